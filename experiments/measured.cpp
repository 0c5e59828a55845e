#include "experiments/measured.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/units.hpp"
#include "experiments/run.hpp"
#include "experiments/sweep.hpp"
#include "search/report.hpp"
#include "sim/replay.hpp"
#include "costmodel/calibration_fit.hpp"
#include "validate/executor/executor.hpp"

#ifndef OSDP_PLOT_SCRIPT
#define OSDP_PLOT_SCRIPT ""
#endif

namespace osdp::experiments {
namespace {

// The finished rows of an earlier run (rows.jsonl), by key.
std::map<std::string, ValidationRow> finished_rows(const std::string& path) {
  std::map<std::string, ValidationRow> out;
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    try {
      const ValidationRow r = row_from_json(nlohmann::json::parse(line));
      out[r.key] = r;
    } catch (const std::exception&) {
      // A line cut short by an interruption: that plan runs again.
    }
  }
  return out;
}

// Rank 0's tasks in the last timed step beside the simulator's: where a prediction goes wrong.
void write_task_csv(const std::string& path, const sim::Replay& replay,
                    const std::vector<validate::TaskTiming>& measured) {
  std::vector<double> predicted(replay.schedule.tasks.size(), 0.0);
  for (const auto& rec : replay.result.tasks)
    if (rec.rank == 0) predicted[static_cast<std::size_t>(rec.task)] = sim::to_seconds(rec.end - rec.start);
  std::string csv = "task,kind,stream,op,slice,predicted_s,measured_s,measured_start_s\n";
  for (std::size_t t = 0; t < replay.schedule.tasks.size() && t < measured.size(); ++t) {
    const sim::Task& task = replay.schedule.tasks[t];
    csv += fmt::format("{},{},{},{},{},{:.6g},{:.6g},{:.6g}\n", experiments::csv_field(task.name),
                       sim::to_string(task.kind), task.stream == sim::Stream::kComm ? "comm" : "compute",
                       task.op, task.slice, predicted[t], measured[t].end_s - measured[t].start_s,
                       measured[t].start_s);
  }
  costmodel::write_file_atomic(path, csv);
}

// One unit being measured: its prediction, and (when a plan fits) its device and executor.
class Running {
 public:
  Running(const experiments::Unit& u, const experiments::PlannedUnit& p, validate::Communicator& comm,
          const DeviceFactory& make_device, const ValidationOptions& o)
      : unit_(u), comm_(comm), o_(o) {
    row_.index = u.index;
    row_.key = u.key();
    row_.config = experiments::to_json(u.config).dump();
    row_.model = p.model.name;
    row_.strategy = u.strategy.label;
    row_.world_size = p.cluster.world_size();
    row_.memory_limit_bytes = p.search.memory_limit_bytes;
    row_.feasible = p.plan.has_value();
    if (!p.plan) return;
    plan_ = *p.plan;
    workload_ = p.workload;
    row_.batch = plan_.batch_size;
    row_.prefetch = plan_.prefetch;
    std::string summary;
    for (const auto& line : search::summarize_choices(p.workload, p.result.choices))
      summary += (summary.empty() ? "" : "; ") + line;
    row_.plan_summary = summary;
    sim::SimOptions so;
    so.record_tasks = o.tasks;
    replay_ = sim::replay_plan(plan_, so);
    row_.analytic_time_s = replay_.analytic_time_s;
    row_.predicted_time_s = sim::to_seconds(replay_.result.iteration);
    row_.predicted_peak_bytes = replay_.result.peak_rank().peak_bytes - replay_.result.reserve_bytes;
    dev_ = make_device(plan_);
    validate::ExecutorOptions xo;
    xo.record_tasks = o.tasks;
    xo.gemm_math = o.gemm_math;
    naming_the_plan(
        [&] { executor_ = std::make_unique<validate::Executor>(*dev_, comm, workload_, plan_, replay_.schedule, xo); });
  }

