// The exact solver of one hybrid layout and the pieces the strategies of search/hybrid.cpp share
// with it (search/hybrid.hpp's opening comment has the algorithm; hybrid_layout.cpp holds the
// layout's solve and its bounds; hybrid_chains.cpp the chain DP along a stage's units;
// hybrid_split.cpp the stage split and the incumbent; hybrid_context.hpp the priced items;
// hybrid_bounds.hpp the LP bounds).
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "costmodel/plan_cost.hpp"
#include "search/hybrid.hpp"

namespace osdp::search::detail {

// Thrown by the solvers when a budget of HybridSearchOptions runs out; search_hybrid catches it and
// returns the best plan so far.
struct BudgetStop {
  bool memory = false;  // the memory budget (else the time budget)
};
inline void check_deadline(const HybridSearchOptions& o) {
  if (std::chrono::steady_clock::now() > o.deadline) throw BudgetStop{false};
}

// How a strategy restricts and prices the per-operator items.
struct ItemRules {
  bool galvatron = false;  // REPLICATE or ZDP only, memory rounded up to whole MiB
  double overlap = 0;      // galvatron's overlap coefficient for choosing (0: osdp's time)
};

// The priced operators the layouts of one hybrid workload share (one cache per workload and strategy):
// an operator's slice and choices depend on its shape and TP degree, and the parts of its price
// (PlanCostModel::op_parts) also on b0, but not on the micro-batch count or the schedule.
struct PartsCache {
  struct Shape {
    costmodel::Operator sliced;
    std::vector<costmodel::Choice> choices;        // of the space, less those the strategy's rules refuse
    std::map<int, costmodel::Operator> ep_sliced;  // the EP slices of `sliced` its choices use, by degree
    // (`sliced` and these are also the layout's CP slices: a cache serves one CP degree)
    // The operator a choice prices (costmodel::plan_slice).
    const costmodel::Operator& of(const costmodel::Choice& c) const {
      return c.ep > 1 ? ep_sliced.at(c.ep) : sliced;
    }
  };
  std::map<std::pair<int, int>, Shape> shapes;                                 // (shape, t)
  std::map<std::tuple<int, int, int>, std::vector<costmodel::OpParts>> parts;  // (shape, t, b0)
  // Per unit, filled by the first layout: the TP degrees it allows, and its class (units of one class
  // have operators of the same shapes, so the same items); per operator, its unit.
  std::vector<std::vector<int>> allowed;
  std::vector<int> unit_class;
  std::vector<int> op_unit;
};

class LayoutContext;  // search/internal/hybrid_context.hpp

// Stage costs c(s, i, j) (stage s holding units i..j-1; infinity: none). A row (s, i) is stored once
// something is set in it: stage 0 starts at unit 0 only, so one stage costs one row, not U + 1.
class StageTable {
 public:
  StageTable(int pp, int U) : U_(U), rows_(static_cast<std::size_t>(pp) * static_cast<std::size_t>(U + 1)) {}
  double operator()(int s, int i, int j) const {
    const auto& r = rows_[row(s, i)];
    return r.empty() ? kInfinity : r[static_cast<std::size_t>(j)];
  }
  double& set(int s, int i, int j) {
    auto& r = rows_[row(s, i)];
    if (r.empty()) r.assign(static_cast<std::size_t>(U_) + 1, kInfinity);
    return r[static_cast<std::size_t>(j)];
  }
  bool has_row(int s, int i) const { return !rows_[row(s, i)].empty(); }
  // The bytes a table of pp stages over U units holds at most (stage 0 one row, the others U + 1).
  static double max_bytes(int pp, int U) {
    return (1.0 + (pp - 1.0) * (U + 1.0)) * (U + 1.0) * sizeof(double);
  }

