// The cost of a plan (plan.hpp's layout: pipeline stages, micro-batches, a tensor-parallel degree per
// unit, per-operator data-parallel choices), both tiers. A data-parallel plan (one stage, one
// micro-batch, TP 1) costs exactly what cost_model.hpp gives its operators: T = sum of their times,
// M = reserve + prefetch reserve + sum persistent + max transient (a test holds it over every choice).
// TP slices and their traffic are workload.hpp's.
//
// One operator's price at (t, choice, b0, m), priced on the data-parallel group's ring (a cluster of
// d ranks: one node of d when N_s <= G, else N_s / G nodes of G / t; cost_model.hpp's formulas on
// it; a calibration's world segments only where that group is the whole world), with the TP slice's
// P_t parameters, n slices of Ps = ceil(P_t / n), k of them ZDP, and ag, rs the slice's all-gather
// and reduce-scatter, ar the all-reduce of g P_t:
//   per micro-batch, forward:  fwd = the slice's forward kernels at b;   comm_f = (k + (n-k)/m) ag
//                               (ZDP slices gather for every micro-batch, DP slices once per step)
//                  backward: bwd = its backward kernels (+ fwd when checkpointed, + its selective
//                            recompute kernels when selectively checkpointed);
//                            comm_b = (k + regather) ag + n rs / m   (REPLICATE: ar / m): gradients
//                            are reduced once per step, after the last micro-batch (Megatron's and
//                            PyTorch pipelining's deferred gradient sync)
//   time = ov(fwd, comm_f) + ov(bwd, comm_b) + tp_f + tp_b (+ tp_f when checkpointed) + opt / m
//          (ov as in cost_model.hpp when overlap is on and prefetch >= 1, else the sum; the paper
//          tier prices compute as b gamma and has no optimizer term); the per-step work is spread
//          over the step's micro-batches, so the stage's m micro-batches sum to the step's work
//   states = (w+g+o) shard + (n-k) w Ps + [tied gradient] g P_t + [m > 1, sharded] n g Ps
//            (the accumulated unsharded gradient, reduced at the step's end)
//   act    = b kept (saved, input or selective)  per micro-batch in flight
//   trans  = b workspace + gathered ZDP slices as in cost_model.hpp + [m = 1, sharded] g Ps
//            + b (saved - kept)
// With t = 1, m = 1 and pp = 1 this is exactly CostModel::cost (a test holds it).
//
// Expert parallelism (Choice::ep = e > 1, an MoE layer's MLP): the operator is the EP slice of its TP
// slice (workload.hpp: ep_slice, imbalance g = CostOptions::expert_imbalance), its states sharded and
// its weights gathered and reduced over the d / e ranks holding the same experts (stride t e: the
// expert-data-parallel group, a cluster of one node of d / e when N_s <= G, else of N_s / G nodes of
// G / (t e), or of N_s / (t e) nodes of one rank when t e > G); the router, the norm and a shared MLP
// are held with them (under 0.5% of a DeepSeek-V3 or Qwen3-MoE layer's parameters), every EP rank
// the same: their gradients, reduced over the expert-data group, are then all-reduced over the EP
// group, once per step (OpParts::ep_shared_sync_s, part of grad_sync_s): AR_e(g P_sh / d_e) on the
// EP group's ring, P_sh the parameters that are not the experts' and d_e the expert-data group's
// shards (REPLICATE: AR_e(g P_sh)). Its tokens move
// by all-to-alls on the EP group (e ranks at stride t: within a node when t e <= G, else over
// t e / G nodes, priced flat on the slowest link), each of X = g b0 s k h e_act bytes per rank (the
// tokens for the rank's TP slice of experts): forward a dispatch and a combine, backward their two
// gradients (and the forward's two again when checkpointed), on the critical path beside the TP
// all-reduces (OpParts::ep_forward_s, ep_backward_s; counted in tp_comm_s). The send and receive
// buffers of one all-to-all, 2 X, are transient.
//
// Context parallelism (Plan::cp = c, one degree for the plan): each sample's tokens over c ranks at
// stride t (the CP group; the unit's data-parallel group of N_s / t ranks still shards the weights,
// as torchtitan shards over dp x cp), b0 c samples per CP group of each TP index, so the global batch
// is b0 m N / (pp c). Every operator is its CP slice (workload.hpp: cp_slice, s / c tokens), TP
// all-reduces, re-layouts and stage sends carry s / c tokens. An attention operator at c > 1 also
// exchanges, per micro-batch, with KV = b kv / c its keys and values and Q = b q / c its queries
// (b = b0 t; kv and q per sample of its TP slice), on the CP group's ring (within a node when t c <= G,
// else priced flat on the slowest link):
//   ring (pass-KV, torchtitan's default): forward the K/V blocks around the ring, the c - 1 steps of
//        an all-gather of c KV, each pass p = AG(c KV) / (c - 1) overlapping one block of the core
//        (Kernel::ring_block: a c-th of its kernels' time a, the phase's at the choice's split): what
//        shows is (c - 1) max(0, p - a / c); backward the blocks again, overlapped the same way with
//        the backward's core, and their K/V gradients back, a reduce-scatter of c KV after each block
//        (not overlapped).
//   all-to-all (Ulysses): forward Q, K, V to head-sharded full sequences and the output back,
//        A2A(Q + KV) + A2A(Q); backward the same two.
// Both again in backward when the operator is fully checkpointed (OpParts::cp_forward_s,
// cp_backward_s; counted in tp_comm_s).
//
// Between units. A unit of degree t' after one of degree t != t' re-lays its input out: the larger
// per-device batch's activation X = b0 max(t, t') s h e is all-gathered on a ring of max/min ranks
// (forward when t grows, backward when it shrinks), once per micro-batch: AG_{t'/t}(X). Stage
// boundaries hand activations over in the t = 1 layout (each rank its b0 samples: Megatron's
// scatter-gather of p2p), so a stage's first unit re-lays from 1 and its last unit to 1; the send
// takes p2p = alpha + b0 s h e beta each way on the link between the stages (between nodes when
// N_s >= G), charged to the sending stage per micro-batch. A tied embedding on a pipeline keeps its
// token table in the first stage and a copy in the last (the LM head): the copy's gradient is
// all-reduced between the two once per step, AR_2(g P_t) on the link between them, charged / m to the
// last stage.
//
// Stage time per micro-batch c_s = sum of its units' operator times + its re-layouts + its sends.
// Step:   T = sum_s c_s + (m - 1) max_s c_s   (fill and drain, then the slowest stage sets the
//         pace: (m + pp - 1) c for equal stages, bubble fraction (pp - 1) / (m + pp - 1); GPipe and
//         1F1B take the same time)
// Memory of stage s: reserve + prefetch reserve + sum states + f_s sum act + max trans, with f_s the
// micro-batches in flight: GPipe m, 1F1B min(pp - s, m).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/choice.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/model.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"

