// The schedule's dependency DAG (its deps plus the order of each stream) kept with Boost.Graph:
// checked for cycles, walked in topological order; its critical path — compute tasks at their
// duration, collectives at their closed-form ring time, no interference — is the analytic overlap
// estimate the simulator is compared with (a lower bound of the simulated step when the
// interference is 1 and every rank is alike).
#pragma once

#include <vector>

#include "costmodel/cost_model.hpp"
#include "sim/schedule.hpp"

namespace osdp::sim {

struct CriticalPath {
  double seconds = 0;
  std::vector<int> tasks;  // along the path, first to last
};

// Throws osdp::Error naming a task on the cycle when the schedule is not a DAG.
CriticalPath critical_path(const Schedule& schedule, const costmodel::CostModel& model);

}  // namespace osdp::sim
