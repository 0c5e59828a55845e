#include "costmodel/cost_model.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace osdp::costmodel {
namespace {

double ceil_div(std::int64_t a, std::int64_t b) {
  return static_cast<double>((a + b - 1) / b);
}

}  // namespace

double prefetch_reserve_bytes(const Workload& w, int prefetch) {
  if (prefetch <= 0) return 0;
  double largest = 0;
  for (const auto& op : w.operators) largest = std::max(largest, static_cast<double>(op.parameters()));
  return (prefetch * w.bytes.weight + (prefetch + 1) * w.bytes.gradient) * largest;
}

namespace {
std::vector<RingLevel> ring_links(const ClusterSpec& cluster) {
  if (cluster.nodes <= 1 || !cluster.inter) return {RingLevel::kIntra};
  if (cluster.devices_per_node <= 1) return {RingLevel::kInter};
  return {RingLevel::kIntra, RingLevel::kInter};
}
}  // namespace

std::optional<LevelStep> level_step(const Calibration& cal, int nodes, Collective c, double chunk,
                                    RingLevel level) {
  if (cal.per_node <= 0 || level == RingLevel::kWorld) return std::nullopt;
  const bool intra = level == RingLevel::kIntra;
  const int ranks = intra ? cal.per_node : cal.level_nodes > 0 ? cal.level_nodes : nodes;
  const auto& segs = (intra ? cal.intra : cal.inter).segments(c);
  const double ring_bytes = chunk * ranks;
  for (std::size_t j = 0; j < segs.size(); ++j)
    if (ring_bytes <= segs[j].up_to_bytes) return LevelStep{&segs[j], static_cast<int>(j), ring_bytes};
  return std::nullopt;
}

const char* to_string(RingLevel l) {
  switch (l) {
    case RingLevel::kWorld:
      return "world";
    case RingLevel::kIntra:
      return "intra";
    case RingLevel::kInter:
      return "inter";
  }
  return "?";
}

const char* to_string(Tier t) {
  return t == Tier::kPaper ? "paper" : "extended";
}

namespace {
// The GEMM roofline: t = overhead + max(flops / (peak eff), bytes / memory bandwidth), eff = efficiency
// d / (d + d_half), d the smallest of m, n and k.
double roofline(const ComputeSpec& c, Precision precision, const GemmPrice::Shape& s, double density) {
  const double m = static_cast<double>(s[0]), n = static_cast<double>(s[1]), kk = static_cast<double>(s[2]);
  const double count = static_cast<double>(s[3]);
  const double d = std::min({m, n, kk});
  const double eff = c.gemm_efficiency * d / (d + c.gemm_half_efficiency_dim);
  const double flop_s = 2.0 * m * n * kk * count * density / (c.peak_flops(precision) * eff);
  const int elem = precision_bytes(precision).activation;  // an operand element in compute
  const double bytes = count * (m * kk + kk * n + m * n) * elem * density;
  return c.kernel_overhead_s + std::max(flop_s, bytes / c.memory_bandwidth_bytes_per_s);
}

// The points of a draw (uncertainty.hpp): what each factor's key starts with.
enum : std::int64_t {
  kInterferencePoint = 1,
  kSegmentPoint,
  kElementwisePoint,
  kGemmPoint,
  kOptimizerPoint,
  kComputeDrift,
  kCommunicationDrift,
  kAccumulatePoint,
  kReplicatePoint,
  kStepLevel
};
std::int64_t octave(double bytes) {
  return bytes > 1 ? static_cast<std::int64_t>(std::floor(std::log2(bytes))) : 0;
}
}  // namespace

