#include "experiments/run.hpp"

#include <limits>

#include <fmt/format.h>

#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/units.hpp"
#include "search/report.hpp"
#include "search/scheduler.hpp"
#include "sim/replay.hpp"

namespace osdp::experiments {

search::PlanRequest unit_request(const Unit& u, const std::string& calibration, bool selective) {
  const Config& c = u.config;
  search::PlanRequest r;
  r.model = c.model;
  r.cluster = c.cluster;
  r.world_size = c.world_size;
  r.calibration = calibration;
  r.memory = c.memory;
  r.strategy = u.strategy.strategy;
  r.batch = c.batch ? std::to_string(*c.batch) : "auto";
  r.checkpoint = u.strategy.checkpoint.value_or(c.checkpoint);
  r.selective = selective;
  r.tier = c.tier;
  r.split_max = u.strategy.split_max.value_or(c.split_max);
  r.prefetch = c.prefetch;
  r.regather = c.checkpoint_regather;
  r.groups = c.groups == "auto" && c.schema1_space ? "off" : c.groups;
  if (c.pp > 0 || c.schema1_space) r.pp = {std::max(c.pp, 1)};
  if (c.tp > 0 || c.schema1_space) r.tp = {std::max(c.tp, 1)};
  r.micro_batches = c.micro_batches == 0 && c.schema1_space ? 1 : c.micro_batches;
  if (!u.strategy.pp.empty()) r.pp = u.strategy.pp;
  if (!u.strategy.tp.empty()) r.tp = u.strategy.tp;
  if (u.strategy.micro_batches) r.micro_batches = *u.strategy.micro_batches;
  r.global_batch = c.global_batch;
  r.schedule = c.schedule;
  r.seq = c.seq;
  return r;
}

PlannedUnit plan_unit(const Unit& u, const std::string& calibration, bool selective) {
  PlannedUnit p;
  p.report = search::run_request(unit_request(u, calibration, selective));
  return p;
}

std::string plan_summary(const costmodel::Workload& w, const std::vector<costmodel::Choice>& choices) {
  std::string summary;
  for (const auto& line : search::summarize_choices(w, choices))
    summary += (summary.empty() ? "" : "; ") + line;
  return summary;
}

UnitResult unit_row(const Unit& u, const PlannedUnit& p) {
  const search::PlanOutcome& o = p.outcome();
  const costmodel::ClusterSpec& cluster = p.report.prepared->ctx.cluster;
  UnitResult out;
  out.index = u.index;
  out.key = u.key();
  out.model = p.report.prepared->ctx.model.name;
  out.cluster = cluster.name;
  out.strategy = u.strategy.label;
  out.world_size = cluster.world_size();
  out.memory_limit_bytes = o.memory_limit_bytes;
  out.feasible = o.feasible;
  out.min_fit_bytes = o.feasible ? 0 : o.min_fit_bytes;
  if (o.batches)
    for (const auto& cand : o.batches->candidates)
      if (cand.feasible)
        out.candidates.push_back({cand.batch, cand.time_s, cand.peak_bytes, cand.throughput});
  if (o.feasible) {
    out.batch_size = o.plan.batch_size;
    out.pp = o.plan.pp;
    out.micro_batches = o.plan.micro_batches;
    out.global_batch = o.evaluation.global_batch;
    out.plan_summary = plan_summary(*o.workload, o.plan.choices);
    if (!o.plan.data_parallel()) {
      out.plan_summary += "; layout: " + o.plan.layout_summary();
      out.units = nlohmann::json::array();
      const costmodel::Workload& w = *o.workload;
      for (std::size_t k = 0; k < w.units.size(); ++k) {
        nlohmann::json labels = nlohmann::json::array();
        for (const int op : w.units[k].ops)
          labels.push_back(o.plan.choices[static_cast<std::size_t>(op)].label());
        out.units.push_back({{"name", w.units[k].name},
                             {"stage", o.plan.stage_of_unit(static_cast<int>(k))},
                             {"tp", o.plan.unit_tp[k]},
                             {"operators", std::move(labels)}});
      }
    }
  }
  return out;
}

UnitResult run_unit(const Unit& u, const Experiment& e) {
  const PlannedUnit p = plan_unit(u);
  const search::PlanOutcome& o = p.outcome();
  UnitResult out = unit_row(u, p);
  for (const EvaluatorKind ev : e.evaluators) {
    Evaluation x;
    x.evaluator = ev;
    x.feasible = o.feasible;
    if (o.feasible && ev == EvaluatorKind::kAnalytic) {
      x.throughput = o.evaluation.throughput;
      x.time_s = o.evaluation.time_s;
      x.peak_bytes = o.evaluation.peak_bytes;
      x.interval = search::time_interval(o);
    } else if (o.feasible) {
      sim::SimOptions opt;
      opt.symmetric = o.plan.data_parallel();  // exact on the bundled homogeneous clusters
      opt.memory_rank = sim::SimOptions::kNoRanks;
      const sim::Replay replay = sim::replay_plan(o.plan, *o.workload, opt);
      x.time_s = sim::to_seconds(replay.result.iteration);
      x.peak_bytes = replay.result.peak_rank().peak_bytes;
      x.throughput = o.evaluation.global_batch / x.time_s;
      x.interval = costmodel::central_interval(
          sim::simulated_step_times(o.plan, *o.workload, static_cast<int>(o.drawn_time_s.size()), opt));
    }
    out.evaluations.push_back(x);
  }
  return out;
}

const Evaluation* UnitResult::evaluation(EvaluatorKind evaluator) const {
  for (const auto& e : evaluations)
    if (e.evaluator == evaluator) return &e;
  return nullptr;
}

nlohmann::json to_json(const UnitResult& r) {
  nlohmann::json evs = nlohmann::json::array();
  for (const auto& e : r.evaluations) {
    evs.push_back({{"evaluator", to_string(e.evaluator)},
                   {"feasible", e.feasible},
                   {"throughput_samples_per_s", e.throughput},
                   {"iteration_time_s", e.time_s},
                   {"iteration_time_interval_s", costmodel::to_json(e.interval)},
                   {"peak_memory_bytes", e.peak_bytes}});
    if (!e.drawn_s.empty()) evs.back()["drawn_time_s"] = e.drawn_s;
  }
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
                   {"pp", r.pp},
                   {"micro_batches", r.micro_batches},
                   {"global_batch", r.global_batch},
                   {"min_fit_memory_bytes", r.min_fit_bytes},
                   {"plan_summary", r.plan_summary},
                   {"evaluations", evs},
                   {"candidates", cands}};
  if (!r.units.is_null()) j["units"] = r.units;
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
                        {"check_note", m->check_note},
                        {"compute", m->emulated ? "emulated" : "real"}};
  return j;
}

