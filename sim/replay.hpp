// Replaying a plan file: lower its model, price it with its cluster, calibration and cost options
// (prefetch from the plan), build its schedule and simulate it on RingLinks — the one path that
// `osdp simulate`, `osdp plan --evaluate sim` and the sweep's "sim" evaluator share.
#pragma once

#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"
#include "sim/engine.hpp"
#include "sim/schedule.hpp"

namespace osdp::sim {

struct Replay {
  Schedule schedule;
  SimResult result;
  // The plan's choices priced again by the cost model (the search objective):
  //   time = sum of the operators' times; peak = reserve + prefetch reserve + sum(persistent)
  //   + max(transient).
  double analytic_time_s = 0;
  double analytic_peak_bytes = 0;
};

// `options.overlap` and `options.interference` are taken from the cluster and calibration; the rest
// is the caller's. The first form lowers the plan's model; the second takes its lowering
// (costmodel::lower(plan.model)) from a caller that has it already.
Replay replay_plan(const costmodel::Plan& plan, SimOptions options);
Replay replay_plan(const costmodel::Plan& plan, const costmodel::Workload& workload, SimOptions options);

}  // namespace osdp::sim
