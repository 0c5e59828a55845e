// The registered strategies (strategy.hpp): the data-parallel ones run the batch-size scheduler over a
// solver of batch_solver.hpp, the layout ones the layout search of hybrid.hpp; exact takes whichever
// covers the space the request allows.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/uncertainty.hpp"
#include "search/report.hpp"
#include "search/request.hpp"
#include "search/strategy.hpp"

namespace osdp::search {
namespace {

// Whether the request's layout space holds data parallelism only (one stage, one micro-batch, TP 1).
bool data_parallel_space(const PreparedSearch& p) {
  const HybridSearchOptions& o = p.layouts;
  const bool one_stage = (o.pp.size() == 1 && o.pp[0] == 1) || p.ctx.cluster.world_size() == 1;
  const bool tp1 = (o.tp.size() == 1 && o.tp[0] == 1) || p.ctx.cluster.devices_per_node == 1;
  const bool one_micro_batch = o.micro_batches ? *o.micro_batches == 1 : o.max_micro_batches == 1;
  // A global batch the scheduler cannot hold (not batch x devices) leaves it to the layout search.
  return one_stage && tp1 && one_micro_batch && (!o.global_batch || p.options.batch);
}

// The data-parallel plan of a scheduler's result, priced by the plan cost model.
PlanOutcome data_parallel_outcome(const PreparedSearch& p, SearchResult r, const std::string& strategy) {
  PlanOutcome o;
  o.strategy = strategy;
  o.feasible = r.feasible;
  o.memory_limit_bytes = r.memory_limit_bytes;
  o.min_fit_bytes = r.min_fit_bytes;
  o.search_seconds = r.search_seconds;
  o.complete = r.complete;
  o.workload = p.workload;
  if (r.feasible) {
    r.strategy = strategy;
    costmodel::Plan& plan = o.plan;
    plan = make_plan(p.ctx, *p.workload, r);
    o.evaluation = p.plan_model->evaluate(*p.workload, plan);
    plan.predicted_iteration_time_s = o.evaluation.time_s;
    plan.predicted_peak_memory_bytes = o.evaluation.peak_bytes;
    plan.predicted_throughput_samples_per_s = o.evaluation.throughput;
  }
  o.batches = std::move(r);
  return o;
}

PlanOutcome run_scheduler(const PreparedSearch& p, const BatchSolver& solver, const std::string& strategy) {
  if (p.layouts.global_batch && !p.options.batch)
    throw UsageError(
        fmt::format("strategy {} plans data parallelism: a global batch of {} is not a whole number "
                    "of samples on each of the {} devices",
                    strategy, *p.layouts.global_batch, p.ctx.cluster.world_size()));
  PlanOutcome o = data_parallel_outcome(p, run_search(*p.workload, *p.model, solver, p.options), strategy);
  o.solver = solver.name();
  return o;
}

// The least memory at which some plan of the layout space fits (0: none found under the time budget):
// a bisection on the capacity, each step a layout search for a plan of one sample per device per
// micro-batch and one micro-batch where the request leaves them free (a plan's memory never falls as
// either grows), its least peak the new upper end; it ends when nothing fits a byte below the least
// peak found. The data-parallel plans' least peak (dp_fit, 0: none) starts the upper end when the
// space holds them. A search stopped by its budget may miss a fit: the figure is then an upper bound.
double least_fitting_memory(const PreparedSearch& p, LayoutSearch search, double dp_fit) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto left = [&] {
    return p.time_budget_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  HybridSearchOptions o = p.layouts;
  o.progress = nullptr;
  if (!o.global_batch) {
    o.b0 = 1;
    if (!o.micro_batches) o.micro_batches = 1;
  }
  const costmodel::Calibration* cal = p.ctx.calibration ? &*p.ctx.calibration : nullptr;
  // The least peak of a plan that fits in `capacity`, or none.
  const auto fit = [&](double capacity) -> std::optional<double> {
    costmodel::PlanCostModel model(p.ctx.cluster, cal, p.ctx.model.precision, p.ctx.cost_options);
    model.set_capacity(capacity);
    o.time_budget_s = std::max(0.001, left());
    const HybridResult r = search_hybrid(p.ctx.model, model, search, o, p.workload);
    if (!r.feasible) return std::nullopt;
    return r.evaluation.peak_bytes;
  };
  double lo = p.options.memory_limit_bytes;  // nothing fits here
  double hi = 0;
  for (double c = std::max(dp_fit, 2 * lo); hi == 0 && c <= 1e18 && left() > 0; c *= 2)
    if (const auto peak = fit(c)) hi = *peak;
  if (hi == 0) return 0;
  while (hi - lo > 1 && left() > 0) {
    const double mid = std::floor(lo + (hi - lo) / 2);
    if (mid <= lo) break;
    if (const auto peak = fit(mid))
      hi = *peak;
    else
      lo = mid;
  }
  return hi;
}

PlanOutcome run_layouts(const PreparedSearch& p, LayoutSearch search, const HybridSearchOptions& options,
                        const std::string& strategy) {
  HybridResult r = search_hybrid(p.ctx.model, *p.plan_model, search, options, p.workload);
  PlanOutcome o;
  o.strategy = strategy;
  o.feasible = r.feasible;
  o.memory_limit_bytes = p.options.memory_limit_bytes;
  o.search_seconds = r.search_seconds;
  o.complete = r.complete;
  if (r.feasible) {
    o.workload = r.workload;
    o.plan = r.plan;
    o.evaluation = r.evaluation;
    stamp(o.plan, p.ctx, strategy, o.memory_limit_bytes);
    o.plan.predicted_iteration_time_s = o.evaluation.time_s;
    o.plan.predicted_peak_memory_bytes = o.evaluation.peak_bytes;
    o.plan.predicted_throughput_samples_per_s = o.evaluation.throughput;
  } else {
    o.workload = p.workload;
    // What memory would fit: the least of the layout space, from the data-parallel plans' least peak
    // at batch 1 (a plan of the space where the request allows data parallelism). Not after a search
    // its budget stopped (unknown, 0; the exact strategy then runs the scheduler, which says).
    if (r.complete) {
      const SolverRegistry solvers = default_solvers();
      SearchOptions one = p.options;
      one.batch = 1;
      const double dp_fit = run_search(*p.workload, *p.model, solvers.get("exact"), one).min_fit_bytes;
      o.min_fit_bytes = least_fitting_memory(p, search, dp_fit);
    }
  }
  o.layouts = std::move(r);
  return o;
}

class DataParallelStrategy : public Strategy {
 public:
  DataParallelStrategy(std::string name, std::string summary, SolverLimits limits)
      : info_{std::move(name), std::move(summary), true}, limits_(limits) {}
  const StrategyInfo& info() const override { return info_; }
  PlanOutcome search(const PreparedSearch& p) const override {
    return run_scheduler(p, default_solvers(limits_).get(info_.name), info_.name);
  }