namespace osdp::costmodel {

struct OpCost {
  double time_s = 0;  // per micro-batch (per-step parts spread over the m micro-batches)
  double states_bytes = 0;
  double act_bytes = 0;  // per micro-batch in flight
  double transient_bytes = 0;
  double compute_s = 0, dp_comm_s = 0, tp_comm_s = 0;  // parts of time_s before overlap
};

// One operator's price split by where a pipeline schedule places each part (sim/schedule.hpp), with
// the same terms as op_cost: per micro-batch the forward and backward compute (the backward with the
// recompute), the ZDP slices' gathers of each and the TP all-reduces; per step the DP slices' gathers,
// the gradients' reduction (reduce-scatters; REPLICATE's all-reduce) and the optimizer with, for
// REPLICATE, the runtime's copies (CostModel::replicate_s; both 0 in the paper tier). op_cost spreads the
// per-step parts over the m micro-batches.
struct OpParts {
  double forward_s = 0, backward_s = 0;
  double zdp_forward_s = 0, zdp_backward_s = 0;
  double tp_forward_s = 0, tp_backward_s = 0;
  double dp_gather_s = 0, grad_sync_s = 0, optimizer_s = 0;
  double ep_forward_s = 0, ep_backward_s = 0;  // the expert all-to-alls (dispatch and combine)
  double ep_shared_sync_s = 0;  // the shared parameters' gradients over the EP group (in grad_sync_s)
  double cp_forward_s = 0, cp_backward_s = 0;  // context parallelism's K/V passes or all-to-alls
};

// A plan's context parallelism as the cost of one operator needs it.
struct CpLayout {
  int degree = 1;
  bool all_to_all = false;
};

struct StageCost {
  int first_unit = 0, end_unit = 0;
  double time_s = 0;  // c_s: per micro-batch
  double peak_bytes = 0;
  int in_flight = 1;
  double compute_s = 0, dp_comm_s = 0, tp_comm_s = 0, p2p_s = 0, relayout_s = 0;
};

struct Evaluation {
  double time_s = 0;
  double peak_bytes = 0;  // the largest stage's
  double throughput = 0;  // global samples per second
  double bubble_fraction = 0;
  int global_batch = 0;
  bool fits = false;
  std::vector<StageCost> stages;
};

class PlanCostModel {
 public:
  PlanCostModel(const ClusterSpec& cluster, const Calibration* calibration, Precision precision,
                CostOptions options);

