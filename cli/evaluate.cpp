// osdp plan --evaluate sim: the best plans of the top batch sizes of a data-parallel search, re-scored
// by simulation.
#include <algorithm>

#include "cli/commands.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"
#include "sim/replay.hpp"

namespace osdp::cli {

std::vector<EvaluatedBatch> evaluate_by_simulation(const search::PreparedSearch& p,
                                                   const search::PlanOutcome& outcome, int top) {
  if (!outcome.batches) return {};
  const search::SearchResult& result = *outcome.batches;
  const search::SolverRegistry solvers = search::default_solvers();
  const search::BatchSolver& solver = solvers.get(outcome.solver);
  // The best plan of every batch size at which one fits, with its analytic figures.
  std::vector<search::SearchResult> best;
  for (const search::BatchCandidate& c : result.candidates) {
    if (!c.feasible && !c.skipped) continue;
    if (c.batch == result.batch && result.feasible) {
      best.push_back(result);
      continue;
    }
    search::SearchOptions fixed = p.options;
    fixed.batch = c.batch;
    search::SearchResult r = search::run_search(*p.workload, *p.model, solver, fixed);
    if (r.feasible) best.push_back(std::move(r));
  }
  std::stable_sort(best.begin(), best.end(),
                   [](const search::SearchResult& a, const search::SearchResult& b) {
                     return a.throughput > b.throughput;
                   });
  if (top > 0 && best.size() > static_cast<std::size_t>(top)) best.resize(static_cast<std::size_t>(top));

  std::vector<EvaluatedBatch> out;
  const double n = p.ctx.cluster.world_size();
  for (const search::SearchResult& r : best) {
    const costmodel::Plan plan = search::make_plan(p.ctx, *p.workload, r);
    sim::SimOptions sim_options;
    sim_options.symmetric = true;
    sim_options.memory_rank = sim::SimOptions::kNoRanks;
    const sim::Replay run = sim::replay_plan(plan, *p.workload, sim_options);
    EvaluatedBatch e;
    e.batch = r.batch;
    e.analytic_time_s = r.time_s;
    e.analytic_peak_bytes = r.peak_bytes;
    e.analytic_throughput = r.throughput;
    e.simulated_time_s = sim::to_seconds(run.result.iteration);
    e.simulated_peak_bytes = run.result.peak_rank().peak_bytes;
    e.simulated_throughput =
        e.simulated_time_s > 0 ? static_cast<double>(n) * r.batch / e.simulated_time_s : 0;
    out.push_back(e);
  }
  std::sort(out.begin(), out.end(),
            [](const EvaluatedBatch& a, const EvaluatedBatch& b) { return a.batch < b.batch; });
  return out;
}

}  // namespace osdp::cli
