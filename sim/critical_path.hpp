// The schedule's dependency DAG (its deps plus the order of each stream of each stage) kept with
// Boost.Graph: checked for cycles, walked in topological order; its critical path — compute tasks at
// their duration, collectives at their ring time on the network (each step at the slowest step of its
// ring), sends at their message time, no interference — is the analytic overlap estimate the simulator
// is compared with (a lower bound of the simulated step when the interference is 1 and every rank is
// alike). The path runs across stages through a receive's dependency on its send.
#pragma once

#include <vector>

#include "sim/network.hpp"
#include "sim/schedule.hpp"

namespace osdp::sim {

struct CriticalPath {
  double seconds = 0;
  std::vector<int> tasks;  // along the path, first to last
};

// Throws osdp::Error naming a task on the cycle when the schedule is not a DAG.
CriticalPath critical_path(const Schedule& schedule, const NetworkModel& network);

}  // namespace osdp::sim
