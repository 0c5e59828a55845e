// The cost model (DESIGN.md section 4): time and memory of one operator under one choice.
//
// Notation: N ranks, P parameters of the operator, n slices of which k are ZDP, slice size
// Ps = ceil(P / n), w/g/o bytes per gathered weight/gradient/optimizer state, b micro-batch.
// Collectives are rings over N ranks on the bottleneck link (or on the calibrated segment for the
// buffer size S, the full gathered or reduced buffer), priced by costmodel/collective.hpp:
//   all-gather(S) = reduce-scatter(S) = (N-1) alpha + (N-1)/N S beta;  all-reduce(S) = twice that.
// Sharding groups and two-level collectives (issue 14), on M nodes of G devices (N = M G) with links
// intra (a1, b1) and inter (a2, b2); S = w Ps gathered, R = g Ps reduced per slice, ring(c, X, n, l) the
// ring formula over n ranks on link l:
//   world, flat:      all-gather ring(AG, S, N, slowest), reduce-scatter ring(RS, R, N, slowest) (above)
//   world, two-level: all-gather ring(AG, S/G, M, inter) + ring(AG, S, G, intra)
//                     reduce-scatter ring(RS, R, G, intra) + ring(RS, R/G, M, inter)
//   node (HSDP):      all-gather ring(AG, S, G, intra)
//                     reduce-scatter ring(RS, R, G, intra) + all-reduce ring(AR, R/G, M, inter)
//   at rest, node:    (w+g+o) ceil(P/G) instead of (w+g+o) ceil(P/N)
// These per-level rings are priced by the calibration's per-level segments where it has them
// (`osdp calibrate --per-node G`: alpha and beta fitted on the rings within a node and across nodes,
// ring(c, X, n, segment of X)), else on the cluster's links; a calibration's world segments
// (measured over the whole world) price only the flat ring.
// Communication of a choice:
//   forward:  n all-gathers of w Ps (every slice is gathered once for forward)
//   backward: k all-gathers of w Ps (ZDP slices gather again; 2k when checkpoint_regather is set and
//             the operator is checkpointed), n reduce-scatters of g Ps
//   REPLICATE: one all-reduce of g P in backward; plus, once per step and not overlapped, what the
//              runtime adds beyond it where the calibration measured that (replicate_s: FSDP2's
//              copies for a module on a (world x 1) mesh).
// Time tiers:
//   paper:    t = comm + b * gamma, gamma the operator's compute per sample (its kernels at b = 1),
//             so DP gives 2(N-1)alpha + 2(N-1)/N S beta + b gamma and ZDP 3(...) + b gamma
//             (the seed paper's t_d and t_z, S = w P).
//   extended: per-kernel compute at batch b (ComputeSpec's roofline; with a calibration's measured
//             shapes, GemmPrice: the roofline corrected towards them, a measured shape at its time),
//             slices run one after another and their outputs are summed, never priced below the
//             whole GEMM unless the calibration measured both so; with prefetch >= 1 forward and
//             backward each overlap their communication with their compute (prefetch 0: their sum):
//             ov(x, c) = c if c >= i x, else x + c (1 - 1/i) (i the interference: compute slows by i
//             while a collective runs; i = 1 gives max(x, c)); plus the Adam step over the shard.
// Memory (both tiers):
//   persistent = (w+g+o) ceil(P/N) [REPLICATE: (w+g+o) P; node group: (w+g+o) ceil(P/G)]
//              + (n-k) w Ps                       (DP slices keep their gathered weights)
//              + b * kept activations              (saved; checkpointed: the input only;
//                                                  selective: the input, GEMM and attention outputs)
//              + g P                              (a tied embedding's gradient, alive all backward)
//   transient  = [k > 0] w Ps + g Ps              (one gathered ZDP slice, one slice's gradient
//                                                  before its reduce-scatter; neither for REPLICATE
//                                                  and no gradient term for a tied embedding;
//                                                  k w Ps when all ZDP slices are held together: a
//                                                  checkpointed operator whose recompute reuses the
//                                                  backward gather, and a tied LM head)
//              + b * backward workspace
//              + b * (saved - kept)               (recomputed activations)
// Compute: a checkpointed operator runs its forward again before its backward, a selectively
// checkpointed one its norms, rotary and activation (Operator::selective_recompute).
// The step's peak is bounded by reserve + sum(persistent) + max(transient): the search objective.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <vector>

