// The layout search (the strategies exact, galvatron and megatron-3d of search/strategy.hpp): over
// pipeline degree, stage split, micro-batches, per-unit tensor-parallel degree and per-operator
// data-parallel choices, priced by costmodel/plan_cost.hpp.
//
// exact (the optimum of the analytic model over the whole space). For one layout (pp, m, b0,
// schedule, SP) the step is T = sum_s c_s + (m - 1) max_s c_s with stages independent in memory, so:
//   1. c*(s, i, j), the least time per micro-batch of stage s holding units i..j-1 within the
//      memory limit: a dynamic program along the units, one state per TP degree of the unit before
//      (the re-layout between units depends on both degrees), each state a Pareto set of
//      (persistent bytes, largest transient, time). One chain per stage start gives every end (the
//      last stage's one chain runs backward from the model's end and gives every start). A label is
//      dropped when another with the same degree is no worse in all three, when it no longer fits,
//      or when no plan through it can beat the bound (below). Persistent bytes are states plus f_s
//      micro-batches of activations (f_s of the schedule).
//   2. The split: for every threshold C among the c* values (ascending), the least sum of c* over
//      splits whose stages all take at most C, a DP over (stage, first unit); T(C) = sum + (m-1) C.
//      The optimum is the least T(C) (at C = the optimal split's slowest stage, T(C) is at most its
//      T); thresholds stop once the unconstrained least sum + (m - 1) C reaches the best T.
//   The bounds are LP relaxations over units: per unit the lower convex hull of (persistent bytes,
//   time) over its degrees and its operators' item combinations at one degree. With a pipeline,
//   each is taken per band of the stage's largest transient (the items' transients cut into bands
//   no wider than the memory budget / 64; in band [lo, hi] only items within hi, under the budget
//   less lo) and the least over bands kept: the LP of all items charges none its own transient (on
//   Llama 3.1 405B's two stages it lies 2.1% under the optimum, the bands' 0.07%). lp(s, i, j) is the
//   LP of units i..j-1 within one stage's memory with its f_s, plus the least re-layout into unit i
//   (a later stage's entry) and the least exit after unit j-1 (sends; the last stage's tied
//   all-reduce) over those units' degrees; the layout's bound is the best split
//   of lp by step 2's rule (T >= sum + (m - 1) max). A stage's chains price only the (i, j) whose
//   lp with the others' bounds can beat the bound, and stop at the last such end (start). A label
//   of stage s at unit u is dropped when
//   for every such end j (every start, for the last stage) own + before + after + (m - 1) max(own,
//   before / s, after / (pp - 1 - s)) reaches the bound, own = its time + the LP of the stage's
//   remaining units within what the stage has left + its least exit (forward) or entry (backward),
//   before and after = the least lp sums of the stages before and after it (the slowest stage is no
//   faster than their means). Stages are priced one by one from the end whose stage is the slower in
//   the LP's best split (from the last back unless the first is slower), and once a stage is
//   priced its least sums replace the LP's for the stages priced after it. Before the last stage to
//   price, each of its (i, j) worth pricing gets an incumbent: the priced stages around it and
//   itself at one degree by the flat exact solver. Priced against the others' exact costs, a stage
//   that is not the slowest weighs 1 in T, not m, and its chain's slack under an LP bound is wide.
//   Without a pipeline: m (time + the LP of the units left), and the stage is solved per band of
//   largest transient X (the items' transients cut into bands [lo, hi] no wider than the memory
//   budget / 256): a band's chain takes only items within hi and starts its labels at transient lo,
//   its LP takes those items under budget - lo, and the bands go in the order of their LP, the
//   least of which is the layout's bound; the first band's chain kept to 16 labels per unit (least
//   time plus the LP left) gives the first incumbent. The bound is asked only of Pareto survivors
//   (it refuses everything worse than what it refuses); before the filter, every grown label meets
//   lines under the LP (convex in its budget: conjugate(lambda) - lambda budget per lambda), and a
//   label partway through a unit owes the unit's other operators at their least. The LP of a set of
//   units takes each unit class's hull increments n times for its n units. A layout is first solved
//   for T within 0.2% of its lower bound, then 1%, 5%, then the incumbent (one degree for every
//   unit, even stages or the LP's best split, each stage by the flat exact solver) or what the best
//   plan so far allows: a plan found below a bound is the optimum (a split that the chains priced
//   but that does not beat the bound is not a find). An incumbent just past such a bound, within
//   the same widening, becomes the bound.
//   Over layouts: every valid pp, every schedule asked for, m = 1..max_micro_batches (or the one
//   given), every context-parallel degree c (1, and powers of two up to max_cp dividing a stage and
//   cutting the sequence into 2c chunks, each variant asked for: a layout group of its own with its own
//   item cache), and every b0 up to the largest that fits in the relaxation; a CP group whose half
//   degree is searched too takes odd b0 only (at an even b0 it is no better than c / 2 at b0 / 2: the
//   same global batch and tokens per rank, no more memory, fewer exchange steps) (found per (pp, schedule, m)
//   by doubling and bisection on the relaxation's memory alone; memory grows with b0). The highest
//   throughput B / T wins (B = b0 m N / pp); with a global batch given, only layouts with that B.
//   Best first over a priority queue of throughput caps: each group's b0 = 1..largest as one range,
//   bounded by the LP with times priced at the range's largest b0 and memory at its smallest (a
//   plan's step per sample never rises with b0 and a plan that fits at b0 fits below it, as in the
//   flat scheduler); a range that comes first is split in two, a single layout's cheap bound (the LP
//   within all stages' memory together) is replaced by the split bound above, and a layout whose
//   tight cap comes first is solved. The search stops at the first cap that does not beat the best
//   plan.
// brute_force_layout: every plan of one layout (stage splits x degrees x choices), for tests.
// megatron-3d: one TP degree for every unit, even stages, every operator REPLICATE (DDP), all or no
//   checkpointing (or all selective); a grid over tp, pp, m and b0.
// galvatron: Galvatron's search as its released code does it: even stages (layers divided equally,
//   the remainder to the first stages), per layer a TP degree with DDP or ZeRO-3 data parallelism
//   (REPLICATE or ZDP, no splits), checkpointing when allowed, memory rounded up to whole MiB per
//   operator, global batch sizes in steps of 8, micro-batches by its heuristic (1 without a
//   pipeline, else min(8, max(pp, ceil(B / (N / pp) / 4))) as osdp reads it), and optionally its
//   1.3 overlap coefficient (compute and data-parallel communication each slowed by it, their max
//   taken) for choosing. Its plans are priced by osdp's model like every other strategy's.
// Budgets: the search stops at its time budget with the best plan found so far, and passes over a
// layout whose solve would hold more than its memory budget (stage tables, LP tables, labels); either
// leaves the result incomplete (complete = false: not proved optimal). The exact strategy then also
// offers the data-parallel scheduler's plan (search/strategies.cpp) where the space holds it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/model.hpp"
#include "costmodel/plan_cost.hpp"
#include "search/space.hpp"

