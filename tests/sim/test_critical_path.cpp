// The schedule's critical path (Boost.Graph) against the simulator: with interference 1 and every
// rank alike, the simulator runs each task at max(its dependencies, its stream's previous task),
// which is the longest-path recurrence itself; only the rounding of each ring step to whole ticks
// (at most one tick per step) separates the two.
#include <catch2/catch.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "search/report.hpp"
#include "search/scheduler.hpp"
#include "sim/critical_path.hpp"
#include "sim/engine.hpp"
#include "sim/network.hpp"
#include "sim/replay.hpp"
#include "sim/schedule.hpp"

namespace {

using namespace osdp;

constexpr double kGiB = 1073741824.0;

}  // namespace

TEST_CASE("the critical path equals the simulated step at interference 1", "[critical_path]") {
  int checked = 0;
  for (const std::string model_name : {"nd-48x1024", "gpt2-1.5b", "ws-2x8192"}) {
    for (const int prefetch : {0, 1, 2}) {
      const auto model = costmodel::load_model(model_name);
      auto cluster = costmodel::load_cluster("titan-rtx-8");
      cluster.overlap.interference = 1.0;
      costmodel::CostOptions options;
      options.prefetch = prefetch;
      const auto w = costmodel::lower(model);
      const costmodel::CostModel cost(cluster, nullptr, model.precision, options);
      search::SearchOptions so;
      so.space.split_max = 4;
      so.space.checkpoint = search::CheckpointPolicy::kAuto;
      so.memory_limit_bytes = 16 * kGiB;
      so.reserve_bytes = cluster.reserve_bytes;
      const auto registry = search::default_solvers();
      const auto result = search::run_search(w, cost, registry.get("exact"), so);
      if (!result.feasible) continue;  // the prefetch reserve of a wide model may not fit
      ++checked;
      const auto plan = search::make_plan({"test", model, cluster, {}, options}, w, result);
      const sim::Schedule schedule = sim::build_schedule(plan, w, sim::plan_cost_model(plan));
      const sim::RingLinks net(cluster, nullptr);
      const sim::CriticalPath cp = sim::critical_path(schedule, net);
      sim::SimOptions opt;
      opt.interference = 1.0;
      const sim::SimResult r = sim::simulate(schedule, net, opt);
      // One tick per ring step of every collective on the path, plus one per compute task.
      std::int64_t steps = 0;
      for (int t : cp.tasks) steps += sim::is_collective(schedule.tasks[t].kind) ? schedule.world_size : 1;
      INFO(model_name << " prefetch " << prefetch << ": path " << cp.seconds << " s, simulated "
                      << sim::to_seconds(r.iteration) << " s");
      REQUIRE(std::llabs(sim::to_ticks(cp.seconds) - r.iteration) <= steps);
      // The path starts at the first task and ends at the optimizer step.
      REQUIRE(cp.tasks.back() == static_cast<int>(schedule.tasks.size()) - 1);
      // Prefetch 0 runs everything in order: the path is every task.
      if (prefetch == 0) REQUIRE(cp.tasks.size() == schedule.tasks.size());
    }
  }
  REQUIRE(checked >= 7);
}

TEST_CASE("a dependency cycle is reported", "[critical_path]") {
  sim::Schedule s;
  s.world_size = 1;
  s.tasks.resize(2);
  s.tasks[0].name = "a";
  s.tasks[1].name = "b";
  s.tasks[0].deps = {1};
  s.tasks[1].deps = {0};
  costmodel::ClusterSpec c;
  c.memory_bytes = 1;
  const sim::RingLinks net(c, nullptr);
  REQUIRE_THROWS_AS(sim::critical_path(s, net), osdp::Error);
  // The simulator does not hang on it either: it reports the tasks that never ran.
  REQUIRE_THROWS_AS(sim::simulate(s, net, {}), osdp::Error);
}
