// `osdp plan`: the best plan of one model on one cluster (search/request.hpp, the one way into a
// search): over the whole space the cluster allows unless options narrow it, a baseline beside it,
// and optionally the plan replayed by the simulator.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/units.hpp"
#include "experiments/evaluator.hpp"
#include "search/report.hpp"
#include "search/request.hpp"
#include "sim/replay.hpp"
#include "sim/report.hpp"

namespace osdp::cli {
namespace {

using costmodel::format_bytes;
using costmodel::format_seconds;

struct PlanArgs {
  search::PlanRequest req;  // the search: names, files and option strings (search/request.hpp)
  std::string out, emit_costs, trace;
  experiments::EvaluatorKind evaluate = experiments::EvaluatorKind::kAnalytic;  // analytic or sim
  int evaluate_top = 5;
  bool json = false, data_parallel = false, groups = false, no_groups = false, hybrid = false;
};

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

nlohmann::json evaluation_json(const std::vector<EvaluatedBatch>& ev) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& e : ev)
    arr.push_back({{"batch_size", e.batch},
                   {"analytic_time_s", e.analytic_time_s},
                   {"simulated_time_s", e.simulated_time_s},
                   {"analytic_peak_bytes", e.analytic_peak_bytes},
                   {"simulated_peak_bytes", e.simulated_peak_bytes},
                   {"analytic_throughput", e.analytic_throughput},
                   {"simulated_throughput", e.simulated_throughput}});
  return arr;
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

// What the search did, in a line.
std::string search_line(const search::PlanOutcome& o) {
  std::string what;
  if (o.batches) {
    int visited = 0;
    for (const auto& c : o.batches->candidates) visited += c.skipped ? 0 : 1;
    what = fmt::format("over {} batch sizes ({} bounded out)", o.batches->candidates.size(),
                       o.batches->candidates.size() - static_cast<std::size_t>(visited));
  } else if (o.layouts) {
    what = fmt::format("{} layouts bounded, {} solved", o.layouts->layouts, o.layouts->solved);
  }
  return fmt::format("{}: {}{}", format_seconds(o.search_seconds), what,
                     o.complete ? ""
                                : ", stopped by its budget (time, or memory for its states): the plan is the "
                                  "best found, not proved optimal");
}

// " (90%: 11.80-12.90)" for a known interval, else nothing.
std::string interval_text(const costmodel::Interval& i, int decimals = 2) {
  if (!i.known()) return {};
  return fmt::format(" ({:.0f}%: {:.{}f}-{:.{}f})", 100 * costmodel::kIntervalLevel, i.low, decimals, i.high,
                     decimals);
}

std::string time_interval_text(const costmodel::Interval& i) {
  if (!i.known()) return {};
  return fmt::format(" ({:.0f}%: {} to {})", 100 * costmodel::kIntervalLevel, format_seconds(i.low),
                     format_seconds(i.high));
}

// Why a plan has no interval, or empty when it has one.
std::string no_interval_reason(const search::PreparedSearch& p, const search::PlanOutcome& o) {
  if (!o.drawn_time_s.empty()) return {};
  if (p.draws == 0) return "none (--draws 0)";
  if (!p.ctx.calibration)
    return "none: no calibration (the cluster's figures record no error); `osdp calibrate` measures one";
  return "none: the calibration records no fit residuals";
}

// " -> exact is 1.013x (90%: 0.998-1.027)" after a simpler plan `b`, and where the gain is within the
// interval a line naming b as as good as far as osdp can tell.
std::string versus(const search::PlanOutcome& o, const search::PlanOutcome& b) {
  if (!o.feasible) return {};
  const costmodel::Interval speedup = search::speedup_interval(o, b);
  std::string text =
      fmt::format(" -> {} is {:.3f}x{}", o.strategy, o.evaluation.throughput / b.evaluation.throughput,
                  interval_text(speedup, 3));
  if (search::within_error(speedup) && o.evaluation.throughput > b.evaluation.throughput)
    text += fmt::format(
        "\n                 the gain is within the calibration's error: {} does as well as far as osdp can "
        "tell",
        b.description.empty() ? b.strategy : b.description);
  return text;
}

void print_outcome(const search::PreparedSearch& p, const search::PlanOutcome& o) {
  const costmodel::Plan& plan = o.plan;
  const costmodel::Evaluation& ev = o.evaluation;
  const int n = p.ctx.cluster.world_size();
  std::cout << fmt::format("  layout         {}\n", plan.layout_summary())
            << fmt::format("  batch size     {} per device{} (global batch {})\n", plan.batch_size,
                           plan.micro_batches > 1 || plan.pp > 1 ? " per micro-batch" : "", ev.global_batch)
            << fmt::format("  throughput     {:.2f} samples/s{}\n", ev.throughput,
                           interval_text(search::throughput_interval(o)))
            << (o.robust_throughput > 0
                    ? fmt::format(
                          "  robust         {:.2f} samples/s with every fitted price at its 95th percentile "
                          "(--objective robust maximized this)\n",
                          o.robust_throughput)
                    : std::string())
            << fmt::format("  step time      {}{}{}\n", format_seconds(ev.time_s),
                           time_interval_text(search::time_interval(o)),
                           plan.pp > 1 ? fmt::format(" (bubble {:.1f}%)", 100 * ev.bubble_fraction) : "")
            << fmt::format("  peak memory    {} of {} ({} reserve included)\n", format_bytes(ev.peak_bytes),
                           format_bytes(o.memory_limit_bytes), format_bytes(p.ctx.cluster.reserve_bytes));
  if (!plan.data_parallel()) {
    const auto lines = search::stage_degrees(*o.workload, plan);
    for (std::size_t s = 0; s < lines.size(); ++s)
      std::cout << fmt::format("  stage {:<8} {} ranks: {}\n", s, n / plan.pp, lines[s]);
  }
  bool first = true;
  for (const auto& line : search::summarize_choices(*o.workload, plan.choices)) {
    std::cout << (first ? "  choices        " : "                 ") << line << "\n";
    first = false;
  }
}

int run_plan(const PlanArgs& args) {
  PlanArgs a = args;
  if (a.hybrid) {
    const search::StrategyRegistry registry = search::default_strategies();
    if (registry.get(a.req.strategy).info().data_parallel) {
      std::vector<std::string> layout;
      for (const search::Strategy* s : registry.all())
        if (!s->info().data_parallel) layout.push_back(s->name());
      throw UsageError(
          fmt::format("--hybrid: strategy {} searches data parallelism only; the strategies of the "
                      "whole space: {}",
                      a.req.strategy, fmt::join(layout, ", ")));
    }
    std::cerr << "osdp plan: warning: --hybrid is the default now (stages, micro-batches and TP degrees are "
                 "searched wherever the cluster allows them); the flag does nothing\n";
  }
  if (a.data_parallel) {  // narrows the layout space to data parallelism
    a.req.pp = {1};
    a.req.tp = {1};
    a.req.ep = {1};
    a.req.cp = {1};
    a.req.micro_batches = 1;
  }
  if (a.groups && a.no_groups) throw UsageError("--groups and --no-groups: choose one");
  if (a.groups) a.req.groups = "on";
  if (a.no_groups) a.req.groups = "off";
  if (!a.trace.empty() && a.evaluate != experiments::EvaluatorKind::kSim)
    throw UsageError("--trace needs --evaluate sim");
  if (isatty(2)) a.req.progress = [](const std::string& line) { std::cerr << "osdp plan: " << line << "\n"; };
  const search::PlanReport report = search::run_request(a.req);
  const search::PreparedSearch& p = *report.prepared;
  const search::PlanOutcome& o = report.outcome;
  if (!a.emit_costs.empty()) {
    if (!o.batches)
      throw UsageError(
          fmt::format("--emit-costs: strategy {} searched layouts, not one knapsack per batch size: "
                      "narrow the space to data parallelism (--data-parallel) or pick a "
                      "data-parallel strategy",
                      o.strategy));
    costmodel::write_file_atomic(
        a.emit_costs,
        search::to_costs_json(o.batches->outcome.instance, o.batches->outcome.solution).dump(1) + "\n");
  }
  if (!a.out.empty() && o.feasible)
    costmodel::write_file_atomic(a.out, costmodel::to_json(o.plan, &o.evaluation).dump(1) + "\n");

  // --evaluate sim: the plan replayed by the simulator (a data-parallel plan's symmetric ranks: exact
  // on the homogeneous clusters it runs on; every rank of the others), and for the batch-size
  // scheduler the best plans of the top batch sizes too.
  std::optional<sim::Replay> simulated;
  std::vector<EvaluatedBatch> evaluated;
  if (a.evaluate == experiments::EvaluatorKind::kSim && o.feasible) {
    sim::SimOptions so;
    so.symmetric = o.plan.data_parallel() && a.trace.empty();
    so.memory_rank = sim::SimOptions::kNoRanks;
    if (!a.trace.empty()) so = sim::trace_options(so);
    simulated = sim::replay_plan(o.plan, *o.workload, so);
    if (!a.trace.empty())
      costmodel::write_file_atomic(a.trace,
                                   sim::chrome_trace(simulated->schedule, simulated->result).dump() + "\n");
    if (o.batches) evaluated = evaluate_by_simulation(p, o, a.evaluate_top);
  }

  if (a.json) {
    nlohmann::json j = search::report_json(report);
    j["evaluate"] = experiments::to_string(a.evaluate);
    if (simulated) {
      const double t = sim::to_seconds(simulated->result.iteration);
      j["simulated"] = {{"iteration_time_s", t},
                        {"peak_memory_bytes", simulated->result.peak_rank().peak_bytes},
                        {"throughput_samples_per_s", t > 0 ? o.evaluation.global_batch / t : 0.0},
                        {"summary", sim::summary_json(simulated->schedule, simulated->result)}};
    }
    if (a.evaluate == experiments::EvaluatorKind::kSim && o.batches) {
      j["evaluated"] = evaluation_json(evaluated);
      const int win = simulated_winner(evaluated);
      j["simulated_best_batch_size"] = win > 0 ? nlohmann::json(win) : nlohmann::json(nullptr);
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format("osdp plan: {} on {} ({} x {}), memory limit {}, strategy {}\n",
                             p.ctx.model.name, p.ctx.cluster.name, p.ctx.cluster.world_size(),
                             p.ctx.cluster.device_name, format_bytes(o.memory_limit_bytes), o.strategy);
    const costmodel::PrecisionBytes pb = costmodel::precision_bytes(p.ctx.model.precision);
    std::cout << fmt::format(
        "  model          seq {}, {} (params {} gathered, gradients reduced in {}, {} B/param at rest)\n",
        p.ctx.model.seq, costmodel::to_string(p.ctx.model.precision),
        costmodel::param_dtype(p.ctx.model.precision), costmodel::reduce_dtype(p.ctx.model.precision),
        pb.at_rest());
    if (o.feasible) {
      print_outcome(p, o);
    } else if (o.min_fit_bytes > 0) {
      std::cout << fmt::format(
          "  no plan fits: the smallest peak is {} ({:.0f} bytes); --memory {}MiB would fit\n",
          format_bytes(o.min_fit_bytes), o.min_fit_bytes, min_fit_mib(o.min_fit_bytes));
    } else if (o.layouts && !o.layouts->skipped.empty()) {
      std::cout << "  no plan fits: no pipeline degree could be searched (below: why)\n";
    } else {
      std::cout << "  no plan fits at any memory the search tried within its time budget\n";
    }
    if (o.layouts)
      for (const auto& line : o.layouts->skipped) std::cout << "  skipped        " << line << "\n";
    std::cout << "  search         " << search_line(o) << "\n";
    if (o.feasible && !no_interval_reason(p, o).empty())
      std::cout << "  intervals      " << no_interval_reason(p, o) << "\n";
    std::vector<const search::PlanOutcome*> simpler;
    for (const search::PlanOutcome& b : report.baselines) simpler.push_back(&b);
    if (report.unsplit) simpler.push_back(&*report.unsplit);
    if (report.uniform) simpler.push_back(&*report.uniform);
    for (const search::PlanOutcome* b : simpler) {
      if (b->feasible)
        std::cout << fmt::format("  {:<14} batch {}, {:.2f} samples/s, step {}, peak {}{}\n", b->strategy,
                                 b->plan.batch_size, b->evaluation.throughput,
                                 format_seconds(b->evaluation.time_s), format_bytes(b->evaluation.peak_bytes),
                                 versus(o, *b));
      else
        std::cout << fmt::format("  {:<14} does not fit (needs {})\n", b->strategy,
                                 format_bytes(b->min_fit_bytes));
    }
    if (simulated) {
      const double t = sim::to_seconds(simulated->result.iteration);
      std::cout << fmt::format(
          "  simulated      step {} ({:+.1f}% from the analytic step), {:.2f} samples/s, peak {}{}\n",
          format_seconds(t), 100 * (t / o.evaluation.time_s - 1), t > 0 ? o.evaluation.global_batch / t : 0.0,
          format_bytes(simulated->result.peak_rank().peak_bytes),
          a.trace.empty() ? "" : fmt::format("; trace in {}", a.trace));
    }
    if (a.evaluate == experiments::EvaluatorKind::kSim && o.batches && o.feasible)
      print_evaluation(evaluated, o.plan.batch_size);
    if (!a.out.empty() && o.feasible) std::cout << "  plan written to " << a.out << "\n";
  }
  if (!o.feasible) {
    if (a.json && o.min_fit_bytes > 0)
      std::cerr << fmt::format(
          "osdp plan: no plan fits; the smallest memory that would fit is {:.0f} bytes (--memory {}MiB)\n",
          o.min_fit_bytes, min_fit_mib(o.min_fit_bytes));
    return kExitNoFit;
  }
  return kExitOk;
}

std::string strategy_list() {
  std::string out;
  const search::StrategyRegistry registry = search::default_strategies();
  for (const search::Strategy* s : registry.all())
    out += fmt::format("\n  {:<12} {}", s->name(), s->info().summary);
  return out;
}

}  // namespace

Action add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  app.description(
      "Find the plan with the highest throughput over the whole space the cluster allows: pipeline stages\n"
      "and micro-batches, a tensor-parallel degree per unit, per operator DP, ZDP or REPLICATE, k of n\n"
      "slices ZDP, activation checkpointing, on clusters of several nodes node groups and two-level\n"
      "collectives, and the micro-batch size, under the device memory limit. Options narrow the space.\n"
      "Exit codes: 0 a plan; 2 bad input or usage; 3 no plan fits (the message gives the memory that "
      "would).");
  app.add_option("--model", a->req.model,
                 "Built-in model name (see `osdp models`), a model JSON file, or a Hugging Face config.json "
                 "(model_type gpt2, llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, deepseek_v3)")
      ->required();
  app.add_option("--seq", a->req.seq,
                 "Sequence length in tokens (default: the model file's; 8192 for a Hugging Face config, at "
                 "most its max_position_embeddings)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--cluster", a->req.cluster,
                 "Built-in cluster name (see `osdp clusters`) or a cluster JSON file")
      ->required();
  app.add_option("--memory", a->req.memory,
                 "Device memory limit, e.g. 8GiB or 16GB (default: the device's memory)");
  app.add_option("--strategy", a->req.strategy, "The search:" + strategy_list())->capture_default_str();
  app.add_option(
         "--baseline", a->req.baselines,
         "Strategies shown beside the result, e.g. --baseline fsdp galvatron megatron-3d (none to skip)")
      ->expected(1, -1)
      ->default_str("fsdp");
  a->req.baselines = {"fsdp"};
  app.add_option("--batch", a->req.batch,
                 "Samples per device per step of a data-parallel plan, or auto to search it; beyond data "
                 "parallelism, a global batch of this x the devices")
      ->capture_default_str();
  app.add_option("--global-batch", a->req.global_batch,
                 "A fixed global batch (samples per step over all devices)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--split-max", a->req.split_max,
                 "Largest number of slices per operator (1, 2, 4, ...; 1: no splitting)")
      ->check(PowerOfTwo(64))
      ->capture_default_str();
  app.add_option("--checkpoint", a->req.checkpoint,
                 "Activation checkpointing: auto (none, full or selective, searched per operator), on "
                 "(full: only each layer operator's input kept), off, or selective (torchtitan's "
                 "\"selective op\": GEMM and attention outputs kept, norms, rotary and activations "
                 "recomputed, where an operator has that form)")
      ->check(CLI::IsMember({"auto", "on", "off", "selective"}))
      ->capture_default_str();
  app.add_option("--tier", a->req.tier, "Cost model: extended (default) or paper (the seed formulas)")
      ->check(CLI::IsMember({"paper", "extended"}))
      ->capture_default_str();
  app.add_option("--calibration", a->req.calibration, "Calibration name or file (overrides the cluster's)");
  app.add_flag("--checkpoint-regather", a->req.regather,
               "A checkpointed ZDP operator gathers its weights again for the recompute");
  app.add_option("--prefetch", a->req.prefetch,
                 "Prefetch depth: all-gathers issued this many operators ahead (0: no overlap)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  auto* space = app.add_option_group("The space (narrowing it)");
  space->add_flag("--data-parallel,--no-hybrid", a->data_parallel,
                  "Data parallelism only: one stage, one micro-batch, TP 1, no EP (as --pp 1 --tp 1 --ep 1 "
                  "--micro-batches 1)");
  space
      ->add_option("--pp", a->req.pp,
                   "Pipeline degrees allowed (default: every power of two dividing the devices)")
      ->check(PowerOfTwo(1 << 20));
  space
      ->add_option("--tp", a->req.tp, "Tensor-parallel degrees allowed (default: powers of two up to a node)")
      ->check(PowerOfTwo(1 << 20));
  space
      ->add_option("--ep", a->req.ep,
                   "Expert-parallel degrees offered MoE layers (default: every power of two dividing the "
                   "experts and the layer's data-parallel group; --ep 1: none)")
      ->check(PowerOfTwo(1 << 20));
  space
      ->add_option("--expert-imbalance", a->req.expert_imbalance,
                   "Tokens the busiest expert-parallel rank receives over its balanced share (a capacity "
                   "factor; 1: balanced)")
      ->check(CLI::Range(1.0, 64.0))
      ->capture_default_str();
  space
      ->add_option("--cp", a->req.cp,
                   "Context-parallel degrees (each sample's sequence over that many ranks; default: every "
                   "power of two up to --max-cp dividing a stage; --cp 1: none)")
      ->check(PowerOfTwo(1 << 20));
  space->add_option("--max-cp", a->req.max_cp, "The largest context-parallel degree searched")
      ->check(PowerOfTwo(1 << 20))
      ->capture_default_str();
  space
      ->add_option("--cp-variant", a->req.cp_variant,
                   "Context parallelism's attention: ring (K/V passed around the ring), all-to-all "
                   "(Ulysses: re-sharded by heads) or both")
      ->check(CLI::IsMember({"ring", "all-to-all", "both"}))
      ->capture_default_str();
  space->add_option("--micro-batches", a->req.micro_batches, "A fixed number of micro-batches per step")
      ->check(CLI::Range(1, 1024));
  space
      ->add_option("--max-micro-batches", a->req.max_micro_batches,
                   "Micro-batches per step searched: 1 to this")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  space
      ->add_option("--max-micro-batch-size", a->req.max_b0,
                   "Largest samples per device per micro-batch searched")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  space->add_option("--schedule", a->req.schedule, "Pipeline schedule: 1f1b, gpipe or both")
      ->check(CLI::IsMember({"1f1b", "gpipe", "both"}))
      ->capture_default_str();
  space->add_flag("--sequence-parallel", a->req.sequence_parallel,
                  "Tensor-parallel units also split layer norms, residuals and dropout along the sequence");
  space->add_flag(
      "--no-groups", a->no_groups,
      "Flat rings over all ranks only: no node groups (HSDP) or two-level collectives (searched by "
      "default on clusters of several nodes of several devices)");
  space->add_flag("--groups", a->groups,
                  "Require node groups and two-level collectives in the space (an error on a cluster without "
                  "two levels; they are searched by default where the cluster has them)");
  app.add_flag("--hybrid", a->hybrid, "Accepted for old scripts: the hybrid space is the default")->group("");
  app.add_option("--galvatron-overlap", a->req.galvatron_overlap,
                 "galvatron only: choose with its overlap coefficient (e.g. 1.3; 0: osdp's times)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  app.add_option("--dfs-budget", a->req.dfs_budget, "Node budget of the dfs strategy per batch size")
      ->capture_default_str();
  app.add_option("--time-budget", a->req.time_budget_s,
                 "Seconds the search may take: it then stops with the best plan found, not proved optimal")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--objective", a->req.objective,
                 "throughput: the highest predicted throughput; robust: the highest throughput with every "
                 "price the calibration fitted at its 95th percentile (needs a calibration; the plan is then "
                 "shown at its predicted figures, beside the robust throughput)")
      ->check(CLI::IsMember({"throughput", "robust"}))
      ->capture_default_str();
  app.add_option(
         "--draws", a->req.draws,
         "Draws of the calibration's uncertainty each plan is priced under for its 90% intervals (step "
         "time, throughput, speedups; 0: none). Needs a calibration: a cluster's datasheet figures "
         "record no error")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_option("--out", a->out, "Write the plan file here");
  app.add_option("--emit-costs", a->emit_costs,
                 "Write the knapsack instance the search solved (data-parallel searches; for an audit)");
  app.add_option_function<std::string>(
         "--evaluate", [a](const std::string& v) { a->evaluate = *experiments::evaluator_named(v); },
         "analytic: the cost model only; sim: also simulate the plan (and, for a data-parallel search, "
         "the best plans of the top batch sizes)")
      ->check(CLI::IsMember({"analytic", "sim"}))
      ->default_str("analytic");
  app.add_option(
         "--evaluate-top", a->evaluate_top,
         "With --evaluate sim: how many batch sizes (best analytic throughput first; 0: all that fit)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option(
      "--trace", a->trace,
      "With --evaluate sim: write the simulated step as a Chrome trace (a process per rank, a thread "
      "per stream, a memory counter per rank)");
  app.add_flag("--json", a->json, "Print one JSON object instead of the summary");
  return [a]() { return run_plan(*a); };
}

}  // namespace osdp::cli