  int world_size() const { return cluster_.world_size(); }
  int node_size() const { return cluster_.devices_per_node; }
  const ClusterSpec& cluster() const { return cluster_; }
  const CostOptions& options() const { return options_; }
  // Whether (pp, t) is a valid layout: pp | N, t a power of two with t <= G, t | N/pp, and the
  // stage's data-parallel group a whole number of ranks per node.
  bool valid(int pp, int t) const;
  // The cost model of a unit's data-parallel group (cached).
  const CostModel& dp_model(int pp, int t) const;
  // The same for the ranks of one stage at stride `stride` (dp_model: stride t; an expert-parallel
  // choice's sharding group: stride t e, which may exceed a node), and of a group of `ranks` ranks at
  // stride t (an EP group's all-to-alls, a CP group's ring).
  const CostModel& group_model(int pp, int stride) const;
  const CostModel& strided_model(int pp, int t, int ranks) const;
  // The cost model a choice's states and collectives use at degree t (group_model(pp, t ep)).
  const CostModel& sharding_model(int pp, int t, const Choice& choice) const {
    return group_model(pp, t * choice.ep);
  }
  // One all-to-all of `bytes` per rank on the EP group of e ranks at stride t.
  double ep_all_to_all_s(int pp, int t, int e, double bytes) const;