CostModel::CostModel(const ClusterSpec& cluster, const Calibration* calibration, Precision precision,
                     CostOptions options)
    : world_(cluster.world_size()),
      nodes_(cluster.nodes),
      node_size_(cluster.devices_per_node),
      intra_(cluster.intra),
      inter_(cluster.inter),
      ring_links_(ring_links(cluster)),
      calibration_(calibration),
      compute_(calibration && calibration->compute ? *calibration->compute : cluster.compute),
      precision_(precision),
      interference_(calibration && calibration->interference ? *calibration->interference
                                                             : cluster.overlap.interference),
      overlap_(cluster.overlap.enabled),
      options_(options) {
  if (calibration && !calibration->gemm_times.empty())
    gemm_ = GemmPrice([compute = compute_, precision = precision_](
                          const GemmPrice::Shape& s) { return roofline(compute, precision, s, 1.0); },
                      calibration->gemm_times);
  // The step's level (composition.hpp) scales every calibrated price, nominal or drawn.
  if (calibration) compute_drift_ = communication_drift_ = step_level(*calibration);
  if (calibration && (calibration->draw || calibration->quantile_z)) {
    draw_ = calibration->draw ? *calibration->draw : 1;
    if (calibration->quantile_z) fixed_z_ = *calibration->quantile_z;
    const FitErrors e = fit_errors(*calibration);
    gemm_error_ = gemm_.empty() ? e.gemm_formula : gemm_.leave_one_out_error();
    elementwise_error_ = e.elementwise;
    optimizer_error_ = e.optimizer;
    accumulate_error_ = e.accumulate;
    replicate_error_ = e.replicate;
    if (e.level) {  // one factor for the whole step, a Student t of the level's degrees of freedom
      const double t =
          fixed_z_ ? student_t_at(e.level_dof, *fixed_z_) : student_t(draw_, e.level_dof, kStepLevel);
      compute_drift_ = communication_drift_ = *e.level * quantile_factor(e.level_sigma, t);
    } else {
      compute_drift_ = factor(e.compute_drift, {kComputeDrift});
      communication_drift_ = factor(e.communication_drift, {kCommunicationDrift});
    }
    interference_ = std::max(1.0, interference_ * factor(e.interference, {kInterferencePoint}));
  }
}

double CostModel::factor(double sigma, std::initializer_list<std::int64_t> key) const {
  if (fixed_z_) return quantile_factor(sigma, *fixed_z_);
  return draw_factor(draw_, sigma, key);
}

double CostModel::segment_factor(const Segment& s, int index, Collective c, RingLevel level,
                                 double bytes) const {
  if (!draw_) return communication_drift_;
  return communication_drift_ * factor(s.residual, {kSegmentPoint, static_cast<std::int64_t>(level),
                                                    static_cast<std::int64_t>(c), index, octave(bytes)});
}

double CostModel::segment_s(const Segment& s, int index, Collective c, RingLevel level,
                            const CollectiveOp& op) const {
  return op.ring_s(s.alpha_s, s.beta_s_per_byte) * segment_factor(s, index, c, level, op.bytes);
}

double CostModel::collective_s(Collective c, double bytes) const {
  if (world_ <= 1 || bytes <= 0) return 0.0;
  const CollectiveOp op{c, bytes, world_};
  if (calibration_) {
    const auto& segs = calibration_->segments(c);
    for (std::size_t j = 0; j < segs.size(); ++j)
      if (bytes <= segs[j].up_to_bytes)
        return segment_s(segs[j], static_cast<int>(j), c, RingLevel::kWorld, op);
  }
  double slowest = 0.0;
  for (const RingLevel l : ring_links_) slowest = std::max(slowest, link_step_s(c, op.chunk_bytes(), l));
  return op.steps() * slowest;
}

double CostModel::link_step_s(Collective c, double chunk, RingLevel level) const {
  if (calibration_)
    if (const auto st = level_step(*calibration_, nodes_, c, chunk, level))
      return (st->segment->alpha_s + chunk * st->segment->beta_s_per_byte) *
             segment_factor(*st->segment, st->index, c, level, st->ring_bytes);
  const LinkSpec& l = level == RingLevel::kInter && inter_ ? *inter_ : intra_;
  return l.alpha_s + chunk * l.beta_s_per_byte();
}

