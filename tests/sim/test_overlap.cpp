// Overlap of the compute and comm streams on real plans (the exact strategy's plans for the bundled
// models), checked against bounds derived here from the schedule semantics (sim/schedule.hpp,
// sim/engine.hpp), independently of the engine:
//   C = sum of the compute tasks' durations (ticks, each rounded), M = sum over collectives of the
//   ring closed form on the cluster's slowest link (all-gather and reduce-scatter (N-1) alpha +
//   (N-1)/N S beta, all-reduce twice), steps = the ring steps of all collectives.
// - Lower bound: each rank's compute stream runs every compute task one after another (interference
//   1: at full speed), so T >= C; the rank behind the slowest link spends at least K steps of that
//   link in each collective, one collective after another, so T >= M. Hence T >= max(C, M).
// - Upper bound: let F(t) be the latest end of task t over all ranks. A compute task starts once its
//   stream predecessor and its dependencies have ended, so F(t) <= max(F(pred), F(deps)) + duration;
//   a collective ends at most K slowest steps after its last entry (every path of the ring recurrence
//   has K steps), so the same holds with its closed form. F is then the schedule of one rank with
//   nominal durations, in which the earliest unfinished task (its dependencies come earlier in issue
//   order) is always running: some stream is always busy, so T <= C + M.
// - Prefetch 0: every task depends on the one issued before it, so nothing overlaps and T is exactly
//   C + (sum of K rounded slowest steps), which is the sum of the cost model's per-operator times
//   (ChoiceCost.time_s: compute + comm, the paper tier's t_d and t_z) within one tick per task and
//   per ring step.
// - One rank: collectives take no time, and each compute task starts when its predecessor ends
//   (gathers it waits for take 0 ticks), so T = C exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"
#include "search/report.hpp"
#include "search/scheduler.hpp"
#include "search/batch_solver.hpp"
#include "sim/engine.hpp"
#include "sim/network.hpp"
#include "sim/replay.hpp"
#include "sim/schedule.hpp"

namespace {

using namespace osdp;
using sim::Tick;

constexpr double kGiB = 1073741824.0;

struct Planned {
  costmodel::Workload workload;
  costmodel::CostModel cost;
  search::SearchResult result;
  costmodel::Plan plan;
  sim::Schedule schedule;
};

// The exact strategy's plan (split up to 4, checkpointing per operator) with prefetch p.
Planned plan_for(const costmodel::ModelSpec& model, const costmodel::ClusterSpec& cluster,
                 costmodel::Tier tier, int prefetch, double memory) {
  static const auto registry = search::default_solvers();
  costmodel::CostOptions co;
  co.tier = tier;
  co.prefetch = prefetch;
  costmodel::Workload w = costmodel::lower(model);
  costmodel::CostModel cost(cluster, nullptr, model.precision, co);
  search::SearchOptions so;
  so.space.split_max = 4;
  so.space.checkpoint = search::CheckpointPolicy::kAuto;
  so.memory_limit_bytes = memory;
  so.reserve_bytes = cluster.reserve_bytes;
  search::SearchResult r = search::run_search(w, cost, registry.get("exact"), so);
  const search::PlanContext ctx{"test", model, cluster, std::nullopt, co};
  costmodel::Plan plan = search::make_plan(ctx, w, r);
  plan.prefetch = prefetch;
  sim::Schedule s = r.feasible ? sim::build_schedule(plan, w, sim::plan_cost_model(plan)) : sim::Schedule{};
  return {std::move(w), cost, std::move(r), std::move(plan), std::move(s)};
}

int steps(const sim::Task& t, int n) {
  return (t.kind == sim::TaskKind::kAllReduce ? 2 : 1) * (n - 1);
}

// The link every collective is priced on: intra-node on one node, else the slower inter-node link.
costmodel::LinkSpec slowest_link(const costmodel::ClusterSpec& c) {
  return c.nodes > 1 && c.inter ? *c.inter : c.intra;
}

struct Totals {
  Tick compute = 0;        // C
  Tick comm = 0;           // M, the closed forms
  Tick comm_stepwise = 0;  // sum of K rounded steps
  std::int64_t steps = 0;  // ring steps of all collectives
  std::int64_t compute_tasks = 0;
};

Totals totals(const sim::Schedule& s, const costmodel::ClusterSpec& c) {
  Totals t;
  const int n = s.world_size;
  const costmodel::LinkSpec l = slowest_link(c);
  double comm_s = 0;
  for (const sim::Task& task : s.tasks) {
    if (task.stream == sim::Stream::kCompute) {
      t.compute += sim::to_ticks(task.duration_s);
      ++t.compute_tasks;
    } else if (n > 1) {
      const int k = steps(task, n);
      comm_s += k * l.alpha_s + k / static_cast<double>(n) * task.bytes / l.bandwidth_bytes_per_s;
      t.comm_stepwise += k * sim::to_ticks(l.alpha_s + task.bytes / n / l.bandwidth_bytes_per_s);
      t.steps += k;
    }
  }
  t.comm = sim::to_ticks(comm_s);
  return t;
}

sim::SimOptions options(double interference) {
  sim::SimOptions o;
  o.interference = interference;
  o.memory_rank = sim::SimOptions::kNoRanks;
  return o;
}

costmodel::ClusterSpec cluster_named(const std::string& name, int nodes = 0, int per_node = 0) {
  costmodel::ClusterSpec c = costmodel::load_cluster(name);
  if (nodes > 0) c.nodes = nodes;
  if (per_node > 0) c.devices_per_node = per_node;
  return c;
}

}  // namespace

