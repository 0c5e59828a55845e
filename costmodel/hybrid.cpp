#include "costmodel/hybrid.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/plan.hpp"

namespace osdp::costmodel {
namespace {

double ceil_div(double a, double b) {
  return std::ceil(a / b);
}

bool power_of_two(int x) {
  return x >= 1 && (x & (x - 1)) == 0;
}

// Activations per sample every TP rank keeps whole without sequence parallelism (opening comment).
double replicated_saved(const Operator& op, int seq, const PrecisionBytes& bytes, bool dropout) {
  const double sh = static_cast<double>(seq) * op.hidden;
  const double e = bytes.activation, mask = dropout ? 1.0 : 0.0;
  switch (op.kind) {
    case OperatorKind::kAttention:
    case OperatorKind::kMlp:
      return (2 * e + mask) * sh;
    case OperatorKind::kHead:
      return e * sh;
    case OperatorKind::kEmbedding: {
      bool head = false;
      for (const Kernel& k : op.forward) head = head || k.site == 1;
      return mask * sh + (head ? e * sh : 0.0);
    }
    case OperatorKind::kProjection:
      return op.saved_bytes_per_sample;
  }
  return op.saved_bytes_per_sample;
}

bool vocabulary_weight(const Operator& op, const Weight& w) {
  return (op.kind == OperatorKind::kEmbedding || op.kind == OperatorKind::kHead) && w.splittable;
}

}  // namespace

const char* to_string(PipelineSchedule s) {
  return s == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
}

std::optional<PipelineSchedule> schedule_from_string(const std::string& s) {
  if (s == "gpipe") return PipelineSchedule::kGpipe;
  if (s == "1f1b") return PipelineSchedule::k1F1B;
  return std::nullopt;
}

HybridWorkload hybrid_workload(const ModelSpec& model, int pp) {
  HybridWorkload hw;
  hw.pp = pp;
  ModelSpec m = model;
  if (pp > 1 && m.tied_embeddings) {
    m.tied_embeddings = false;
    hw.tied_copy = true;
  }
  hw.workload = lower(m);
  const auto& ops = hw.workload.operators;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const Operator& op = ops[static_cast<std::size_t>(i)];
    const bool layer_op = op.kind == OperatorKind::kAttention || op.kind == OperatorKind::kMlp;
    if (layer_op && !hw.units.empty() && hw.units.back().layer &&
        ops[static_cast<std::size_t>(hw.units.back().ops.front())].layer == op.layer) {
      hw.units.back().ops.push_back(i);
      continue;
    }
    HybridUnit u;
    u.name = layer_op ? fmt::format("layer{}", op.layer) : op.name;
    u.ops = {i};
    u.hidden = op.hidden;
    u.layer = layer_op;
    hw.units.push_back(std::move(u));
  }
  return hw;
}

bool tp_allowed(const Operator& op, int t) {
  if (t == 1) return true;
  if (op.kind == OperatorKind::kProjection) return false;
  bool any = false;
  for (const auto& w : op.weights) any = any || w.splittable;
  if (!any) return false;
  if (op.kind == OperatorKind::kEmbedding || op.kind == OperatorKind::kHead)
    return true;  // padded vocabulary
  const auto s = op.splits(t);
  return std::find(s.begin(), s.end(), t) != s.end();
}

Operator tp_slice(const Operator& op, int t, bool sp, const PrecisionBytes& bytes, bool dropout, int seq) {
  if (t == 1) return op;
  Operator s = op;
  const double td = t;
  std::string column_weight;  // the last column-split weight: its bias is split too
  for (auto& w : s.weights) {
    if (w.splittable && (w.split_columns || vocabulary_weight(op, w))) {
      w.cols = static_cast<std::int64_t>(ceil_div(static_cast<double>(w.cols), td));
      column_weight = w.split_columns ? w.name : "";
    } else if (w.splittable) {
      w.rows /= t;
      column_weight.clear();
    } else if (!column_weight.empty() && w.name == column_weight + ".bias") {
      w.cols /= t;
    }
  }
  for (auto* list : {&s.forward, &s.backward}) {
    for (auto& k : *list) {
      if (k.kind == KernelKind::kGemm) {
        if (k.split_dim != Dim::kNone) k = k.slice(t);
      } else if (k.tp_sliced || sp) {
        k.bytes_per_sample /= td;
      }
    }
  }
  // Saved activations: the replicated part stays whole (without SP), the rest is divided.
  const double replicated =
      sp ? 0.0 : std::min(op.saved_bytes_per_sample, replicated_saved(op, seq, bytes, dropout));
  s.saved_bytes_per_sample = replicated + (op.saved_bytes_per_sample - replicated) / td;
  if (sp) s.input_bytes_per_sample = op.input_bytes_per_sample / td;
  s.workspace_bytes_per_sample = op.workspace_bytes_per_sample / td;
  if (op.split_units > 0) s.split_units = op.split_units / t;
  return s;
}

