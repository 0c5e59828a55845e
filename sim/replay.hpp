// Replaying a plan file: lower its model at its pipeline degree, price it with its cluster,
// calibration and cost options (prefetch from the plan), build its schedule and simulate it on
// RingLinks — the one path that `osdp simulate`, `osdp plan --evaluate sim`, the sweep's "sim"
// evaluator and `osdp validate`'s prediction share.
#pragma once

#include <string>
#include <string_view>

#include "costmodel/plan.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/workload.hpp"
#include "sim/engine.hpp"
#include "sim/schedule.hpp"

namespace osdp::sim {

struct Replay {
  Schedule schedule;
  SimResult result;
  // The plan priced again by the plan cost model (costmodel/plan_cost.hpp: the search objective).
  double analytic_time_s = 0;
  double analytic_peak_bytes = 0;
  double analytic_throughput = 0;
};

using costmodel::plan_cost_model;  // costmodel/plan_cost.hpp

// The simulated step time under each of draws 1..draws of the plan's calibration's uncertainty
// (costmodel::drawn_predictions: empty without one), each draw replayed with `options`.
std::vector<double> simulated_step_times(const costmodel::Plan& plan, const costmodel::Workload& w, int draws,
                                         const SimOptions& options);

// The plan's choices priced by this osdp's cost model (Replay's analytic figures), without building
// or simulating its schedule.
struct AnalyticFigures {
  double time_s = 0;
  double peak_bytes = 0;
};
AnalyticFigures analytic_figures(const costmodel::Plan& plan, const costmodel::Workload& workload);

// A plan whose recorded predictions are not what this osdp's cost model gives for it (`now`) was
// edited, or written by another version: a sentence saying so, with both figures and both versions
// (the plan's tool_version and `this_version`). Empty when they agree to 1e-6 or the plan has no
// prediction.
std::string edited_plan_warning(const costmodel::Plan& plan, const AnalyticFigures& now,
                                std::string_view this_version);

// `options.overlap` and `options.interference` are taken from the cluster and calibration; the rest
// is the caller's. The first form lowers the plan's model; the second takes its lowering
// (costmodel::lower(plan.model, plan.pp)) from a caller that has it already.
Replay replay_plan(const costmodel::Plan& plan, SimOptions options);
Replay replay_plan(const costmodel::Plan& plan, const costmodel::Workload& workload, SimOptions options);

}  // namespace osdp::sim
