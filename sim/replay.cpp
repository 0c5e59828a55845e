#include "sim/replay.hpp"

#include <algorithm>

#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"
#include "sim/network.hpp"

namespace osdp::sim {

Replay replay_plan(const costmodel::Plan& plan, SimOptions options) {
  return replay_plan(plan, costmodel::lower(plan.model), options);
}

Replay replay_plan(const costmodel::Plan& plan, const costmodel::Workload& w, SimOptions options) {
  costmodel::CostOptions cost_options = plan.cost_options;
  cost_options.prefetch = plan.prefetch;
  const costmodel::Calibration* cal = plan.calibration ? &*plan.calibration : nullptr;
  const costmodel::CostModel model(plan.cluster, cal, plan.model.precision, cost_options);

  Replay run;
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

  run.schedule = build_schedule(plan, w, model);
  const RingLinks network(plan.cluster, cal);
  options.overlap = model.overlap();
  options.interference = model.interference();
  run.result = simulate(run.schedule, network, options);
  return run;
}

}  // namespace osdp::sim
