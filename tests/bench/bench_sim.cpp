// bench_sim: how fast the discrete-event simulator replays one training iteration at scale.
//
//   build-bsim/tests/bench/bench_sim [--max-ranks N] [--repeat N] [--strategy NAME] [--json FILE]
//
// The plan: nd-96x1024 (the paper's narrow & deep model, 96 layers at hidden 1024) searched by
// search::run_search (default strategy fsdp, which issues 2 all-gathers and 1 reduce-scatter per
// operator: 579 collectives, close to the 576 of the published ASTRA-sim run) at the batch size
// the scheduler picks, prefetch 1. For each cluster and rank count the plan and its schedule are
// built once; then sim::simulate runs with SimOptions defaults (no task recording, memory timeline
// of rank 0; overlap and interference from the cluster, as `osdp simulate` sets them) in full
// per-rank detail and in symmetric mode, and the two must give the same iteration ticks. Clusters: (a) flat,
// titan-rtx-8 with devices_per_node = N on one node; (b) two levels, h100-2x8 with N / 8 nodes of 8. Reported
// per run: wall seconds of the simulate() call (median of the repeats), SimResult.events, events/s,
// queue_events. A third topology, hybrid, is the same model on h100-2x8 at 1024 ranks under a
// pipeline-and-tensor-parallel plan (search::search_hybrid, megatron-3d, pp 8, tp 8, 16
// micro-batches, 1F1B): stages and sends and TP all-reduces in the one schedule, simulated in full
// detail (symmetric mode takes one stage only). See bench/README.md.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/provenance.hpp"
#include "costmodel/workload.hpp"
#include "search/hybrid.hpp"
#include "search/report.hpp"
#include "search/scheduler.hpp"
#include "search/batch_solver.hpp"
#include "sim/engine.hpp"
#include "sim/network.hpp"
#include "sim/schedule.hpp"

