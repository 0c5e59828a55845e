// `osdp simulate` (replay a plan file in the discrete-event simulator) and `osdp collective` (price
// one ring collective in closed form and by simulation).
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/provenance.hpp"
#include "costmodel/uncertainty.hpp"
#include "costmodel/units.hpp"
#include "search/report.hpp"
#include "sim/network.hpp"
#include "sim/replay.hpp"
#include "sim/report.hpp"

namespace osdp::cli {
namespace {

using costmodel::format_bytes;
using costmodel::format_seconds;

struct SimulateArgs {
  std::string plan, trace, memory_csv, ranks = "all";
  int prefetch = -1;  // -1: the plan's
  int draws = costmodel::kDefaultDraws;
  std::vector<std::string> stragglers;
  bool json = false;
};

// "RANK:FACTOR" pairs into per-rank compute time factors (empty when there are none).
std::vector<double> parse_stragglers(const std::vector<std::string>& specs, int world) {
  if (specs.empty()) return {};
  std::vector<double> speed(static_cast<std::size_t>(world), 1.0);
  std::vector<bool> seen(static_cast<std::size_t>(world), false);
  for (const std::string& s : specs) {
    const auto colon = s.find(':');
    int rank = -1;
    double factor = 0;
    try {
      std::size_t used_rank = 0, used_factor = 0;
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      rank = std::stoi(s.substr(0, colon), &used_rank);
      factor = std::stod(s.substr(colon + 1), &used_factor);
      if (used_rank != colon || used_factor != s.size() - colon - 1) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw UsageError(fmt::format("--straggler: expected RANK:FACTOR like 3:1.2, got \"{}\"", s));
    }
    if (rank < 0 || rank >= world)
      throw UsageError(fmt::format("--straggler {}: rank {} is not in 0..{}", s, rank, world - 1));
    if (!(factor > 0) || !std::isfinite(factor))
      throw UsageError(fmt::format("--straggler {}: the factor must be positive (1.2: 20% slower)", s));
    if (seen[rank]) throw UsageError(fmt::format("--straggler: rank {} is given twice", rank));
    seen[rank] = true;
    speed[rank] = factor;
  }
  return speed;
}

double relative(double simulated, double analytic) {
  return analytic > 0 ? (simulated - analytic) / analytic : 0.0;
}

// The step time's 90% intervals, analytic and simulated, as a row of the table (empty without).
std::string interval_row(const nlohmann::json& j) {
  const auto text = [](const nlohmann::json& i) {
    return fmt::format("{} to {}", format_seconds(i[0].get<double>()), format_seconds(i[1].get<double>()));
  };
  if (!j["iteration_time_interval_s"].is_array()) return {};
  return fmt::format("  {:<15}analytic {}, simulated {} ({} draws of the calibration's error)\n",
                     fmt::format("{:.0f}% interval", 100 * costmodel::kIntervalLevel),
                     text(j["analytic"]["iteration_time_interval_s"]), text(j["iteration_time_interval_s"]),
                     j["draws"].get<int>());
}

int run_simulate(const SimulateArgs& a) {
  costmodel::Plan plan = costmodel::read_plan(costmodel::load_json_file(a.plan), a.plan);
  const bool overridden = a.prefetch >= 0 && a.prefetch != plan.prefetch;
  if (a.prefetch >= 0) plan.prefetch = plan.cost_options.prefetch = a.prefetch;
  const int world = plan.cluster.world_size();

  sim::SimOptions options;
  options.symmetric = a.ranks == "symmetric";
  options.speed = parse_stragglers(a.stragglers, world);
  if (!a.trace.empty() || !a.memory_csv.empty()) options = sim::trace_options(options);
  // Progress on stderr about once a second, for runs that take longer (every rank of a large world).
  options.progress = [world, &a](double fraction, double elapsed_s) {
    std::cerr << fmt::format("osdp simulate: {}: {:.0f}% of the tasks of {} ranks after {:.0f} s{}\n", a.plan,
                             100 * fraction, world, elapsed_s,
                             a.ranks == "all" ? " (--ranks symmetric simulates one period of ranks)" : "");
  };
  sim::Replay run;
  try {
    run = sim::replay_plan(plan, options);
  } catch (const UsageError& e) {
    if (!options.symmetric) throw;
    throw UsageError(fmt::format("{}: --ranks symmetric: {} (use --ranks all)", a.plan, e.what()));
  }
  const sim::SimResult& r = run.result;

  if (!a.trace.empty())
    costmodel::write_file_atomic(a.trace, sim::chrome_trace(run.schedule, r).dump() + "\n");
  if (!a.memory_csv.empty()) costmodel::write_file_atomic(a.memory_csv, sim::memory_csv(run.schedule, r));

  // A plan whose predictions this osdp's cost model does not reproduce was edited, or written by
  // another version: say so, and by how much, rather than compare against figures of unknown origin.
  const std::string this_version = costmodel::tool_version();
  if (!overridden)
    if (const std::string w =
            sim::edited_plan_warning(plan, {run.analytic_time_s, run.analytic_peak_bytes}, this_version);
        !w.empty())
      std::cerr << fmt::format(
          "osdp simulate: warning: {}: {}; the table compares against the plan's figures\n", a.plan, w);
  if (!plan.tool_version.empty() && plan.tool_version != this_version)
    std::cerr << fmt::format("osdp simulate: note: {} was written by osdp {}, this is {}\n", a.plan,
                             plan.tool_version, this_version);

  // The analytic figures: the plan's prediction, or the cost model's when the plan has none or the
  // prefetch depth was changed.
  const bool repriced = overridden || plan.predicted_iteration_time_s <= 0;
  nlohmann::json j = sim::simulation_json(plan, run, a.plan, a.ranks, a.stragglers, repriced);
  sim::add_intervals(j, plan, a.draws, options);
  if (a.json) {
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  const double an_time = j["analytic"]["iteration_time_s"].get<double>();
  const double an_peak = j["analytic"]["peak_memory_bytes"].get<double>();
  const double time = j["iteration_time_s"].get<double>();
  const double peak = j["peak_memory_bytes"].get<double>();
  const double samples = j["global_batch"].get<double>();
  const nlohmann::json& summary = j;

  const sim::RankStats& crit = r.ranks[r.critical_rank];
  const int peak_rank = summary["peak_rank"].get<int>();
  std::cout << fmt::format(
                   "osdp simulate: {} ({} on {}, {} x {}), batch {} per device{}, prefetch {}\n", a.plan,
                   plan.model.name, plan.cluster.name, world, plan.cluster.device_name, plan.batch_size,
                   plan.data_parallel() ? std::string()
                                        : fmt::format(" per micro-batch; {}, global batch {}",
                                                      plan.layout_summary(), plan.global_batch(world)),
                   plan.prefetch)
            << fmt::format("  {:<15}{:>14}{:>14}{:>12}\n", "", repriced ? "analytic*" : "analytic",
                           "simulated", "difference")
            << fmt::format("  {:<15}{:>14}{:>14}{:>+11.2f}%\n", "step time", format_seconds(an_time),
                           format_seconds(time), 100 * relative(time, an_time))
            << interval_row(j)
            << fmt::format("  {:<15}{:>14}{:>14}{:>+11.2f}%\n", "peak memory", format_bytes(an_peak),
                           format_bytes(peak), 100 * relative(peak, an_peak))
            << fmt::format("  {:<15}{:>14.2f}{:>14.2f}{:>+11.2f}%   samples/s\n", "throughput",
                           an_time > 0 ? samples / an_time : 0.0, time > 0 ? samples / time : 0.0,
                           100 * relative(an_time, time));
  if (repriced) std::cout << fmt::format("  * priced by the cost model at prefetch {}\n", plan.prefetch);
  if (plan.pp > 1) {
    std::cout << fmt::format("  bubble         {:.1f}% of the stages' compute streams idle\n",
                             100 * summary["bubble_fraction"].get<double>());
    for (const auto& st : summary["stages"])
      std::cout << fmt::format(
          "  stage {:<8} rank {}: compute busy {}, comm busy {}, sends {}, peak {}\n", st["stage"].get<int>(),
          st["first_rank"].get<int>(), format_seconds(st["compute_busy_s"].get<double>()),
          format_seconds(st["comm_busy_s"].get<double>()), format_seconds(st["send_busy_s"].get<double>()),
          format_bytes(st["peak_memory_bytes"].get<double>()));
  }
  std::cout << fmt::format("  critical rank  {}: compute busy {}, comm busy {}, exposed comm {}\n",
                           r.critical_rank, format_seconds(sim::to_seconds(crit.compute_busy)),
                           format_seconds(sim::to_seconds(crit.comm_busy)),
                           format_seconds(summary["exposed_comm_s"].get<double>()))
            << fmt::format("  peak           rank {} at {}:", peak_rank,
                           format_seconds(summary["peak_time_s"].get<double>()));
  const sim::RankStats& pr = r.ranks[peak_rank];
  std::string sep = " ";
  for (int c = 0; c < sim::kMemoryCategories; ++c) {
    if (pr.peak_breakdown[c] <= 0) continue;
    std::cout << fmt::format("{}{} {}", sep, sim::to_string(static_cast<sim::MemoryCategory>(c)),
                             format_bytes(pr.peak_breakdown[c]));
    sep = ", ";
  }
  std::cout << fmt::format("{}reserve {}\n", sep, format_bytes(r.reserve_bytes))
            << fmt::format("  ranks          {} of {} simulated ({})\n", r.ranks_simulated, world, a.ranks)
            << fmt::format("  events         {} ({} through the queue) in {} ({:.3g} events/s)\n", r.events,
                           r.queue_events, format_seconds(r.wall_seconds),
                           summary["events_per_second"].get<double>());
  if (!a.trace.empty()) std::cout << "  trace written to " << a.trace << " (open it in ui.perfetto.dev)\n";
  if (!a.memory_csv.empty()) std::cout << "  memory timeline written to " << a.memory_csv << "\n";
  return kExitOk;
}

// --- osdp collective ------------------------------------------------------------------------------

struct CollectiveArgs {
  std::string op, bytes, alpha, bandwidth, inter_alpha, inter_bandwidth;
  int ranks = 0, nodes = 1;
  bool json = false;
};

double parse_option(const std::string& text, costmodel::UnitKind kind, const char* option, bool allow_zero) {
  std::string err;
  const auto v = costmodel::parse_quantity(text, kind, &err);
  if (!v) throw UsageError(fmt::format("{}: {}", option, err));
  if (*v < 0 || (!allow_zero && *v == 0))
    throw UsageError(
        fmt::format("{}: must be {}, got \"{}\"", option, allow_zero ? "non-negative" : "positive", text));
  return *v;
}

int run_collective(const CollectiveArgs& a) {
  using costmodel::UnitKind;
  const int n = a.ranks;
  if (n % a.nodes != 0)
    throw UsageError(
        fmt::format("--nodes {} does not divide --ranks {} (ranks are numbered node by node)", a.nodes, n));
  if (a.nodes > 1 && (a.inter_alpha.empty() || a.inter_bandwidth.empty()))
    throw UsageError("--nodes > 1 needs --inter-alpha and --inter-bandwidth");
  costmodel::ClusterSpec cluster;
  cluster.name = "collective";
  cluster.nodes = a.nodes;
  cluster.devices_per_node = n / a.nodes;
  cluster.intra = {parse_option(a.alpha, UnitKind::kSeconds, "--alpha", true),
                   parse_option(a.bandwidth, UnitKind::kBytesPerSecond, "--bandwidth", false)};
  if (a.nodes > 1)
    cluster.inter = costmodel::LinkSpec{
        parse_option(a.inter_alpha, UnitKind::kSeconds, "--inter-alpha", true),
        parse_option(a.inter_bandwidth, UnitKind::kBytesPerSecond, "--inter-bandwidth", false)};
  const double bytes = parse_option(a.bytes, UnitKind::kBytes, "--bytes", true);

  const auto collective = costmodel::collective_from_string(a.op);
  if (!collective) throw UsageError(fmt::format("no collective is called \"{}\"", a.op));
  const costmodel::CollectiveOp op{*collective, bytes, n};
  const int passes = costmodel::describe(op.kind).passes;
  // Closed form (sim/engine.hpp, costmodel/collective.hpp): every rank sends one chunk S/N per step
  // over its outgoing link; all-gather and reduce-scatter take N - 1 steps, all-reduce 2(N - 1). Every
  // step waits for the predecessor's previous step, so the ring advances at the pace of its slowest link:
  //   t = steps (alpha + S/N beta) on the bottleneck link (the inter-node link when it is slower).
  const int steps = op.steps();
  const double chunk = op.chunk_bytes();
  double step_s = 0;
  if (cluster.devices_per_node > 1)
    step_s = op.step_s(cluster.intra.alpha_s, cluster.intra.beta_s_per_byte());
  if (cluster.inter)
    step_s = std::max(step_s, op.step_s(cluster.inter->alpha_s, cluster.inter->beta_s_per_byte()));
  const double closed_form_s = steps * step_s;

  sim::Schedule schedule;
  schedule.world_size = n;
  sim::Task task;
  task.name = a.op;
  task.kind = sim::task_kind_of(op.kind);
  task.stream = sim::Stream::kComm;
  task.bytes = bytes;
  schedule.tasks.push_back(task);
  sim::SimOptions options;
  options.memory_rank = sim::SimOptions::kNoRanks;
  const sim::SimResult r = sim::simulate(schedule, sim::RingLinks(cluster, nullptr), options);
  const double simulated_s = sim::to_seconds(r.iteration);
  // nccl-tests' bus bandwidth: algorithm bandwidth S / t times (N-1)/N, or 2(N-1)/N for all-reduce.
  const double algbw = simulated_s > 0 ? bytes / simulated_s : 0.0;
  const double busbw = op.bus_bandwidth(simulated_s);

  if (a.json) {
    nlohmann::json j{{"collective", a.op},
                     {"ranks", n},
                     {"nodes", a.nodes},
                     {"bytes", bytes},
                     {"steps", steps},
                     {"chunk_bytes", chunk},
                     {"step_s", step_s},
                     {"closed_form_s", closed_form_s},
                     {"simulated_s", simulated_s},
                     {"difference_s", simulated_s - closed_form_s},
                     {"algorithm_bandwidth_bytes_per_s", algbw},
                     {"bus_bandwidth_bytes_per_s", busbw},
                     {"events", r.events}};
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << fmt::format("osdp collective: {} of {} over {} ranks ({} node{}), {} {} steps of {}\n", a.op,
                           format_bytes(bytes), n, a.nodes, a.nodes == 1 ? "" : "s", steps,
                           costmodel::describe(op.kind).pairwise ? "pairwise" : "ring", format_bytes(chunk))
            << fmt::format("  closed form    {}  ({}(N-1) (alpha + S/N beta) on the slowest link)\n",
                           format_seconds(closed_form_s), passes > 1 ? fmt::format("{} ", passes) : "")
            << fmt::format("  simulated      {}  ({:+.3g} s apart; {} events)\n", format_seconds(simulated_s),
                           simulated_s - closed_form_s, r.events)
            << fmt::format("  bus bandwidth  {} (algorithm bandwidth {})\n",
                           costmodel::format_bandwidth(busbw), costmodel::format_bandwidth(algbw));
  return kExitOk;
}

}  // namespace

Action add_simulate_command(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  app.description(
      "Replay a plan file in the discrete-event simulator: per rank a compute and a comm stream, ring\n"
      "collectives step by step, the memory timeline. Prints the simulated step time and peak memory\n"
      "beside the plan's analytic prediction; writes a Chrome trace (Perfetto) and the memory timeline.\n"
      "Exit codes: 0 done; 2 bad input or usage.");
  app.add_option("--plan", a->plan, "Plan file written by `osdp plan --out`")->required();
  app.add_option("--trace", a->trace, "Write a Chrome trace-event JSON file here (open in ui.perfetto.dev)");
  app.add_option("--memory-csv", a->memory_csv,
                 "Write the memory timeline here (time_s,rank,buffer,category,delta_bytes,total_bytes)");
  app.add_option(
         "--ranks", a->ranks,
         "all: simulate every rank; symmetric: one period of ranks (homogeneous runs only, same result)")
      ->check(CLI::IsMember({"all", "symmetric"}))
      ->capture_default_str();
  app.add_option("--prefetch", a->prefetch, "Prefetch depth instead of the plan's (all-gathers issued ahead)")
      ->check(CLI::Range(0, 64));
  app.add_option("--straggler", a->stragglers,
                 "RANK:FACTOR: rank RANK computes FACTOR times slower (1.2: 20% slower); repeatable");
  app.add_option("--draws", a->draws,
                 "Draws of the plan's calibration's uncertainty, each simulated and priced, for the step "
                 "time's 90% intervals (0: none; nothing to draw without a calibration)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_flag("--json", a->json, "Print one JSON object instead of the summary");
  return [a]() { return run_simulate(*a); };
}

Action add_collective_command(CLI::App& app) {
  auto a = std::make_shared<CollectiveArgs>();
  app.description(
      "Price one collective: the closed form (N-1)(alpha + S/N beta), twice for all-reduce, on the\n"
      "slowest link, beside the simulator's step-by-step time (a ring; an all-to-all's N-1 steps are\n"
      "pairwise exchanges, each on its pair's link, so it can beat the closed form across nodes).");
  std::vector<std::string> keys;
  for (const costmodel::CollectiveKind& k : costmodel::kCollectives) keys.emplace_back(k.key);
  app.add_option("collective", a->op, fmt::format("{}", fmt::join(keys, " | ")))
      ->required()
      ->check(CLI::IsMember(keys));
  app.add_option("--ranks", a->ranks, "Ranks in the ring (N)")->required()->check(CLI::Range(1, 1 << 16));
  app.add_option("--bytes", a->bytes,
                 "The full buffer S (gathered or reduced; an all-to-all's per rank), e.g. 1GiB or 100MB")
      ->required();
  app.add_option("--alpha", a->alpha, "Latency per ring step on the intra-node link, e.g. 10us")->required();
  app.add_option("--bandwidth", a->bandwidth, "Intra-node link bandwidth per direction, e.g. 12GB/s")
      ->required();
  app.add_option("--nodes", a->nodes, "Nodes the ranks are spread over (ranks numbered node by node)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--inter-alpha", a->inter_alpha, "Latency per ring step between nodes (with --nodes > 1)");
  app.add_option("--inter-bandwidth", a->inter_bandwidth, "Bandwidth between nodes (with --nodes > 1)");
  app.add_flag("--json", a->json, "Print one JSON object instead of the summary");
  return [a]() { return run_collective(*a); };
}

}  // namespace osdp::cli
