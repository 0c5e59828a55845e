#include "search/request.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "costmodel/bounds.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/hf_config.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/provenance.hpp"
#include "costmodel/uncertainty.hpp"
#include "costmodel/units.hpp"

namespace osdp::search {
namespace {

using costmodel::power_of_two;

int positive_integer(const std::string& text, const char* option) {
  try {
    std::size_t used = 0;
    const int b = std::stoi(text, &used);
    if (used != text.size() || b < 1) throw std::invalid_argument("not positive");
    return b;
  } catch (const std::exception&) {
    throw UsageError(fmt::format("{}: expected a positive integer or \"auto\", got \"{}\"", option, text));
  }
}

void check_degrees(const std::vector<int>& v, const char* option) {
  for (const int d : v)
    if (!power_of_two(d)) throw UsageError(fmt::format("{}: expected powers of two, got {}", option, d));
}

}  // namespace

double parse_memory_option(const std::string& text, const char* option) {
  std::string err;
  auto v = costmodel::parse_quantity(text, costmodel::UnitKind::kBytes, &err);
  if (!v) throw UsageError(fmt::format("{}: {}", option, err));
  const std::string problem =
      costmodel::bound_problem(*v, costmodel::UnitKind::kBytes, costmodel::bounds::kDeviceMemory, text);
  if (!problem.empty()) throw UsageError(fmt::format("{}: {}", option, problem));
  return *v;
}

PlanRequest read_plan_request(const nlohmann::json& j, const std::string& origin) {
  costmodel::JsonReader r(j, origin, "");
  PlanRequest q;
  q.model = r.string("model");
  q.cluster = r.string("cluster");
  q.world_size = static_cast<int>(r.integer_or("world_size", 0, 1 << 20, q.world_size));
  q.calibration = r.string_or("calibration", q.calibration);
  q.memory = r.string_or("memory", q.memory);
  q.strategy = r.string_or("strategy", q.strategy);
  if (const auto* b = r.raw("baseline"); b != nullptr) {  // a name or a list of names
    if (b->is_string()) {
      q.baselines = {b->get<std::string>()};
    } else if (b->is_array()) {
      for (const auto& x : *b) {
        if (!x.is_string()) r.fail("baseline", "expected a strategy name or a list of names");
        q.baselines.push_back(x.get<std::string>());
      }
    } else {
      r.fail("baseline", "expected a strategy name or a list of names");
    }
  }
  if (const auto* b = r.raw("batch"); b != nullptr)
    q.batch = b->is_number_integer() ? std::to_string(b->get<long long>()) : r.string("batch");
  q.checkpoint = r.choice_or("checkpoint", {"auto", "on", "off", "selective"}, q.checkpoint);
  q.tier = r.choice_or("tier", {"extended", "paper"}, q.tier);
  q.split_max = static_cast<int>(r.integer_or("split_max", 1, 64, q.split_max));
  q.prefetch = static_cast<int>(r.integer_or("prefetch", 0, 64, q.prefetch));
  q.regather = r.boolean_or("checkpoint_regather", q.regather);
  if (const auto* g = r.raw("groups"); g != nullptr)  // true/false as before, or auto/on/off
    q.groups = g->is_boolean() ? (g->get<bool>() ? "on" : "off") : r.choice("groups", {"auto", "on", "off"});
  q.expert_imbalance = r.number_or("expert_imbalance", 1.0, 64.0, q.expert_imbalance);
  q.max_cp = static_cast<int>(r.integer_or("max_cp", 1, 1 << 20, q.max_cp));
  q.cp_variant = r.choice_or("cp_variant", {"ring", "all-to-all", "both"}, q.cp_variant);
  for (const auto& [key, out] :
       {std::pair{"pp", &q.pp}, std::pair{"tp", &q.tp}, std::pair{"ep", &q.ep}, std::pair{"cp", &q.cp}}) {
    const auto* v = r.raw(key);
    if (v == nullptr) continue;
    if (v->is_number_integer()) {
      *out = {v->get<int>()};
    } else if (v->is_array()) {
      for (const auto& x : *v) {
        if (!x.is_number_integer()) r.fail(key, "expected an integer or a list of integers");
        out->push_back(x.get<int>());
      }
    } else {
      r.fail(key, "expected an integer or a list of integers");
    }
  }
  q.seq = static_cast<int>(r.integer_or("seq", 0, 1 << 20, q.seq));
  q.max_micro_batches = static_cast<int>(r.integer_or("max_micro_batches", 1, 1024, q.max_micro_batches));
  q.micro_batches = static_cast<int>(r.integer_or("micro_batches", 0, 1024, q.micro_batches));
  q.global_batch = static_cast<int>(r.integer_or("global_batch", 0, 1 << 24, q.global_batch));
  q.max_b0 = static_cast<int>(r.integer_or("max_micro_batch_size", 1, 1 << 20, q.max_b0));
  q.schedule = r.choice_or("schedule", {"1f1b", "gpipe", "both"}, q.schedule);
  q.sequence_parallel = r.boolean_or("sequence_parallel", q.sequence_parallel);
  q.galvatron_overlap = r.number_or("galvatron_overlap", 0, 10, q.galvatron_overlap);
  q.dfs_budget = r.integer_or("dfs_budget", 1, std::int64_t{1} << 40, q.dfs_budget);
  q.time_budget_s = r.number_or("time_budget_s", 0.001, 1e6, q.time_budget_s);
  q.draws = static_cast<int>(r.integer_or("draws", 0, 100000, q.draws));
  q.objective = r.string_or("objective", q.objective);
  r.finish();
  return q;
}

std::unique_ptr<PreparedSearch> prepare_search(const PlanRequest& a) {
  if (a.world_size < 0 || a.world_size > (1 << 20))
    throw UsageError(
        fmt::format("world size: expected 0 (the cluster's) to {}, got {}", 1 << 20, a.world_size));
  const auto start = std::chrono::steady_clock::now();
  auto p = std::make_unique<PreparedSearch>();
  PlanContext& ctx = p->ctx;
  ctx.tool_version = costmodel::tool_version();
  ctx.model = costmodel::load_model(a.model);
  if (a.seq != 0) costmodel::set_sequence_length(ctx.model, a.seq, "--seq");
  ctx.cluster = costmodel::resized(costmodel::load_cluster(a.cluster), a.world_size);
  const std::string cal_name = !a.calibration.empty() ? a.calibration : ctx.cluster.calibration;
  // A calibration whose probes ran this model prices its plans at the model's own level.
  if (!cal_name.empty())
    ctx.calibration =
        costmodel::for_model(costmodel::load_calibration(cal_name, ctx.cluster.compute), ctx.model.name);
  if (a.objective != "throughput" && a.objective != "robust")
    throw UsageError(fmt::format("--objective: expected throughput or robust, got \"{}\"", a.objective));
  if (a.objective == "robust") {
    if (!ctx.calibration || !costmodel::has_uncertainty(*ctx.calibration))
      throw UsageError(
          "--objective robust: needs a calibration that records its errors (--calibration FILE from `osdp "
          "calibrate`); a cluster's datasheet figures have none");
    p->nominal_calibration = ctx.calibration;
    ctx.calibration = costmodel::at_quantile(*ctx.calibration, costmodel::kRobustZ);
  }
  if (a.tier != "extended" && a.tier != "paper")
    throw UsageError(fmt::format("--tier: expected extended or paper, got \"{}\"", a.tier));
  ctx.cost_options.tier = a.tier == "paper" ? costmodel::Tier::kPaper : costmodel::Tier::kExtended;
  ctx.cost_options.checkpoint_regather = a.regather;
  if (!(a.expert_imbalance >= 1.0 && a.expert_imbalance <= 64.0))
    throw UsageError(
        fmt::format("--expert-imbalance: expected 1 (balanced) to 64, got {}", a.expert_imbalance));
  ctx.cost_options.expert_imbalance = a.expert_imbalance;
  if (a.prefetch < 0 || a.prefetch > 64)
    throw UsageError(fmt::format("--prefetch: expected 0 to 64, got {}", a.prefetch));
  ctx.cost_options.prefetch = a.prefetch;

  p->workload = std::make_shared<const costmodel::Workload>(costmodel::lower(ctx.model));
  const costmodel::Calibration* cal = ctx.calibration ? &*ctx.calibration : nullptr;
  p->model.emplace(ctx.cluster, cal, ctx.model.precision, ctx.cost_options);
  SearchOptions& opt = p->options;
  if (a.split_max < 1 || a.split_max > 64 || !power_of_two(a.split_max))
    throw UsageError(fmt::format(
        "--split-max: expected a power of two from 1 to 64 (slices split in halves), got {}", a.split_max));
  opt.space.split_max = a.split_max;
  if (a.groups != "auto" && a.groups != "on" && a.groups != "off")
    throw UsageError(fmt::format("--groups: expected auto, on or off, got \"{}\"", a.groups));
  if (a.groups == "on" && !p->model->two_levels())
    throw UsageError(
        fmt::format("--groups: node groups and two-level collectives need a cluster of several nodes with "
                    "several devices each; {} has {} node(s) of {}",
                    ctx.cluster.name, ctx.cluster.nodes, ctx.cluster.devices_per_node));
  opt.space.groups = a.groups == "on" || (a.groups == "auto" && p->model->two_levels());
  if (a.checkpoint != "auto" && a.checkpoint != "on" && a.checkpoint != "off" && a.checkpoint != "selective")
    throw UsageError(
        fmt::format("--checkpoint: expected auto, on, off or selective, got \"{}\"", a.checkpoint));
  opt.space.selective = a.selective;
  opt.space.checkpoint = a.checkpoint == "on"          ? CheckpointPolicy::kOn
                         : a.checkpoint == "off"       ? CheckpointPolicy::kOff
                         : a.checkpoint == "selective" ? CheckpointPolicy::kSelective
                                                       : CheckpointPolicy::kAuto;
  opt.memory_limit_bytes =
      a.memory.empty() ? ctx.cluster.memory_bytes : parse_memory_option(a.memory, "--memory");
  if (opt.memory_limit_bytes > ctx.cluster.memory_bytes)
    std::cerr << fmt::format(
        "osdp plan: warning: --memory {} is more than the {} of a {} device in cluster {}: the plan "
        "is for a device that large\n",
        costmodel::format_bytes(opt.memory_limit_bytes), costmodel::format_bytes(ctx.cluster.memory_bytes),
        ctx.cluster.device_name, ctx.cluster.name);
  opt.reserve_bytes = ctx.cluster.reserve_bytes;
  if (a.batch != "auto") opt.batch = positive_integer(a.batch, "--batch");
  p->plan_model.emplace(ctx.cluster, cal, ctx.model.precision, ctx.cost_options);
  p->plan_model->set_capacity(opt.memory_limit_bytes);

  HybridSearchOptions& lo = p->layouts;
  lo.space = opt.space;
  check_degrees(a.pp, "--pp");
  check_degrees(a.tp, "--tp");
  check_degrees(a.ep, "--ep");
  check_degrees(a.cp, "--cp");
  lo.pp = a.pp;
  lo.tp = a.tp;
  lo.space.ep = a.ep;
  lo.cp = a.cp;
  if (a.max_cp < 1) throw UsageError(fmt::format("--max-cp: expected 1 or more, got {}", a.max_cp));
  lo.max_cp = a.max_cp;
  if (a.cp_variant != "ring" && a.cp_variant != "all-to-all" && a.cp_variant != "both")
    throw UsageError(
        fmt::format("--cp-variant: expected ring, all-to-all or both, got \"{}\"", a.cp_variant));
  lo.cp_variants.clear();
  if (a.cp_variant != "all-to-all") lo.cp_variants.push_back(false);
  if (a.cp_variant != "ring") lo.cp_variants.push_back(true);
  if (a.max_micro_batches < 1)
    throw UsageError(fmt::format("--max-micro-batches: expected 1 or more, got {}", a.max_micro_batches));
  lo.max_micro_batches = a.max_micro_batches;
  if (a.micro_batches > 0) lo.micro_batches = a.micro_batches;
  if (a.global_batch > 0) lo.global_batch = a.global_batch;
  if (opt.batch) {  // beyond data parallelism: the global batch of that data-parallel plan
    const long long global = static_cast<long long>(*opt.batch) * ctx.cluster.world_size();
    if (global > (1 << 24))
      throw UsageError(fmt::format("--batch {}: the global batch {} x {} devices is over {}", *opt.batch,
                                   *opt.batch, ctx.cluster.world_size(), 1 << 24));
    if (a.global_batch > 0 && a.global_batch != global)
      throw UsageError(
          fmt::format("--batch {} means a global batch of {} on {} devices; --global-batch asks for {}",
                      *opt.batch, global, ctx.cluster.world_size(), a.global_batch));
    lo.global_batch = static_cast<int>(global);
  } else if (a.global_batch > 0 && a.global_batch % ctx.cluster.world_size() == 0) {
    opt.batch = a.global_batch / ctx.cluster.world_size();  // data-parallel plans of that global batch
  }
  lo.max_b0 = a.max_b0;
  lo.sequence_parallel = a.sequence_parallel;
  lo.galvatron_overlap = a.galvatron_overlap;
  if (a.schedule == "both")
    lo.schedules = {costmodel::PipelineSchedule::k1F1B, costmodel::PipelineSchedule::kGpipe};
  else if (const auto s = costmodel::schedule_from_string(a.schedule))
    lo.schedules = {*s};
  else
    throw UsageError(fmt::format("--schedule: expected 1f1b, gpipe or both, got \"{}\"", a.schedule));
  if (!(a.time_budget_s > 0))
    throw UsageError(
        fmt::format("--time-budget: expected a positive number of seconds, got {}", a.time_budget_s));
  lo.time_budget_s = a.time_budget_s;
  p->time_budget_s = a.time_budget_s;
  if (a.draws < 0) throw UsageError(fmt::format("--draws: expected 0 or more, got {}", a.draws));
  p->draws = a.draws;
  // The request's time budget runs from its start (the model's lowering counts): the strategy's
  // search stops by 80% of it when baselines follow (95% without), the baselines by 95%, each with the
  // best plan it has. The last 5% are for pricing the plans found and writing them out on the largest
  // models (a search checks its deadline about once a second there).
  const auto at = [&](double share) {
    return start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(share * a.time_budget_s));
  };
  p->baselines_deadline = at(0.95);
  const bool baselines = std::any_of(a.baselines.begin(), a.baselines.end(), [&](const std::string& b) {
    return !b.empty() && b != "none" && b != a.strategy;
  });
  opt.deadline = baselines ? at(0.8) : at(0.95);
  lo.deadline = opt.deadline;
  if (a.progress)
    lo.progress = [report = a.progress, last = 0.0](int pp, double thr, std::int64_t layouts,
                                                    double seconds) mutable {
      if (seconds - last < 1.0) return;  // a line a second at most
      last = seconds;
      report(fmt::format("{} layouts in {:.1f} s (the last at pipeline degree {}); best {}", layouts, seconds,
                         pp, thr > 0 ? fmt::format("{:.2f} samples/s", thr) : "none fits yet"));
    };

