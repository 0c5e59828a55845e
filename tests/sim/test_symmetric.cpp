// Symmetric simulation (sim/engine.hpp): on a homogeneous cluster every rank congruent modulo the
// network's period behaves alike, so simulating one period with the ring closed over it must give
// exactly what the full run gives. Why, from the ring recurrence: rank r's step k ends at the largest
// sum of step times over paths r, r or r-1, ... of length k, started from the entries; entries and
// links are periodic in r with the period, so the paths of the closed ring of one period see the same
// step times (r mod period) and the same entries as those of the full ring, and K = (N - 1) steps
// (2(N - 1) for all-reduce) of chunks S/N are kept in both. A single-level network has period 1; a
// two-level one, where the last rank of each node sends over the inter-node link, the ranks per node.
// Then determinism: the same input gives the same output, every number of it.
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/error.hpp"
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

constexpr double kGiB = 1073741824.0;

struct Case {
  const char* base;
  int nodes, per_node;
  int period;  // ranks a symmetric run simulates
};

costmodel::ClusterSpec cluster_of(const Case& c) {
  costmodel::ClusterSpec s = costmodel::load_cluster(c.base);
  s.nodes = c.nodes;
  s.devices_per_node = c.per_node;
  return s;
}

// The exact strategy's schedule at prefetch p (split up to 4, checkpointing per operator).
sim::Schedule schedule_for(const std::string& model_name, const costmodel::ClusterSpec& cluster, int prefetch,
                           const char* strategy = "exact", bool groups = false,
                           double* analytic_s = nullptr) {
  static const auto registry = search::default_solvers();
  const costmodel::ModelSpec model = costmodel::load_model(model_name);
  const costmodel::Workload w = costmodel::lower(model);
  costmodel::CostOptions co;
  co.prefetch = prefetch;
  const costmodel::CostModel cost(cluster, nullptr, model.precision, co);
  search::SearchOptions so;
  so.space.split_max = 4;
  so.space.checkpoint = search::CheckpointPolicy::kAuto;
  so.memory_limit_bytes = 16 * kGiB;
  so.reserve_bytes = cluster.reserve_bytes;
  so.space.groups = groups;
  const auto r = search::run_search(w, cost, registry.get(strategy), so);
  REQUIRE(r.feasible);
  const search::PlanContext ctx{"test", model, cluster, std::nullopt, co};
  costmodel::Plan plan = search::make_plan(ctx, w, r);
  plan.prefetch = prefetch;
  if (analytic_s != nullptr) *analytic_s = r.time_s;
  return sim::build_schedule(plan, w, sim::plan_cost_model(plan));
}

sim::SimOptions options(const costmodel::ClusterSpec& c, bool symmetric) {
  sim::SimOptions o;
  o.symmetric = symmetric;
  o.interference = c.overlap.interference;
  return o;
}

void require_same_stats(const sim::RankStats& a, const sim::RankStats& b) {
  REQUIRE(a.finish == b.finish);
  REQUIRE(a.compute_busy == b.compute_busy);
  REQUIRE(a.comm_busy == b.comm_busy);
  REQUIRE(a.peak_bytes == b.peak_bytes);
  REQUIRE(a.peak_time == b.peak_time);
  REQUIRE(a.peak_breakdown == b.peak_breakdown);
}

}  // namespace

TEST_CASE("symmetric simulation gives exactly what the full run gives", "[symmetric]") {
  const Case cases[] = {
      {"titan-rtx-8", 1, 8, 1},  // single level, 8 and 64 ranks
      {"titan-rtx-8", 1, 64, 1},
      {"h100-2x8", 2, 8, 8},  // two levels: 2 and 8 nodes of 8
      {"h100-2x8", 8, 8, 8},
  };
  for (const Case& c : cases) {
    const costmodel::ClusterSpec cluster = cluster_of(c);
    const sim::RingLinks net(cluster, nullptr);
    REQUIRE(net.period(cluster.world_size()) == c.period);
    for (const char* model : {"nd-48x1024", "ic-8x512-1024-2048", "gpt2-1.5b"}) {
      for (const int prefetch : {0, 1, 2}) {
        INFO(model << " on " << c.base << " as " << c.nodes << " x " << c.per_node << ", prefetch "
                   << prefetch);
        const sim::Schedule s = schedule_for(model, cluster, prefetch);
        const auto full = sim::simulate(s, net, options(cluster, false));
        const auto sym = sim::simulate(s, net, options(cluster, true));
        REQUIRE(full.ranks_simulated == cluster.world_size());
        REQUIRE(sym.ranks_simulated == c.period);
        REQUIRE(sym.world_size == full.world_size);
        REQUIRE(sym.iteration == full.iteration);
        REQUIRE(sym.critical_rank == full.critical_rank);
        REQUIRE(sym.peak_rank().peak_bytes == full.peak_rank().peak_bytes);
        for (int r = 0; r < cluster.world_size(); ++r) {
          INFO("rank " << r << ", represented by rank " << r % c.period);
          require_same_stats(full.ranks[r], sym.ranks[r % c.period]);
        }
        // The two-level network really has ranks that differ (otherwise period 8 proves nothing).
        if (c.period > 1 && prefetch > 0) {
          bool differ = false;
          for (int r = 1; r < c.period; ++r) differ = differ || full.ranks[r].finish != full.ranks[0].finish;
          CHECK(differ);
        }
      }
    }
  }
}