 private:
  StrategyInfo info_;
  SolverLimits limits_;
};

// Whether the request's space holds the data-parallel layout (one stage, one micro-batch, TP 1) at a
// batch the scheduler can search.
bool holds_data_parallel(const PreparedSearch& p) {
  const HybridSearchOptions& o = p.layouts;
  const auto allows_1 = [](const std::vector<int>& v) {
    return v.empty() || std::find(v.begin(), v.end(), 1) != v.end();
  };
  return allows_1(o.pp) && allows_1(o.tp) && (!o.micro_batches || *o.micro_batches == 1) &&
         (!o.global_batch || p.options.batch);
}

// exact over the whole space: the layout search, or the scheduler where only data parallelism is left.
// When a budget stopped the layout search, the scheduler's plan (itself budgeted) is offered too.
class ExactStrategy : public Strategy {
 public:
  const StrategyInfo& info() const override { return info_; }
  PlanOutcome search(const PreparedSearch& p) const override {
    if (data_parallel_space(p)) return run_scheduler(p, default_solvers().get("exact"), info_.name);
    if (!holds_data_parallel(p)) return run_layouts(p, LayoutSearch::kExact, p.layouts, info_.name);
    // The scheduler's data-parallel plan first (milliseconds, seconds on the largest models): the plan
    // when a budget stops the layout search before it finds a better one; the layout search then has
    // what is left of the time budget. A complete layout search holds that plan in its space.
    PlanOutcome d = run_scheduler(p, default_solvers().get("exact"), info_.name);
    PlanOutcome o = run_layouts(p, LayoutSearch::kExact, p.layouts, info_.name);
    o.search_seconds += d.search_seconds;
    if (o.complete) return o;
    if (d.feasible && (!o.feasible || d.evaluation.throughput > o.evaluation.throughput)) {
      d.search_seconds = o.search_seconds;
      d.complete = false;
      d.layouts = std::move(o.layouts);
      return d;
    }
    if (!o.feasible && d.min_fit_bytes > 0) o.min_fit_bytes = d.min_fit_bytes;
    return o;
  }

