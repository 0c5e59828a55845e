// Search strategies behind one interface, chosen by name from an explicit registry that lists itself
// (DESIGN.md section 5). Each strategy searches a plan (costmodel::Plan: its layout, micro-batch size
// and per-operator choices) for a prepared search (request.hpp) and returns it priced by the plan cost
// model (costmodel/plan_cost.hpp), whatever its kind:
//   exact        the optimum of the analytic model over the whole space the request allows: pipeline
//                stages and micro-batches, a TP degree per unit, per operator DP/ZDP/REPLICATE, splits,
//                checkpointing and, on clusters of several nodes, node groups and two-level collectives
//                (search/hybrid.hpp); where the space holds data parallelism only (one stage, one
//                micro-batch, TP 1), the batch-size scheduler over the exact solver (scheduler.hpp)
//   dp-only      exact within data parallelism (one stage, one micro-batch, TP 1)
//   fsdp, zero2, ddp, hsdp, fsdp-2level, osdp-ref, dfs
//                the data-parallel baselines and the paper's search (batch_solver.hpp), each by the
//                batch-size scheduler
//   galvatron    Galvatron's search as its released code does it (search/hybrid.hpp)
//   megatron-3d  one TP degree everywhere, even stages, DDP; a grid over tp, pp, m and b0
// A data-parallel strategy searches one stage, one micro-batch and TP 1 whatever the request allows.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/plan.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/workload.hpp"
#include "search/batch_solver.hpp"
#include "search/hybrid.hpp"
#include "search/scheduler.hpp"

namespace osdp::search {

struct PreparedSearch;  // request.hpp

// What a strategy is: its name, a line for `--help` and listings, and whether it searches data
// parallelism only (the batch-size scheduler over a solver) or layouts too.
struct StrategyInfo {
  std::string name;
  std::string summary;
  bool data_parallel = true;
};

// What a strategy returns: the plan it found with its provenance, priced.
struct PlanOutcome {
  std::string strategy;
  // A simpler plan derived from another (request.hpp: without_splits, one_choice_per_kind): what it
  // is, in words, for the reports ("the same plan without splits"); empty for a strategy's own plan.
  std::string description;
  bool feasible = false;
  costmodel::Plan plan;  // when feasible: the whole plan, its provenance and predictions
  // lower(model, plan.pp), shared with the request and the other outcomes (a 100,000-layer model's
  // is hundreds of MB)
  std::shared_ptr<const costmodel::Workload> workload;
  costmodel::Evaluation evaluation;  // the plan cost model's figures
  // The step time under each draw of the calibration's uncertainty (costmodel::drawn_step_times;
  // empty: no intervals), for the intervals of report.hpp.
  std::vector<double> drawn_time_s;
  // --objective robust: the throughput the search maximized (every fitted price at its 95th
  // percentile, and the composition error at it too); 0 otherwise. The plan, its evaluation and its
  // draws are priced nominally.
  double robust_throughput = 0;
  double memory_limit_bytes = 0;
  double min_fit_bytes = 0;  // when nothing fits and the strategy can say: the least memory that would
  double search_seconds = 0;
  bool complete = true;  // false: a budget stopped the search; the plan is the best found, not proved
  std::optional<SearchResult> batches;  // a data-parallel strategy's scheduler: candidates, the instance
  std::string solver;                   // and the solver it ran at each batch size (batch_solver.hpp)
  std::optional<HybridResult> layouts;  // a layout strategy's search: layouts priced and solved, labels
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual const StrategyInfo& info() const = 0;
  const std::string& name() const { return info().name; }
  virtual PlanOutcome search(const PreparedSearch& prepared) const = 0;
};

class StrategyRegistry {
 public:
  void add(std::unique_ptr<Strategy> s);
  // Throws UsageError naming the known strategies.
  const Strategy& get(const std::string& name) const;
  std::vector<std::string> names() const;
  std::vector<const Strategy*> all() const;

 private:
  std::vector<std::unique_ptr<Strategy>> items_;
};

// The built-in strategies, registered by explicit calls (their data-parallel solvers with `limits`).
StrategyRegistry default_strategies(const SolverLimits& limits = {});

}  // namespace osdp::search