  bool feasible() const { return row_.feasible; }
  void warm_up() {
    naming_the_plan([&] { executor_->step(); });
  }
  void timed_step() {
    naming_the_plan([&] { last_ = executor_->step(); });
    row_.steps_s.push_back(comm_.max_over_ranks(last_.seconds));
    peak_ = std::max(peak_, static_cast<double>(last_.peak_bytes - last_.baseline_bytes));
  }

  // A device out of memory says which buffer (operator) and how many bytes; this adds the plan.
  template <typename F>
  void naming_the_plan(F&& work) {
    try {
      work();
    } catch (const validate::OutOfMemory& e) {
      throw validate::OutOfMemory(fmt::format("plan {} of unit {} ({}, micro-batch {}, {}): {}", row_.strategy,
                                    unit_.index, row_.model, plan_.batch_size, row_.plan_summary, e.what()));
    }
  }

  ValidationRow finish() {
    if (!row_.feasible) return row_;
    row_.measured_peak_bytes = comm_.max_over_ranks(peak_);
    row_.baseline_bytes = static_cast<double>(last_.baseline_bytes);
    row_.padding_bytes = static_cast<double>(last_.padding_bytes);
    // The driver's view (GPUs; 0 on the CPU): the least free memory of any rank, the first's total.
    row_.device_free_bytes = -comm_.max_over_ranks(-static_cast<double>(last_.device_free_bytes));
    row_.device_total_bytes = static_cast<double>(last_.device_total_bytes);
    row_.loss = last_.loss;
    if (o_.tasks && comm_.rank() == 0) {
      std::filesystem::create_directories(o_.out_dir + "/tasks");
      write_task_csv(fmt::format("{}/tasks/{}-{}-b{}.csv", o_.out_dir, unit_.index, unit_.strategy.label,
                                 plan_.batch_size),
                     replay_, last_.tasks);
    }
    executor_.reset();
    dev_.reset();
    row_.measured_time_s = costmodel::median(row_.steps_s);
    row_.measured_min_s = *std::min_element(row_.steps_s.begin(), row_.steps_s.end());
    row_.measured_max_s = *std::max_element(row_.steps_s.begin(), row_.steps_s.end());
    row_.time_error = (row_.measured_time_s - row_.predicted_time_s) / row_.predicted_time_s;
    row_.memory_error = (row_.measured_peak_bytes - row_.predicted_peak_bytes) / row_.predicted_peak_bytes;
    return row_;
  }

 private:
  const experiments::Unit& unit_;
  validate::Communicator& comm_;
  const ValidationOptions& o_;
  ValidationRow row_;
  costmodel::Plan plan_;
  costmodel::Workload workload_;
  sim::Replay replay_;
  std::unique_ptr<validate::Device> dev_;
  std::unique_ptr<validate::Executor> executor_;
  validate::StepStats last_;
  double peak_ = 0;
};

}  // namespace

nlohmann::json to_json(const ValidationRow& r) {
  return {{"index", r.index},
          {"key", r.key},
          {"config", r.config},
          {"model", r.model},
          {"strategy", r.strategy},
          {"plan_summary", r.plan_summary},
          {"world_size", r.world_size},
          {"batch_size", r.batch},
          {"prefetch", r.prefetch},
          {"memory_limit_bytes", r.memory_limit_bytes},
          {"feasible", r.feasible},
          {"analytic_time_s", r.analytic_time_s},
          {"predicted_time_s", r.predicted_time_s},
          {"measured_time_s", r.measured_time_s},
          {"measured_min_s", r.measured_min_s},
          {"measured_max_s", r.measured_max_s},
          {"steps_s", r.steps_s},
          {"predicted_peak_bytes", r.predicted_peak_bytes},
          {"measured_peak_bytes", r.measured_peak_bytes},
          {"baseline_bytes", r.baseline_bytes},
          {"padding_bytes", r.padding_bytes},
          {"device_free_bytes", r.device_free_bytes},
          {"device_total_bytes", r.device_total_bytes},
          {"time_error", r.time_error},
          {"memory_error", r.memory_error},
          {"loss", r.loss}};
}

