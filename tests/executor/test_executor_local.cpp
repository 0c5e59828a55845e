// The executor in one process (a one-rank communicator): every plan pattern runs three steps on the
// GPTs and the llama-family models (step_test_models), the loss falls, and the measured peak is the
// simulator's to the byte (prefetch 0). Under the sanitizer build this is also where the executor's
// own memory is leak-checked. Then the same plans with every buffer renamed: the executor knows
// buffers by their role, so nothing changes.
#include <string>
#include <vector>

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
  for (const costmodel::ModelSpec& m : step_test_models()) {
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

TEST_CASE("one rank: the executor finds buffers by role, not by name", "[executor]") {
  // Every buffer renamed: the step computes the same loss and the same weights, to the bit, and
  // allocates the same bytes.
  for (const costmodel::ModelSpec& m : step_test_models()) {
    const costmodel::Workload w = costmodel::lower(m);
    for (const NamedPlan& pattern : plan_patterns()) {
      CAPTURE(m.name, pattern.name);
      const costmodel::Plan p = make_plan(m, tiny_cluster(1, false), w, 2, 1, pattern);
      const sim::Replay replay = sim::replay_plan(p, sim::SimOptions{});
      sim::Schedule renamed = replay.schedule;
      for (std::size_t b = 0; b < renamed.buffers.size(); ++b)
        renamed.buffers[b].name = "buffer " + std::to_string(b);
      StepStats stats[2];
      std::vector<std::vector<float>> weights[2];
      int i = 0;
      for (const sim::Schedule* s : std::vector<const sim::Schedule*>{&replay.schedule, &renamed}) {
        CpuDevice dev(CpuDeviceOptions{0, false, 0});
        SelfCommunicator self(dev);
        Executor ex(dev, self, w, p, *s);
        ex.step();
        stats[i] = ex.step();
        for (std::size_t u = 0; u < w.operators.size(); ++u)
          weights[i].push_back(ex.logical_weights(static_cast<int>(u)));
        ++i;
      }
      CHECK(stats[1].loss == stats[0].loss);
      CHECK(stats[1].peak_bytes == stats[0].peak_bytes);
      CHECK(stats[1].padding_bytes == stats[0].padding_bytes);
      CHECK(weights[1] == weights[0]);
    }
  }
}

// Emulated compute (ExecutorOptions::emulate_compute): on a cluster whose compute is slow enough that
// the tiny models' tasks take milliseconds, every compute task of a step takes at least its duration
// in the schedule (the wait runs from the task's start), the step at least the sum of them (prefetch
// 0: one stream), nothing is computed (the weights after the step are the initial ones: no gradient,
// no Adam), and memory peaks where the simulator says, as in a real step.
TEST_CASE("one rank, emulated compute: each task takes its calibrated time and computes nothing",
          "[executor][emulate]") {
  for (const costmodel::ModelSpec& m : {tiny_model(true, 1), llama_model("llama")}) {
    const costmodel::Workload w = costmodel::lower(m);
    costmodel::ClusterSpec cluster = tiny_cluster(1, false);
    cluster.compute.fp32_flops_per_s = 2e8;
    cluster.compute.memory_bandwidth_bytes_per_s = 1e8;
    for (const NamedPlan& pattern : plan_patterns()) {
      CAPTURE(m.name, pattern.name);
      const costmodel::Plan p = make_plan(m, cluster, w, 2, 0, pattern);
      const sim::Replay replay = sim::replay_plan(p, sim::SimOptions{});
      CpuDevice dev(CpuDeviceOptions{0, false, 0});
      SelfCommunicator self(dev);
      ExecutorOptions o;
      o.emulate_compute = true;
      o.record_tasks = true;
      Executor ex(dev, self, w, p, replay.schedule, o);
      std::vector<std::vector<float>> before;
      for (int u = 0; u < static_cast<int>(w.operators.size()); ++u) before.push_back(ex.logical_weights(u));
      const StepStats st = ex.step();
      double compute = 0;
      int waited = 0;
      for (int t = ex.first_task(); t < ex.end_task(); ++t) {
        const sim::Task& task = replay.schedule.tasks[static_cast<std::size_t>(t)];
        if (sim::is_collective(task.kind) || task.duration_s <= 0) continue;
        const TaskTiming& tt = st.tasks[static_cast<std::size_t>(t - ex.first_task())];
        CAPTURE(task.name, task.duration_s);
        CHECK(tt.end_s - tt.start_s >= task.duration_s);
        compute += task.duration_s;
        ++waited;
      }
      CHECK(waited > 0);
      CHECK(compute > 1e-3);  // the durations are not lost in the noise
      CHECK(st.seconds >= compute);
      CHECK(st.loss == 0);
      for (int u = 0; u < static_cast<int>(w.operators.size()); ++u)
        CHECK(ex.logical_weights(u) == before[static_cast<std::size_t>(u)]);
      const double measured = static_cast<double>(st.peak_bytes - st.baseline_bytes);
      CHECK(measured == replay.result.ranks[0].peak_bytes - replay.result.reserve_bytes);
    }
  }
}