namespace {

// A figure that may be NaN: to_json writes NaN as null (JSON has no NaN; the nccl backend's loss of a
// timing run is one), and it reads back as NaN.
double figure(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

}  // namespace

UnitResult unit_result_from_json(const nlohmann::json& j) {
  UnitResult r;
  r.index = j.at("index").get<int>();
  r.key = j.at("key").get<std::string>();
  r.model = j.at("model").get<std::string>();
  r.cluster = j.at("cluster").get<std::string>();
  r.strategy = j.at("strategy").get<std::string>();
  r.world_size = j.at("world_size").get<int>();
  r.memory_limit_bytes = figure(j, "memory_limit_bytes");
  r.feasible = j.at("feasible").get<bool>();
  r.batch_size = j.at("batch_size").get<int>();
  // Rows written before plans had layouts: one stage, one micro-batch, the batch on every device.
  r.pp = j.value("pp", 1);
  r.micro_batches = j.value("micro_batches", 1);
  r.global_batch = j.value("global_batch", r.batch_size * r.world_size);
  r.min_fit_bytes = figure(j, "min_fit_memory_bytes");
  r.plan_summary = j.at("plan_summary").get<std::string>();
  if (const auto it = j.find("units"); it != j.end()) r.units = *it;
  for (const auto& e : j.at("evaluations")) {
    r.evaluations.push_back({evaluator_named(e.at("evaluator").get<std::string>()).value(),
                             e.at("feasible").get<bool>(),
                             figure(e, "throughput_samples_per_s"),
                             figure(e, "iteration_time_s"),
                             figure(e, "peak_memory_bytes"),
                             {},
                             {}});
    // Rows written before intervals have none.
    if (const auto it = e.find("iteration_time_interval_s");
        it != e.end() && it->is_array() && it->size() == 2)
      r.evaluations.back().interval = {(*it)[0].get<double>(), (*it)[1].get<double>()};
    if (const auto it = e.find("drawn_time_s"); it != e.end())
      r.evaluations.back().drawn_s = it->get<std::vector<double>>();
  }
  for (const auto& c : j.at("candidates"))
    r.candidates.push_back({c.at("batch_size").get<int>(), figure(c, "iteration_time_s"),
                            figure(c, "peak_memory_bytes"), figure(c, "throughput_samples_per_s")});
  if (const auto it = j.find("measurement"); it != j.end()) {
    const nlohmann::json& m = *it;
    Measurement x;
    x.group = m.at("group").get<std::string>();
    x.prefetch = m.at("prefetch").get<int>();
    x.steps_s = m.at("steps_s").get<std::vector<double>>();
    x.min_s = figure(m, "min_s");
    x.max_s = figure(m, "max_s");
    x.predicted_peak_bytes = figure(m, "predicted_peak_bytes");
    x.peak_bytes = figure(m, "peak_bytes");
    x.baseline_bytes = figure(m, "baseline_bytes");
    x.padding_bytes = figure(m, "padding_bytes");
    x.device_free_bytes = figure(m, "device_free_bytes");
    x.device_total_bytes = figure(m, "device_total_bytes");
    x.time_error = figure(m, "time_error");
    x.memory_error = figure(m, "memory_error");
    x.loss = figure(m, "loss");
    x.state_bytes = m.value("state_bytes", 0.0);  // rows written before the torch backend have none
    x.predicted_state_bytes = m.value("predicted_state_bytes", 0.0);
    x.check_loss_error = m.value("check_loss_error", -1.0);
    x.check_grad_diff = m.value("check_grad_diff", -1.0);
    x.check_weight_diff = m.value("check_weight_diff", -1.0);
    x.check_note = m.value("check_note", std::string());
    x.emulated = m.value("compute", std::string("real")) == "emulated";
    r.measurement = std::move(x);
  }
  return r;
}

}  // namespace osdp::experiments