TpTraffic tp_traffic(const Operator& op, int seq) {
  const double sh = static_cast<double>(seq) * op.hidden;
  switch (op.kind) {
    case OperatorKind::kAttention:
    case OperatorKind::kMlp:
      return {sh, sh};
    case OperatorKind::kEmbedding: {
      bool head = false;
      for (const Kernel& k : op.forward) head = head || k.site == 1;
      return {sh, head ? sh : 0.0};
    }
    case OperatorKind::kHead:
      return {0.0, sh};
    case OperatorKind::kProjection:
      return {};
  }
  return {};
}

HybridCostModel::HybridCostModel(const ClusterSpec& cluster, const Calibration* calibration,
                                 Precision precision, CostOptions options, bool dropout)
    : cluster_(cluster),
      calibration_(calibration),
      precision_(precision),
      options_(options),
      dropout_(dropout),
      capacity_(cluster.memory_bytes) {}

bool HybridCostModel::valid(int pp, int t) const {
  const int n = world_size(), g = node_size();
  if (!power_of_two(pp) || !power_of_two(t) || n % pp != 0) return false;
  const int ns = n / pp;
  if (t > g || ns % t != 0) return false;
  if (ns > g && (ns % g != 0 || g % t != 0)) return false;
  return true;
}

const CostModel& HybridCostModel::dp_model(int pp, int t) const {
  auto& slot = dp_models_[{pp, t}];
  if (slot) return *slot;
  assert(valid(pp, t));
  const int n = world_size(), g = node_size(), ns = n / pp, d = ns / t;
  ClusterSpec sub = cluster_;
  if (ns <= g) {
    sub.nodes = 1;
    sub.devices_per_node = d;
    sub.inter.reset();
  } else {
    sub.nodes = ns / g;
    sub.devices_per_node = g / t;
  }
  const Calibration* cal = calibration_;
  if (cal && d != n) {
    // A calibration's collective segments were fitted on rings of the whole world (or on its
    // levels): they do not describe a smaller group's rings, which the cluster's links price.
    auto copy = std::make_unique<Calibration>(*cal);
    copy->allgather.clear();
    copy->reducescatter.clear();
    copy->allreduce.clear();
    copy->per_node = 0;
    copy->intra = {};
    copy->inter = {};
    cal = copy.get();
    dp_calibrations_[{pp, t}] = std::move(copy);
  }
  slot = std::make_unique<CostModel>(sub, cal, precision_, options_);
  return *slot;
}

double HybridCostModel::tp_allreduce_s(int t, double bytes) const {
  if (t <= 1 || bytes <= 0) return 0;
  return CollectiveOp{Collective::kAllReduce, bytes, t}.ring_s(cluster_.intra.alpha_s,
                                                               cluster_.intra.beta_s_per_byte());
}

double HybridCostModel::relayout_s(int t, int t2, int b0, int seq, int hidden, int e) const {
  if (t == t2) return 0;
  const int hi = std::max(t, t2), lo = std::min(t, t2);
  const double x = static_cast<double>(b0) * hi * seq * hidden * e;
  return CollectiveOp{Collective::kAllGather, x, hi / lo}.ring_s(cluster_.intra.alpha_s,
                                                                 cluster_.intra.beta_s_per_byte());
}

double HybridCostModel::p2p_s(int pp, int b0, int seq, int hidden, int e) const {
  if (pp <= 1) return 0;
  const bool across = cluster_.nodes > 1 && cluster_.inter && world_size() / pp >= node_size();
  const LinkSpec& l = across ? *cluster_.inter : cluster_.intra;
  return l.alpha_s + static_cast<double>(b0) * seq * hidden * e * l.beta_s_per_byte();
}

double HybridCostModel::tied_allreduce_s(int pp, double bytes) const {
  if (pp <= 1 || bytes <= 0) return 0;
  const bool across = cluster_.nodes > 1 && cluster_.inter && world_size() - world_size() / pp >= node_size();
  const LinkSpec& l = across ? *cluster_.inter : cluster_.intra;
  return CollectiveOp{Collective::kAllReduce, bytes, 2}.ring_s(l.alpha_s, l.beta_s_per_byte());
}

