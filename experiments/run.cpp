#include "experiments/run.hpp"

#include <fmt/format.h>

#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/units.hpp"
#include "search/report.hpp"
#include "search/scheduler.hpp"
#include "sim/replay.hpp"

namespace osdp::experiments {

costmodel::ClusterSpec resize(costmodel::ClusterSpec c, int world_size) {
  if (world_size <= 0 || world_size == c.world_size()) return c;
  if (c.inter) {
    if (world_size % c.devices_per_node != 0)
      throw UsageError(fmt::format("world size {} is not a whole number of {}-device nodes of cluster \"{}\"",
                                   world_size, c.devices_per_node, c.name));
    c.nodes = world_size / c.devices_per_node;
  } else {
    c.nodes = 1;
    c.devices_per_node = world_size;
  }
  c.name = fmt::format("{}@{}", c.name, world_size);
  return c;
}

PlannedUnit plan_unit(const Unit& u, const std::optional<costmodel::Calibration>& calibration) {
  const Config& c = u.config;
  PlannedUnit p;
  p.model = costmodel::load_model(c.model);
  p.cluster = resize(costmodel::load_cluster(c.cluster), c.world_size);
  if (calibration)
    p.calibration = calibration;
  else if (!p.cluster.calibration.empty())
    p.calibration = costmodel::load_calibration(p.cluster.calibration, p.cluster.compute);
  p.options.tier = c.tier == "paper" ? costmodel::Tier::kPaper : costmodel::Tier::kExtended;
  p.options.prefetch = c.prefetch;
  p.options.checkpoint_regather = c.checkpoint_regather;
  p.workload = costmodel::lower(p.model);
  const costmodel::CostModel cost(p.cluster, p.calibration ? &*p.calibration : nullptr, p.model.precision,
                                  p.options);

  search::SearchOptions& so = p.search;
  so.space.split_max = u.strategy.split_max.value_or(c.split_max);
  so.space.groups = c.groups;
  const std::string ckpt = u.strategy.checkpoint.value_or(c.checkpoint);
  so.space.checkpoint = ckpt == "on"    ? search::CheckpointPolicy::kOn
                        : ckpt == "off" ? search::CheckpointPolicy::kOff
                                        : search::CheckpointPolicy::kAuto;
  so.batch = c.batch;
  so.reserve_bytes = p.cluster.reserve_bytes;
  so.memory_limit_bytes = p.cluster.memory_bytes;
  if (!c.memory.empty()) {
    std::string err;
    so.memory_limit_bytes = *costmodel::parse_quantity(c.memory, costmodel::UnitKind::kBytes, &err);
  }
  const auto registry = search::default_strategies();
  p.result = search::run_search(p.workload, cost, registry.get(u.strategy.strategy), so);
  if (p.result.feasible)
    p.plan = search::make_plan({"sweep", p.model, p.cluster, p.calibration, p.options}, p.workload, p.result);
  return p;
}

std::string plan_summary(const costmodel::Workload& w, const std::vector<costmodel::Choice>& choices) {
  std::string summary;
  for (const auto& line : search::summarize_choices(w, choices))
    summary += (summary.empty() ? "" : "; ") + line;
  return summary;
}

UnitResult unit_row(const Unit& u, const PlannedUnit& p) {
  const search::SearchResult& r = p.result;
  UnitResult out;
  out.index = u.index;
  out.key = u.key();
  out.model = p.model.name;
  out.cluster = p.cluster.name;
  out.strategy = u.strategy.label;
  out.world_size = p.cluster.world_size();
  out.memory_limit_bytes = p.search.memory_limit_bytes;
  out.feasible = r.feasible;
  out.batch_size = r.batch;
  out.min_fit_bytes = r.feasible ? 0 : r.min_fit_bytes;
  for (const auto& cand : r.candidates)
    if (cand.feasible) out.candidates.push_back({cand.batch, cand.time_s, cand.peak_bytes, cand.throughput});
  if (r.feasible) out.plan_summary = plan_summary(p.workload, r.choices);
  return out;
}

UnitResult run_unit(const Unit& u, const Experiment& e) {
  const PlannedUnit p = plan_unit(u);
  const costmodel::ClusterSpec& cluster = p.cluster;
  const search::SearchResult& r = p.result;
  UnitResult out = unit_row(u, p);
  for (const auto& ev : e.evaluators) {
    Evaluation x;
    x.evaluator = ev;
    x.feasible = r.feasible;
    if (r.feasible && ev == "analytic") {
      x.throughput = r.throughput;
      x.time_s = r.time_s;
      x.peak_bytes = r.peak_bytes;
    } else if (r.feasible) {
      sim::SimOptions opt;
      opt.symmetric = true;  // exact on the bundled homogeneous clusters
      opt.memory_rank = sim::SimOptions::kNoRanks;
      const sim::Replay replay = sim::replay_plan(*p.plan, opt);
      x.time_s = sim::to_seconds(replay.result.iteration);
      x.peak_bytes = replay.result.peak_rank().peak_bytes;
      x.throughput = static_cast<double>(cluster.world_size()) * r.batch / x.time_s;
    }
    out.evaluations.push_back(x);
  }
  return out;
}

const Evaluation* UnitResult::evaluation(const std::string& evaluator) const {
  for (const auto& e : evaluations)
    if (e.evaluator == evaluator) return &e;
  return nullptr;
}

nlohmann::json to_json(const UnitResult& r) {
  nlohmann::json evs = nlohmann::json::array();
  for (const auto& e : r.evaluations)
    evs.push_back({{"evaluator", e.evaluator},
                   {"feasible", e.feasible},
                   {"throughput_samples_per_s", e.throughput},
                   {"iteration_time_s", e.time_s},
                   {"peak_memory_bytes", e.peak_bytes}});
  nlohmann::json cands = nlohmann::json::array();
  for (const auto& c : r.candidates)
    cands.push_back({{"batch_size", c.batch},
                     {"iteration_time_s", c.time_s},
                     {"peak_memory_bytes", c.peak_bytes},
                     {"throughput_samples_per_s", c.throughput}});
  nlohmann::json j{{"index", r.index},
                   {"key", r.key},
                   {"model", r.model},
                   {"cluster", r.cluster},
                   {"strategy", r.strategy},
                   {"world_size", r.world_size},
                   {"memory_limit_bytes", r.memory_limit_bytes},
                   {"feasible", r.feasible},
                   {"batch_size", r.batch_size},
                   {"min_fit_memory_bytes", r.min_fit_bytes},
                   {"plan_summary", r.plan_summary},
                   {"evaluations", evs},
                   {"candidates", cands}};
  if (const auto& m = r.measurement)
    j["measurement"] = {{"group", m->group},
                        {"prefetch", m->prefetch},
                        {"steps_s", m->steps_s},
                        {"min_s", m->min_s},
                        {"max_s", m->max_s},
                        {"predicted_peak_bytes", m->predicted_peak_bytes},
                        {"peak_bytes", m->peak_bytes},
                        {"baseline_bytes", m->baseline_bytes},
                        {"padding_bytes", m->padding_bytes},
                        {"device_free_bytes", m->device_free_bytes},
                        {"device_total_bytes", m->device_total_bytes},
                        {"time_error", m->time_error},
                        {"memory_error", m->memory_error},
                        {"loss", m->loss},
                        {"state_bytes", m->state_bytes},
                        {"predicted_state_bytes", m->predicted_state_bytes},
                        {"check_loss_error", m->check_loss_error},
                        {"check_grad_diff", m->check_grad_diff},
                        {"check_weight_diff", m->check_weight_diff},
                        {"check_note", m->check_note}};
  return j;
}

UnitResult unit_result_from_json(const nlohmann::json& j) {
  UnitResult r;
  r.index = j.at("index").get<int>();
  r.key = j.at("key").get<std::string>();
  r.model = j.at("model").get<std::string>();
  r.cluster = j.at("cluster").get<std::string>();
  r.strategy = j.at("strategy").get<std::string>();
  r.world_size = j.at("world_size").get<int>();
  r.memory_limit_bytes = j.at("memory_limit_bytes").get<double>();
  r.feasible = j.at("feasible").get<bool>();
  r.batch_size = j.at("batch_size").get<int>();
  r.min_fit_bytes = j.at("min_fit_memory_bytes").get<double>();
  r.plan_summary = j.at("plan_summary").get<std::string>();
  for (const auto& e : j.at("evaluations"))
    r.evaluations.push_back({e.at("evaluator").get<std::string>(), e.at("feasible").get<bool>(),
                             e.at("throughput_samples_per_s").get<double>(),
                             e.at("iteration_time_s").get<double>(),
                             e.at("peak_memory_bytes").get<double>()});
  for (const auto& c : j.at("candidates"))
    r.candidates.push_back({c.at("batch_size").get<int>(), c.at("iteration_time_s").get<double>(),
                            c.at("peak_memory_bytes").get<double>(),
                            c.at("throughput_samples_per_s").get<double>()});
  if (const auto it = j.find("measurement"); it != j.end()) {
    const nlohmann::json& m = *it;
    Measurement x;
    x.group = m.at("group").get<std::string>();
    x.prefetch = m.at("prefetch").get<int>();
    x.steps_s = m.at("steps_s").get<std::vector<double>>();
    x.min_s = m.at("min_s").get<double>();
    x.max_s = m.at("max_s").get<double>();
    x.predicted_peak_bytes = m.at("predicted_peak_bytes").get<double>();
    x.peak_bytes = m.at("peak_bytes").get<double>();
    x.baseline_bytes = m.at("baseline_bytes").get<double>();
    x.padding_bytes = m.at("padding_bytes").get<double>();
    x.device_free_bytes = m.at("device_free_bytes").get<double>();
    x.device_total_bytes = m.at("device_total_bytes").get<double>();
    x.time_error = m.at("time_error").get<double>();
    x.memory_error = m.at("memory_error").get<double>();
    x.loss = m.at("loss").get<double>();
    x.state_bytes = m.value("state_bytes", 0.0);  // rows written before the torch backend have none
    x.predicted_state_bytes = m.value("predicted_state_bytes", 0.0);
    x.check_loss_error = m.value("check_loss_error", -1.0);
    x.check_grad_diff = m.value("check_grad_diff", -1.0);
    x.check_weight_diff = m.value("check_weight_diff", -1.0);
    x.check_note = m.value("check_note", std::string());
    r.measurement = std::move(x);
  }
  return r;
}

}  // namespace osdp::experiments