double CostModel::collective_s(Collective c, double bytes, RingLevel level) const {
  if (level == RingLevel::kWorld || !two_levels()) return collective_s(c, bytes);
  if (bytes <= 0) return 0.0;
  const CollectiveOp op{c, bytes, level == RingLevel::kIntra ? node_size_ : nodes_};
  return op.steps() * link_step_s(c, op.chunk_bytes(), level);
}

std::vector<LevelCollective> CostModel::level_collectives(const Choice& ch, Collective c,
                                                          double bytes) const {
  if ((!ch.node_group && !ch.two_level) || !two_levels()) return {{c, bytes, RingLevel::kWorld}};
  const double g = node_size_;
  if (c == Collective::kAllGather) {
    if (ch.node_group) return {{c, bytes, RingLevel::kIntra}};
    return {{c, bytes / g, RingLevel::kInter}, {c, bytes, RingLevel::kIntra}};
  }
  // Reduce-scatter: within the node first, then the shard across nodes (an all-reduce for a node group).
  return {{c, bytes, RingLevel::kIntra},
          {ch.node_group ? Collective::kAllReduce : c, bytes / g, RingLevel::kInter}};
}

std::vector<LevelCollective> CostModel::all_to_all_parts(double bytes, bool two_level) const {
  if (!two_level || !two_levels()) return {{Collective::kAllToAll, bytes, RingLevel::kWorld}};
  return {{Collective::kAllToAll, bytes, RingLevel::kIntra},
          {Collective::kAllToAll, bytes, RingLevel::kInter}};
}

double CostModel::all_to_all_s(double bytes, bool two_level) const {
  double t = 0;
  for (const auto& lc : all_to_all_parts(bytes, two_level)) t += collective_s(lc.kind, lc.bytes, lc.level);
  return t;
}

CostModel::ShardComm CostModel::shard_comm_s(const Choice& ch, double weight_bytes,
                                             double gradient_bytes) const {
  ShardComm sc;
  for (const auto& lc : level_collectives(ch, Collective::kAllGather, weight_bytes))
    sc.all_gather_s += collective_s(lc.kind, lc.bytes, lc.level);
  for (const auto& lc : level_collectives(ch, Collective::kReduceScatter, gradient_bytes))
    sc.reduce_scatter_s += collective_s(lc.kind, lc.bytes, lc.level);
  return sc;
}

namespace {
GemmPrice::Shape shape_of(const Kernel& k, int batch) {
  return {k.dim(Dim::kM, batch), k.dim(Dim::kN, batch), k.dim(Dim::kK, batch), k.dim(Dim::kCount, batch)};
}
}  // namespace

double CostModel::kernel_s(const Kernel& k, int batch) const {
  if (k.kind == KernelKind::kElementwise) {
    const double bytes = k.bytes_per_sample * batch;
    const double t = compute_.kernel_overhead_s + bytes / compute_.memory_bandwidth_bytes_per_s;
    return t * compute_drift_ *
           (draw_ ? factor(elementwise_error_, {kElementwisePoint, octave(bytes)}) : 1.0);
  }
  const GemmPrice::Shape s = shape_of(k, batch);
  const double t =
      gemm_.empty() ? roofline(compute_, precision_, s, k.density) : gemm_.seconds(s) * k.density;
  return t * compute_drift_ * (draw_ ? factor(gemm_error_, {kGemmPoint, s[0], s[1], s[2], s[3]}) : 1.0);
}

double CostModel::accumulate_s(const Kernel& piece, int batch) const {
  const int elem = precision_bytes(precision_).activation;
  const double bytes = static_cast<double>(piece.dim(Dim::kM, batch)) *
                       static_cast<double>(piece.dim(Dim::kN, batch)) *
                       static_cast<double>(piece.dim(Dim::kCount, batch)) * elem * piece.density;
  const double bw = compute_.accumulate_bandwidth_bytes_per_s > 0 ? compute_.accumulate_bandwidth_bytes_per_s
                                                                  : compute_.memory_bandwidth_bytes_per_s;
  const double t = bytes / bw;
  return t * compute_drift_ * (draw_ ? factor(accumulate_error_, {kAccumulatePoint}) : 1.0);
}