ValidationRow row_from_json(const nlohmann::json& j) {
  ValidationRow r;
  r.index = j.at("index").get<int>();
  r.key = j.at("key").get<std::string>();
  r.config = j.at("config").get<std::string>();
  r.model = j.at("model").get<std::string>();
  r.strategy = j.at("strategy").get<std::string>();
  r.plan_summary = j.at("plan_summary").get<std::string>();
  r.world_size = j.at("world_size").get<int>();
  r.batch = j.at("batch_size").get<int>();
  r.prefetch = j.at("prefetch").get<int>();
  r.memory_limit_bytes = j.at("memory_limit_bytes").get<double>();
  r.feasible = j.at("feasible").get<bool>();
  r.analytic_time_s = j.at("analytic_time_s").get<double>();
  r.predicted_time_s = j.at("predicted_time_s").get<double>();
  r.measured_time_s = j.at("measured_time_s").get<double>();
  r.measured_min_s = j.at("measured_min_s").get<double>();
  r.measured_max_s = j.at("measured_max_s").get<double>();
  r.steps_s = j.at("steps_s").get<std::vector<double>>();
  r.predicted_peak_bytes = j.at("predicted_peak_bytes").get<double>();
  r.measured_peak_bytes = j.at("measured_peak_bytes").get<double>();
  r.baseline_bytes = j.at("baseline_bytes").get<double>();
  r.padding_bytes = j.at("padding_bytes").get<double>();
  r.device_free_bytes = j.value("device_free_bytes", 0.0);  // absent in rows of osdp before the GPU backend
  r.device_total_bytes = j.value("device_total_bytes", 0.0);
  r.time_error = j.at("time_error").get<double>();
  r.memory_error = j.at("memory_error").get<double>();
  r.loss = j.at("loss").get<double>();
  return r;
}

ValidationSummary summarize(const std::vector<ValidationRow>& rows, const experiments::ValidationSpec& spec) {
  ValidationSummary s;
  std::vector<double> errs;
  for (const auto& r : rows) {
    if (!r.feasible) continue;
    ++s.plans;
    errs.push_back(std::fabs(r.time_error));
    s.max_abs_time_error = std::max(s.max_abs_time_error, std::fabs(r.time_error));
    s.max_abs_memory_error = std::max(s.max_abs_memory_error, std::fabs(r.memory_error));
    if (std::fabs(r.time_error) > spec.time_max)
      s.failures.push_back(fmt::format("{} {} b={}: step time off by {:+.1f}% (tolerance {:.1f}%)", r.model,
                                       r.strategy, r.batch, 100 * r.time_error, 100 * spec.time_max));
    if (std::fabs(r.memory_error) > spec.memory_max)
      s.failures.push_back(fmt::format("{} {} b={}: peak memory off by {:+.2f}% (tolerance {:.2f}%)", r.model,
                                       r.strategy, r.batch, 100 * r.memory_error, 100 * spec.memory_max));
  }
  s.median_abs_time_error = errs.empty() ? 0.0 : costmodel::median(errs);
  if (s.plans > 0 && s.median_abs_time_error > spec.time_median)
    s.failures.push_back(fmt::format("costmodel::median step-time error {:.1f}% (tolerance {:.1f}%)",
                                     100 * s.median_abs_time_error, 100 * spec.time_median));
  if (s.plans == 0) s.failures.push_back("no plan of the experiment fits: nothing was measured");
  for (const auto& check : spec.speedups) {
    std::map<std::string, std::map<std::string, const ValidationRow*>> by_config;
    for (const auto& r : rows)
      if (r.feasible) by_config[r.config][r.strategy] = &r;
    for (const auto& [config, strategies] : by_config) {
      auto f = strategies.find(check.faster), t = strategies.find(check.than);
      if (f == strategies.end() || t == strategies.end()) continue;
      SpeedupResult x;
      x.config = config;
      x.faster = check.faster;
      x.than = check.than;
      x.predicted = t->second->predicted_time_s / f->second->predicted_time_s;
      x.measured = t->second->measured_time_s / f->second->measured_time_s;
      x.error = x.measured / x.predicted - 1.0;
      x.ok = std::fabs(x.error) <= check.tolerance;
      if (!x.ok)
        s.failures.push_back(fmt::format(
            "speedup of {} over {} measured {:.3f}x, predicted {:.3f}x ({:+.1f}%, "
            "tolerance {:.1f}%) at {}",
            x.faster, x.than, x.measured, x.predicted, 100 * x.error, 100 * check.tolerance, config));
      s.speedups.push_back(x);
    }
  }
  return s;
}