// Issue 14: node groups and two-level collectives run on rings within a node (G ranks, intra link)
// and across nodes (M ranks at one local index, inter link). Those rings are as periodic as the world
// ring, so symmetric stays exact; at prefetch 0 nothing overlaps, so the simulated step is the cost
// model's sum (the same collectives, priced per level), to the tick.
TEST_CASE("node groups and two-level collectives: symmetric is exact, prefetch 0 is the analytic sum",
          "[symmetric][groups]") {
  for (const Case& c : {Case{"h100-2x8", 2, 8, 8}, Case{"h100-2x8", 4, 4, 4}}) {
    const costmodel::ClusterSpec cluster = cluster_of(c);
    const sim::RingLinks net(cluster, nullptr);
    for (const char* strategy : {"exact", "hsdp", "fsdp-2level"}) {
      for (const char* model : {"nd-48x1024", "ic-8x512-1024-2048"}) {
        for (const int prefetch : {0, 1}) {
          INFO(strategy << " " << model << " on " << c.nodes << " x " << c.per_node << ", prefetch "
                        << prefetch);
          double analytic = 0;
          const sim::Schedule s = schedule_for(model, cluster, prefetch, strategy, true, &analytic);
          int intra = 0, inter = 0;
          for (const auto& t : s.tasks) {
            intra += t.level == costmodel::RingLevel::kIntra ? 1 : 0;
            inter += t.level == costmodel::RingLevel::kInter ? 1 : 0;
          }
          if (std::string(strategy) != "exact") REQUIRE((intra > 0 && inter > 0));
          const auto full = sim::simulate(s, net, options(cluster, false));
          const auto sym = sim::simulate(s, net, options(cluster, true));
          REQUIRE(sym.iteration == full.iteration);
          for (int r = 0; r < cluster.world_size(); ++r)
            require_same_stats(full.ranks[r], sym.ranks[r % c.period]);
          // Every ring step and task is rounded to a picosecond tick: at most half a tick each, and a
          // task has at most 2 (N - 1) steps.
          const double rounding = 0.5e-12 * static_cast<double>(s.tasks.size()) * 2 * cluster.world_size();
          if (prefetch == 0) REQUIRE(std::abs(sim::to_seconds(full.iteration) - analytic) <= rounding);
        }
      }
    }
  }
}

// Which collectives a node-sharded and a two-level slice run, on which ring, on which buffer: the
// schedule's tasks for one operator of hsdp and of fsdp-2level on 2 x 8 (G = 8).
TEST_CASE("the schedule runs each level's collective on its own ring", "[groups]") {
  const costmodel::ClusterSpec cluster = cluster_of({"h100-2x8", 2, 8, 8});
  for (const char* strategy : {"hsdp", "fsdp-2level"}) {
    const sim::Schedule s = schedule_for("nd-48x1024", cluster, 0, strategy, true);
    std::vector<const sim::Task*> ops;
    for (const auto& t : s.tasks)
      if (t.op == 1 && sim::is_collective(t.kind)) ops.push_back(&t);
    INFO(strategy);
    double S = 0;
    for (const auto* t : ops)
      if (t->level == costmodel::RingLevel::kIntra && t->kind == sim::TaskKind::kAllGather) S = t->bytes;
    REQUIRE(S > 0);
    std::vector<std::pair<sim::TaskKind, costmodel::RingLevel>> kinds;
    for (const auto* t : ops) {
      kinds.emplace_back(t->kind, t->level);
      CHECK(t->bytes == (t->level == costmodel::RingLevel::kInter ? S / 8 : S));
    }
    using K = sim::TaskKind;
    using L = costmodel::RingLevel;
    if (std::string(strategy) == "hsdp")  // forward AG, backward AG, RS within, AR of the shard across
      CHECK(kinds == decltype(kinds){{K::kAllGather, L::kIntra},
                                     {K::kAllGather, L::kIntra},
                                     {K::kReduceScatter, L::kIntra},
                                     {K::kAllReduce, L::kInter}});
    else  // each all-gather across then within, the reduce-scatter within then across
      CHECK(kinds == decltype(kinds){{K::kAllGather, L::kInter},
                                     {K::kAllGather, L::kIntra},
                                     {K::kAllGather, L::kInter},
                                     {K::kAllGather, L::kIntra},
                                     {K::kReduceScatter, L::kIntra},
                                     {K::kReduceScatter, L::kInter}});
  }
}

