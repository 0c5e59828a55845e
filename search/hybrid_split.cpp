// The stage split of the exact hybrid search and the plans it starts from
// (search/internal/hybrid_layout.hpp): the split minimising a pipeline's step over a table of priced stages,
// a layout's empty plan, even stages, and the incumbents of one TP degree for every unit.
#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "search/internal/hybrid_context.hpp"
#include "search/internal/hybrid_layout.hpp"
#include "search/solvers.hpp"

namespace osdp::search::detail {

using costmodel::Choice;
using costmodel::Plan;
using costmodel::PlanCostModel;
using costmodel::Workload;

// The split minimising sum_s c(s) + (m - 1) max_s c(s) over a table of stage costs (c[s][i][j]: stage
// s holding units i..j-1): for every threshold C among the costs (ascending), the least sum over splits
// whose stages all take at most C, a DP over (stage, first unit); T(C) = sum + (m - 1) C, and the
// optimum is the least T(C) (at C = the optimal split's slowest stage, T(C) is at most its T).
// Thresholds stop once the unconstrained least sum + (m - 1) C reaches the best. Returns that T
// (infinity: no split) and fills `split` (the stages' first units) when given.
double best_stage_split(const StageTable& c, int pp, int U, int m, std::vector<int>* split_out,
                        const HybridSearchOptions* budget) {
  auto cost = [&](int s, int i, int j) { return c(s, i, j); };
  // Least sum over splits whose stages take at most `cap`; fills `split` (stage starts).
  auto least_sum = [&](double cap, std::vector<int>* split) {
    if (budget) check_deadline(*budget);
    // best[s][j]: least sum of stages 0..s-1 covering units 0..j-1
    std::vector<std::vector<double>> best(static_cast<std::size_t>(pp + 1),
                                          std::vector<double>(static_cast<std::size_t>(U + 1), kInf));
    std::vector<std::vector<int>> from(static_cast<std::size_t>(pp + 1),
                                       std::vector<int>(static_cast<std::size_t>(U + 1), -1));
    best[0][0] = 0;
    for (int s = 0; s < pp; ++s)
      for (int i = 0; i <= U; ++i) {
        const double b = best[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
        if (b == kInf || i >= U || !c.has_row(s, i)) continue;
        for (int j = i + 1; j <= U; ++j) {
          const double x = cost(s, i, j);
          if (x > cap) continue;
          if (b + x < best[static_cast<std::size_t>(s + 1)][static_cast<std::size_t>(j)]) {
            best[static_cast<std::size_t>(s + 1)][static_cast<std::size_t>(j)] = b + x;
            from[static_cast<std::size_t>(s + 1)][static_cast<std::size_t>(j)] = i;
          }
        }
      }
    const double total = best[static_cast<std::size_t>(pp)][static_cast<std::size_t>(U)];
    if (split && total < kInf) {
      split->assign(static_cast<std::size_t>(pp), 0);
      int j = U;
      for (int s = pp; s >= 1; --s) {
        const int i = from[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)];
        (*split)[static_cast<std::size_t>(s - 1)] = i;
        j = i;
      }
    }
    return total;
  };
  const double free_sum = least_sum(kInf, nullptr);
  if (free_sum == kInf) return kInf;
  // T(C) = S(C) + (m - 1) C, S(C) the least sum with every stage at most C: S falls as C grows, in
  // steps at some of the stage costs. Between two steps T only grows, so the least T is at the first
  // feasible C or at a step, and the steps are found by bisection over the sorted stage costs (S(C) <
  // S(C0) holds from the step on). With one micro-batch T = S, least at any C: the free sum.
  if (m == 1) {
    if (split_out) least_sum(kInf, split_out);
    return free_sum;
  }
  std::vector<double> thresholds;
  for (int s = 0; s < pp; ++s)
    for (int i = 0; i < U; ++i) {
      if (!c.has_row(s, i)) continue;
      for (int j = i + 1; j <= U; ++j) {
        const double x = cost(s, i, j);
        if (x < kInf) thresholds.push_back(x);
      }
    }
  std::sort(thresholds.begin(), thresholds.end());
  thresholds.erase(std::unique(thresholds.begin(), thresholds.end()), thresholds.end());
  // The first index k >= from whose threshold gives a sum below `above` (thresholds.size(): none).
  const auto first_below = [&](std::size_t from, double above) {
    std::size_t lo = from, hi = thresholds.size();
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (least_sum(thresholds[mid], nullptr) < above)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  };
  double best_t = kInf;
  for (std::size_t k = first_below(0, kInf); k < thresholds.size();) {
    const double cap = thresholds[k];
    if (free_sum + (m - 1) * cap >= best_t) break;
    std::vector<int> split;
    const double sum = least_sum(cap, split_out ? &split : nullptr);
    const double t = sum + (m - 1) * cap;
    if (t < best_t) {
      best_t = t;
      if (split_out) *split_out = split;
    }
    if (sum <= free_sum) break;  // no later step: S is at its least
    k = first_below(k + 1, sum);
  }
  return best_t;
}

Plan empty_plan(const Workload& hw, const HybridLayout& layout) {
  Plan p;
  p.pp = layout.pp;
  p.micro_batches = layout.m;
  p.batch_size = layout.b0;
  p.schedule = layout.schedule;
  p.sequence_parallel = layout.sequence_parallel;
  p.cp = layout.cp;
  p.cp_all_to_all = layout.cp_all_to_all;
  p.stage_first_unit.assign(static_cast<std::size_t>(layout.pp), 0);
  p.unit_tp.assign(hw.units.size(), 1);
  p.choices.assign(hw.operators.size(), Choice{});
  return p;
}

std::vector<int> even_stage_starts(const Workload& hw, int pp) {
  std::vector<int> layer_units;
  for (std::size_t u = 0; u < hw.units.size(); ++u)
    if (hw.units[u].layer) layer_units.push_back(static_cast<int>(u));
  const int L = static_cast<int>(layer_units.size());
  if (L < pp) return {};
  std::vector<int> starts{0};
  int acc = 0;
  for (int s = 0; s + 1 < pp; ++s) {
    acc += L / pp + (s < L % pp ? 1 : 0);
    int u = layer_units[static_cast<std::size_t>(acc)];
    while (
        u > 0 && !hw.units[static_cast<std::size_t>(u - 1)].layer && u - 1 > starts.back() &&
        hw.operators[static_cast<std::size_t>(hw.units[static_cast<std::size_t>(u - 1)].ops.front())].kind ==
            costmodel::OperatorKind::kProjection)
      --u;
    starts.push_back(u);
  }
  return starts;
}

// Once the degrees are fixed, the stage is a multiple-choice knapsack with a max-transient term
// (solvers.hpp).
bool flat_stage(const LayoutContext& ctx, int t, int s, Plan& plan) {
  const auto& hw = ctx.workload();
  const int pp = ctx.layout().pp, U = static_cast<int>(hw.units.size());
  const int first = plan.stage_first_unit[static_cast<std::size_t>(s)];
  const int end = s + 1 < pp ? plan.stage_first_unit[static_cast<std::size_t>(s + 1)] : U;
  const int f = ctx.in_flight(s);
  Instance inst;
  inst.capacity_bytes = ctx.capacity();
  inst.fixed_memory_bytes = ctx.fixed();
  std::vector<std::pair<int, int>> op_t;  // (operator, degree) per group
  for (int u = first; u < end; ++u) {
    const auto& allowed = ctx.allowed(u);
    int tu = 0;
    if (std::find(allowed.begin(), allowed.end(), t) != allowed.end())
      tu = t;
    else if (std::find(allowed.begin(), allowed.end(), 1) != allowed.end())
      tu = 1;
    if (tu == 0) return false;
    plan.unit_tp[static_cast<std::size_t>(u)] = tu;
    for (int oi : hw.units[static_cast<std::size_t>(u)].ops) {
      Group g;
      for (const auto& it : ctx.items(oi, tu))
        g.items.push_back({it.time_s, it.cost.states_bytes + f * it.cost.act_bytes, it.cost.transient_bytes});
      inst.groups.push_back(std::move(g));
      op_t.emplace_back(oi, tu);
    }
  }
  const HybridSearchOptions& o = ctx.options();
  const Solution sol = solve_exact(
      inst, std::numeric_limits<double>::infinity(),
      std::min(kMaxDpStates, static_cast<std::size_t>(std::max(1.0, o.memory_budget_bytes / 8))), o.deadline);
  if (!sol.feasible) return false;
  for (std::size_t g = 0; g < op_t.size(); ++g)
    plan.choices[static_cast<std::size_t>(op_t[g].first)] =
        ctx.items(op_t[g].first, op_t[g].second)[static_cast<std::size_t>(sol.chosen[g])].choice;
  return true;
}

std::optional<Plan> uniform_plan(const LayoutContext& ctx, int t, const std::vector<int>& starts) {
  Plan plan = empty_plan(ctx.workload(), ctx.layout());
  plan.stage_first_unit = starts;
  for (int s = 0; s < ctx.layout().pp; ++s)
    if (!flat_stage(ctx, t, s, plan)) return std::nullopt;
  return plan;
}

}  // namespace osdp::search::detail