#include "costmodel/calibration.hpp"
#include "costmodel/choice.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/collective.hpp"
#include "costmodel/gemm_price.hpp"
#include "costmodel/uncertainty.hpp"
#include "costmodel/workload.hpp"

namespace osdp::costmodel {

enum class Tier { kPaper, kExtended };

// The ring a collective runs on: over every rank (world), within one node (intra: G ranks on the
// intra-node link), or across nodes among the ranks of one local index (inter: M ranks on the
// inter-node link). Node groups and two-level collectives use the last two.
enum class RingLevel { kWorld, kIntra, kInter };
const char* to_string(RingLevel l);
const char* to_string(Tier t);

// The calibration's fit of one step over the link of `level` (kIntra or kInter) moving `chunk` bytes of
// collective `c`: the segment of that level's own ring moving the same chunk (its buffer chunk x the
// ring's ranks: the calibration's per_node within a node, its level_nodes or else `nodes` across), and
// that buffer. None where the calibration has no fit of that level for `c` (no levels: per_node 0).
// CostModel::link_step_s and the simulator's rings (sim/network.hpp) price steps by it.
struct LevelStep {
  const Segment* segment = nullptr;
  int index = 0;
  double ring_bytes = 0;
};
std::optional<LevelStep> level_step(const Calibration& cal, int nodes, Collective c, double chunk,
                                    RingLevel level);

struct CostOptions {
  Tier tier = Tier::kExtended;
  // Under ZDP a checkpointed operator's recompute needs the weights: false reuses the backward
  // all-gather (recompute runs right before the operator's backward, FSDP-style); true gathers once
  // more (the behaviour the seed paper reports for FairScale).
  bool checkpoint_regather = false;
  // All-gathers issued ahead of the compute that needs them (the schedule's prefetch depth). With
  // 0 nothing overlaps, so the extended tier credits overlap only when this is >= 1; the memory
  // bound then sets aside p gathered operators and p + 1 operators' gradients in flight
  // (prefetch_reserve_bytes).
  int prefetch = 0;
  // Expert parallelism's straggler (issue 35): the tokens the busiest rank of an expert-parallel group
  // receives over its balanced share (>= 1; 1: every expert gets s k / E tokens). Its expert GEMMs, its
  // dispatch and combine bytes scale by it (workload.hpp: ep_slice).
  double expert_imbalance = 1.0;
};

// One part of a sharded choice's all-gather or reduce-scatter (`c`, of a slice of `bytes`): the
// collective it runs, on which buffer, on which ring, in order. World/flat: c itself; two-level:
// all-gather across nodes on S/G then within on S, reduce-scatter within on S then across on S/G;
// node group: all-gather within; reduce-scatter within, then an all-reduce of S/G across. The cost
// model prices these and the schedule runs them (CostModel::level_collectives), so both describe the
// same work.
struct LevelCollective {
  Collective kind;
  double bytes;
  RingLevel level;
};

// What prefetch depth p can add to any step's peak: p operators gathered ahead and p + 1 operators'
// gradients still being reduce-scattered, each as large as the largest operator.
double prefetch_reserve_bytes(const Workload& w, int prefetch);

struct ChoiceCost {
  double time_s = 0;
  double persistent_bytes = 0;
  double transient_bytes = 0;
  double compute_s = 0;  // forward + backward (+ recompute) + optimizer, before overlap
  double comm_s = 0;     // all collectives, before overlap
};

class CostModel {
 public:
  // `calibration` may be null; when given, its segments and compute figures override the cluster's.
  CostModel(const ClusterSpec& cluster, const Calibration* calibration, Precision precision,
            CostOptions options);

