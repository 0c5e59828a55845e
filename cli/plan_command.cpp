#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.hpp"
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
#include "sim/pipeline.hpp"

namespace osdp::cli {
namespace {

using costmodel::format_bytes;
using costmodel::format_seconds;

struct PlanArgs {
  search::PlanRequest req;  // the search: names, files and option strings (search/request.hpp)
  std::string out, emit_costs, baseline = "fsdp", evaluate = "analytic";
  int evaluate_top = 5;
  bool json = false;
  // --hybrid (search/hybrid.hpp)
  bool hybrid = false, sequence_parallel = false, no_hybrid = false;
  std::vector<int> pp, tp;
  std::string schedule = "1f1b", trace;
  int max_micro_batches = 8, micro_batches = 0, global_batch = 0, max_b0 = 4096;
  double galvatron_overlap = 0;
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

// Runs of equal values over consecutive names: "layer0..layer15 tp2".
std::vector<std::string> runs(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < names.size()) {
    std::size_t j = i;
    while (j + 1 < names.size() && values[j + 1] == values[i]) ++j;
    out.push_back(i == j ? fmt::format("{} {}", names[i], values[i])
                         : fmt::format("{}..{} {}", names[i], names[j], values[i]));
    i = j + 1;
  }
  return out;
}

std::string join_lines(const std::vector<std::string>& parts, std::size_t width, const std::string& indent) {
  std::string out, line;
  for (const auto& p : parts) {
    if (!line.empty() && line.size() + 2 + p.size() > width) {
      out += line + ",\n" + indent;
      line.clear();
    }
    line += (line.empty() ? "" : ", ") + p;
  }
  return out + line;
}

costmodel::HybridCostModel hybrid_cost_model(const search::PreparedSearch& prepared) {
  const search::PlanContext& ctx = prepared.ctx;
  costmodel::HybridCostModel cost(ctx.cluster, ctx.calibration ? &*ctx.calibration : nullptr,
                                  ctx.model.precision, ctx.cost_options, ctx.model.dropout);
  cost.set_capacity(prepared.options.memory_limit_bytes);
  return cost;
}

search::HybridSearchOptions hybrid_options(const PlanArgs& a, const search::PreparedSearch& prepared) {
  search::HybridSearchOptions so;
  so.space = prepared.options.space;
  so.pp = a.pp;
  so.tp = a.tp;
  so.max_micro_batches = a.max_micro_batches;
  if (a.micro_batches > 0) so.micro_batches = a.micro_batches;
  if (a.global_batch > 0) so.global_batch = a.global_batch;
  so.max_b0 = a.max_b0;
  so.sequence_parallel = a.sequence_parallel;
  so.galvatron_overlap = a.galvatron_overlap;
  if (a.schedule == "both")
    so.schedules = {costmodel::PipelineSchedule::k1F1B, costmodel::PipelineSchedule::kGpipe};
  else
    so.schedules = {*costmodel::schedule_from_string(a.schedule)};
  if (isatty(2))
    so.progress = [last = 0.0](int pp, double thr, std::int64_t layouts, double seconds) mutable {
      if (seconds - last < 1.0) return;  // a line a second at most
      last = seconds;
      std::cerr << fmt::format(
          "osdp plan: hybrid search, {} layouts solved in {:.1f} s (the last at pipeline "
          "degree {}); best {}\n",
          layouts, seconds, pp, thr > 0 ? fmt::format("{:.2f} samples/s", thr) : "none fits yet");
    };
  return so;
}

nlohmann::json hybrid_result_json(const search::HybridResult& x) {
  nlohmann::json j{{"strategy", x.strategy}, {"feasible", x.feasible},
                   {"layouts", x.layouts},   {"layouts_solved", x.solved},
                   {"labels", x.labels},     {"search_seconds", x.search_seconds},
                   {"skipped", x.skipped}};
  if (x.feasible) j["plan"] = costmodel::to_json(x.workload, x.plan, x.evaluation);
  return j;
}

// One line per stage of a hybrid plan: its units' TP degrees, as runs.
std::vector<std::string> stage_degrees(const search::HybridResult& r) {
  std::vector<std::string> lines;
  for (const auto& st : r.evaluation.stages) {
    std::vector<std::string> un, tv;
    for (int u = st.first_unit; u < st.end_unit; ++u) {
      un.push_back(r.workload.units[static_cast<std::size_t>(u)].name);
      tv.push_back(fmt::format("tp{}", r.plan.unit_tp[static_cast<std::size_t>(u)]));
    }
    lines.push_back(join_lines(runs(un, tv), 90, std::string(19, ' ')));
  }
  return lines;
}

int run_plan_hybrid(const PlanArgs& a) {
  search::PlanRequest req = a.req;
  const std::string strategy = req.strategy;
  const auto& names = search::hybrid_strategy_names();
  if (std::find(names.begin(), names.end(), strategy) == names.end())
    throw UsageError(fmt::format("--strategy with --hybrid: expected one of {}, got \"{}\"",
                                 fmt::join(names, ", "), strategy));
  // What the hybrid search does not take (yet), refused rather than ignored.
  if (a.req.batch != "auto")
    throw UsageError("--batch does not apply with --hybrid: use --max-micro-batch-size or --global-batch");
  if (!a.trace.empty() && a.evaluate != "sim") throw UsageError("--trace needs --evaluate sim");
  if (!a.emit_costs.empty()) throw UsageError("--emit-costs does not apply with --hybrid");
  req.strategy = "exact";
  const auto prepared = search::prepare_search(req, fmt::format("{}+{}", OSDP_VERSION, OSDP_GIT_HASH));
  const search::PlanContext& ctx = prepared->ctx;
  const costmodel::HybridCostModel cost = hybrid_cost_model(*prepared);
  const search::HybridSearchOptions so = hybrid_options(a, *prepared);
  const auto r = search::search_hybrid(ctx.model, cost, strategy, so);
  std::vector<search::HybridResult> baselines;
  if (a.baseline != "none")
    for (const auto& n : names)
      if (n != strategy) baselines.push_back(search::search_hybrid(ctx.model, cost, n, so));

  // --evaluate sim: the plan found, replayed by the pipeline simulator (sim/pipeline.hpp).
  std::optional<sim::PipelineSpec> sim_spec;
  std::optional<sim::PipelineResult> simulated;
  if (a.evaluate == "sim" && r.feasible) {
    sim_spec = sim::pipeline_spec(r.workload, r.plan, cost);
    simulated = sim::simulate_pipeline(*sim_spec);
    if (!a.trace.empty())
      costmodel::write_file_atomic(a.trace, sim::pipeline_trace(*sim_spec, *simulated).dump() + "\n");
  }
  const int N = ctx.cluster.world_size();
  if (!a.out.empty() && r.feasible) {
    costmodel::HybridPlanFile f;
    f.tool_version = ctx.tool_version;
    f.strategy = r.strategy;
    f.model = ctx.model;
    f.cluster = ctx.cluster;
    f.calibration = ctx.calibration;
    f.cost_options = ctx.cost_options;
    f.memory_limit_bytes = prepared->options.memory_limit_bytes;
    f.plan = r.plan;
    costmodel::write_file_atomic(
        a.out, costmodel::hybrid_plan_file_json(f, r.workload, r.evaluation).dump(1) + "\n");
  }
  if (a.json) {
    nlohmann::json j = hybrid_result_json(r);
    j["model"] = ctx.model.name;
    j["cluster"] = ctx.cluster.name;
    j["world_size"] = N;
    j["tool_version"] = ctx.tool_version;
    j["memory_limit_bytes"] = prepared->options.memory_limit_bytes;
    nlohmann::json bs = nlohmann::json::array();
    for (const auto& b : baselines) {
      nlohmann::json bj = hybrid_result_json(b);
      if (b.feasible) bj["throughput_samples_per_s"] = b.evaluation.throughput;
      if (b.feasible && r.feasible)
        bj["speedup_of_strategy"] = r.evaluation.throughput / b.evaluation.throughput;
      bs.push_back(bj);
    }
    j["baselines"] = bs;
    j["evaluate"] = a.evaluate;
    if (simulated) {
      j["simulated"] = sim::pipeline_summary(*sim_spec, *simulated);
      j["simulated"]["throughput_samples_per_s"] = r.evaluation.global_batch / simulated->step_s;
      j["simulated"]["relative_to_analytic"] = simulated->step_s / r.evaluation.time_s - 1;
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format("osdp plan --hybrid: {} on {} ({} x {}), memory limit {}, strategy {}\n",
                             ctx.model.name, ctx.cluster.name, N, ctx.cluster.device_name,
                             format_bytes(prepared->options.memory_limit_bytes), r.strategy);
    if (r.feasible) {
      const auto& p = r.plan;
      const auto& ev = r.evaluation;
      std::cout
          << fmt::format(
                 "  global batch   {} = {} micro-batches x {} per device x {} devices per stage (t = 1)\n",
                 ev.global_batch, p.micro_batches, p.b0, N / p.pp)
          << fmt::format("  pipeline       {} stage{}, {}{}\n", p.pp, p.pp > 1 ? "s" : "",
                         costmodel::to_string(p.schedule), p.sequence_parallel ? ", sequence parallel" : "")
          << fmt::format("  throughput     {:.2f} samples/s\n", ev.throughput)
          << fmt::format("  step time      {} (bubble {:.1f}%)\n", format_seconds(ev.time_s),
                         100 * ev.bubble_fraction)
          << fmt::format("  peak memory    {} of {} (the largest stage's)\n", format_bytes(ev.peak_bytes),
                         format_bytes(prepared->options.memory_limit_bytes));
      if (simulated)
        std::cout << fmt::format(
            "  simulated      {} (bubble {:.1f}%, {:+.1f}% from the analytic step), {:.2f} samples/s{}\n",
            format_seconds(simulated->step_s), 100 * simulated->bubble_fraction,
            100 * (simulated->step_s / ev.time_s - 1), ev.global_batch / simulated->step_s,
            a.trace.empty() ? std::string() : fmt::format("; trace in {}", a.trace));
      const std::string indent(17, ' ');
      for (int s = 0; s < p.pp; ++s) {
        const auto& st = ev.stages[static_cast<std::size_t>(s)];
        std::vector<std::string> un, tv, on, ch;
        for (int u = st.first_unit; u < st.end_unit; ++u) {
          un.push_back(r.workload.units[static_cast<std::size_t>(u)].name);
          tv.push_back(fmt::format("tp{}", p.unit_tp[static_cast<std::size_t>(u)]));
          for (int oi : r.workload.units[static_cast<std::size_t>(u)].ops) {
            on.push_back(r.workload.workload.operators[static_cast<std::size_t>(oi)].name);
            ch.push_back(p.choices[static_cast<std::size_t>(oi)].label());
          }
        }
        std::cout << fmt::format("  stage {:<8} {} per micro-batch, peak {}, {} in flight{}\n", s,
                                 format_seconds(st.time_s), format_bytes(st.peak_bytes), st.in_flight,
                                 simulated ? fmt::format(" (simulated: peak {}, {} in flight)",
                                                         format_bytes(simulated->stages[s].peak_bytes),
                                                         simulated->stages[s].max_in_flight)
                                           : std::string())
                  << indent << "degrees  " << join_lines(runs(un, tv), 90, indent + "         ") << "\n"
                  << indent << "choices  " << join_lines(runs(on, ch), 90, indent + "         ") << "\n";
      }
    } else {
      std::cout << (r.layouts == 0 && !r.skipped.empty()
                        ? "  no hybrid plan: no pipeline degree could be searched\n"
                        : "  no hybrid plan fits under this memory limit\n");
    }
    for (const auto& why : r.skipped) std::cout << "  not searched   " << why << "\n";
    std::cout << fmt::format(
        "  search         {}{}\n", format_seconds(r.search_seconds),
        r.strategy == "exact" || r.strategy == "dp-only"
            ? fmt::format(": {} bounds on layouts and ranges of micro-batch sizes, {} layout{} solved",
                          r.layouts, r.solved, r.solved == 1 ? "" : "s")
            : fmt::format(" over {} layouts", r.layouts));
    for (const auto& b : baselines) {
      if (b.feasible)
        std::cout << fmt::format("  {:<14} {:.2f} samples/s (pp {}, m {}, batch {}){}; search {}\n",
                                 b.strategy, b.evaluation.throughput, b.plan.pp, b.plan.micro_batches,
                                 b.evaluation.global_batch,
                                 r.feasible ? fmt::format(" -> {} is {:.3f}x", r.strategy,
                                                          r.evaluation.throughput / b.evaluation.throughput)
                                            : std::string(),
                                 format_seconds(b.search_seconds));
      else
        std::cout << fmt::format("  {:<14} does not fit\n", b.strategy);
    }
    if (!a.out.empty() && r.feasible) std::cout << "  plan written to " << a.out << "\n";
  }
  return r.feasible ? kExitOk : kExitNoFit;
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
