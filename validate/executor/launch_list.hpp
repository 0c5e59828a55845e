// The launch list: how the executor enqueues a schedule on a device's streams, worked out once per
// plan, the same for every backend. Tasks go in issue order, each on its stream; a task whose
// dependencies run on another stream first waits for the event of the latest of them there (that
// stream's own order covers the earlier ones), unless an earlier task of its stream already waited
// for that one or a later one. Only tasks some wait refers to record an event: on a GPU an event
// per task per step would cost more than the waits.
#pragma once

#include <vector>

#include "sim/schedule.hpp"

namespace osdp::validate {

struct Launch {
  int task = -1;
  int stream = 0;  // 0: compute (sends too: they do not wait), 1: comm (0 for every task on one stream)
  std::vector<int> waits;  // tasks on other streams whose events this task waits for
  bool record = false;     // some later task waits for this one's event
};

// The tasks [first, end) of one stage (a rank's; a receive's dependency on the other stage's send is
// the communicator's to keep, not a wait). `one_stream`: the device runs both of the schedule's
// streams on one (no overlap): no waits.
std::vector<Launch> launch_list(const sim::Schedule& schedule, int first, int end, bool one_stream = false);
// Every task (a schedule of one stage).
std::vector<Launch> launch_list(const sim::Schedule& schedule, bool one_stream = false);

}  // namespace osdp::validate