double CostModel::kernels_s(const std::vector<Kernel>& kernels, int batch, int splits) const {
  double t = 0;
  for (const Kernel& k : kernels) {
    if (splits > 1 && k.split_dim != Dim::kNone) {
      const Kernel piece = k.slice(splits);
      double sliced = splits * kernel_s(piece, batch);
      // The same work in slices is never cheaper than whole unless the calibration measured both so
      // (a slice whose operands stay in a cache the whole GEMM's do not): a search that took a gap
      // between two corrections for a gain would pick splits for it.
      if (!gemm_.measured(shape_of(piece, batch)) || !gemm_.measured(shape_of(k, batch)))
        sliced = std::max(sliced, kernel_s(k, batch));
      // Slices cut along the reduction dimension make partial sums: every slice after the first adds
      // into the output (C += A B), reading C once more than a GEMM that writes it.
      if (k.split_dim == Dim::kK) sliced += (splits - 1) * accumulate_s(piece, batch);
      t += sliced;
    } else if (splits > 1 && k.tp_sliced) {
      // An elementwise kernel over heads, ffn columns or the vocabulary runs once per slice on its
      // share of the bytes: the same bytes, splits launches.
      t += kernel_s(k, batch) + (splits - 1) * launch_s();
    } else {
      t += kernel_s(k, batch);
    }
  }
  return t;
}

double CostModel::launch_s() const {
  const double t = compute_.kernel_overhead_s;
  return t * compute_drift_ * (draw_ ? factor(elementwise_error_, {kElementwisePoint, -1}) : 1.0);
}

double CostModel::phase_s(const std::vector<Kernel>& kernels, int batch, int splits) const {
  if (options_.tier == Tier::kPaper) return batch * kernels_s(kernels, 1, splits);
  return kernels_s(kernels, batch, splits);
}

double CostModel::ring_block_s(const std::vector<Kernel>& kernels, int batch, int splits) const {
  std::vector<Kernel> core;
  for (const Kernel& k : kernels)
    if (k.ring_block) core.push_back(k);
  return core.empty() ? 0.0 : phase_s(core, batch, splits);
}

double CostModel::optimizer_s(double elements, const PrecisionBytes& b) const {
  // Adam reads and writes its states and the weights and reads the gradient:
  //   fp32, bf16: 2 (shard w + o) + shard g = 28 B/param (the fp32 master is the sharded weight);
  //   mixed: 2 o + g + w (fp32 master in o, bf16 copy written) = 28.
  const double per_param = precision_ == Precision::kMixed
                               ? 2.0 * b.optimizer + b.gradient + b.weight
                               : 2.0 * (b.shard_weight + b.optimizer) + b.shard_gradient;
  const double bw = compute_.optimizer_bandwidth_bytes_per_s > 0 ? compute_.optimizer_bandwidth_bytes_per_s
                                                                 : compute_.memory_bandwidth_bytes_per_s;
  const double t = compute_.kernel_overhead_s + elements * per_param / bw;
  return t * compute_drift_ * (draw_ ? factor(optimizer_error_, {kOptimizerPoint}) : 1.0);
}

double CostModel::per_step_s(const Choice& ch, double parameters, const PrecisionBytes& b) const {
  if (ch.replicate) return optimizer_s(parameters, b) + replicate_s(b.weight * parameters);
  return optimizer_s(std::ceil(parameters / shards(ch)), b);
}

double CostModel::replicate_s(double weight_bytes) const {
  if (!(compute_.replicate_bandwidth_bytes_per_s > 0)) return 0.0;
  const double t = compute_.replicate_overhead_s + weight_bytes / compute_.replicate_bandwidth_bytes_per_s;
  return t * compute_drift_ *
         (draw_ ? factor(replicate_error_, {kReplicatePoint, octave(weight_bytes)}) : 1.0);
}

double CostModel::overlapped_s(double x, double c, double i) {
  if (c <= 0) return x;
  if (c >= i * x) return c;
  return x + c * (1.0 - 1.0 / i);
}