namespace osdp::search {

struct HybridSearchOptions {
  SpaceOptions space;   // the per-operator choices within each data-parallel group
  std::vector<int> pp;  // pipeline degrees to try; empty: every valid one
  std::vector<int> tp;  // TP degrees allowed; empty: every valid one
  // Context-parallel degrees (empty: every power of two dividing a stage, up to max_cp) and variants
  // (false: ring, true: all-to-all) tried; the layouts' groups multiply by them.
  std::vector<int> cp;
  int max_cp = 16;
  std::vector<bool> cp_variants{false};
  int max_micro_batches = 8;         // m = 1..this
  std::optional<int> micro_batches;  // a fixed m
  std::optional<int> global_batch;   // a fixed global batch B
  int max_b0 = 4096;                 // samples per device per micro-batch, at most
  std::vector<costmodel::PipelineSchedule> schedules{costmodel::PipelineSchedule::k1F1B};
  bool sequence_parallel = false;
  std::optional<int> b0;         // a fixed micro-batch per device
  double galvatron_overlap = 0;  // galvatron only: its overlap coefficient (0: osdp's times)
  double time_budget_s = 60;     // the search stops by then with the best plan found
  // What one layout's solve may hold at once (its stage tables, LP tables and labels), at most about
  // this; a layout that would hold more is passed over.
  double memory_budget_bytes = 256.0 * 1024 * 1024;
  // Set by search_hybrid from time_budget_s (the solvers check it; callers leave it).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // galvatron and megatron-3d: called after each pipeline degree with the degree, the best throughput
  // so far (0: none fits yet), layouts priced and seconds spent. exact: after each layout solved, with
  // its pipeline degree, the best throughput so far, layouts solved and seconds spent.
  std::function<void(int pp, double throughput, std::int64_t layouts, double seconds)> progress;
};

struct HybridLayout {
  int pp = 1, m = 1, b0 = 1;
  costmodel::PipelineSchedule schedule = costmodel::PipelineSchedule::k1F1B;
  bool sequence_parallel = false;
  int cp = 1;                  // context-parallel degree (plan.hpp: b0 m N / (pp cp) samples per step)
  bool cp_all_to_all = false;  // its variant: Ulysses' all-to-alls, else ring attention
};

struct HybridResult {
  std::string strategy;
  bool feasible = false;
  std::shared_ptr<const costmodel::Workload> workload;  // the plan's (lower(model, plan.pp))
  costmodel::Plan plan;
  costmodel::Evaluation evaluation;
  // galvatron, megatron-3d: layouts priced; exact, dp-only: bounds computed (on single layouts and
  // on ranges of b0, and the memory checks that find each group's largest b0), and layouts solved
  // (the others were passed over by their bounds).
  std::int64_t layouts = 0;
  std::int64_t solved = 0;
  std::int64_t labels = 0;  // DP labels created (exact, galvatron)
  double search_seconds = 0;
  // Pipeline degrees passed over because a unit can take none of the TP degrees asked for (--tp):
  // why, one line each; empty when every degree was searched.
  std::vector<std::string> skipped;
  bool complete = true;  // false: a budget stopped the search (the plan is the best found)
};

enum class LayoutSearch { kExact, kGalvatron, kMegatron3d };

// The best plan of one layout, exact; none when nothing fits.
std::optional<costmodel::Plan> solve_layout_exact(const costmodel::PlanCostModel& model,
                                                  const costmodel::Workload& hw, const HybridLayout& layout,
                                                  const HybridSearchOptions& options,
                                                  std::int64_t* labels = nullptr);
// The same by enumerating every plan of the layout (small instances only).
std::optional<costmodel::Plan> brute_force_layout(const costmodel::PlanCostModel& model,
                                                  const costmodel::Workload& hw, const HybridLayout& layout,
                                                  const HybridSearchOptions& options);

// One of the layout searches over every layout the options allow.
// one_stage: lower(model) when the caller has it (not lowered again).
HybridResult search_hybrid(const costmodel::ModelSpec& model, const costmodel::PlanCostModel& cost,
                           LayoutSearch search, const HybridSearchOptions& options,
                           std::shared_ptr<const costmodel::Workload> one_stage = nullptr);

}  // namespace osdp::search
