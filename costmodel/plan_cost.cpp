#include "costmodel/plan_cost.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "costmodel/composition.hpp"
#include "costmodel/error.hpp"
#include "costmodel/uncertainty.hpp"

namespace osdp::costmodel {
namespace {

double ceil_div(double a, double b) {
  return std::ceil(a / b);
}

// What one rank sends in one expert all-to-all at b samples per TP group (the opening comment's X):
// the tokens of its TP slice of experts, times the imbalance the EP slice's kernels carry.
double ep_bytes(const Operator& sliced, int b) {
  return b * sliced.dispatch_bytes_per_sample;
}

}  // namespace

PlanCostModel::PlanCostModel(const ClusterSpec& cluster, const Calibration* calibration, Precision precision,
                             CostOptions options)
    : cluster_(cluster),
      calibration_(calibration),
      precision_(precision),
      options_(options),
      capacity_(cluster.memory_bytes) {}

bool PlanCostModel::valid(int pp, int t) const {
  return valid_degrees(cluster_, pp, t);
}

const CostModel& PlanCostModel::dp_model(int pp, int t) const {
  assert(valid(pp, t));
  return group_model(pp, t);
}

const CostModel& PlanCostModel::sub_model(std::pair<int, int> key, ClusterSpec sub, int ranks) const {
  auto& slot = dp_models_[key];
  if (slot) return *slot;
  const Calibration* cal = calibration_;
  if (cal && ranks != world_size()) {
    // A calibration's world segments were fitted on rings of the whole world: they do not describe a
    // smaller group's rings. Its levels' fits price a step over a link within or between nodes
    // (CostModel::link_step_s), which a smaller group's rings take too; without them, the cluster's
    // links price the steps.
    auto copy = std::make_unique<Calibration>(*cal);
    copy->allgather.clear();
    copy->reducescatter.clear();
    copy->allreduce.clear();
    copy->alltoall.clear();
    copy->level_nodes = cluster_.nodes;
    cal = copy.get();
    dp_calibrations_[key] = std::move(copy);
  }
  slot = std::make_unique<CostModel>(sub, cal, precision_, options_);
  return *slot;
}

const CostModel& PlanCostModel::group_model(int pp, int stride) const {
  if (const auto it = dp_models_.find({pp, stride}); it != dp_models_.end() && it->second) return *it->second;
  const int n = world_size(), g = node_size(), ns = n / pp, d = ns / stride;
  ClusterSpec sub = cluster_;
  if (ns <= g) {
    sub.nodes = 1;
    sub.devices_per_node = d;
    sub.inter.reset();
  } else if (stride <= g) {
    sub.nodes = ns / g;
    sub.devices_per_node = g / stride;
  } else {
    sub.nodes = d;  // one rank per node
    sub.devices_per_node = 1;
  }
  return sub_model({pp, stride}, sub, d);
}

const CostModel& PlanCostModel::strided_model(int pp, int t, int e) const {
  const int g = node_size();
  if (const auto it = dp_models_.find({-pp, e * (g + 1) + t}); it != dp_models_.end() && it->second)
    return *it->second;
  ClusterSpec sub = cluster_;
  if (t * e <= g) {
    sub.nodes = 1;
    sub.devices_per_node = e;
    sub.inter.reset();
  } else {
    sub.nodes = t * e / g;
    sub.devices_per_node = g / t;
  }
  return sub_model({-pp, e * (g + 1) + t}, sub, e);
}

double ep_shared_elements(const Operator& op, const Choice& ch, const CostModel& sub) {
  const double shared = static_cast<double>(op.parameters() - op.expert_parameters());
  return ch.replicate ? shared : shared / sub.shards(ch);
}

double PlanCostModel::ep_all_to_all_s(int pp, int t, int e, double bytes) const {
  if (e <= 1 || bytes <= 0) return 0;
  return strided_model(pp, t, e).all_to_all_s(bytes, false);
}

Operator plan_slice(const Operator& op, int t, bool sp, const Workload& w, const Choice& choice,
                    double expert_imbalance, CpLayout cp) {
  Operator s = tp_slice(op, t, sp, w);
  if (choice.ep > 1) s = ep_slice(s, choice.ep, expert_imbalance);
  return cp.degree > 1 ? cp_slice(s, cp.degree, cp.all_to_all) : s;
}

// A ring of `ranks` within a node (TP groups, re-layouts), or of ranks on different nodes: each step on
// that link, priced by the calibration's fit of it where it has one (CostModel::link_step_s).
double PlanCostModel::link_ring_s(Collective c, double bytes, int ranks, bool across) const {
  if (ranks <= 1 || bytes <= 0) return 0;
  const CollectiveOp op{c, bytes, ranks};
  const RingLevel level =
      across && cluster_.nodes > 1 && cluster_.inter ? RingLevel::kInter : RingLevel::kIntra;
  return op.steps() * group_model(1, 1).link_step_s(c, op.chunk_bytes(), level);
}

double PlanCostModel::tp_allreduce_s(int t, double bytes) const {
  return link_ring_s(Collective::kAllReduce, bytes, t, false);
}

double PlanCostModel::relayout_s(int t, int t2, int b0, int seq, int hidden, int e) const {
  if (t == t2) return 0;
  const int hi = std::max(t, t2), lo = std::min(t, t2);
  const double x = static_cast<double>(b0) * hi * seq * hidden * e;
  return link_ring_s(Collective::kAllGather, x, hi / lo, false);
}

double PlanCostModel::p2p_s(int pp, int b0, int seq, int hidden, int e) const {
  if (pp <= 1) return 0;
  const bool across = cluster_.nodes > 1 && cluster_.inter && world_size() / pp >= node_size();
  // A message is one step of a ring of two that moves it as its chunk (no reduction: the all-gather's).
  const double bytes = static_cast<double>(b0) * seq * hidden * e;
  return link_ring_s(Collective::kAllGather, 2 * bytes, 2, across);
}

double PlanCostModel::tied_allreduce_s(int pp, double bytes) const {
  if (pp <= 1 || bytes <= 0) return 0;
  const bool across = cluster_.nodes > 1 && cluster_.inter && world_size() - world_size() / pp >= node_size();
  return link_ring_s(Collective::kAllReduce, bytes, 2, across);
}

int PlanCostModel::in_flight(PipelineSchedule s, int pp, int stage, int m) {
  return s == PipelineSchedule::kGpipe ? m : std::min(pp - stage, m);
}

double PlanCostModel::fixed_bytes(const Workload& w) const {
  return cluster_.reserve_bytes + prefetch_reserve_bytes(w, options_.prefetch);
}

OpParts PlanCostModel::op_parts(const Workload& w, const Operator& op0, int t, const Choice& ch, int b0,
                                int pp, bool sp, CpLayout cp) const {
  return op_parts(op0, plan_slice(op0, t, sp, w, ch, options_.expert_imbalance, cp), t, ch, b0, pp, w.bytes,
                  w.seq, cp);
}

OpParts PlanCostModel::op_parts(const Operator& op0, const Operator& op, int t, const Choice& ch, int b0,
                                int pp, const PrecisionBytes& B, int seq, CpLayout cp) const {
  const CostModel& sub = sharding_model(pp, t, ch);
  const int b = b0 * t;
  const double P = static_cast<double>(op.parameters());
  const int n = ch.replicate ? 1 : ch.split;
  const int k = ch.replicate ? 0 : ch.zdp_slices;
  const Recompute rc = op.recompute(ch);
  const bool ckpt = rc == Recompute::kFull;
  OpParts x;
  if (ch.replicate) {
    x.grad_sync_s = sub.collective_s(Collective::kAllReduce, B.reduce * P);
  } else {
    const double Ps = ceil_div(P, n);
    const auto sc = sub.shard_comm_s(ch, B.weight * Ps, B.reduce * Ps);
    const int regather = (ckpt && options_.checkpoint_regather) ? k : 0;
    x.zdp_forward_s = k * sc.all_gather_s;
    x.zdp_backward_s = (k + regather) * sc.all_gather_s;
    x.dp_gather_s = (n - k) * sc.all_gather_s;
    x.grad_sync_s = n * sc.reduce_scatter_s;
  }
  const TpTraffic tr = tp_traffic(op0, seq);
  const double tokens = 1.0 / cp.degree;  // the share of each sample's tokens a rank holds
  x.tp_forward_s = tp_allreduce_s(t, b * tr.forward_elements * B.activation * tokens);
  x.tp_backward_s =
      tp_allreduce_s(t, b * tr.backward_elements * B.activation * tokens) + (ckpt ? x.tp_forward_s : 0.0);
  const auto ph = sub.phases(op, b, ch.replicate ? 1 : ch.split);
  x.forward_s = ph.forward_s;
  x.backward_s = ph.backward_s + (ckpt ? ph.forward_s : rc == Recompute::kSelective ? ph.selective_s : 0.0);
  x.optimizer_s = options_.tier == Tier::kPaper ? 0.0 : sub.per_step_s(ch, P, B);
  if (ch.ep > 1) {
    const double a2a = ep_all_to_all_s(pp, t, ch.ep, ep_bytes(op, b));
    x.ep_forward_s = 2 * a2a;
    x.ep_backward_s = 2 * a2a + (ckpt ? x.ep_forward_s : 0.0);
    x.ep_shared_sync_s =
        strided_model(pp, t, ch.ep)
            .collective_s(Collective::kAllReduce, B.reduce * ep_shared_elements(op, ch, sub));
    x.grad_sync_s += x.ep_shared_sync_s;
  }
  if (cp.degree > 1 && op.kind == OperatorKind::kAttention) {
    const CostModel& ring = strided_model(pp, t, cp.degree);
    const double kv = b * op.kv_bytes_per_sample, q = b * op.q_bytes_per_sample;  // per rank (op: CP slice)
    if (cp.all_to_all) {
      x.cp_forward_s = ring.all_to_all_s(q + kv, false) + ring.all_to_all_s(q, false);
      x.cp_backward_s = x.cp_forward_s;
    } else {
      // Each of the c - 1 passes of a K/V block overlaps one block of the core (a c-th of its kernels'
      // time): only what a pass takes beyond its block shows.
      const double pass = ring.collective_s(Collective::kAllGather, cp.degree * kv) / (cp.degree - 1);
      const int splits = ch.replicate ? 1 : ch.split;
      const auto exposed = [&](const std::vector<Kernel>& kernels) {
        return (cp.degree - 1) * std::max(0.0, pass - sub.ring_block_s(kernels, b, splits) / cp.degree);
      };
      x.cp_forward_s = exposed(op.forward);
      x.cp_backward_s = exposed(op.backward) + ring.collective_s(Collective::kReduceScatter, cp.degree * kv);
    }
    if (ckpt) x.cp_backward_s += x.cp_forward_s;
  }
  return x;
}

double PlanCostModel::overlapped_s(const CostModel& sub, double compute_s, double comm_s) const {
  if (options_.tier == Tier::kExtended && sub.overlap() && options_.prefetch > 0)
    return CostModel::overlapped_s(compute_s, comm_s, sub.interference());
  return compute_s + comm_s;
}

OpCost PlanCostModel::op_cost(const Workload& w, const Operator& op0, int t, const Choice& ch, int b0, int m,
                              int pp, bool sp, CpLayout cp) const {
  const Operator op = plan_slice(op0, t, sp, w, ch, options_.expert_imbalance, cp);
  return op_cost(op_parts(op0, op, t, ch, b0, pp, w.bytes, w.seq, cp), op, t, ch, b0, m, pp, w.bytes);
}

OpCost PlanCostModel::op_cost(const OpParts& x, const Operator& op, int t, const Choice& ch, int b0, int m,
                              int pp, const PrecisionBytes& B) const {
  assert(b0 >= 1 && m >= 1);
  const CostModel& sub = sharding_model(pp, t, ch);
  const int b = b0 * t;
  const double P = static_cast<double>(op.parameters());
  const int n = ch.replicate ? 1 : ch.split;
  const int k = ch.replicate ? 0 : ch.zdp_slices;
  const double Ps = ceil_div(P, n);
  const bool ckpt = op.recompute(ch) == Recompute::kFull;
  const double md = m;
  const double comm_f = x.zdp_forward_s + x.dp_gather_s / md;
  const double comm_b = x.zdp_backward_s + x.grad_sync_s / md;
  const double opt = x.optimizer_s / md;
  OpCost c;
  const double shard_elems = ch.replicate ? P : ceil_div(P, sub.shards(ch));
  c.compute_s = x.forward_s + x.backward_s + opt;
  c.dp_comm_s = comm_f + comm_b;
  c.tp_comm_s =
      x.tp_forward_s + x.tp_backward_s + x.ep_forward_s + x.ep_backward_s + x.cp_forward_s + x.cp_backward_s;
  c.time_s =
      overlapped_s(sub, x.forward_s, comm_f) + overlapped_s(sub, x.backward_s, comm_b) + opt + c.tp_comm_s;

  const double state = B.at_rest();
  c.states_bytes = state * shard_elems;
  if (!ch.replicate) c.states_bytes += (n - k) * B.weight * Ps;
  if (op.tied_gradient && !ch.replicate) c.states_bytes += B.gradient * P;
  if (m > 1 && !ch.replicate && !op.tied_gradient) c.states_bytes += n * B.gradient_in_flight() * Ps;
  c.act_bytes = b * op.kept_bytes_per_sample(ch);
  c.transient_bytes = b * op.workspace_bytes_per_sample;
  if (!ch.replicate) {
    const bool all_slices = (ckpt && !options_.checkpoint_regather) || op.tied_gradient;
    c.transient_bytes += (all_slices ? k : std::min(k, 1)) * B.weight * Ps;
    if (!op.tied_gradient && m == 1) c.transient_bytes += B.gradient_in_flight() * Ps;
  }
  c.transient_bytes += b * (op.saved_bytes_per_sample - op.kept_bytes_per_sample(ch));
  if (ch.ep > 1) c.transient_bytes += 2 * ep_bytes(op, b);  // one all-to-all's send and receive buffers
  return c;
}

PlanCostModel::Relayout PlanCostModel::relayout_into(const Workload& w, const Plan& plan, int s,
                                                     int u) const {
  const int t = plan.unit_tp[static_cast<std::size_t>(u)];
  const bool first = u == plan.stage_first_unit[static_cast<std::size_t>(s)];
  if (first && s == 0) return {};  // the embedding takes no activation
  const int from = first ? 1 : plan.unit_tp[static_cast<std::size_t>(u - 1)];
  const int hidden = w.units[static_cast<std::size_t>(u - 1)].hidden;
  return {relayout_s(from, t, plan.batch_size, w.seq / plan.cp, hidden, w.bytes.activation), t > from};
}

PlanCostModel::StageExit PlanCostModel::stage_exit(const Workload& w, int pp, int b0, int s, int u, int t,
                                                   int cp) const {
  if (s + 1 >= pp) return {};
  const int e = w.bytes.activation, seq = w.seq / cp;
  const int hidden = w.units[static_cast<std::size_t>(u)].hidden;
  return {relayout_s(t, 1, b0, seq, hidden, e), p2p_s(pp, b0, seq, hidden, e)};
}

double PlanCostModel::tied_sync_s(const Workload& w, int pp, int t, bool sequence_parallel) const {
  if (!w.tied_copy) return 0;
  const int head = w.units.back().ops.back();
  const Operator sliced = tp_slice(w.operators[static_cast<std::size_t>(head)], t, sequence_parallel, w);
  return tied_allreduce_s(pp, w.bytes.reduce * static_cast<double>(sliced.parameters()));
}

Evaluation PlanCostModel::evaluate(const Workload& w, const Plan& plan) const {
  const auto& units = w.units;
  const auto& ops = w.operators;
  const int pp = plan.pp, m = plan.micro_batches;
  check_layout(plan, w, cluster_);
  Evaluation ev;
  ev.global_batch = plan.global_batch(world_size());
  const double fixed = fixed_bytes(w);
  for (int s = 0; s < pp; ++s) {
    StageCost st;
    st.first_unit = plan.stage_first_unit[s];
    st.end_unit = s + 1 < pp ? plan.stage_first_unit[s + 1] : static_cast<int>(units.size());
    st.in_flight = in_flight(plan.schedule, pp, s, m);
    double states = 0, act = 0, trans = 0;
    for (int u = st.first_unit; u < st.end_unit; ++u) {
      const Unit& unit = units[static_cast<std::size_t>(u)];
      const int t = plan.unit_tp[static_cast<std::size_t>(u)];
      st.relayout_s += relayout_into(w, plan, s, u).seconds;
      for (int oi : unit.ops) {
        const Operator& op = ops[static_cast<std::size_t>(oi)];
        const auto c = op_cost(w, op, t, plan.choices[static_cast<std::size_t>(oi)], plan.batch_size, m, pp,
                               plan.sequence_parallel, {plan.cp, plan.cp_all_to_all});
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
    const StageExit exit =
        stage_exit(w, pp, plan.batch_size, s, last, plan.unit_tp[static_cast<std::size_t>(last)], plan.cp);
    st.relayout_s += exit.relayout_s;
    st.p2p_s = 2 * exit.send_s;
    if (s == pp - 1) st.p2p_s += tied_sync_s(w, pp, plan.unit_tp.back(), plan.sequence_parallel) / m;
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

PlanCostModel plan_cost_model(const Plan& plan) {
  CostOptions cost_options = plan.cost_options;
  cost_options.prefetch = plan.prefetch;
  const Calibration* cal = plan.calibration ? &*plan.calibration : nullptr;
  PlanCostModel model(plan.cluster, cal, plan.model.precision, cost_options);
  model.set_capacity(plan.memory_limit_bytes > 0 ? plan.memory_limit_bytes : plan.cluster.memory_bytes);
  return model;
}

std::vector<double> drawn_predictions(const Plan& plan, int draws,
                                      const std::function<double(const Plan&)>& predict) {
  std::vector<double> out;
  if (draws <= 0 || !plan.calibration || !has_uncertainty(*plan.calibration)) return out;
  const double composition = fit_errors(*plan.calibration).composition;
  const std::vector<std::int64_t> keys =
      composition > 0 ? composition_keys(plan) : std::vector<std::int64_t>{};
  Plan p = plan;
  for (int d = 1; d <= draws; ++d) {
    p.calibration = drawn(*plan.calibration, static_cast<std::uint64_t>(d));
    out.push_back(predict(p) * composition_factor(keys, static_cast<std::uint64_t>(d), composition));
  }
  return out;
}

std::vector<double> drawn_step_times(const Workload& w, const Plan& plan, int draws) {
  return drawn_predictions(plan, draws,
                           [&w](const Plan& p) { return plan_cost_model(p).evaluate(w, p).time_s; });
}

}  // namespace osdp::costmodel
