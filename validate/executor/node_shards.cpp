#include "validate/executor/node_shards.hpp"

#include <fmt/format.h>

namespace osdp::validate {

using costmodel::RingLevel;
using sim::TaskKind;

NodeShards::NodeShards(Communicator& world, int nodes, int per_node, bool rings)
    : world_(world), nodes_(nodes), per_node_(per_node) {
  if (!rings) return;
  if (per_node < 1 || nodes < 1 || per_node * nodes != world.size())
    throw UsageError(fmt::format("the plan's {} nodes of {} ranks are not the job's {} ranks", nodes,
                                 per_node, world.size()));
  intra_ = &world.ring(RingLevel::kIntra, per_node);
  inter_ = &world.ring(RingLevel::kInter, per_node);
}

int NodeShards::shards(Sharding sh) const {
  return sh == Sharding::kReplicated ? 1 : sh == Sharding::kNode ? per_node_ : world_.size();
}

int NodeShards::shard_of(Sharding sh) const {
  const int r = world_.rank();
  switch (sh) {
    case Sharding::kReplicated:
      return 0;
    case Sharding::kWorld:
      return r;
    case Sharding::kNode:
      return r % per_node_;
    case Sharding::kTwoLevel:
      return r % per_node_ * nodes_ + r / per_node_;
  }
  return r;
}

std::size_t NodeShards::chunk_at(std::size_t n) const {
  return static_cast<std::size_t>(world_.rank() % per_node_) * n * static_cast<std::size_t>(nodes_);
}

void NodeShards::collective(Stream& s, TaskKind kind, RingLevel level, Sharding sh, const float* shard,
                            float* weights, float* grad, float* grad_shard, std::size_t n,
                            const std::string& what) {
  const bool gather = kind == TaskKind::kAllGather;
  const std::size_t chunk = n * static_cast<std::size_t>(nodes_);
  switch (level) {
    case RingLevel::kWorld:
      if (gather)
        world_.all_gather(s, shard, weights, n, what);
      else
        world_.reduce_scatter(s, grad, grad_shard, n, what);
      return;
    case RingLevel::kIntra:
      if (gather && sh == Sharding::kNode)
        intra_->all_gather(s, shard, weights, n, what);
      else if (gather)
        intra_->all_gather(s, weights + chunk_at(n), weights, chunk, what);
      else if (sh == Sharding::kNode)
        intra_->reduce_scatter(s, grad, grad_shard, n, what);
      else
        intra_->reduce_scatter(s, grad, grad + chunk_at(n), chunk, what);
      return;
    case RingLevel::kInter:
      if (gather)
        inter_->all_gather(s, shard, weights + chunk_at(n), n, what);
      else if (kind == TaskKind::kReduceScatter)
        inter_->reduce_scatter(s, grad + chunk_at(n), grad_shard, n, what);
      else
        inter_->all_reduce(s, grad_shard, n, what);
      return;
  }
}

void NodeShards::gather(Device& dev, Stream& s, Sharding sh, const float* shard, float* full, std::size_t n,
                        const std::string& what) {
  switch (sh) {
    case Sharding::kReplicated:
      dev.copy(s, shard, full, n);
      return;
    case Sharding::kWorld:
      world_.all_gather(s, shard, full, n, what);
      return;
    case Sharding::kNode:
      intra_->all_gather(s, shard, full, n, what);
      return;
    case Sharding::kTwoLevel:
      collective(s, TaskKind::kAllGather, RingLevel::kInter, sh, shard, full, nullptr, nullptr, n, what);
      collective(s, TaskKind::kAllGather, RingLevel::kIntra, sh, nullptr, full, nullptr, nullptr, n, what);
      return;
  }
}

}  // namespace osdp::validate