  p->registry = default_strategies({a.dfs_budget});
  p->strategy = &p->registry.get(a.strategy);
  if (p->strategy->info().data_parallel) {  // options beyond data parallelism are not for it
    const auto beyond = [](const std::vector<int>& v) {
      return std::any_of(v.begin(), v.end(), [](int d) { return d != 1; });
    };
    const char* option = beyond(a.pp)          ? "--pp"
                         : beyond(a.tp)        ? "--tp"
                         : a.micro_batches > 1 ? "--micro-batches"
                                               : nullptr;
    if (option != nullptr) {
      std::vector<std::string> layout;
      for (const Strategy* s : p->registry.all())
        if (!s->info().data_parallel) layout.push_back(s->name());
      throw UsageError(
          fmt::format("{}: strategy {} searches data parallelism only (one stage, one micro-batch, "
                      "TP 1); the strategies of the whole space: {}",
                      option, a.strategy, fmt::join(layout, ", ")));
    }
  }
  for (const std::string& b : a.baselines) {
    if (b == "none" || b.empty()) continue;
    const Strategy* s = &p->registry.get(b);
    if (s != p->strategy && std::find(p->baselines.begin(), p->baselines.end(), s) == p->baselines.end())
      p->baselines.push_back(s);
  }
  return p;
}

