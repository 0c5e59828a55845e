// The simulated memory timeline: one example derived by hand from the schedule semantics
// (sim/schedule.hpp: resident shards and Adam states all along; buffers allocated when a task starts
// and freed when it ends), then the analytic peak of the search (reserve + sum persistent + max
// transient, costmodel/cost_model.hpp) as an upper bound of the simulated peak on every bundled model
// and strategy.
#include <algorithm>
#include <optional>
#include <string>

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
using sim::MemoryCategory;
using sim::Tick;

constexpr double kGiB = 1073741824.0;
constexpr double kMiB = 1048576.0;

double category(const sim::RankStats& s, MemoryCategory c) {
  return s.peak_breakdown[static_cast<int>(c)];
}

}  // namespace

TEST_CASE("a hand-computed peak: embedding DP, attention ZDP, MLP split 1 of 2 ZDP, head REPLICATE",
          "[memory]") {
  // One layer, hidden h = 64, heads a = 4, ffn f = 256, seq s = 32, vocab V = 128, untied, fp32
  // (w = g = e = 4, o = 8), dropout masks on; N = 4 ranks, batch b = 2, prefetch 0, reserve 1 MiB.
  // Parameters (costmodel/workload.hpp):
  //   embedding  h V + s h                     = 8192 + 2048          = 10240
  //   attention  4 h^2 + 6 h                   = 16384 + 384          = 16768
  //   mlp        2 h f + f + 3 h               = 32768 + 256 + 192    = 33216  (slice: 33216 / 2 = 16608)
  //   head       h V + 2 h                     = 8192 + 128           = 8320
  // Saved activations per sample: embedding (dropout mask) s h = 2048; attention e(6sh + 2as^2) +
  //   as^2 + sh = 81920 + 6144 = 88064; mlp e(2sh + 2sf) + sh = 81920 + 2048 = 83968; head e(sh + sV)
  //   = 24576. Backward workspace per sample: attention e(as^2 + 3sh) = 40960, mlp 2 e s f = 65536,
  //   head e s V = 16384, embedding 0.
  // Resident: (w + g + o) = 16 B per parameter of each shard, ceil(P/N) (REPLICATE: P):
  //   16 (2560 + 4192 + 8304 + 8320) = 374016 B, half shards (w + g), half Adam states (o).
  // Buffers (b = 2): gathered We = 4*10240 = 40960, Wa = 67072, one mlp slice Wm = 66432; gradients
  //   Ga = 67072, Gm = 66432 (a slice), Ge = 40960; activations Ae = 4096, Aa = 176128, Am = 167936,
  //   Ah = 49152; workspaces Xa = 81920, Xm = 131072, Xh = 32768.
  // Prefetch 0 runs the tasks one after another in issue order; in use (beyond the resident) at each
  // task start, after its allocations:
  //   fwd:  AG e (We), F e (+Ae), AG a (+Wa), F a (+Aa; ends -Wa), AG m0 (+Wm), F m0 (+Am; ends -Wm),
  //         AG m1 (+Wm, kept: DP slice), F m1, F head (+Ah)
  //   bwd:  B head: We+Ae+Aa+Am+Wm+Ah+Xh = 537472 (ends -Xh -Ah); all-reduce head (no buffer);
  //         AG m0 (+Wm); B m0: We+Ae+Aa+Am+2Wm+Xm+Gm = 719488 (ends -Wm); RS m0 (ends -Gm);
  //         B m1: 653056 (ends -Wm -Xm -Am); RS m1; AG a; B a: We+Ae+Aa+Wa+Xa+Ga = 437248; RS a;
  //         B e: We+Ae+Ge = 86016; RS e; optimizer.
  // Peak: at the start of the mlp's first backward slice, 1048576 + 374016 + 719488 = 2142080 B, with
  //   gathered We + 2 Wm = 173824, gradients Gm = 66432, activations Ae+Aa+Am = 348160, workspace
  //   Xm = 131072. Its time: the sum of the durations of the 12 tasks before it (each collective
  //   K = N - 1 rounded ring steps, the all-reduce 2K).
  // The analytic bound counts the head's activations as persistent although they are freed before the
  //   mlp's backward: it is above the simulated peak by exactly Ah = 49152 B (every other term of the
  //   mlp's transient, Xm + Wm + Gm, and every persistent term is live at the peak).
  costmodel::ModelSpec model;
  model.name = "tiny";
  model.stages = {costmodel::StageSpec{1, 64, 4, 256}};
  model.seq = 32;
  model.vocab = 128;
  model.tied_embeddings = false;
  model.precision = costmodel::Precision::kFp32;
  model.dropout = true;
  const costmodel::Workload w = costmodel::lower(model);
  REQUIRE(w.operators.size() == 4);
  const double params[] = {10240, 16768, 33216, 8320};
  for (std::size_t u = 0; u < 4; ++u) REQUIRE(static_cast<double>(w.operators[u].parameters()) == params[u]);

  costmodel::ClusterSpec cluster;
  cluster.name = "four";
  cluster.nodes = 1;
  cluster.devices_per_node = 4;
  cluster.memory_bytes = kGiB;
  cluster.reserve_bytes = kMiB;
  cluster.intra = costmodel::LinkSpec{10e-6, 12e9};
  const costmodel::CostModel cost(cluster, nullptr, model.precision, {});

  costmodel::Plan plan;
  plan.model = model;
  plan.cluster = cluster;
  plan.batch_size = 2;
  plan.prefetch = 0;
  const costmodel::Choice choices[] = {
      {false, 1, 0, false}, {false, 1, 1, false}, {false, 2, 1, false}, {true, 1, 0, false}};
  costmodel::set_data_parallel(plan, w, {choices, choices + 4});
  const sim::Schedule s = sim::build_schedule(plan, w, sim::plan_cost_model(plan));
  const sim::RingLinks net(cluster, nullptr);
  const auto r = sim::simulate(s, net, {});

  // Every rank alike; rank 0's peak.
  const sim::RankStats& peak = r.peak_rank();
  REQUIRE(peak.peak_bytes == 2142080.0);
  REQUIRE(category(peak, MemoryCategory::kShard) == 187008.0);
  REQUIRE(category(peak, MemoryCategory::kOptimizer) == 187008.0);
  REQUIRE(category(peak, MemoryCategory::kGatheredWeight) == 173824.0);
  REQUIRE(category(peak, MemoryCategory::kGradient) == 66432.0);
  REQUIRE(category(peak, MemoryCategory::kActivation) == 348160.0);
  REQUIRE(category(peak, MemoryCategory::kWorkspace) == 131072.0);
  for (const auto& rank : r.ranks) REQUIRE(rank.peak_bytes == peak.peak_bytes);

  // The peak task and the 12 before it, in the order derived above.
  const char* before[] = {"embedding.allgather0",
                          "embedding.forward0",
                          "layer0.attention.allgather0",
                          "layer0.attention.forward0",
                          "layer0.mlp.allgather0",
                          "layer0.mlp.forward0",
                          "layer0.mlp.allgather1",
                          "layer0.mlp.forward1",
                          "head.forward0",
                          "head.backward0",
                          "head.allreduce0",
                          "layer0.mlp.bwd.allgather0"};  // the ZDP slice gathered again for the backward
  REQUIRE(s.tasks.size() > 13);
  Tick start = 0;
  for (std::size_t t = 0; t < 12; ++t) {
    const sim::Task& task = s.tasks[t];
    INFO("task " << t << ": " << task.name);
    REQUIRE(task.name == before[t]);
    if (task.stream == sim::Stream::kCompute) {
      start += sim::to_ticks(task.duration_s);
    } else {
      const int k = (task.kind == sim::TaskKind::kAllReduce ? 2 : 1) * 3;
      start += k * sim::to_ticks(10e-6 + task.bytes / 4 / 12e9);
    }
  }
  REQUIRE(s.tasks[12].name == "layer0.mlp.backward0");
  REQUIRE(peak.peak_time == start);

  // The analytic bound and its gap.
  double persistent = 0, transient = 0;
  for (std::size_t u = 0; u < 4; ++u) {
    const auto c = cost.cost(w.operators[u], choices[u], plan.batch_size, w.bytes);
    persistent += c.persistent_bytes;
    transient = std::max(transient, c.transient_bytes);
  }
  REQUIRE(cluster.reserve_bytes + persistent + transient - peak.peak_bytes == 49152.0);
}