int HybridCostModel::in_flight(PipelineSchedule s, int pp, int stage, int m) {
  return s == PipelineSchedule::kGpipe ? m : std::min(pp - stage, m);
}

double HybridCostModel::fixed_bytes(const Workload& w) const {
  return cluster_.reserve_bytes + prefetch_reserve_bytes(w, options_.prefetch);
}

HybridOpParts HybridCostModel::op_parts(const Operator& op0, int t, const Choice& ch, int b0, int pp, bool sp,
                                        const PrecisionBytes& B, int seq) const {
  return op_parts(op0, tp_slice(op0, t, sp, B, dropout_, seq), t, ch, b0, pp, B, seq);
}

HybridOpParts HybridCostModel::op_parts(const Operator& op0, const Operator& op, int t, const Choice& ch,
                                        int b0, int pp, const PrecisionBytes& B, int seq) const {
  const CostModel& sub = dp_model(pp, t);
  const int b = b0 * t;
  const double P = static_cast<double>(op.parameters());
  const int n = ch.replicate ? 1 : ch.split;
  const int k = ch.replicate ? 0 : ch.zdp_slices;
  const bool ckpt = ch.checkpoint && op.checkpointable;
  HybridOpParts x;
  if (ch.replicate) {
    x.grad_sync_s = sub.collective_s(Collective::kAllReduce, B.gradient * P);
  } else {
    const double Ps = ceil_div(P, n);
    const auto sc = sub.shard_comm_s(ch, B.weight * Ps, B.gradient * Ps);
    const int regather = (ckpt && options_.checkpoint_regather) ? k : 0;
    x.zdp_forward_s = k * sc.all_gather_s;
    x.zdp_backward_s = (k + regather) * sc.all_gather_s;
    x.dp_gather_s = (n - k) * sc.all_gather_s;
    x.grad_sync_s = n * sc.reduce_scatter_s;
  }
  const TpTraffic tr = tp_traffic(op0, seq);
  x.tp_forward_s = tp_allreduce_s(t, b * tr.forward_elements * B.activation);
  x.tp_backward_s =
      tp_allreduce_s(t, b * tr.backward_elements * B.activation) + (ckpt ? x.tp_forward_s : 0.0);
  const auto ph = sub.phases(op, b, ch.replicate ? 1 : ch.split);
  x.forward_s = ph.forward_s;
  x.backward_s = ph.backward_s + (ckpt ? ph.forward_s : 0.0);
  const double shard_elems = ch.replicate ? P : ceil_div(P, sub.shards(ch));
  x.optimizer_s = options_.tier == Tier::kPaper ? 0.0 : sub.optimizer_s(shard_elems, B);
  return x;
}

double HybridCostModel::overlapped_s(const CostModel& sub, double compute_s, double comm_s) const {
  if (options_.tier == Tier::kExtended && sub.overlap() && options_.prefetch > 0)
    return CostModel::overlapped_s(compute_s, comm_s, sub.interference());
  return compute_s + comm_s;
}

HybridOpCost HybridCostModel::op_cost(const Operator& op0, int t, const Choice& ch, int b0, int m, int pp,
                                      bool sp, const PrecisionBytes& B, int seq) const {
  const Operator op = tp_slice(op0, t, sp, B, dropout_, seq);
  return op_cost(op_parts(op0, op, t, ch, b0, pp, B, seq), op, t, ch, b0, m, pp, B);
}

HybridOpCost HybridCostModel::op_cost(const HybridOpParts& x, const Operator& op, int t, const Choice& ch,
                                      int b0, int m, int pp, const PrecisionBytes& B) const {
  assert(b0 >= 1 && m >= 1);
  const CostModel& sub = dp_model(pp, t);
  const int b = b0 * t;
  const double P = static_cast<double>(op.parameters());
  const int n = ch.replicate ? 1 : ch.split;
  const int k = ch.replicate ? 0 : ch.zdp_slices;
  const double Ps = ceil_div(P, n);
  const bool ckpt = ch.checkpoint && op.checkpointable;
  const double md = m;
  const double comm_f = x.zdp_forward_s + x.dp_gather_s / md;
  const double comm_b = x.zdp_backward_s + x.grad_sync_s / md;
  const double opt = x.optimizer_s / md;
  HybridOpCost c;
  const double shard_elems = ch.replicate ? P : ceil_div(P, sub.shards(ch));
  c.compute_s = x.forward_s + x.backward_s + opt;
  c.dp_comm_s = comm_f + comm_b;
  c.tp_comm_s = x.tp_forward_s + x.tp_backward_s;
  c.time_s =
      overlapped_s(sub, x.forward_s, comm_f) + overlapped_s(sub, x.backward_s, comm_b) + opt + c.tp_comm_s;

  const double state = B.weight + B.gradient + B.optimizer;
  c.states_bytes = state * shard_elems;
  if (!ch.replicate) c.states_bytes += (n - k) * B.weight * Ps;
  if (op.tied_gradient && !ch.replicate) c.states_bytes += B.gradient * P;
  if (m > 1 && !ch.replicate && !op.tied_gradient) c.states_bytes += n * B.gradient * Ps;
  c.act_bytes = b * (ckpt ? op.input_bytes_per_sample : op.saved_bytes_per_sample);
  c.transient_bytes = b * op.workspace_bytes_per_sample;
  if (!ch.replicate) {
    const bool all_slices = (ckpt && !options_.checkpoint_regather) || op.tied_gradient;
    c.transient_bytes += (all_slices ? k : std::min(k, 1)) * B.weight * Ps;
    if (!op.tied_gradient && m == 1) c.transient_bytes += B.gradient * Ps;
  }
  if (ckpt) c.transient_bytes += b * (op.saved_bytes_per_sample - op.input_bytes_per_sample);
  return c;
}