 private:
  StrategyInfo info_{
      "exact",
      "the optimum of the analytic model over the whole space: pipeline stages, micro-batches, "
      "a TP degree per unit, per operator DP/ZDP/REPLICATE, splits, checkpointing, node groups",
      false};
};

class DpOnlyStrategy : public Strategy {
 public:
  const StrategyInfo& info() const override { return info_; }
  PlanOutcome search(const PreparedSearch& p) const override {
    return run_scheduler(p, default_solvers().get("exact"), info_.name);
  }

 private:
  StrategyInfo info_{"dp-only", "exact within data parallelism: one stage, one micro-batch, TP 1", true};
};

class LayoutStrategy : public Strategy {
 public:
  LayoutStrategy(std::string name, std::string summary, LayoutSearch search)
      : info_{std::move(name), std::move(summary), false}, search_(search) {}
  const StrategyInfo& info() const override { return info_; }
  PlanOutcome search(const PreparedSearch& p) const override {
    return run_layouts(p, search_, p.layouts, info_.name);
  }

 private:
  StrategyInfo info_;
  LayoutSearch search_;
};

}  // namespace

void StrategyRegistry::add(std::unique_ptr<Strategy> s) {
  items_.push_back(std::move(s));
}

const Strategy& StrategyRegistry::get(const std::string& name) const {
  for (const auto& s : items_)
    if (s->name() == name) return *s;
  throw UsageError(fmt::format("unknown strategy \"{}\" (known: {})", name, fmt::join(names(), ", ")));
}

std::vector<std::string> StrategyRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& s : items_) out.push_back(s->name());
  return out;
}

std::vector<const Strategy*> StrategyRegistry::all() const {
  std::vector<const Strategy*> out;
  for (const auto& s : items_) out.push_back(s.get());
  return out;
}

StrategyRegistry default_strategies(const SolverLimits& limits) {
  StrategyRegistry r;
  r.add(std::make_unique<ExactStrategy>());
  r.add(std::make_unique<DpOnlyStrategy>());
  const SolverRegistry solvers = default_solvers(limits);
  for (const std::string& name : solvers.names())
    if (name != "exact")
      r.add(std::make_unique<DataParallelStrategy>(name, solvers.get(name).summary(), limits));
  r.add(std::make_unique<LayoutStrategy>("galvatron",
                                         "Galvatron's search as its released code does it: even stages, per "
                                         "layer a TP degree with DDP or ZeRO-3, its micro-batch heuristic, "
                                         "global batches in steps of 8",
                                         LayoutSearch::kGalvatron));
  r.add(std::make_unique<LayoutStrategy>(
      "megatron-3d",
      "one TP degree for every unit, even stages, DDP everywhere: a grid over tp, pp, m and b0",
      LayoutSearch::kMegatron3d));
  return r;
}

PlanOutcome run_strategy(const PreparedSearch& p, const Strategy& s) {
  PlanOutcome o = s.search(p);
  if (o.feasible && p.nominal_calibration) {  // found at the 95th percentile: priced as it is
    // The composition error at the same quantile scales every plan alike (one factor for all its
    // operators' keys at once): it moves the robust figure, not the choice.
    const double c = costmodel::fit_errors(*p.nominal_calibration).composition;
    o.robust_throughput = o.evaluation.throughput / costmodel::quantile_factor(c, costmodel::kRobustZ);
    o.plan.calibration = p.nominal_calibration;
    o.evaluation = costmodel::plan_cost_model(o.plan).evaluate(*o.workload, o.plan);
    o.plan.predicted_iteration_time_s = o.evaluation.time_s;
    o.plan.predicted_peak_memory_bytes = o.evaluation.peak_bytes;
    o.plan.predicted_throughput_samples_per_s = o.evaluation.throughput;
  }
  if (o.feasible) o.drawn_time_s = costmodel::drawn_step_times(*o.workload, o.plan, p.draws);
  return o;
}

}  // namespace osdp::search