  // Operator `op` of workload `w` at degree t.
  OpParts op_parts(const Workload& w, const Operator& op, int t, const Choice& choice, int b0, int pp,
                   bool sp, CpLayout cp = {}) const;
  // Compute and the collectives beside it as op_cost combines them: overlapped (cost_model.hpp) in the
  // extended tier with overlap and prefetch, else their sum.
  double overlapped_s(const CostModel& sub, double compute_s, double comm_s) const;
  OpCost op_cost(const Workload& w, const Operator& op, int t, const Choice& choice, int b0, int m, int pp,
                 bool sp, CpLayout cp = {}) const;
  // The same two from the operator already sliced (sliced = tp_slice(op, t, sp, w)) and, for op_cost,
  // from its parts: op_cost(w, op, ...) == op_cost(op_parts(op, sliced, ...), sliced, ...). A search
  // prices the parts once per b0 and combines them for every micro-batch count.
  OpParts op_parts(const Operator& op, const Operator& sliced, int t, const Choice& choice, int b0, int pp,
                   const PrecisionBytes& bytes, int seq, CpLayout cp = {}) const;
  OpCost op_cost(const OpParts& parts, const Operator& sliced, int t, const Choice& choice, int b0, int m,
                 int pp, const PrecisionBytes& bytes) const;
  // An all-reduce of `bytes` on a TP ring of t ranks (the intra-node link). TP rings, re-layouts, sends
  // and the tied copy's all-reduce are priced step by step on their link (link_ring_s): by the
  // calibration's fit of that link where it fitted the node levels, else by the cluster's figures.
  double tp_allreduce_s(int t, double bytes) const;
  // The re-layout from degree t to t2 of activations `hidden` wide at b0 samples per device.
  double relayout_s(int t, int t2, int b0, int seq, int hidden, int activation_bytes) const;
  // One p2p send of b0 samples' activations between stages (one direction).
  double p2p_s(int pp, int b0, int seq, int hidden, int activation_bytes) const;
  // The tied copy's gradient all-reduce between the first and the last stage (once per step).
  double tied_allreduce_s(int pp, double bytes) const;
  // The walk between units and stages that evaluate, the schedule and the search share:
  // the re-layout into unit u of stage s from the unit before it (a stage's first unit from the t = 1
  // layout, the first stage's first unit from none), gathering in forward when the degree grows;
  struct Relayout {
    double seconds = 0;
    bool forward = false;
  };
  Relayout relayout_into(const Workload& w, const Plan& plan, int s, int u) const;
  // what ends stage s after its last unit u at degree t: the re-layout to t = 1 and one send each
  // way (none for the last stage);
  struct StageExit {
    double relayout_s = 0, send_s = 0;
  };
  StageExit stage_exit(const Workload& w, int pp, int b0, int s, int u, int t, int cp = 1) const;
  // the tied copy's gradient all-reduce, once per step, with the LM head at degree t (0 without a
  // tied copy).
  double tied_sync_s(const Workload& w, int pp, int t, bool sequence_parallel) const;
  static int in_flight(PipelineSchedule s, int pp, int stage, int m);
  // Memory every stage sets aside whatever the plan: the device reserve and the prefetch reserve.
  double fixed_bytes(const Workload& w) const;
  double capacity_bytes() const { return capacity_; }
  void set_capacity(double bytes) { capacity_ = bytes; }

  Evaluation evaluate(const Workload& w, const Plan& plan) const;

 private:
  ClusterSpec cluster_;
  const Calibration* calibration_;
  Precision precision_;
  CostOptions options_;
  double capacity_;
  // Keyed (pp, stride) for sharding groups, (-pp, e (G + 1) + t) for EP groups.
  mutable std::map<std::pair<int, int>, std::unique_ptr<CostModel>> dp_models_;
  mutable std::map<std::pair<int, int>, std::unique_ptr<Calibration>> dp_calibrations_;
  const CostModel& sub_model(std::pair<int, int> key, ClusterSpec sub, int ranks) const;
  // Collective `c` of `bytes` on a ring of `ranks`, every step on the link between nodes (`across`, on a
  // cluster with more than one node) or within one.
  double link_ring_s(Collective c, double bytes, int ranks, bool across) const;
};

// The operator a plan prices for op at degree t with `choice`: its TP slice, its EP slice when the
// choice is expert-parallel (with the model's expert imbalance), its CP slice under context parallelism.
Operator plan_slice(const Operator& op, int t, bool sequence_parallel, const Workload& w,
                    const Choice& choice, double expert_imbalance, CpLayout cp = {});

// Elements of an expert-parallel operator's gradient that are not the experts' (the norm, the router, a
// shared MLP), per rank, that its EP group all-reduces once per step (OpParts::ep_shared_sync_s): of its
// shard of the expert-data group `sub` (REPLICATE: all of them). `sliced` is its plan_slice.
double ep_shared_elements(const Operator& sliced, const Choice& choice, const CostModel& sub);

// The plan cost model of a plan file: its cluster, calibration and cost options, the prefetch depth
// from the plan, its memory limit as the capacity.
PlanCostModel plan_cost_model(const Plan& plan);

// What a prediction of a plan gives under each of draws 1..`draws` of its calibration's uncertainty
// (uncertainty.hpp): `predict` run on the plan with its calibration drawn, times the plan's
// composition factor in that draw (composition.hpp). Empty when the plan has no calibration, it
// records no error, or draws is 0.
std::vector<double> drawn_predictions(const Plan& plan, int draws,
                                      const std::function<double(const Plan&)>& predict);
// The analytic step time of each draw.
std::vector<double> drawn_step_times(const Workload& w, const Plan& plan, int draws);

}  // namespace osdp::costmodel