PlanReport run_request(const PlanRequest& r) {
  PlanReport rep;
  rep.prepared = prepare_search(r);
  rep.outcome = run_strategy(*rep.prepared, *rep.prepared->strategy);
  PreparedSearch& p = *rep.prepared;  // the baselines have until their own deadline
  p.options.deadline = p.baselines_deadline;
  p.layouts.deadline = p.baselines_deadline;
  for (const Strategy* b : p.baselines) rep.baselines.push_back(run_strategy(p, *b));
  if (rep.outcome.feasible) rep.unsplit = without_splits(p, rep.outcome);
  if (rep.outcome.feasible) rep.uniform = one_choice_per_kind(p, rep.outcome);
  return rep;
}

namespace {
// `w` (a copy of a plan's outcome with other choices) as strategy `name`, described as `description`,
// priced by the plan's cost model and its draws; none when it does not fit.
std::optional<PlanOutcome> repriced(const PreparedSearch& p, PlanOutcome w, const char* name,
                                    const char* description) {
  w.strategy = name;
  w.description = description;
  w.batches.reset();
  w.layouts.reset();
  w.robust_throughput = 0;
  w.evaluation = costmodel::plan_cost_model(w.plan).evaluate(*w.workload, w.plan);
  if (!w.evaluation.fits) return std::nullopt;
  w.plan.predicted_iteration_time_s = w.evaluation.time_s;
  w.plan.predicted_peak_memory_bytes = w.evaluation.peak_bytes;
  w.plan.predicted_throughput_samples_per_s = w.evaluation.throughput;
  w.drawn_time_s = costmodel::drawn_step_times(*w.workload, w.plan, p.draws);
  return w;
}
}  // namespace