TEST_CASE("symmetric simulation with a calibration collapses to one rank", "[symmetric]") {
  // A calibration prices every link alike (sim/network.hpp), so even two levels have period 1.
  const costmodel::ClusterSpec cluster = cluster_of({"h100-2x8", 2, 8, 1});
  costmodel::Calibration cal;
  cal.allgather = cal.reducescatter = cal.allreduce = {{1e300, 12e-6, 1 / 40e9}};
  const sim::RingLinks net(cluster, &cal);
  REQUIRE(net.period(16) == 1);
  const sim::Schedule s = schedule_for("nd-48x1024", cluster, 1);
  const auto full = sim::simulate(s, net, options(cluster, false));
  const auto sym = sim::simulate(s, net, options(cluster, true));
  REQUIRE(sym.ranks_simulated == 1);
  REQUIRE(sym.iteration == full.iteration);
  for (int r = 0; r < 16; ++r) require_same_stats(full.ranks[r], sym.ranks[0]);
}

TEST_CASE("symmetric simulation refuses stragglers", "[symmetric]") {
  const costmodel::ClusterSpec cluster = cluster_of({"titan-rtx-8", 1, 8, 1});
  const sim::RingLinks net(cluster, nullptr);
  const sim::Schedule s = schedule_for("nd-48x1024", cluster, 1);
  sim::SimOptions o = options(cluster, true);
  o.speed.assign(8, 1.0);
  o.speed[3] = 1.2;
  REQUIRE_THROWS_AS(sim::simulate(s, net, o), UsageError);
  o.symmetric = false;
  REQUIRE(sim::simulate(s, net, o).ranks_simulated == 8);
}

TEST_CASE("the same input gives the same output", "[symmetric]") {
  for (const Case& c : {Case{"titan-rtx-8", 1, 8, 1}, Case{"h100-2x8", 2, 8, 8}}) {
    const costmodel::ClusterSpec cluster = cluster_of(c);
    const sim::RingLinks net(cluster, nullptr);
    const sim::Schedule s = schedule_for("ic-8x512-1024-2048", cluster, 1);
    sim::SimOptions o = options(cluster, false);
    o.record_tasks = true;
    o.memory_rank = sim::SimOptions::kAllRanks;
    o.speed.assign(cluster.world_size(), 1.0);
    o.speed[1] = 1.3;  // a straggler, so that ranks differ
    const auto a = sim::simulate(s, net, o);
    const auto b = sim::simulate(s, net, o);
    INFO(c.base);
    REQUIRE(a.world_size == b.world_size);
    REQUIRE(a.ranks_simulated == b.ranks_simulated);
    REQUIRE(a.iteration == b.iteration);
    REQUIRE(a.critical_rank == b.critical_rank);
    REQUIRE(a.reserve_bytes == b.reserve_bytes);
    REQUIRE(a.events == b.events);
    REQUIRE(a.queue_events == b.queue_events);
    REQUIRE(a.ranks.size() == b.ranks.size());
    for (std::size_t r = 0; r < a.ranks.size(); ++r) require_same_stats(a.ranks[r], b.ranks[r]);
    REQUIRE(a.tasks.size() == b.tasks.size());
    REQUIRE(a.tasks.size() == s.tasks.size() * a.ranks.size());
    for (std::size_t i = 0; i < a.tasks.size(); ++i) {
      REQUIRE(a.tasks[i].rank == b.tasks[i].rank);
      REQUIRE(a.tasks[i].task == b.tasks[i].task);
      REQUIRE(a.tasks[i].start == b.tasks[i].start);
      REQUIRE(a.tasks[i].end == b.tasks[i].end);
    }
    REQUIRE(a.memory.size() == b.memory.size());
    REQUIRE(!a.memory.empty());
    for (std::size_t i = 0; i < a.memory.size(); ++i) {
      REQUIRE(a.memory[i].time == b.memory[i].time);
      REQUIRE(a.memory[i].rank == b.memory[i].rank);
      REQUIRE(a.memory[i].buffer == b.memory[i].buffer);
      REQUIRE(a.memory[i].delta == b.memory[i].delta);
      REQUIRE(a.memory[i].total == b.memory[i].total);
    }
  }
}