TEST_CASE("with prefetch the step lies between max(compute, comm) and their sum", "[overlap]") {
  int checked = 0, overlapped = 0;
  double lowest = 1, highest = 0;
  for (const auto& cname : {"titan-rtx-8", "h100-2x8"}) {
    const costmodel::ClusterSpec cluster = cluster_named(cname);
    const sim::RingLinks net(cluster, nullptr);
    for (const auto& m : costmodel::list_catalog("models")) {
      const costmodel::ModelSpec model = costmodel::load_model(m.path);
      for (const int prefetch : {1, 2}) {
        const Planned p = plan_for(model, cluster, costmodel::Tier::kExtended, prefetch, 16 * kGiB);
        if (!p.result.feasible) continue;
        const Totals t = totals(p.schedule, cluster);
        const Tick tolerance = t.steps;  // one tick per ring step (closed form against rounded steps)
        const auto r = sim::simulate(p.schedule, net, options(1.0));
        INFO(m.name << " on " << cname << ", prefetch " << prefetch << ", batch " << p.plan.batch_size
                    << ": T " << r.iteration << ", C " << t.compute << ", M " << t.comm);
        REQUIRE(r.iteration >= t.compute);
        REQUIRE(r.iteration >= t.comm - tolerance);
        REQUIRE(r.iteration <= t.compute + t.comm + tolerance);
        overlapped += r.iteration < t.compute + t.comm - tolerance ? 1 : 0;
        const double span = static_cast<double>(std::min(t.compute, t.comm));
        if (span > 0) {  // where T sits between max(C, M) (0: full overlap) and C + M (1: none)
          const double x = static_cast<double>(r.iteration - std::max(t.compute, t.comm)) / span;
          lowest = std::min(lowest, x);
          highest = std::max(highest, x);
        }
        ++checked;
      }
    }
  }
  WARN("T = max(C, M) + x min(C, M) over " << checked << " plans: x from " << lowest << " to " << highest);
  REQUIRE(checked >= 20);
  REQUIRE(overlapped > 0);  // prefetch does overlap something somewhere
}

