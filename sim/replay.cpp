#include "sim/replay.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "costmodel/cost_model.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/units.hpp"
#include "costmodel/workload.hpp"
#include "sim/network.hpp"

namespace osdp::sim {

Replay replay_plan(const costmodel::Plan& plan, SimOptions options) {
  return replay_plan(plan, costmodel::lower(plan.model, plan.pp), options);
}

std::vector<double> simulated_step_times(const costmodel::Plan& plan, const costmodel::Workload& w, int draws,
                                         const SimOptions& options) {
  return costmodel::drawn_predictions(plan, draws, [&](const costmodel::Plan& p) {
    return to_seconds(replay_plan(p, w, options).result.iteration);
  });
}

namespace {

double relative(double recorded, double now) {
  return now > 0 ? (recorded - now) / now : 0.0;
}

}  // namespace

AnalyticFigures analytic_figures(const costmodel::Plan& plan, const costmodel::Workload& workload) {
  const costmodel::Evaluation ev = plan_cost_model(plan).evaluate(workload, plan);
  return {ev.time_s, ev.peak_bytes};
}

std::string edited_plan_warning(const costmodel::Plan& plan, const AnalyticFigures& now,
                                std::string_view this_version) {
  if (plan.predicted_iteration_time_s <= 0) return {};
  const double dt = relative(plan.predicted_iteration_time_s, now.time_s);
  const double dm = relative(plan.predicted_peak_memory_bytes, now.peak_bytes);
  if (std::abs(dt) <= 1e-6 && std::abs(dm) <= 1e-6) return {};
  return fmt::format(
      "the plan's predictions (step {}, peak {}) are not what this osdp's cost model gives for it (step {}, "
      "peak {}): the plan was edited or written by another version (it says \"{}\", this is {})",
      costmodel::format_seconds(plan.predicted_iteration_time_s),
      costmodel::format_bytes(plan.predicted_peak_memory_bytes), costmodel::format_seconds(now.time_s),
      costmodel::format_bytes(now.peak_bytes), plan.tool_version.empty() ? "no version" : plan.tool_version,
      this_version);
}

Replay replay_plan(const costmodel::Plan& plan, const costmodel::Workload& w, SimOptions options) {
  const costmodel::PlanCostModel model = plan_cost_model(plan);
  const costmodel::Calibration* cal = plan.calibration ? &*plan.calibration : nullptr;
  Replay run;
  const costmodel::Evaluation ev = model.evaluate(w, plan);
  run.analytic_time_s = ev.time_s;
  run.analytic_peak_bytes = ev.peak_bytes;
  run.analytic_throughput = ev.throughput;
  run.schedule = build_schedule(plan, w, model);
  const costmodel::CostModel& world = model.dp_model(1, 1);
  const RingLinks network(plan.cluster, cal, &world);
  options.overlap = world.overlap();
  options.interference = world.interference();
  run.result = simulate(run.schedule, network, options);
  return run;
}

}  // namespace osdp::sim