std::optional<PlanOutcome> without_splits(const PreparedSearch& p, const PlanOutcome& o) {
  if (!o.feasible) return std::nullopt;
  PlanOutcome w = o;
  bool split = false;
  for (costmodel::Choice& c : w.plan.choices) {
    if (c.split <= 1) continue;
    split = true;
    c.zdp_slices = c.zdp_slices > 0 ? 1 : 0;
    c.split = 1;
  }
  if (!split) return std::nullopt;
  return repriced(p, std::move(w), "without splits", "the same plan without splits");
}

std::optional<PlanOutcome> one_choice_per_kind(const PreparedSearch& p, const PlanOutcome& o) {
  if (!o.feasible || !o.workload || o.workload->operators.size() != o.plan.choices.size())
    return std::nullopt;
  const auto& ops = o.workload->operators;
  // Per kind (an MoE layer's MLP a kind of its own), its choices in order of first use with their counts.
  using Kind = std::pair<costmodel::OperatorKind, bool>;
  const auto kind_of = [&](std::size_t i) { return Kind{ops[i].kind, ops[i].experts > 0}; };
  std::map<Kind, std::vector<std::pair<costmodel::Choice, int>>> seen;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    auto& list = seen[kind_of(i)];
    const auto it =
        std::find_if(list.begin(), list.end(), [&](const auto& e) { return e.first == o.plan.choices[i]; });
    if (it == list.end())
      list.emplace_back(o.plan.choices[i], 1);
    else
      ++it->second;
  }
  if (std::all_of(seen.begin(), seen.end(), [](const auto& e) { return e.second.size() == 1; }))
    return std::nullopt;
  std::map<Kind, costmodel::Choice> most;
  for (const auto& [kind, list] : seen)
    most[kind] = std::max_element(list.begin(), list.end(), [](const auto& a, const auto& b) {
                   return a.second < b.second;  // the first of the largest count
                 })->first;
  PlanOutcome w = o;
  for (std::size_t i = 0; i < ops.size(); ++i) w.plan.choices[i] = most[kind_of(i)];
  try {
    return repriced(p, std::move(w), "one choice per kind",
                    "the same plan with one choice per operator kind");
  } catch (const UsageError&) {
    return std::nullopt;  // a choice that another operator of the kind cannot take (a split, a TP slice)
  }
}

