#include "sim/network.hpp"

#include <algorithm>

namespace osdp::sim {

RingLinks::RingLinks(const costmodel::ClusterSpec& cluster, const costmodel::Calibration* calibration)
    : nodes_(cluster.nodes),
      per_node_(cluster.devices_per_node),
      intra_(cluster.intra),
      inter_(cluster.inter ? *cluster.inter : cluster.intra),
      calibration_(calibration) {}

Tick RingLinks::step_ticks(TaskKind kind, double total_bytes, int world, int rank) const {
  const costmodel::CollectiveOp op{collective_of(kind), total_bytes, world};
  if (calibration_) {
    for (const auto& s : calibration_->segments(op.kind))
      if (total_bytes <= s.up_to_bytes) return to_ticks(op.step_s(s.alpha_s, s.beta_s_per_byte));
  }
  const bool crosses = nodes_ > 1 && (rank + 1) % per_node_ == 0;
  const costmodel::LinkSpec& l = crosses ? inter_ : intra_;
  return to_ticks(op.step_s(l.alpha_s, l.beta_s_per_byte()));
}

Tick RingLinks::level_step_ticks(TaskKind kind, double total_bytes, int ring_size,
                                 costmodel::RingLevel level) const {
  const costmodel::CollectiveOp op{collective_of(kind), total_bytes, ring_size};
  if (calibration_) {
    const auto& segs = level == costmodel::RingLevel::kInter ? calibration_->inter : calibration_->intra;
    for (const auto& s : segs.segments(op.kind))
      if (total_bytes <= s.up_to_bytes) return to_ticks(op.step_s(s.alpha_s, s.beta_s_per_byte));
  }
  const costmodel::LinkSpec& l = level == costmodel::RingLevel::kInter ? inter_ : intra_;
  return to_ticks(op.step_s(l.alpha_s, l.beta_s_per_byte()));
}

int RingLinks::period(int world) const {
  if (nodes_ <= 1) return 1;
  if (calibration_ && std::none_of(costmodel::kCollectives.begin(), costmodel::kCollectives.end(),
                                   [&](const costmodel::CollectiveKind& k) {
                                     return calibration_->segments(k.kind).empty();
                                   }))
    return 1;  // every collective priced by its calibrated segment, on every link alike
  if (intra_.alpha_s == inter_.alpha_s && intra_.bandwidth_bytes_per_s == inter_.bandwidth_bytes_per_s)
    return 1;
  return per_node_ < world ? per_node_ : world;
}

}  // namespace osdp::sim