  ChoiceCost cost(const Operator& op, const Choice& choice, int batch, const PrecisionBytes& bytes) const;
  // The operator's forward and backward compute at a batch size and split (the tier's phase time),
  // which every choice of that split shares: pricing many choices computes them once.
  struct PhaseTimes {
    double forward_s = 0, backward_s = 0;
    double selective_s = 0;  // the kernels a selectively checkpointed operator runs again
  };
  PhaseTimes phases(const Operator& op, int batch, int splits) const;
  // cost() with the phases of the choice's split (REPLICATE: 1) given.
  ChoiceCost cost(const Operator& op, const Choice& choice, int batch, const PrecisionBytes& bytes,
                  const PhaseTimes& phases) const;

  int world_size() const { return world_; }
  const ComputeSpec& compute() const { return compute_; }
  double interference() const { return interference_; }
  bool overlap() const { return overlap_; }
  const CostOptions& options() const { return options_; }

  double collective_s(Collective c, double bytes) const;
  // What the price of calibrated segment `index` of a level's collective `c` over `bytes` is
  // multiplied by: the step's level (1 without one), and in a draw the communication drift (or the
  // level's factor) and the segment's residual at the buffer's octave. The simulator's rings take the same
  // factor, so both draw the same step.
  double segment_factor(const Segment& s, int index, Collective c, RingLevel level, double bytes) const;
  // The same on one level's ring (kWorld: collective_s; the others step by step, link_step_s).
  double collective_s(Collective c, double bytes, RingLevel level) const;
  // One step of collective `c` (a point-to-point message: kAllGather, a chunk with no reduction) that
  // moves `chunk` bytes over the link of `level` (kIntra: within a node, kInter: between nodes). Where
  // the calibration fitted that level (its `levels`), by the fit: the segment of that level's own ring
  // moving the same chunk (chunk x its ranks), alpha + chunk beta, drawn as the segment; else alpha +
  // chunk beta of the cluster's link. A ring of any size on one kind of link (a TP group inside a node,
  // one local index's ranks across nodes, a pipeline's send) is so priced by what the lab or cluster
  // measured of that link, not by the cluster file's figures; on a level's own ring it is that ring's
  // segment, step for step.
  double link_step_s(Collective c, double chunk, RingLevel level) const;
  // One slice's all-gather of `weight_bytes` and reduce-scatter of `gradient_bytes` under a sharded
  // choice's group and communication (the opening comment's formulas; world/flat is collective_s).
  struct ShardComm {
    double all_gather_s = 0, reduce_scatter_s = 0;
  };
  ShardComm shard_comm_s(const Choice& choice, double weight_bytes, double gradient_bytes) const;
  // The parts of a sharded choice's collective `c` of `bytes` (LevelCollective): one world ring unless
  // the choice is node-sharded or two-level and the cluster has two levels.
  std::vector<LevelCollective> level_collectives(const Choice& choice, Collective c, double bytes) const;
  // The parts of an all-to-all of `bytes` per rank over the world: flat, one world exchange (on the
  // slowest link, or the calibration's world segment); two-level (on a cluster with two levels), an
  // exchange within each node of the whole S (each rank gathers what goes to its local index on every
  // node) and then one across nodes among the ranks of one local index, of S again:
  //   A2A(S, G, intra) + A2A(S, M, inter)
  // with each level's segments where the calibration has them. all_to_all_s sums their prices.
  std::vector<LevelCollective> all_to_all_parts(double bytes, bool two_level) const;
  double all_to_all_s(double bytes, bool two_level) const;
  // Over how many ranks a sharded choice's states are split: the node's G for a node group (on a
  // cluster with two levels), else all N.
  int shards(const Choice& choice) const { return choice.node_group && two_levels() ? node_size_ : world_; }
  // Whether the cluster has the two levels that node groups and two-level collectives need.
  bool two_levels() const { return nodes_ > 1 && node_size_ > 1 && inter_.has_value(); }
  int node_size() const { return node_size_; }
  double kernel_s(const Kernel& k, int batch) const;
  // The kernels run with every splittable kernel cut into `splits` slices: each slice's GEMMs, the
  // partial sums' accumulation (accumulate_s per slice after the first of a GEMM cut along k), and a
  // launch (the kernel overhead) per slice of every elementwise kernel a slice runs a share of.
  double kernels_s(const std::vector<Kernel>& kernels, int batch, int splits) const;
  // What adding a slice's product into the output costs beyond writing it: bytes(C) over the
  // accumulate bandwidth (ComputeSpec).
  double accumulate_s(const Kernel& piece, int batch) const;
  // One more launch of an elementwise kernel: the kernel overhead.
  double launch_s() const;
  // Compute time of a list of kernels at batch b as the tier prices it: the extended tier runs the
  // kernels at batch b, the paper tier takes b times their time at batch 1 (b gamma).
  double phase_s(const std::vector<Kernel>& kernels, int batch, int splits) const;
  // phase_s of the kernels among `kernels` that ring attention runs block by block (Kernel::ring_block).
  double ring_block_s(const std::vector<Kernel>& kernels, int batch, int splits) const;
  double optimizer_s(double elements, const PrecisionBytes& bytes) const;
  // What a REPLICATE operator with `weight_bytes` of weights pays per step in its runtime beyond its
  // kernels and its all-reduce (ComputeSpec::replicate_overhead_s, 0 unless the calibration measured
  // it): priced once per step beside the optimizer, on the compute stream.
  double replicate_s(double weight_bytes) const;
  // What an operator of `parameters` under `choice` pays once per step on the compute stream, after its
  // backward: the optimizer over its shard (all of it for REPLICATE) and a REPLICATE operator's runtime
  // copies (replicate_s). The DP cost model, the plan cost model and the simulator's optimizer task all
  // take it from here.
  double per_step_s(const Choice& choice, double parameters, const PrecisionBytes& bytes) const;
  static double overlapped_s(double compute_s, double comm_s, double interference);

