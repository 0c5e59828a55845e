// `osdp plan --hybrid` (search/hybrid.hpp): the hybrid search of one model on one cluster, its plan
// per stage, the pipeline simulator's step (--evaluate sim) and trace, and the other hybrid
// strategies beside it.
#include <algorithm>
#include <iostream>
#include <optional>

#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/plan_args.hpp"
#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/hybrid.hpp"
#include "costmodel/units.hpp"
#include "osdp_version.hpp"
#include "search/hybrid.hpp"
#include "search/request.hpp"
#include "sim/pipeline.hpp"

namespace osdp::cli {
namespace {

using costmodel::format_bytes;
using costmodel::format_seconds;

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

}  // namespace

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

}  // namespace osdp::cli