TEST_CASE("with prefetch 0 the step is the cost model's sum, exactly in ticks", "[overlap]") {
  int checked = 0;
  for (const auto& cname : {"titan-rtx-8", "h100-2x8"}) {
    const costmodel::ClusterSpec cluster = cluster_named(cname);
    const sim::RingLinks net(cluster, nullptr);
    for (const auto& m : costmodel::list_catalog("models")) {
      const costmodel::ModelSpec model = costmodel::load_model(m.path);
      for (const auto tier : {costmodel::Tier::kPaper, costmodel::Tier::kExtended}) {
        const Planned p = plan_for(model, cluster, tier, 0, 16 * kGiB);
        if (!p.result.feasible) continue;
        const Totals t = totals(p.schedule, cluster);
        double sum_s = 0;  // the paper tier's sum over operators (the extended tier's without overlap)
        for (std::size_t u = 0; u < p.workload.operators.size(); ++u)
          sum_s += p.cost
                       .cost(p.workload.operators[u], p.plan.choices[u], p.plan.batch_size,
                             p.workload.bytes)
                       .time_s;
        // Rounding: half a tick per compute task, per ring step and once for the sum.
        const Tick tolerance = t.compute_tasks + t.steps + 1;
        INFO(m.name << " on " << cname << ", " << costmodel::to_string(tier) << " tier, batch "
                    << p.plan.batch_size);
        for (const double interference : {1.0, cluster.overlap.interference}) {
          const auto r = sim::simulate(p.schedule, net, options(interference));
          REQUIRE(r.iteration == t.compute + t.comm_stepwise);
          REQUIRE(std::llabs(r.iteration - sim::to_ticks(sum_s)) <= tolerance);
          REQUIRE(std::llabs(r.iteration - sim::to_ticks(p.plan.predicted_iteration_time_s)) <= tolerance);
        }
        ++checked;
      }
    }
  }
  REQUIRE(checked >= 20);
}

TEST_CASE("with overlap off the streams never run together", "[overlap]") {
  // SimOptions.overlap false (a cluster whose overlap is disabled): a rank runs one stream at a time.
  // On one node every rank is in the same state at every tick, so no collective waits for a late
  // rank and, as in the upper bound's argument, some task always runs: T = C + sum of K rounded
  // steps, whatever the prefetch depth. On two nodes the rank behind a slow link still runs every
  // compute task and every collective of at least K slow steps one after another: T >= C + M.
  int checked = 0;
  for (const auto& cname : {"titan-rtx-8", "h100-2x8"}) {
    const costmodel::ClusterSpec cluster = cluster_named(cname);
    const sim::RingLinks net(cluster, nullptr);
    for (const auto& mname : {"nd-48x1024", "ws-2x8192", "ic-8x512-1024-2048", "gpt2-1.5b"}) {
      const costmodel::ModelSpec model = costmodel::load_model(mname);
      for (const int prefetch : {1, 2}) {
        const Planned p = plan_for(model, cluster, costmodel::Tier::kExtended, prefetch, 16 * kGiB);
        if (!p.result.feasible) continue;
        const Totals t = totals(p.schedule, cluster);
        sim::SimOptions o = options(cluster.overlap.interference);  // no effect without overlap
        o.overlap = false;
        const auto r = sim::simulate(p.schedule, net, o);
        INFO(mname << " on " << cname << ", prefetch " << prefetch);
        if (cluster.nodes == 1) REQUIRE(r.iteration == t.compute + t.comm_stepwise);
        REQUIRE(r.iteration >= t.compute + t.comm - t.steps);
        ++checked;
      }
    }
  }
  REQUIRE(checked >= 8);
}

TEST_CASE("without communication the step is the compute sum exactly", "[overlap]") {
  // One rank: a copy of titan-rtx-8 with one device.
  const costmodel::ClusterSpec cluster = cluster_named("titan-rtx-8", 1, 1);
  const sim::RingLinks net(cluster, nullptr);
  int checked = 0;
  for (const auto& m : costmodel::list_catalog("models")) {
    const costmodel::ModelSpec model = costmodel::load_model(m.path);
    for (const int prefetch : {0, 1, 2}) {
      const Planned p = plan_for(model, cluster, costmodel::Tier::kExtended, prefetch, 24 * kGiB);
      if (!p.result.feasible) continue;
      const Totals t = totals(p.schedule, cluster);
      INFO(m.name << " on one rank, prefetch " << prefetch << ", batch " << p.plan.batch_size);
      for (const double interference : {1.0, cluster.overlap.interference}) {
        const auto r = sim::simulate(p.schedule, net, options(interference));
        REQUIRE(r.iteration == t.compute);
        REQUIRE(r.ranks[0].compute_busy == t.compute);
      }
      ++checked;
    }
  }
  REQUIRE(checked >= 6);
}