 private:
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();
  std::size_t row(int s, int i) const {
    return static_cast<std::size_t>(s) * static_cast<std::size_t>(U_ + 1) + static_cast<std::size_t>(i);
  }
  int U_;
  std::vector<std::vector<double>> rows_;
};

// The split minimising sum_s c(s) + (m - 1) max_s c(s) (hybrid_split.cpp); infinity when there is
// none. Fills `split_out` (the stages' first units) when given. With `budget`, checks its deadline.
double best_stage_split(const StageTable& c, int pp, int U, int m, std::vector<int>* split_out,
                        const HybridSearchOptions* budget = nullptr);

// A plan of the layout with every unit at degree 1, every choice the default, one stage at unit 0.
costmodel::Plan empty_plan(const costmodel::Workload& hw, const HybridLayout& layout);

// Stage s's first unit for even stages: layers divided equally (the remainder to the first stages);
// the embedding with the first stage, a projection with the layer after it, the head with the last.
// Empty when there are fewer layers than stages.
std::vector<int> even_stage_starts(const costmodel::Workload& hw, int pp);

// Stage s of `plan` (its stage_first_unit set): TP degree t for every unit that allows it (1 for the
// others) and the choices by the flat exact solver; false when the stage does not fit (or a unit
// allows neither degree). The other stages are left as they are.
bool flat_stage(const LayoutContext& ctx, int t, int s, costmodel::Plan& plan);

// An incumbent the exact search must beat: the stages first at `starts`, each by flat_stage at
// degree t; none when some stage does not fit there (the caller evaluates the whole plan).
std::optional<costmodel::Plan> uniform_plan(const LayoutContext& ctx, int t, const std::vector<int>& starts);

// Whether some split fits every stage in its own memory in the relaxation (every unit at its least
// bytes): layout_lower_bound is infinity exactly when this is false, and then no larger b0 fits
// either. Memory only, so cheaper than the bound.
bool layout_fits(const costmodel::PlanCostModel& model, const costmodel::Workload& hw,
                 const HybridLayout& layout, const HybridSearchOptions& options, ItemRules rules,
                 PartsCache* cache = nullptr);

// A lower bound on the step time of every plan of the layout, the one solve_layout first checks:
// T = sum c + (m - 1) max c >= (1 + (m - 1) / pp) sum c, and sum c is at least the LP relaxation of
// every operator within the memory of all stages together (at the fewest micro-batches in flight).
// Infinity when no split fits each stage in its own memory even in the relaxation (every unit at its
// least bytes), and then no larger b0 fits either.
// With price_b0 > b0, times are priced at price_b0 and memory at the layout's b0: then every plan at
// any b in b0..price_b0 has a step per sample of at least this over price_b0 (search/hybrid.hpp).
double layout_lower_bound(const costmodel::PlanCostModel& model, const costmodel::Workload& hw,
                          const HybridLayout& layout, const HybridSearchOptions& options, ItemRules rules,
                          PartsCache* cache = nullptr, int price_b0 = 0);

// How solve_layout prices a pipeline's stages: which stage goes first (search/hybrid_layout.cpp), and
// whether incumbents may lower the bound. The defaults are the search's; the tests hold the chains
// alone to brute force in each order.
//   ceiling, stretch: when the incumbent is shorter than `ceiling` but not than `bound`, and within
// `stretch` of it (incumbent <= bound (1 + stretch)), the bound is raised to the incumbent. The solve
// then returns the layout's best plan, the incumbent when nothing beats it, for about what a solve
// under `bound` costs: a narrower bound would save little and, finding nothing, need a second solve.
struct Pricing {
  enum class Order { kAuto, kFromLast, kFromFirst };
  Order order = Order::kAuto;
  bool incumbents = true;
  double ceiling = 0, stretch = 0;
  // One stage: the labels per unit of the heuristic chain whose plan is the first incumbent of the
  // transient bands (0: none).
  std::size_t beam = 16;
  // Forward chains share the steps they have in common (search/internal/hybrid_memo.hpp) where a
  // pipeline's forward stages hold the same micro-batches in flight; no label or plan changes.
  bool share_steps = true;
};

// The best plan of one layout under `rules` (even: the stages of even_stage_starts only) whose step
// is shorter than `bound`; none when nothing fits or nothing beats the bound. `lower` receives
// the layout's tighter lower bound on the step, computed before any plan is priced: the best split of
// the stages' own LP bounds, with one stage the least LP of its transient bands (infinity when none
// fits). With a bound of 0 that is all it does.
std::optional<costmodel::Plan> solve_layout(const costmodel::PlanCostModel& model,
                                            const costmodel::Workload& hw, const HybridLayout& layout,
                                            const HybridSearchOptions& options, ItemRules rules, bool even,
                                            double bound, std::int64_t* labels, PartsCache* cache = nullptr,
                                            double* lower = nullptr, Pricing pricing = {});

}  // namespace osdp::search::detail