HybridCostModel::Relayout HybridCostModel::relayout_into(const HybridWorkload& hw, const HybridPlan& plan,
                                                         int s, int u) const {
  const int t = plan.unit_tp[static_cast<std::size_t>(u)];
  const bool first = u == plan.stage_first_unit[static_cast<std::size_t>(s)];
  if (first && s == 0) return {};  // the embedding takes no activation
  const int from = first ? 1 : plan.unit_tp[static_cast<std::size_t>(u - 1)];
  const int hidden = hw.units[static_cast<std::size_t>(u - 1)].hidden;
  return {relayout_s(from, t, plan.b0, hw.workload.seq, hidden, hw.workload.bytes.activation), t > from};
}

HybridCostModel::StageExit HybridCostModel::stage_exit(const HybridWorkload& hw, int pp, int b0, int s, int u,
                                                       int t) const {
  if (s + 1 >= pp) return {};
  const int e = hw.workload.bytes.activation, seq = hw.workload.seq;
  const int hidden = hw.units[static_cast<std::size_t>(u)].hidden;
  return {relayout_s(t, 1, b0, seq, hidden, e), p2p_s(pp, b0, seq, hidden, e)};
}

double HybridCostModel::tied_sync_s(const HybridWorkload& hw, int pp, int t, bool sequence_parallel) const {
  if (!hw.tied_copy) return 0;
  const int head = hw.units.back().ops.back();
  const Operator sliced = tp_slice(hw.workload.operators[static_cast<std::size_t>(head)], t,
                                   sequence_parallel, hw.workload.bytes, dropout_, hw.workload.seq);
  return tied_allreduce_s(pp, hw.workload.bytes.gradient * static_cast<double>(sliced.parameters()));
}