TEST_CASE("interference never makes a step shorter", "[overlap]") {
  // Compute runs i times slower while a collective is in flight, so raising i can only delay work.
  // The upper bound's argument holds with compute durations of at most i d (+ 1 tick: a rescheduled
  // end is rounded up): T <= i C + M.
  int checked = 0, slowed = 0;
  for (const auto& cname : {"titan-rtx-8", "h100-2x8"}) {
    const costmodel::ClusterSpec cluster = cluster_named(cname);
    const sim::RingLinks net(cluster, nullptr);
    for (const auto& mname : {"nd-48x1024", "ws-2x8192", "ic-8x512-1024-2048", "gpt2-1.5b"}) {
      const costmodel::ModelSpec model = costmodel::load_model(mname);
      for (const int prefetch : {1, 2}) {
        const Planned p = plan_for(model, cluster, costmodel::Tier::kExtended, prefetch, 16 * kGiB);
        if (!p.result.feasible) continue;
        const Totals t = totals(p.schedule, cluster);
        Tick previous = 0;
        for (const double interference : {1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0}) {
          const auto r = sim::simulate(p.schedule, net, options(interference));
          INFO(mname << " on " << cname << ", prefetch " << prefetch << ", interference " << interference);
          REQUIRE(r.iteration >= previous);
          REQUIRE(r.iteration >= std::max(t.compute, t.comm - t.steps));
          REQUIRE(static_cast<double>(r.iteration) <=
                  interference * static_cast<double>(t.compute) +
                      static_cast<double>(t.comm + t.steps + t.compute_tasks));
          slowed += previous > 0 && r.iteration > previous ? 1 : 0;
          previous = r.iteration;
        }
        ++checked;
      }
    }
  }
  REQUIRE(checked >= 8);
  REQUIRE(slowed > 0);
}

TEST_CASE("a straggler delays the step by at most its extra compute", "[overlap][stragglers]") {
  // With interference 1 the step is a max-plus function of the task durations: the longest path
  // through the ranks' compute tasks and ring steps, each (task, rank) at most once on a path. Slowing
  // rank q by f raises each of its compute durations d to ceil(f d), so
  //   T_1 <= T_f <= T_1 + sum(ceil(f d) - d).
  // With prefetch 0 on one node the bound is reached: every collective ends K steps after the last
  // entry on every rank, the straggler enters each one last, so it carries all of its extra compute.
  constexpr double kFactor = 1.3;
  constexpr int kSlow = 5;
  int checked = 0;
  for (const auto& cname : {"titan-rtx-8", "h100-2x8"}) {
    const costmodel::ClusterSpec cluster = cluster_named(cname);
    const sim::RingLinks net(cluster, nullptr);
    for (const auto& mname : {"nd-48x1024", "ic-8x512-1024-2048", "gpt2-1.5b"}) {
      const costmodel::ModelSpec model = costmodel::load_model(mname);
      for (const int prefetch : {0, 1, 2}) {
        const Planned p = plan_for(model, cluster, costmodel::Tier::kExtended, prefetch, 16 * kGiB);
        if (!p.result.feasible) continue;
        Tick extra = 0;
        for (const sim::Task& task : p.schedule.tasks)
          if (task.stream == sim::Stream::kCompute) {
            const Tick d = sim::to_ticks(task.duration_s);
            extra += static_cast<Tick>(std::ceil(static_cast<double>(d) * kFactor)) - d;
          }
        sim::SimOptions o = options(1.0);
        const Tick nominal = sim::simulate(p.schedule, net, o).iteration;
        o.speed.assign(cluster.world_size(), 1.0);
        o.speed[kSlow] = kFactor;
        const auto r = sim::simulate(p.schedule, net, o);
        INFO(mname << " on " << cname << ", prefetch " << prefetch << ": nominal " << nominal << ", extra "
                   << extra);
        REQUIRE(r.iteration >= nominal);
        REQUIRE(r.iteration <= nominal + extra);
        if (prefetch == 0 && cluster.nodes == 1) REQUIRE(r.iteration == nominal + extra);
        ++checked;
      }
    }
  }
  REQUIRE(checked >= 12);
}
