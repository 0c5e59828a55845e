// `osdp plan`: the data-parallel plan of one model on one cluster (search/request.hpp), the exact
// hybrid plan below it on clusters of several devices, and the options of both; `--hybrid` runs
// cli/plan_hybrid_command.cpp instead.
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/plan_args.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/hybrid.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/units.hpp"
#include "osdp_version.hpp"
#include "search/hybrid.hpp"
#include "search/report.hpp"
#include "search/request.hpp"

namespace osdp::cli {
namespace {

using costmodel::format_bytes;
using costmodel::format_seconds;

// The smallest whole number of MiB that fits, so that the figure can be passed back as --memory.
long long min_fit_mib(double bytes) {
  return static_cast<long long>(std::ceil(bytes / 1048576.0));
}

// The batch size with the highest simulated throughput (the first of equals), or -1.
int simulated_winner(const std::vector<EvaluatedBatch>& ev) {
  const EvaluatedBatch* best = nullptr;
  for (const auto& e : ev)
    if (!best || e.simulated_throughput > best->simulated_throughput) best = &e;
  return best ? best->batch : -1;
}

void add_evaluation_json(nlohmann::json& j, const std::vector<EvaluatedBatch>& ev) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& e : ev)
    arr.push_back({{"batch_size", e.batch},
                   {"analytic_time_s", e.analytic_time_s},
                   {"simulated_time_s", e.simulated_time_s},
                   {"analytic_peak_bytes", e.analytic_peak_bytes},
                   {"simulated_peak_bytes", e.simulated_peak_bytes},
                   {"analytic_throughput", e.analytic_throughput},
                   {"simulated_throughput", e.simulated_throughput}});
  j["evaluated"] = arr;
  const int win = simulated_winner(ev);
  j["simulated_best_batch_size"] = win > 0 ? nlohmann::json(win) : nlohmann::json(nullptr);
}

void print_evaluation(const std::vector<EvaluatedBatch>& ev, int analytic_best) {
  std::cout << fmt::format("  simulated      the best plan of {} batch sizes, analytic beside simulated:\n",
                           ev.size())
            << fmt::format("    {:>6} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10}\n", "batch", "time",
                           "sim time", "peak", "sim peak", "samples/s", "sim s/s");
  for (const auto& e : ev)
    std::cout << fmt::format("    {:>6} {:>12} {:>12} {:>12} {:>12} {:>10.2f} {:>10.2f}\n", e.batch,
                             format_seconds(e.analytic_time_s), format_seconds(e.simulated_time_s),
                             format_bytes(e.analytic_peak_bytes), format_bytes(e.simulated_peak_bytes),
                             e.analytic_throughput, e.simulated_throughput);
  const int win = simulated_winner(ev);
  if (win > 0)
    std::cout << fmt::format("  under simulation batch {} wins{}\n", win,
                             win == analytic_best
                                 ? " (as the analytic model says)"
                                 : fmt::format(" (the analytic model picked {})", analytic_best));
}