namespace {

using namespace osdp;

constexpr const char* kModel = "nd-96x1024";
constexpr int kPrefetch = 1;
// Targets (the project's issue): one core.
constexpr double kTargetEventsPerS = 20e6;
constexpr double kTargetFull1024S = 30.0;
constexpr double kTargetSymmetricS = 0.100;

// Published, not measured here (REFERENCE.md): ASTRA-sim 2.x analytical backend on a 2-core
// machine, 576 all-gathers/reduce-scatters of 64 MiB, ring, 12.5e9 B/s, 10 us.
struct Published {
  int ranks;
  double seconds;
};
constexpr Published kAstra[] = {{8, 0.17}, {64, 4.3}, {512, 319.0}, {1024, 24 * 60.0}};
constexpr int kAstraCollectives = 576;

std::optional<double> astra_seconds(int ranks) {
  for (const auto& p : kAstra)
    if (p.ranks == ranks) return p.seconds;
  return std::nullopt;
}

struct Measure {
  std::vector<double> wall_s;  // of each simulate() call
  std::int64_t events = 0, queue_events = 0;
  int ranks_simulated = 0;
  sim::Tick iteration = 0;
  double peak_bytes = 0;
  double median() const {
    std::vector<double> v = wall_s;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  double min() const { return *std::min_element(wall_s.begin(), wall_s.end()); }
  double events_per_s() const { return static_cast<double>(events) / median(); }
};

struct Row {
  std::string topology;  // "flat" or "two-level"
  std::string cluster;   // the base cluster file
  int ranks = 0, nodes = 0, per_node = 0;
  int batch = 0;
  std::string strategy;
  std::vector<std::string> choices;
  std::size_t tasks = 0, collectives = 0;
  double predicted_s = 0, predicted_peak = 0;
  double search_s = 0, schedule_s = 0;
  double interference = 1;
  Measure full, symmetric;  // symmetric: none for a plan of several stages
  std::string layout;        // hybrid: "pp 8, tp 8, m 16"
  bool has_symmetric() const { return !symmetric.wall_s.empty(); }
  bool same() const { return !has_symmetric() || full.iteration == symmetric.iteration; }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string fmt_s(double s) {
  if (s < 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  if (s < 1) return fmt::format("{:.1f} ms", s * 1e3);
  if (s >= 600) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.2f} s", s);
}

std::string fmt_count(double x) {
  if (x >= 1e9) return fmt::format("{:.2f}G", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.0f}", x);
}

// Runs of each simulate() call: a few for small cases, one for the largest full-detail runs.
int repeats_for(int ranks, bool symmetric, int repeat) {
  if (symmetric || ranks <= 64) return repeat;
  if (ranks <= 512) return std::min(repeat, 3);
  return 1;
}

Measure measure(const sim::Schedule& s, const sim::NetworkModel& net, const costmodel::PlanCostModel& model,
                bool symmetric, int runs) {
  sim::SimOptions opt;  // defaults: no task recording, memory timeline of rank 0
  opt.symmetric = symmetric;
  // As `osdp simulate` runs a plan: the cluster's overlap and interference.
  opt.overlap = model.dp_model(1, 1).overlap();
  opt.interference = model.dp_model(1, 1).interference();
  Measure m;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const sim::SimResult r = sim::simulate(s, net, opt);
    m.wall_s.push_back(seconds_since(t0));
    m.events = r.events;
    m.queue_events = r.queue_events;
    m.ranks_simulated = r.ranks_simulated;
    m.iteration = r.iteration;
    m.peak_bytes = r.peak_rank().peak_bytes;
  }
  return m;
}

Row run_case(const std::string& topology, int ranks, const search::SolverRegistry& registry,
             const std::string& strategy, int repeat) {
  Row row;
  row.topology = topology;
  row.ranks = ranks;
  row.strategy = strategy;
  search::PlanContext ctx;
  ctx.tool_version = "bench_sim";
  ctx.model = costmodel::load_model(kModel);
  if (topology == "flat") {
    row.cluster = "titan-rtx-8";
    ctx.cluster = costmodel::load_cluster(row.cluster);
    ctx.cluster.nodes = 1;
    ctx.cluster.devices_per_node = ranks;
    ctx.cluster.inter.reset();
  } else {
    row.cluster = "h100-2x8";
    ctx.cluster = costmodel::load_cluster(row.cluster);
    ctx.cluster.nodes = ranks / ctx.cluster.devices_per_node;
  }
  ctx.cluster.name = fmt::format("{}-as-{}x{}", row.cluster, ctx.cluster.nodes, ctx.cluster.devices_per_node);
  row.nodes = ctx.cluster.nodes;
  row.per_node = ctx.cluster.devices_per_node;
  ctx.cost_options.prefetch = kPrefetch;

  // The plan and its schedule, built once.
  const costmodel::Workload w = costmodel::lower(ctx.model);
  const costmodel::PlanCostModel plan_model(ctx.cluster, nullptr, ctx.model.precision, ctx.cost_options);
  const costmodel::CostModel& model = plan_model.dp_model(1, 1);
  search::SearchOptions so;
  so.space.checkpoint = search::CheckpointPolicy::kAuto;
  so.memory_limit_bytes = ctx.cluster.memory_bytes;
  so.reserve_bytes = ctx.cluster.reserve_bytes;
  auto t0 = std::chrono::steady_clock::now();
  const search::SearchResult r = search::run_search(w, model, registry.get(strategy), so);
  row.search_s = seconds_since(t0);
  if (!r.feasible)
    throw std::runtime_error(
        fmt::format("{} does not fit on {} under strategy {}", kModel, ctx.cluster.name, strategy));
  const costmodel::Plan plan = search::make_plan(ctx, w, r);
  row.batch = plan.batch_size;
  row.predicted_s = r.time_s;
  row.predicted_peak = r.peak_bytes;
  row.choices = search::summarize_choices(w, r.choices);
  t0 = std::chrono::steady_clock::now();
  const sim::Schedule s = sim::build_schedule(plan, w, plan_model);
  row.schedule_s = seconds_since(t0);
  row.tasks = s.tasks.size();
  for (const auto& t : s.tasks) row.collectives += sim::is_collective(t.kind) ? 1 : 0;

  const sim::RingLinks net(ctx.cluster, nullptr);
  row.interference = model.interference();
  row.full = measure(s, net, plan_model, false, repeats_for(ranks, false, repeat));
  row.symmetric = measure(s, net, plan_model, true, repeats_for(ranks, true, repeat));
  return row;
}

// The hybrid row: h100-2x8 as 128 nodes of 8, pp 8, tp 8, 16 micro-batches, megatron-3d's plan.
Row run_hybrid_case(int repeat) {
  constexpr int kRanks = 1024, kPp = 8, kTp = 8, kMicro = 16;
  Row row;
  row.topology = "hybrid";
  row.ranks = kRanks;
  row.strategy = "megatron-3d";
  row.cluster = "h100-2x8";
  const auto model_spec = costmodel::load_model(kModel);
  const auto cluster = costmodel::resized(costmodel::load_cluster(row.cluster), kRanks);
  row.nodes = cluster.nodes;
  row.per_node = cluster.devices_per_node;
  costmodel::CostOptions options;
  options.prefetch = kPrefetch;
  const costmodel::PlanCostModel plan_model(cluster, nullptr, model_spec.precision, options);
  search::HybridSearchOptions ho;
  ho.space.checkpoint = search::CheckpointPolicy::kAuto;
  ho.pp = {kPp};
  ho.tp = {kTp};
  ho.micro_batches = kMicro;
  auto t0 = std::chrono::steady_clock::now();
  const auto r = search::search_hybrid(model_spec, plan_model, search::LayoutSearch::kMegatron3d, ho);
  row.search_s = seconds_since(t0);
  if (!r.feasible)
    throw std::runtime_error(fmt::format("{} does not fit on {} at pp {} tp {}", kModel, cluster.name, kPp, kTp));
  row.batch = r.plan.batch_size;
  row.predicted_s = r.evaluation.time_s;
  row.predicted_peak = r.evaluation.peak_bytes;
  row.layout = fmt::format("pp {}, tp {}, m {}", r.plan.pp, kTp, r.plan.micro_batches);
  row.choices = search::summarize_choices(*r.workload, r.plan.choices);
  t0 = std::chrono::steady_clock::now();
  const sim::Schedule s = sim::build_schedule(r.plan, *r.workload, plan_model);
  row.schedule_s = seconds_since(t0);
  row.tasks = s.tasks.size();
  for (const auto& t : s.tasks) row.collectives += sim::is_collective(t.kind) ? 1 : 0;
  const sim::RingLinks net(cluster, nullptr);
  row.interference = plan_model.dp_model(1, 1).interference();
  row.full = measure(s, net, plan_model, false, repeats_for(kRanks, false, repeat));
  return row;
}

std::string check_cell(const Row& r) {
  if (r.same()) return "same";
  return fmt::format("differs by {} ticks", r.symmetric.iteration - r.full.iteration);
}

void print_table(const std::vector<Row>& rows) {
  std::cout << fmt::format(
      "one iteration of {} (prefetch {}), sim::simulate wall time, median over the runs; events = "
      "SimResult.events\n\n",
      kModel, kPrefetch);
  std::cout << fmt::format("{:<10} {:>5} {:>9} {:<9} {:>4} {:>11} {:>10} {:>10} {:>9} {:>8}  {:<14} {}\n",
                           "cluster", "ranks", "nodes", "mode", "runs", "wall", "events", "events/s",
                           "queue ev", "ns/event", "iteration", "sym = full");
  for (const auto& r : rows) {
    for (int sym = 0; sym < (r.has_symmetric() ? 2 : 1); ++sym) {
      const Measure& m = sym ? r.symmetric : r.full;
      std::cout << fmt::format(
          "{:<10} {:>5} {:>9} {:<9} {:>4} {:>11} {:>10} {:>10} {:>9} {:>8.1f}  {:<14} {}\n", r.topology,
          r.ranks, fmt::format("{}x{}", r.nodes, r.per_node),
          sym ? fmt::format("sym({})", m.ranks_simulated) : "full", m.wall_s.size(), fmt_s(m.median()),
          fmt_count(static_cast<double>(m.events)), fmt_count(m.events_per_s()),
          fmt_count(static_cast<double>(m.queue_events)), m.median() * 1e9 / static_cast<double>(m.events),
          fmt::format("{:.6f} s", sim::to_seconds(m.iteration)), sym ? check_cell(r) : "");
    }
  }
  std::cout << "\nplans (built once per row, not timed above):\n";
  for (const auto& r : rows) {
    std::string choices;
    for (const auto& c : r.choices) choices += (choices.empty() ? "" : "; ") + c;
    std::cout << fmt::format(
        "  {:<9} {:>5} ranks: {} batch {}, {} tasks ({} collectives), interference {:g}, analytic {:.6f} s, "
        "search {}, schedule {}; {}{}\n",
        r.topology, r.ranks, r.strategy, r.batch, r.tasks, r.collectives, r.interference, r.predicted_s,
        fmt_s(r.search_s), fmt_s(r.schedule_s), r.layout.empty() ? "" : r.layout + "; ", choices);
  }

  // Targets.
  std::cout << fmt::format(
      "\ntargets (one core; this machine has {} hardware threads, the simulator uses one):\n",
      std::thread::hardware_concurrency());
  double min_rate = 0;
  std::string min_rate_at;
  double max_sym = 0;
  for (const auto& r : rows) {
    if (r.ranks >= 64 && (min_rate == 0 || r.full.events_per_s() < min_rate)) {
      min_rate = r.full.events_per_s();
      min_rate_at = fmt::format("{} {} ranks", r.topology, r.ranks);
    }
    if (r.has_symmetric()) max_sym = std::max(max_sym, r.symmetric.median());
  }
  if (min_rate > 0)
    std::cout << fmt::format(
        "  >= {} events/s in full detail (rows with >= 64 ranks): lowest {} events/s ({}) -> {}\n",
        fmt_count(kTargetEventsPerS), fmt_count(min_rate), min_rate_at,
        min_rate >= kTargetEventsPerS ? "met" : "NOT met");
  bool any1024 = false;
  for (const auto& r : rows) {
    if (r.ranks != 1024) continue;
    any1024 = true;
    std::cout << fmt::format("  1024 ranks full detail within {:.0f} s: {} {} -> {}\n", kTargetFull1024S,
                             r.topology, fmt_s(r.full.median()),
                             r.full.median() <= kTargetFull1024S ? "met" : "NOT met");
  }
  if (!any1024) std::cout << "  1024 ranks full detail within 30 s: not run (--max-ranks)\n";
  std::cout << fmt::format("  symmetric within {:.0f} ms: slowest {} -> {}\n", kTargetSymmetricS * 1e3,
                           fmt_s(max_sym), max_sym <= kTargetSymmetricS ? "met" : "NOT met");
  bool all_same = true;
  for (const auto& r : rows) all_same = all_same && r.same();
  std::cout << fmt::format("  symmetric gives the full run's iteration ticks: {}\n",
                           all_same ? "yes, every row" : "NO (see the rows above)");

  std::cout << fmt::format(
      "\ncontext (published figures, NOT measured here; REFERENCE.md): ASTRA-sim 2.x analytical backend,\n"
      "  2-core machine, {} ring all-gathers/reduce-scatters of 64 MiB (12.5e9 B/s, 10 us), about 2.2 us\n"
      "  per rank per ring step:\n",
      kAstraCollectives);
  for (const auto& p : kAstra) {
    std::string ours;
    for (const auto& r : rows)
      if (r.ranks == p.ranks && r.topology == "flat")
        ours = fmt::format("   (here, flat full detail: {} for {} collectives: {:.0f}x less wall time)",
                           fmt_s(r.full.median()), r.collectives, p.seconds / r.full.median());
    std::cout << fmt::format("  {:>5} ranks: {:>8}{}\n", p.ranks, fmt_s(p.seconds), ours);
  }
}

nlohmann::json measure_json(const Measure& m) {
  return {{"wall_s", m.wall_s},
          {"median_s", m.median()},
          {"min_s", m.min()},
          {"ranks_simulated", m.ranks_simulated},
          {"events", m.events},
          {"queue_events", m.queue_events},
          {"events_per_s", m.events_per_s()},
          {"iteration_ticks", m.iteration},
          {"iteration_time_s", sim::to_seconds(m.iteration)},
          {"peak_memory_bytes", m.peak_bytes}};
}

nlohmann::json to_json(const std::vector<Row>& rows, int repeat) {
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json c = {{"topology", r.topology},
                        {"cluster", r.cluster},
                        {"ranks", r.ranks},
                        {"nodes", r.nodes},
                        {"devices_per_node", r.per_node},
                        {"strategy", r.strategy},
                        {"batch_size", r.batch},
                        {"choices", r.choices},
                        {"tasks", r.tasks},
                        {"collectives", r.collectives},
                        {"interference", r.interference},
                        {"analytic_iteration_time_s", r.predicted_s},
                        {"analytic_peak_memory_bytes", r.predicted_peak},
                        {"search_s", r.search_s},
                        {"schedule_build_s", r.schedule_s},
                        {"full", measure_json(r.full)}};
    if (!r.layout.empty()) c["layout"] = r.layout;
    if (r.has_symmetric()) {
      c["symmetric"] = measure_json(r.symmetric);
      c["symmetric_same_iteration"] = r.same();
      c["symmetric_minus_full_ticks"] = r.symmetric.iteration - r.full.iteration;
    }
    if (auto a = astra_seconds(r.ranks)) c["published_astra_sim_s"] = *a;
    cases.push_back(c);
  }
  nlohmann::json astra = nlohmann::json::array();
  for (const auto& p : kAstra) astra.push_back({{"ranks", p.ranks}, {"seconds", p.seconds}});
  return {
      {"schema_version", 1},
      {"benchmark", "bench_sim"},
      {"git_hash", "unknown"},
      {"machine", costmodel::machine(1, 1)},
      {"model", kModel},
      {"prefetch", kPrefetch},
      {"repeat", repeat},
      {"targets",
       {{"events_per_s", kTargetEventsPerS},
        {"full_1024_ranks_s", kTargetFull1024S},
        {"symmetric_s", kTargetSymmetricS}}},
      {"published_reference",
       {{"what",
         "ASTRA-sim 2.x analytical backend, 2-core machine, 576 ring all-gathers/reduce-scatters of 64 MiB; "
         "published, not measured here"},
        {"collectives", kAstraCollectives},
        {"runs", astra}}},
      {"cases", cases}};
}

int usage(const char* argv0, int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: %s [--max-ranks N] [--repeat N] [--strategy NAME] [--no-hybrid] [--json FILE]\n"
               "  --max-ranks N      skip rank counts above N (of 8, 64, 512, 1024; default 1024)\n"
               "  --repeat N         runs per case for small ones and symmetric mode (default 5; 3 at 512\n"
               "                     ranks and 1 at 1024 in full detail); the median is reported\n"
               "  --strategy NAME    the search strategy that makes the plan (default fsdp; e.g. exact)\n"
               "  --no-hybrid        skip the hybrid row (pp 8, tp 8, 16 micro-batches at 1024 ranks)\n"
               "  --json FILE        also write the results as JSON\n",
               argv0);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  int max_ranks = 1024;
  int repeat = 5;
  std::string strategy = "fsdp";
  std::string json_path;
  bool no_hybrid = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(argv[0], 0);
    if (a != "--no-hybrid" && i + 1 >= argc) return usage(argv[0], 2);
    if (a == "--max-ranks") {
      max_ranks = std::atoi(argv[++i]);
    } else if (a == "--repeat") {
      repeat = std::atoi(argv[++i]);
    } else if (a == "--strategy") {
      strategy = argv[++i];
    } else if (a == "--no-hybrid") {
      no_hybrid = true;
    } else if (a == "--json") {
      json_path = argv[++i];
    } else {
      return usage(argv[0], 2);
    }
    if (repeat < 1 || max_ranks < 1) return usage(argv[0], 2);
  }

  std::vector<Row> rows;
  try {
    const search::SolverRegistry registry = search::default_solvers();
    registry.get(strategy);  // an unknown name fails before any work
    for (const char* topology : {"flat", "two-level"}) {
      for (int n : {8, 64, 512, 1024}) {
        if (n > max_ranks) continue;
        if (isatty(STDERR_FILENO)) std::cerr << fmt::format("bench_sim: {} {} ranks\n", topology, n);
        rows.push_back(run_case(topology, n, registry, strategy, repeat));
      }
    }
    if (max_ranks >= 1024 && !no_hybrid) {
      if (isatty(STDERR_FILENO)) std::cerr << "bench_sim: hybrid 1024 ranks\n";
      rows.push_back(run_hybrid_case(repeat));
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_sim: error: " << e.what() << "\n";
    return 2;
  }
  if (rows.empty()) {
    std::cerr << "bench_sim: no case has at most --max-ranks ranks (the smallest is 8)\n";
    return 2;
  }
  std::cout << fmt::format("bench_sim on {} ({} hardware threads), data from {}\n",
                           costmodel::machine(1, 1).at("hostname").get<std::string>(),
                           std::thread::hardware_concurrency(), costmodel::data_dir());
  print_table(rows);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << to_json(rows, repeat).dump(2) << "\n";
    if (!f) {
      std::cerr << "bench_sim: cannot write " << json_path << "\n";
      return 2;
    }
    std::cout << "results written to " << json_path << "\n";
  }
  return 0;
}