 private:
  int world_;
  int nodes_, node_size_;  // M nodes of G devices
  LinkSpec intra_;
  std::optional<LinkSpec> inter_;
  // The links a ring's steps cross: within a node (when a node holds more than one device) and
  // between nodes (when there is more than one). Every step of a ring takes as long as its slowest
  // step, so without a calibrated segment of its own the ring is priced on whichever is slower for the
  // message at hand (link_step_s).
  std::vector<RingLevel> ring_links_;
  const Calibration* calibration_;
  ComputeSpec compute_;
  Precision precision_;
  double interference_;
  bool overlap_;
  CostOptions options_;
  // The GEMMs' one price (gemm_price.hpp) when the calibration measured shapes; else the roofline.
  GemmPrice gemm_;
  // A draw of the calibration's uncertainty (uncertainty.hpp; 0: none) and the errors it scales by.
  std::uint64_t draw_ = 0;
  double gemm_error_ = 0, elementwise_error_ = 0, optimizer_error_ = 0, accumulate_error_ = 0,
         replicate_error_ = 0;
  // The step's level (1 without one) times this draw's drift or level factor.
  double compute_drift_ = 1, communication_drift_ = 1;
  std::optional<double> fixed_z_;  // Calibration::quantile_z: every factor at this quantile
  // A price's factor in this draw (or at the fixed quantile) for an error of `sigma`.
  double factor(double sigma, std::initializer_list<std::int64_t> key) const;
  // A calibrated segment's price in the draw (its residual, per octave of the buffer).
  double segment_s(const Segment& s, int index, Collective c, RingLevel level, const CollectiveOp& op) const;
};

}  // namespace osdp::costmodel