int run_plan(const PlanArgs& a) {
  if (a.hybrid) return run_plan_hybrid(a);
  const auto prepared = search::prepare_search(a.req, fmt::format("{}+{}", OSDP_VERSION, OSDP_GIT_HASH));
  const search::PlanContext& ctx = prepared->ctx;
  const costmodel::Workload& w = prepared->workload;
  const costmodel::CostModel& model = *prepared->model;
  const search::SearchOptions& opt = prepared->options;
  const search::StrategyRegistry& registry = prepared->registry;
  const search::Strategy& strategy = *prepared->strategy;
  const search::SearchResult r = search::run_search(w, model, strategy, opt);
  std::optional<search::SearchResult> base;
  if (a.baseline != "none" && a.baseline != a.req.strategy)
    base = search::run_search(w, model, registry.get(a.baseline), opt);

  // The hybrid plan beside it (search/hybrid.hpp): pipeline stages, micro-batches and TP degrees with
  // the same per-operator space, at the same global batch when --batch fixes it. Its space holds this
  // one's (dp-only), so its throughput is never below the exact plan's.
  std::optional<search::HybridResult> hybrid;
  if (!a.no_hybrid && ctx.cluster.world_size() > 1) {
    search::HybridSearchOptions so = hybrid_options(a, *prepared);
    if (opt.batch) so.global_batch = *opt.batch * ctx.cluster.world_size();
    hybrid = search::search_hybrid(ctx.model, hybrid_cost_model(*prepared), "exact", so);
  }

  std::vector<EvaluatedBatch> evaluated;
  if (a.evaluate == "sim" && r.feasible)
    evaluated = evaluate_by_simulation(ctx, w, model, strategy, opt, r, a.evaluate_top);

  if (!a.emit_costs.empty())
    costmodel::write_file_atomic(
        a.emit_costs, search::to_costs_json(r.outcome.instance, r.outcome.solution).dump(1) + "\n");
  if (!a.out.empty() && r.feasible)
    costmodel::write_file_atomic(a.out, to_json(search::make_plan(ctx, w, r)).dump(1) + "\n");

  if (a.json) {
    nlohmann::json j = search::result_json(ctx, w, r);
    j["model"] = ctx.model.name;
    j["cluster"] = ctx.cluster.name;
    j["world_size"] = ctx.cluster.world_size();
    if (base) {
      nlohmann::json bj = search::result_json(ctx, w, *base);
      bj.erase("plan");
      bj.erase("candidates");
      j["baseline"] = bj;
      if (r.feasible && base->feasible) j["speedup_over_baseline"] = r.throughput / base->throughput;
    }
    j["evaluate"] = a.evaluate;
    if (a.evaluate == "sim") add_evaluation_json(j, evaluated);
    if (hybrid) {
      nlohmann::json hj = hybrid_result_json(*hybrid);
      if (hybrid->feasible) {
        hj["throughput_samples_per_s"] = hybrid->evaluation.throughput;
        if (r.feasible) hj["speedup_over_plan"] = hybrid->evaluation.throughput / r.throughput;
      }
      j["hybrid"] = hj;
    }
    std::cout << j.dump(2) << "\n";
  } else {
    const int n = ctx.cluster.world_size();
    std::cout << fmt::format("osdp plan: {} on {} ({} x {}), memory limit {}, strategy {}\n", ctx.model.name,
                             ctx.cluster.name, n, ctx.cluster.device_name,
                             format_bytes(opt.memory_limit_bytes), r.strategy);
    if (r.feasible) {
      std::cout << fmt::format("  batch size     {} per device ({} samples per step)\n", r.batch,
                               static_cast<std::int64_t>(r.batch) * n)
                << fmt::format("  throughput     {:.2f} samples/s\n", r.throughput)
                << fmt::format("  step time      {}\n", format_seconds(r.time_s))
                << fmt::format("  peak memory    {} of {} ({} reserve included)\n",
                               format_bytes(r.peak_bytes), format_bytes(opt.memory_limit_bytes),
                               format_bytes(opt.reserve_bytes));
      bool first = true;
      for (const auto& line : search::summarize_choices(w, r.choices)) {
        std::cout << (first ? "  choices        " : "                 ") << line << "\n";
        first = false;
      }
    } else {
      std::cout << fmt::format(
          "  no plan fits: the smallest peak is {} ({:.0f} bytes); --memory {}MiB would fit\n",
          format_bytes(r.min_fit_bytes), r.min_fit_bytes, min_fit_mib(r.min_fit_bytes));
    }
    int visited = 0;
    for (const auto& c : r.candidates) visited += c.skipped ? 0 : 1;
    std::cout << fmt::format("  search         {} over {} batch sizes ({} bounded out){}\n",
                             format_seconds(r.search_seconds), r.candidates.size(),
                             r.candidates.size() - static_cast<std::size_t>(visited),
                             r.complete ? ""
                                        : ", stopped early by its budget (dfs: nodes; exact: DP states, "
                                          "512 MiB): the plan is the best found, not proved optimal");
    if (base) {
      if (base->feasible)
        std::cout << fmt::format(
            "  {:<14} batch {}, {:.2f} samples/s, step {}, peak {}{}\n", base->strategy, base->batch,
            base->throughput, format_seconds(base->time_s), format_bytes(base->peak_bytes),
            r.feasible ? fmt::format(" -> {} is {:.3f}x", r.strategy, r.throughput / base->throughput)
                       : std::string());
      else
        std::cout << fmt::format("  {:<14} does not fit (needs {})\n", base->strategy,
                                 format_bytes(base->min_fit_bytes));
    }
    if (hybrid && hybrid->feasible) {
      const auto& p = hybrid->plan;
      const auto& ev = hybrid->evaluation;
      std::cout << fmt::format("  hybrid         {:.2f} samples/s{}; search {}\n", ev.throughput,
                               r.feasible
                                   ? fmt::format(", {:.3f}x the plan above", ev.throughput / r.throughput)
                                   : std::string(),
                               format_seconds(hybrid->search_seconds))
                << fmt::format(
                       "                 global batch {} = {} micro-batches x {} per device x {} devices "
                       "per stage; {} stage{}, {}\n",
                       ev.global_batch, p.micro_batches, p.b0, n / p.pp, p.pp, p.pp > 1 ? "s" : "",
                       costmodel::to_string(p.schedule));
      const auto lines = stage_degrees(*hybrid);
      for (std::size_t s = 0; s < lines.size(); ++s)
        std::cout << fmt::format("                 stage {} {}\n", s, lines[s]);
      std::cout
          << "                 (osdp plan --hybrid: its choices, the simulator, the hybrid baselines)\n";
    } else if (hybrid) {
      std::cout << "  hybrid         no hybrid plan fits either\n";
    }
    if (a.evaluate == "sim" && r.feasible) print_evaluation(evaluated, r.batch);
    if (!a.out.empty() && r.feasible) std::cout << "  plan written to " << a.out << "\n";
  }
  if (!r.feasible) {
    if (a.json)
      std::cerr << fmt::format(
          "osdp plan: no plan fits; the smallest memory that would fit is {:.0f} bytes "
          "(--memory {}MiB)\n",
          r.min_fit_bytes, min_fit_mib(r.min_fit_bytes));
    return kExitNoFit;
  }
  return kExitOk;
}

}  // namespace

