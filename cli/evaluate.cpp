// Simulating plans: the shared path of `osdp simulate` and `osdp plan --evaluate sim`.
#include <algorithm>

#include "cli/commands.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"
#include "sim/network.hpp"

namespace osdp::cli {

PlanRun simulate_plan(const costmodel::Plan& plan, sim::SimOptions options) {
  const costmodel::Workload w = costmodel::lower(plan.model);
  costmodel::CostOptions cost_options = plan.cost_options;
  cost_options.prefetch = plan.prefetch;
  const costmodel::Calibration* cal = plan.calibration ? &*plan.calibration : nullptr;
  const costmodel::CostModel model(plan.cluster, cal, plan.model.precision, cost_options);

  PlanRun run;
  double persistent = 0, transient = 0;
  for (std::size_t u = 0; u < w.operators.size(); ++u) {
    const costmodel::ChoiceCost c =
        model.cost(w.operators[u], plan.operators[u].choice, plan.batch_size, w.bytes);
    run.analytic_time_s += c.time_s;
    persistent += c.persistent_bytes;
    transient = std::max(transient, c.transient_bytes);
  }
  run.analytic_peak_bytes = plan.cluster.reserve_bytes + costmodel::prefetch_reserve_bytes(w, plan.prefetch) +
                            persistent + transient;

  run.schedule = sim::build_schedule(plan, w, model);
  const sim::RingLinks network(plan.cluster, cal);
  options.overlap = model.overlap();
  options.interference = model.interference();
  run.result = sim::simulate(run.schedule, network, options);
  return run;
}

std::vector<EvaluatedBatch> evaluate_by_simulation(const search::PlanContext& ctx,
                                                   const costmodel::Workload& w,
                                                   const costmodel::CostModel& model,
                                                   const search::Strategy& strategy,
                                                   const search::SearchOptions& options,
                                                   const search::SearchResult& result, int top) {
  // The best plan of every batch size at which one fits, with its analytic figures.
  std::vector<search::SearchResult> best;
  for (const search::BatchCandidate& c : result.candidates) {
    if (!c.feasible && !c.skipped) continue;
    if (c.batch == result.batch && result.feasible) {
      best.push_back(result);
      continue;
    }
    search::SearchOptions fixed = options;
    fixed.batch = c.batch;
    search::SearchResult r = search::run_search(w, model, strategy, fixed);
    if (r.feasible) best.push_back(std::move(r));
  }
  std::stable_sort(best.begin(), best.end(),
                   [](const search::SearchResult& a, const search::SearchResult& b) {
                     return a.throughput > b.throughput;
                   });
  if (top > 0 && best.size() > static_cast<std::size_t>(top)) best.resize(static_cast<std::size_t>(top));

  std::vector<EvaluatedBatch> out;
  const double n = ctx.cluster.world_size();
  for (const search::SearchResult& r : best) {
    const costmodel::Plan plan = search::make_plan(ctx, w, r);
    sim::SimOptions sim_options;
    sim_options.symmetric = true;
    sim_options.memory_rank = sim::SimOptions::kNoRanks;
    const PlanRun run = simulate_plan(plan, sim_options);
    EvaluatedBatch e;
    e.batch = r.batch;
    e.analytic_time_s = r.time_s;
    e.analytic_peak_bytes = r.peak_bytes;
    e.analytic_throughput = r.throughput;
    e.simulated_time_s = sim::to_seconds(run.result.iteration);
    e.simulated_peak_bytes = run.result.peak_rank().peak_bytes;
    e.simulated_throughput = e.simulated_time_s > 0 ? n * r.batch / e.simulated_time_s : 0;
    out.push_back(e);
  }
  std::sort(out.begin(), out.end(),
            [](const EvaluatedBatch& a, const EvaluatedBatch& b) { return a.batch < b.batch; });
  return out;
}

}  // namespace osdp::cli
