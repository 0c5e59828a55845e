#include "sim/replay.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "costmodel/cost_model.hpp"
#include "costmodel/units.hpp"
#include "costmodel/workload.hpp"
#include "sim/network.hpp"

namespace osdp::sim {

Replay replay_plan(const costmodel::Plan& plan, SimOptions options) {
  return replay_plan(plan, costmodel::lower(plan.model), options);
}

namespace {

costmodel::CostModel plan_cost_model(const costmodel::Plan& plan) {
  costmodel::CostOptions cost_options = plan.cost_options;
  cost_options.prefetch = plan.prefetch;
  const costmodel::Calibration* cal = plan.calibration ? &*plan.calibration : nullptr;
  return costmodel::CostModel(plan.cluster, cal, plan.model.precision, cost_options);
}

AnalyticFigures price(const costmodel::Plan& plan, const costmodel::Workload& w,
                      const costmodel::CostModel& model) {
  AnalyticFigures f;
  double persistent = 0, transient = 0;
  for (std::size_t u = 0; u < w.operators.size(); ++u) {
    const costmodel::ChoiceCost c =
        model.cost(w.operators[u], plan.operators[u].choice, plan.batch_size, w.bytes);
    f.time_s += c.time_s;
    persistent += c.persistent_bytes;
    transient = std::max(transient, c.transient_bytes);
  }
  f.peak_bytes = plan.cluster.reserve_bytes + costmodel::prefetch_reserve_bytes(w, plan.prefetch) +
                 persistent + transient;
  return f;
}

double relative(double recorded, double now) {
  return now > 0 ? (recorded - now) / now : 0.0;
}

}  // namespace

AnalyticFigures analytic_figures(const costmodel::Plan& plan, const costmodel::Workload& workload) {
  return price(plan, workload, plan_cost_model(plan));
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
  const costmodel::CostModel model = plan_cost_model(plan);
  const costmodel::Calibration* cal = plan.calibration ? &*plan.calibration : nullptr;
  Replay run;
  const AnalyticFigures figures = price(plan, w, model);
  run.analytic_time_s = figures.time_s;
  run.analytic_peak_bytes = figures.peak_bytes;

  run.schedule = build_schedule(plan, w, model);
  const RingLinks network(plan.cluster, cal);
  options.overlap = model.overlap();
  options.interference = model.interference();
  run.result = simulate(run.schedule, network, options);
  return run;
}

}  // namespace osdp::sim