Action add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  app.description(
      "Find the plan with the highest throughput: per operator DP, ZDP or REPLICATE, k of n slices ZDP,\n"
      "activation checkpointing, and the micro-batch size, under the device memory limit.\n"
      "Exit codes: 0 a plan; 2 bad input or usage; 3 no plan fits (the message gives the memory that "
      "would).");
  app.add_option("--model", a->req.model, "Built-in model name (see `osdp models`) or a model JSON file")
      ->required();
  app.add_option("--cluster", a->req.cluster,
                 "Built-in cluster name (see `osdp clusters`) or a cluster JSON file")
      ->required();
  app.add_option("--memory", a->req.memory,
                 "Device memory limit, e.g. 8GiB or 16GB (default: the device's memory)");
  app.add_option("--strategy", a->req.strategy,
                 "exact | fsdp | zero2 | ddp | hsdp | fsdp-2level | osdp-ref | dfs; with --hybrid: exact | "
                 "galvatron | megatron-3d | dp-only")
      ->capture_default_str();
  app.add_option("--batch", a->req.batch, "Micro-batch size per device, or auto for the batch-size scheduler")
      ->capture_default_str();
  app.add_flag(
      "--groups", a->req.groups,
      "Also search, per operator, sharding within the node (HSDP) and two-level collectives for world "
      "shards (a cluster of several nodes of several devices; `osdp simulate` runs such plans, `osdp "
      "validate` does not yet)");
  app.add_option("--split-max", a->req.split_max,
                 "Largest number of slices per operator (1, 2, 4, ...; 1: no splitting)")
      ->check(PowerOfTwo(64))
      ->capture_default_str();
  app.add_option("--checkpoint", a->req.checkpoint,
                 "Activation checkpointing: auto (searched per operator), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--tier", a->req.tier, "Cost model: extended (default) or paper (the seed formulas)")
      ->check(CLI::IsMember({"paper", "extended"}))
      ->capture_default_str();
  app.add_option("--calibration", a->req.calibration, "Calibration name or file (overrides the cluster's)");
  app.add_flag("--checkpoint-regather", a->req.regather,
               "A checkpointed ZDP operator gathers its weights again for the recompute");
  app.add_option("--baseline", a->baseline, "Strategy shown beside the result (none to skip)")
      ->capture_default_str();
  app.add_option("--dfs-budget", a->req.dfs_budget, "Node budget of the dfs strategy per batch size")
      ->capture_default_str();
  app.add_option("--out", a->out, "Write the plan file here");
  app.add_option("--emit-costs", a->emit_costs,
                 "Write the knapsack instance the search solved (for an audit)");
  app.add_option("--prefetch", a->req.prefetch,
                 "Prefetch depth: all-gathers issued this many operators ahead (0: no overlap)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--evaluate", a->evaluate,
                 "analytic: the cost model only; sim: also simulate the best plan of the top batch sizes "
                 "(with --hybrid: the plan found, on the pipeline simulator)")
      ->check(CLI::IsMember({"analytic", "sim"}))
      ->capture_default_str();
  app.add_option(
         "--evaluate-top", a->evaluate_top,
         "With --evaluate sim: how many batch sizes (best analytic throughput first; 0: all that fit)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_flag("--json", a->json, "Print one JSON object instead of the summary");
  app.add_flag(
      "--no-hybrid", a->no_hybrid,
      "Without --hybrid the exact hybrid plan (stages, micro-batches, TP degrees) is shown below the "
      "data-parallel one on clusters of several devices: skip it");
  auto* hy = app.add_option_group("Hybrid parallelism (--hybrid)");
  hy->add_flag("--hybrid", a->hybrid,
               "Search the hybrid space: pipeline stages and micro-batches, a tensor-parallel degree per "
               "layer, the per-operator choices within each data-parallel group (strategies: exact, "
               "galvatron, megatron-3d, dp-only; the others are shown beside it)");
  hy->add_option("--pp", a->pp, "Pipeline degrees to try (default: every power of two dividing the devices)")
      ->check(PowerOfTwo(1 << 20));
  hy->add_option("--tp", a->tp, "Tensor-parallel degrees allowed (default: powers of two up to a node)")
      ->check(PowerOfTwo(1 << 20));
  hy->add_option("--schedule", a->schedule, "Pipeline schedule: 1f1b, gpipe or both")
      ->check(CLI::IsMember({"1f1b", "gpipe", "both"}))
      ->capture_default_str();
  hy->add_option("--max-micro-batches", a->max_micro_batches, "Micro-batches per step searched: 1 to this")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  hy->add_option("--micro-batches", a->micro_batches, "A fixed number of micro-batches")
      ->check(CLI::Range(1, 1024));
  hy->add_option("--global-batch", a->global_batch,
                 "A fixed global batch (samples per step over all devices)")
      ->check(CLI::Range(1, 1 << 24));
  hy->add_option("--max-micro-batch-size", a->max_b0, "Largest samples per device per micro-batch searched")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  hy->add_flag("--sequence-parallel", a->sequence_parallel,
               "Tensor-parallel units also split layer norms, residuals and dropout along the sequence");
  hy->add_option("--trace", a->trace,
                 "With --evaluate sim: write the simulated step as a Chrome trace (a process per stage, "
                 "a thread per lane, a memory counter per stage)");
  hy->add_option("--galvatron-overlap", a->galvatron_overlap,
                 "galvatron only: choose with its overlap coefficient (e.g. 1.3; 0: osdp's times)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  return [a]() { return run_plan(*a); };
}

}  // namespace osdp::cli
