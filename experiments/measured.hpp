// osdp validate: every plan of an experiment run for real on a backend and held to the simulator's
// prediction. For each unit the search gives a plan (with the calibration given, or the cluster's);
// the simulator predicts its step time and peak memory; the executor runs warm-up steps, then timed
// ones (each the slowest rank's); the median is compared with the prediction. Rows are appended to
// OUT/rows.jsonl as the plans of each configuration finish (they run side by side, steps
// interleaved; --resume goes on after an interruption); at the end
// OUT/validation.csv, OUT/summary.json and, when Python with matplotlib is there,
// OUT/predicted_vs_measured.png.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/plan.hpp"
#include "experiments/experiment.hpp"
#include "validate/executor/backend.hpp"

namespace osdp::experiments {

struct ValidationRow {
  int index = 0;
  std::string key, config, model, strategy, plan_summary;
  int world_size = 0, batch = 0, prefetch = 0;
  double memory_limit_bytes = 0;
  bool feasible = false;
  double analytic_time_s = 0, predicted_time_s = 0;
  double measured_time_s = 0, measured_min_s = 0, measured_max_s = 0;  // median, min, max of the timed steps
  std::vector<double> steps_s;
  double predicted_peak_bytes = 0;  // simulated, the cluster's reserve excluded
  double measured_peak_bytes = 0;   // the largest rank's tracked peak less the executor's baseline
  double baseline_bytes = 0, padding_bytes = 0;
  double device_free_bytes = 0, device_total_bytes = 0;  // the driver's view after the last step (GPUs)
  double time_error = 0, memory_error = 0;               // (measured - predicted) / predicted
  double loss = 0;
};
nlohmann::json to_json(const ValidationRow& r);
ValidationRow row_from_json(const nlohmann::json& j);

struct SpeedupResult {
  std::string config, faster, than;
  double predicted = 0, measured = 0, error = 0;  // error: measured / predicted - 1
  bool ok = false;
};

struct ValidationSummary {
  int plans = 0;  // feasible rows
  double median_abs_time_error = 0, max_abs_time_error = 0, max_abs_memory_error = 0;
  std::vector<SpeedupResult> speedups;
  std::vector<std::string> failures;  // what passed a tolerance
  bool ok() const { return failures.empty() && plans > 0; }
};
ValidationSummary summarize(const std::vector<ValidationRow>& rows, const experiments::ValidationSpec& spec);

using DeviceFactory = std::function<std::unique_ptr<validate::Device>(const costmodel::Plan&)>;
using Progress = std::function<void(const std::string&)>;

struct ValidationOptions {
  std::optional<costmodel::Calibration> calibration;  // replaces the clusters' own
  std::string out_dir;
  bool resume = false;
  bool tasks = false;  // OUT/tasks/UNIT.csv: every task's predicted and measured time (rank 0, last step)
  validate::GemmMath gemm_math = validate::GemmMath::kFp32;  // see validate::ExecutorOptions::gemm_math
  Progress progress;                     // called on rank 0
};

// Collective: every rank runs every plan. Returns the rows (rank 0 has them all; the outputs are
// written by rank 0).
std::vector<ValidationRow> run_validation(const experiments::Experiment& e, validate::Communicator& comm,
                                          const DeviceFactory& make_device, const ValidationOptions& options);

// Rank 0: validation.csv and summary.json in `dir`, then the plot (returns a note when it could not
// be drawn).
std::string write_validation_outputs(const std::string& dir, const experiments::Experiment& e,
                                     const std::vector<ValidationRow>& rows, const ValidationSummary& summary,
                                     const nlohmann::json& provenance);

}  // namespace osdp::experiments