nlohmann::json report_json(const PlanReport& r) {
  const PlanContext& ctx = r.prepared->ctx;
  nlohmann::json j = outcome_json(r.outcome);
  j["model"] = ctx.model.name;
  j["cluster"] = ctx.cluster.name;
  j["world_size"] = ctx.cluster.world_size();
  nlohmann::json baselines = nlohmann::json::array();
  for (const PlanOutcome& b : r.baselines) {
    nlohmann::json bj = outcome_json(b);
    for (const char* k : {"plan", "candidates", "skipped_ranges"}) bj.erase(k);
    if (r.outcome.feasible && b.feasible) {
      bj["speedup_over_baseline"] = r.outcome.evaluation.throughput / b.evaluation.throughput;
      bj["speedup_interval"] = costmodel::to_json(speedup_interval(r.outcome, b));
    }
    baselines.push_back(std::move(bj));
  }
  j["baselines"] = std::move(baselines);
  // A simpler plan's figures beside the plan's, or null.
  const auto simpler = [&](const std::optional<PlanOutcome>& b) -> nlohmann::json {
    if (!b) return nullptr;
    nlohmann::json u = outcome_json(*b);
    for (const char* k : {"plan", "candidates", "skipped_ranges", "layouts"}) u.erase(k);
    u["speedup_over_baseline"] = r.outcome.evaluation.throughput / b->evaluation.throughput;
    u["speedup_interval"] = costmodel::to_json(speedup_interval(r.outcome, *b));
    return u;
  };
  j["without_splits"] = simpler(r.unsplit);
  j["one_choice_per_kind"] = simpler(r.uniform);
  return j;
}

}  // namespace osdp::search