CostModel::PhaseTimes CostModel::phases(const Operator& op, int batch, int splits) const {
  return PhaseTimes{phase_s(op.forward, batch, splits), phase_s(op.backward, batch, splits),
                    op.selectable() ? phase_s(op.selective_recompute, batch, splits) : 0.0};
}

ChoiceCost CostModel::cost(const Operator& op, const Choice& ch, int batch, const PrecisionBytes& B) const {
  return cost(op, ch, batch, B, phases(op, batch, ch.replicate ? 1 : ch.split));
}

ChoiceCost CostModel::cost(const Operator& op, const Choice& ch, int batch, const PrecisionBytes& B,
                           const PhaseTimes& ph) const {
  assert(batch >= 1);
  assert(ch.split >= 1 && ch.zdp_slices >= 0 && ch.zdp_slices <= ch.split);
  const std::int64_t P = op.parameters();
  const int n = ch.replicate ? 1 : ch.split;
  const int k = ch.replicate ? 0 : ch.zdp_slices;
  const double Ps = ceil_div(P, n);
  const double b = batch;
  const Recompute rc = op.recompute(ch);
  const bool ckpt = rc == Recompute::kFull;
  const double recompute_s = ckpt ? ph.forward_s : rc == Recompute::kSelective ? ph.selective_s : 0.0;

  // Communication.
  double comm_f = 0, comm_b = 0;
  if (ch.replicate) {
    comm_b = collective_s(Collective::kAllReduce, B.reduce * static_cast<double>(P));
  } else {
    const ShardComm sc = shard_comm_s(ch, B.weight * Ps, B.reduce * Ps);
    const double ag = sc.all_gather_s, rs = sc.reduce_scatter_s;
    const int regather = (ckpt && options_.checkpoint_regather) ? k : 0;
    comm_f = n * ag;
    comm_b = (k + regather) * ag + n * rs;
  }

  // Compute.
  ChoiceCost c;
  const double shard_elems = ch.replicate ? static_cast<double>(P) : ceil_div(P, shards(ch));
  if (options_.tier == Tier::kPaper) {
    // b gamma, gamma the operator's compute per sample (forward, recompute, backward at batch 1).
    const double fwd = ph.forward_s;
    c.compute_s = fwd + recompute_s + ph.backward_s;
    c.comm_s = comm_f + comm_b;
    c.time_s = c.compute_s + c.comm_s;
  } else {
    const double fwd = ph.forward_s;
    const double bwd = ph.backward_s + recompute_s;
    const double opt = per_step_s(ch, static_cast<double>(P), B);
    c.compute_s = fwd + bwd + opt;
    c.comm_s = comm_f + comm_b;
    if (overlap_ && options_.prefetch > 0)
      c.time_s = overlapped_s(fwd, comm_f, interference_) + overlapped_s(bwd, comm_b, interference_) + opt;
    else
      c.time_s = c.compute_s + c.comm_s;
  }

  // Memory.
  const double state = B.at_rest();
  c.persistent_bytes = state * shard_elems;
  if (!ch.replicate) c.persistent_bytes += (n - k) * B.weight * Ps;
  c.persistent_bytes += b * op.kept_bytes_per_sample(ch);
  if (op.tied_gradient && !ch.replicate) c.persistent_bytes += B.gradient * static_cast<double>(P);
  c.transient_bytes = b * op.workspace_bytes_per_sample;
  if (!ch.replicate) {
    // ZDP slices are gathered one at a time, except when the recompute of a checkpointed operator
    // (reusing the backward gather) or a tied head (forward and backward adjacent) needs them all.
    const bool all_slices = (ckpt && !options_.checkpoint_regather) || op.tied_gradient;
    c.transient_bytes += (all_slices ? k : std::min(k, 1)) * B.weight * Ps;
    if (!op.tied_gradient) c.transient_bytes += B.gradient_in_flight() * Ps;
  }
  // What the recompute produces lives through the operator's backward.
  c.transient_bytes += b * (op.saved_bytes_per_sample - op.kept_bytes_per_sample(ch));
  return c;
}

}  // namespace osdp::costmodel