TEST_CASE("the analytic peak bounds the simulated peak on every model and strategy", "[memory]") {
  // titan-rtx-8 at 8 and 16 GiB, every bundled model, every strategy (dfs on a small budget); split up
  // to 4, checkpointing per operator (auto). With prefetch p >= 1 the search adds the prefetch
  // reserve (p gathered operators and p + 1 operators' gradients in flight) to its bound.
  const costmodel::ClusterSpec cluster = costmodel::load_cluster("titan-rtx-8");
  const sim::RingLinks net(cluster, nullptr);
  const auto registry = search::default_solvers({20000});
  int checked = 0;
  double largest_gap[2] = {0, 0};  // relative (analytic - simulated) / analytic, per prefetch
  std::string largest_at[2];
  for (const auto& m : costmodel::list_catalog("models")) {
    const costmodel::ModelSpec model = costmodel::load_model(m.path);
    const costmodel::Workload w = costmodel::lower(model);
    for (const int prefetch : {0, 1}) {
      costmodel::CostOptions co;
      co.prefetch = prefetch;
      const costmodel::CostModel cost(cluster, nullptr, model.precision, co);
      for (const double memory : {8 * kGiB, 16 * kGiB}) {
        for (const auto& name : registry.names()) {
          // hsdp and fsdp-2level need several nodes, and the simulator does not run them yet.
          if (registry.get(name).space({}).groups) continue;
          search::SearchOptions so;
          so.space.split_max = 4;
          so.space.checkpoint = search::CheckpointPolicy::kAuto;
          so.memory_limit_bytes = memory;
          so.reserve_bytes = cluster.reserve_bytes;
          const auto r = search::run_search(w, cost, registry.get(name), so);
          if (!r.feasible) continue;
          const search::PlanContext ctx{"test", model, cluster, std::nullopt, co};
          costmodel::Plan plan = search::make_plan(ctx, w, r);
          plan.prefetch = prefetch;
          sim::SimOptions opt;
          opt.interference = cluster.overlap.interference;
          opt.memory_rank = sim::SimOptions::kNoRanks;
          const auto sr = sim::simulate(sim::build_schedule(plan, w, sim::plan_cost_model(plan)), net, opt);
          const double simulated = sr.peak_rank().peak_bytes;
          INFO(m.name << ", " << name << ", " << memory / kGiB << " GiB, prefetch " << prefetch << ", batch "
                      << r.batch << ": simulated " << simulated << " B, analytic " << r.peak_bytes << " B");
          REQUIRE(simulated <= r.peak_bytes);
          const double gap = (r.peak_bytes - simulated) / r.peak_bytes;
          if (gap > largest_gap[prefetch]) {
            largest_gap[prefetch] = gap;
            largest_at[prefetch] =
                m.name + " " + name + " " + std::to_string(static_cast<int>(memory / kGiB)) + " GiB";
          }
          ++checked;
        }
      }
    }
  }
  WARN("largest relative gap of the analytic peak over the simulated one: prefetch 0 "
       << largest_gap[0] << " (" << largest_at[0] << "), prefetch 1 " << largest_gap[1] << " ("
       << largest_at[1] << "), over " << checked << " plans");
  REQUIRE(checked >= 100);  // about half the combinations fit: the largest models do not at 8 GiB
}
