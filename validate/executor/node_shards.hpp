// How an operator's states are spread over the ranks of a job seen as nodes of per_node ranks
// (numbered node by node), and the collectives that move them, on the world or on the
// communicator's node rings (Communicator::ring). The layouts (executor.hpp says why):
//   kReplicated  every rank holds the whole slice;
//   kWorld       rank r holds shard r of the world's;
//   kNode        rank l of a node holds shard l of the node's (replicated across nodes): gather within
//                the node; reduce-scatter within, then the shard all-reduced across nodes;
//   kTwoLevel    rank l of node k holds shard l * nodes + k of the world's: the gather across nodes
//                lands the node's chunk l in place, the one within completes the slice in place; the
//                reduce-scatter within runs in place in the gradient, the one across from chunk l.
#pragma once

#include <cstddef>
#include <string>

#include "costmodel/cost_model.hpp"
#include "sim/schedule.hpp"
#include "validate/executor/backend.hpp"

namespace osdp::validate {

enum class Sharding { kReplicated, kWorld, kNode, kTwoLevel };

class NodeShards {
 public:
  // `rings`: some collective runs on a node ring; the rings are then made (collectively), and
  // nodes x per_node must be the job's size (UsageError otherwise).
  NodeShards(Communicator& world, int nodes, int per_node, bool rings);

  int shards(Sharding sh) const;    // ranks the states are spread over
  int shard_of(Sharding sh) const;  // the shard this rank holds

  // One level of a sharded slice's all-gather (shard -> weights) or reduction (grad -> grad_shard),
  // n elements a shard, on the ring of `level`.
  void collective(Stream& s, sim::TaskKind kind, costmodel::RingLevel level, Sharding sh, const float* shard,
                  float* weights, float* grad, float* grad_shard, std::size_t n, const std::string& what);
  // The slice whole into `full`, as its collectives gather it (replicated: a copy on `dev`).
  void gather(Device& dev, Stream& s, Sharding sh, const float* shard, float* full, std::size_t n,
              const std::string& what);

 private:
  // Two-level: where this rank's chunk of a slice (its node's shards l * nodes ..) starts.
  std::size_t chunk_at(std::size_t n) const;

  Communicator& world_;
  Communicator* intra_ = nullptr;
  Communicator* inter_ = nullptr;
  int nodes_, per_node_;
};

}  // namespace osdp::validate