HybridEvaluation HybridCostModel::evaluate(const HybridWorkload& hw, const HybridPlan& plan) const {
  const auto& units = hw.units;
  const auto& ops = hw.workload.operators;
  const int pp = plan.pp, m = plan.micro_batches;
  if (pp != hw.pp)
    throw UsageError(fmt::format("a plan of {} stages priced on a workload lowered for {}", pp, hw.pp));
  if (static_cast<int>(plan.stage_first_unit.size()) != pp || plan.unit_tp.size() != units.size() ||
      plan.choices.size() != ops.size())
    throw UsageError("a hybrid plan's stages, units or operators do not match its workload");
  if (plan.stage_first_unit.front() != 0) throw UsageError("the first stage must start at the first unit");
  for (int s = 1; s < pp; ++s)
    if (plan.stage_first_unit[s] <= plan.stage_first_unit[s - 1])
      throw UsageError(fmt::format("stage {} is empty", s - 1));
  if (plan.stage_first_unit.back() >= static_cast<int>(units.size()))
    throw UsageError(fmt::format("stage {} is empty", pp - 1));
  const int seq = hw.workload.seq;
  HybridEvaluation ev;
  ev.global_batch = plan.global_batch(world_size());
  const double fixed = fixed_bytes(hw.workload);
  for (int s = 0; s < pp; ++s) {
    HybridStage st;
    st.first_unit = plan.stage_first_unit[s];
    st.end_unit = s + 1 < pp ? plan.stage_first_unit[s + 1] : static_cast<int>(units.size());
    st.in_flight = in_flight(plan.schedule, pp, s, m);
    double states = 0, act = 0, trans = 0;
    for (int u = st.first_unit; u < st.end_unit; ++u) {
      const HybridUnit& unit = units[static_cast<std::size_t>(u)];
      const int t = plan.unit_tp[static_cast<std::size_t>(u)];
      if (!valid(pp, t)) throw UsageError(fmt::format("{}: TP degree {} with {} stages", unit.name, t, pp));
      st.relayout_s += relayout_into(hw, plan, s, u).seconds;
      for (int oi : unit.ops) {
        const Operator& op = ops[static_cast<std::size_t>(oi)];
        if (!tp_allowed(op, t)) throw UsageError(fmt::format("{} cannot run at TP degree {}", op.name, t));
        const auto c = op_cost(op, t, plan.choices[static_cast<std::size_t>(oi)], plan.b0, m, pp,
                               plan.sequence_parallel, hw.workload.bytes, seq);
        st.time_s += c.time_s;
        st.compute_s += c.compute_s;
        st.dp_comm_s += c.dp_comm_s;
        st.tp_comm_s += c.tp_comm_s;
        states += c.states_bytes;
        act += c.act_bytes;
        trans = std::max(trans, c.transient_bytes);
      }
    }
    const int last = st.end_unit - 1;
    const StageExit exit = stage_exit(hw, pp, plan.b0, s, last, plan.unit_tp[static_cast<std::size_t>(last)]);
    st.relayout_s += exit.relayout_s;
    st.p2p_s = 2 * exit.send_s;
    if (s == pp - 1) st.p2p_s += tied_sync_s(hw, pp, plan.unit_tp.back(), plan.sequence_parallel) / m;
    st.time_s += st.relayout_s + st.p2p_s;
    st.peak_bytes = fixed + states + st.in_flight * act + trans;
    ev.stages.push_back(st);
  }
  double sum = 0, mx = 0;
  ev.fits = true;
  for (const auto& st : ev.stages) {
    sum += st.time_s;
    mx = std::max(mx, st.time_s);
    ev.peak_bytes = std::max(ev.peak_bytes, st.peak_bytes);
    ev.fits = ev.fits && st.peak_bytes <= capacity_;
  }
  ev.time_s = sum + (m - 1) * mx;
  ev.throughput = ev.time_s > 0 ? ev.global_batch / ev.time_s : 0;
  ev.bubble_fraction = ev.time_s > 0 ? 1.0 - m * sum / pp / ev.time_s : 0;
  return ev;
}

nlohmann::json to_json(const HybridWorkload& hw, const HybridPlan& plan, const HybridEvaluation& ev) {
  nlohmann::json stages = nlohmann::json::array();
  for (int s = 0; s < plan.pp; ++s) {
    const auto& st = ev.stages[static_cast<std::size_t>(s)];
    nlohmann::json units = nlohmann::json::array();
    for (int u = st.first_unit; u < st.end_unit; ++u) {
      const auto& unit = hw.units[static_cast<std::size_t>(u)];
      nlohmann::json ops = nlohmann::json::array();
      for (int oi : unit.ops) {
        const Choice& c = plan.choices[static_cast<std::size_t>(oi)];
        nlohmann::json op{{"name", hw.workload.operators[static_cast<std::size_t>(oi)].name},
                          {"choice", c.label()}};
        op.update(choice_json(c));
        ops.push_back(std::move(op));
      }
      units.push_back(
          {{"name", unit.name}, {"tp", plan.unit_tp[static_cast<std::size_t>(u)]}, {"operators", ops}});
    }
    stages.push_back({{"stage", s},
                      {"units", units},
                      {"time_per_micro_batch_s", st.time_s},
                      {"peak_memory_bytes", st.peak_bytes},
                      {"micro_batches_in_flight", st.in_flight},
                      {"compute_s", st.compute_s},
                      {"dp_comm_s", st.dp_comm_s},
                      {"tp_comm_s", st.tp_comm_s},
                      {"p2p_s", st.p2p_s},
                      {"relayout_s", st.relayout_s}});
  }
  return {{"pp", plan.pp},
          {"micro_batches", plan.micro_batches},
          {"micro_batch_per_device", plan.b0},
          {"global_batch", ev.global_batch},
          {"schedule", to_string(plan.schedule)},
          {"sequence_parallel", plan.sequence_parallel},
          {"predicted_iteration_time_s", ev.time_s},
          {"predicted_peak_memory_bytes", ev.peak_bytes},
          {"predicted_throughput_samples_per_s", ev.throughput},
          {"bubble_fraction", ev.bubble_fraction},
          {"stages", stages}};
}

}  // namespace osdp::costmodel
