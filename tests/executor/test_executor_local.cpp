// The executor in one process (a one-rank communicator): every plan pattern runs three steps, the
// loss falls, and the measured peak is the simulator's to the byte (prefetch 0). Under the
// sanitizer build this is also where the executor's own memory is leak-checked.
#include <catch2/catch.hpp>

#include "costmodel/cost_model.hpp"
#include "executor_fixtures.hpp"
#include "sim/replay.hpp"
#include "validate/cpu/cpu_device.hpp"
#include "validate/executor/executor.hpp"
#include "validate/executor/self_communicator.hpp"

using namespace osdp;
using namespace osdp::validate;
using namespace osdp::validate::testing;

TEST_CASE("one rank: each plan pattern trains (the loss falls) and peaks where the simulator says",
          "[executor]") {
  for (const bool tied : {true, false}) {
    const costmodel::ModelSpec m = tiny_model(tied, tied ? 1 : 2);
    const costmodel::Workload w = costmodel::lower(m);
    for (const NamedPlan& pattern : plan_patterns()) {
      CAPTURE(m.name, pattern.name);
      const costmodel::Plan p = make_plan(m, tiny_cluster(1, false), w, 2, 0, pattern);
      const sim::Replay replay = sim::replay_plan(p, sim::SimOptions{});
      CpuDevice dev(CpuDeviceOptions{0, false, 0});
      SelfCommunicator self(dev);
      Executor ex(dev, self, w, p, replay.schedule);
      const StepStats first = ex.step();
      ex.step();
      const StepStats third = ex.step();
      CHECK(third.loss < first.loss);
      const double measured = static_cast<double>(third.peak_bytes - third.baseline_bytes);
      CHECK(measured == replay.result.ranks[0].peak_bytes - replay.result.reserve_bytes);
    }
  }
}
