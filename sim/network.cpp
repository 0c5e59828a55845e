#include "sim/network.hpp"

#include <algorithm>

#include "costmodel/cost_model.hpp"

namespace osdp::sim {

RingLinks::RingLinks(const costmodel::ClusterSpec& cluster, const costmodel::Calibration* calibration,
                     const costmodel::CostModel* prices)
    : nodes_(cluster.nodes),
      per_node_(cluster.devices_per_node),
      intra_(cluster.intra),
      inter_(cluster.inter ? *cluster.inter : cluster.intra),
      calibration_(calibration),
      prices_(prices) {}

const costmodel::LinkSpec& RingLinks::link(int from, int to) const {
  return nodes_ > 1 && from / per_node_ != to / per_node_ ? inter_ : intra_;
}

Tick RingLinks::ring_step_ticks(TaskKind kind, double total_bytes, int ring_size, int from, int to,
                                costmodel::RingLevel level, bool calibrated) const {
  const costmodel::CollectiveOp op{collective_of(kind), total_bytes, ring_size};
  if (calibrated && calibration_) {
    const auto& segs = level == costmodel::RingLevel::kWorld   ? calibration_->segments(op.kind)
                       : level == costmodel::RingLevel::kInter ? calibration_->inter.segments(op.kind)
                                                               : calibration_->intra.segments(op.kind);
    for (std::size_t j = 0; j < segs.size(); ++j) {
      const costmodel::Segment& s = segs[j];
      if (total_bytes > s.up_to_bytes) continue;
      const double drawn =
          prices_ ? prices_->segment_factor(s, static_cast<int>(j), op.kind, level, total_bytes) : 1.0;
      return to_ticks(op.step_s(s.alpha_s, s.beta_s_per_byte) * drawn);
    }
  }
  return to_ticks(link_step_s(op.kind, op.chunk_bytes(), from, to));
}

Tick RingLinks::p2p_ticks(double bytes, int from, int to) const {
  return to_ticks(link_step_s(costmodel::Collective::kAllGather, bytes, from, to));
}

double RingLinks::link_step_s(costmodel::Collective c, double chunk, int from, int to) const {
  const bool across = nodes_ > 1 && from / per_node_ != to / per_node_;
  const auto level = across ? costmodel::RingLevel::kInter : costmodel::RingLevel::kIntra;
  if (calibration_)
    if (const auto st = costmodel::level_step(*calibration_, nodes_, c, chunk, level)) {
      const double drawn =
          prices_ ? prices_->segment_factor(*st->segment, st->index, c, level, st->ring_bytes) : 1.0;
      return (st->segment->alpha_s + chunk * st->segment->beta_s_per_byte) * drawn;
    }
  const costmodel::LinkSpec& l = link(from, to);
  return l.alpha_s + chunk * l.beta_s_per_byte();
}

int RingLinks::period(int world) const {
  if (nodes_ <= 1) return 1;
  // Every ring collective priced by its calibrated segment, on every link alike. An all-to-all is
  // not a ring: each step is priced on its pair's own link, which every rank of a group meets alike.
  if (calibration_ && std::none_of(costmodel::kCollectives.begin(), costmodel::kCollectives.end(),
                                   [&](const costmodel::CollectiveKind& k) {
                                     return !k.pairwise && calibration_->segments(k.kind).empty();
                                   }))
    return 1;
  if (intra_.alpha_s == inter_.alpha_s && intra_.bandwidth_bytes_per_s == inter_.bandwidth_bytes_per_s)
    return 1;
  return per_node_ < world ? per_node_ : world;
}

}  // namespace osdp::sim