std::vector<ValidationRow> run_validation(const experiments::Experiment& e, validate::Communicator& comm,
                                          const DeviceFactory& make_device, const ValidationOptions& o) {
  const bool root = comm.rank() == 0;
  const std::string rows_path = o.out_dir + "/rows.jsonl";
  std::map<std::string, ValidationRow> done;
  if (root) {
    std::filesystem::create_directories(o.out_dir);
    if (o.resume)
      done = finished_rows(rows_path);
    else
      std::ofstream(rows_path, std::ios::trunc);
  }
  std::ofstream rows_out;
  if (root) rows_out.open(rows_path, std::ios::app);
  const std::vector<experiments::Unit> units = experiments::expand(e);
  std::vector<ValidationRow> rows;
  auto report = [&](const ValidationRow& row, std::size_t position) {
    if (!root) return;
    rows_out << to_json(row).dump() << "\n";
    rows_out.flush();
    if (o.progress)
      o.progress(
          row.feasible
              ? fmt::format("[{}/{}] {} {} b={}: predicted {:.1f} ms, measured {:.1f} ms ({:+.1f}%); peak {} "
                            "predicted, {} measured ({:+.2f}%)",
                            position, units.size(), row.model, row.strategy, row.batch,
                            1e3 * row.predicted_time_s, 1e3 * row.measured_time_s, 100 * row.time_error,
                            costmodel::format_bytes(row.predicted_peak_bytes),
                            costmodel::format_bytes(row.measured_peak_bytes), 100 * row.memory_error)
              : fmt::format("[{}/{}] {} {}: no plan fits", position, units.size(), row.model, row.strategy));
  };
  // The strategies of one configuration run side by side, their steps interleaved, so that a machine
  // whose speed drifts (a shared host) slows them alike and their comparison holds.
  for (std::size_t first = 0; first < units.size();) {
    std::size_t last = first;
    while (last < units.size() &&
           experiments::to_json(units[last].config) == experiments::to_json(units[first].config))
      ++last;
    std::vector<std::unique_ptr<Running>> group;
    std::vector<std::size_t> positions;
    for (std::size_t i = first; i < last; ++i) {
      const experiments::Unit& u = units[i];
      // Rank 0 decides (it holds the results): every rank skips the same units.
      const bool skip = comm.all_values(root && done.count(u.key()) ? 1.0 : 0.0).front() > 0;
      if (skip) {
        if (root) rows.push_back(done.at(u.key()));
        continue;
      }
      const experiments::PlannedUnit p = experiments::plan_unit(u, o.calibration);
      if (root && o.progress && p.plan)
        o.progress(fmt::format("[{}/{}] {} {} b={}: running {} + {} steps", i + 1, units.size(), p.model.name,
                               u.strategy.label, p.plan->batch_size, e.validation.warmup,
                               e.validation.iterations));
      group.push_back(std::make_unique<Running>(u, p, comm, make_device, o));
      positions.push_back(i + 1);
    }
    for (int k = 0; k < e.validation.warmup; ++k)
      for (auto& r : group)
        if (r->feasible()) r->warm_up();
    for (int k = 0; k < e.validation.iterations; ++k)
      for (auto& r : group)
        if (r->feasible()) r->timed_step();
    for (std::size_t g = 0; g < group.size(); ++g) {
      ValidationRow row = group[g]->finish();
      report(row, positions[g]);
      if (root) rows.push_back(std::move(row));
    }
    first = last;
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  return rows;
}

std::string write_validation_outputs(const std::string& dir, const experiments::Experiment& e,
                                     const std::vector<ValidationRow>& rows, const ValidationSummary& s,
                                     const nlohmann::json& provenance) {
  std::string csv =
      "index,model,strategy,world_size,memory_limit_bytes,feasible,batch_size,prefetch,analytic_time_s,"
      "predicted_time_s,measured_time_s,measured_min_s,measured_max_s,time_error,predicted_peak_bytes,"
      "measured_peak_bytes,baseline_bytes,padding_bytes,device_free_bytes,device_total_bytes,memory_error,"
      "loss,"
      "plan\n";
  for (const auto& r : rows)
    csv += fmt::format(
        "{},{},{},{},{:.0f},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.0f},{:.0f},{:.0f},{:.0f},"
        "{:.0f},{:.0f},{:.6g},{:.8g},{}\n",
        r.index, experiments::csv_field(r.model), experiments::csv_field(r.strategy), r.world_size,
        r.memory_limit_bytes, r.feasible ? "true" : "false", r.batch, r.prefetch, r.analytic_time_s,
        r.predicted_time_s, r.measured_time_s, r.measured_min_s, r.measured_max_s, r.time_error,
        r.predicted_peak_bytes, r.measured_peak_bytes, r.baseline_bytes, r.padding_bytes, r.device_free_bytes,
        r.device_total_bytes, r.memory_error, r.loss, experiments::csv_field(r.plan_summary));
  costmodel::write_file_atomic(dir + "/validation.csv", csv);

  nlohmann::json speedups = nlohmann::json::array();
  for (const auto& x : s.speedups)
    speedups.push_back({{"config", nlohmann::json::parse(x.config)},
                        {"faster", x.faster},
                        {"than", x.than},
                        {"predicted", x.predicted},
                        {"measured", x.measured},
                        {"error", x.error},
                        {"ok", x.ok}});
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& r : rows) rows_json.push_back(to_json(r));
  const nlohmann::json summary = {{"kind", "osdp-validation"},
                                  {"schema_version", 1},
                                  {"experiment", e.source},
                                  {"provenance", provenance},
                                  {"tolerance",
                                   {{"time_median", e.validation.time_median},
                                    {"time_max", e.validation.time_max},
                                    {"memory_max", e.validation.memory_max}}},
                                  {"plans", s.plans},
                                  {"median_abs_time_error", s.median_abs_time_error},
                                  {"max_abs_time_error", s.max_abs_time_error},
                                  {"max_abs_memory_error", s.max_abs_memory_error},
                                  {"speedups", speedups},
                                  {"failures", s.failures},
                                  {"ok", s.ok()},
                                  {"rows", rows_json}};
  costmodel::write_file_atomic(dir + "/summary.json", summary.dump(2) + "\n");

  // The plot: Python with matplotlib, when there is one.
  const char* env_script = std::getenv("OSDP_PLOT_SCRIPT");
  std::string script = env_script != nullptr ? env_script : OSDP_PLOT_SCRIPT;
  if (script.empty() || !std::filesystem::exists(script))
    return fmt::format("no plot: the script {} is not there (set OSDP_PLOT_SCRIPT)", script);
  const char* env_python = std::getenv("OSDP_PYTHON");
  const std::string python = env_python != nullptr                         ? env_python
                             : std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3"
                                                                           : "python3";
  const std::string cmd = fmt::format("'{}' '{}' '{}/summary.json' '{}/predicted_vs_measured.png' 2>&1",
                                      python, script, dir, dir);
  std::FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return "no plot: could not start " + python;
  std::string output;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) output += buf;
  const int rc = pclose(pipe);
  if (rc != 0) return fmt::format("no plot ({} exited with {}): {}", python, rc, output);
  return "";
}

}  // namespace osdp::experiments
