// Running one unit of an experiment: the plan search of its configuration and strategy (the one way
// into a search, search/request.hpp, as `osdp plan` runs it), evaluated by the plan cost model and,
// when asked, by the simulator (symmetric mode for data-parallel plans: exact on the bundled
// homogeneous clusters; every rank for the others).
//
// world_size: the cluster resized (costmodel::resized).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/cluster.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/uncertainty.hpp"
#include "experiments/evaluator.hpp"
#include "experiments/experiment.hpp"
#include "search/request.hpp"
#include "search/scheduler.hpp"

namespace osdp::experiments {

struct Evaluation {
  EvaluatorKind evaluator = EvaluatorKind::kAnalytic;
  bool feasible = false;
  double throughput = 0;  // samples/s over all ranks
  double time_s = 0;
  double peak_bytes = 0;
  // The step time's 90% interval over draws of the calibration's uncertainty (unknown without one).
  costmodel::Interval interval;
  // osdp validate's rows: the prediction in each draw (draw d at index d - 1), so that two plans are
  // compared draw by draw (both priced on the same draw).
  std::vector<double> drawn_s;
};

struct Candidate {  // the best plan of one batch size (analytic)
  int batch;
  double time_s, peak_bytes, throughput;
};

// What the "measured" evaluator (osdp validate, experiments/measured.hpp) adds to a row: the plan run
// for real, beside the simulator's prediction it is held to.
struct Measurement {
  std::string group;  // the plans run side by side (a configuration's JSON): speedups compare within it
  int prefetch = 0;
  std::vector<double> steps_s;      // each timed step: the slowest rank's time
  double min_s = 0, max_s = 0;      // of the steps (their median is the "measured" evaluation's time)
  double predicted_peak_bytes = 0;  // simulated, the cluster's reserve excluded
  double peak_bytes = 0;            // the largest rank's tracked peak less the executor's baseline
  double baseline_bytes = 0, padding_bytes = 0;
  double device_free_bytes = 0, device_total_bytes = 0;  // the driver's view after the last step (GPUs)
  double time_error = 0, memory_error = 0;               // (measured - predicted) / predicted
  double loss = 0;                                       // NaN where compute was emulated (no loss computed)
  bool emulated = false;  // compute emulated (ExecutorOptions::emulate_compute): communication measured
  // The torch backend, which measures no peak (peak_bytes 0): the bytes of parameters, gradients and
  // optimizer states in the largest rank's local shards, and the plan's at-rest states per rank
  // ((w+g+o) of each operator's share); memory_error compares these two instead.
  double state_bytes = 0, predicted_state_bytes = 0;
  // The torch backend's numerics check: one step of the plan in FSDP2 on osdp's executor arithmetic
  // against osdp's executor, from the same weights and tokens: the loss's relative error, the largest
  // gradient difference over the operator's largest gradient, the largest difference of the updated
  // weights; -1 when not checked. check_note names the operators of the largest differences.
  double check_loss_error = -1, check_grad_diff = -1, check_weight_diff = -1;
  std::string check_note;
};

struct UnitResult {
  int index = 0;
  std::string key;
  std::string model, cluster, strategy;  // names for the tables
  int world_size = 0;
  double memory_limit_bytes = 0;
  bool feasible = false;
  int batch_size = 0;  // samples per device per micro-batch
  int pp = 1, micro_batches = 1;
  int global_batch = 0;      // samples per step over all devices
  double min_fit_bytes = 0;  // when nothing fits
  std::string plan_summary;
  // A plan beyond data parallelism, unit by unit (rows.jsonl only): [{"name", "stage", "tp",
  // "operators": [choice labels]}]; null for data-parallel plans.
  nlohmann::json units;
  std::vector<Evaluation> evaluations;
  std::vector<Candidate> candidates;
  std::optional<Measurement> measurement;  // rows of osdp validate

  const Evaluation* evaluation(EvaluatorKind evaluator) const;  // nullptr when not evaluated so
};

// A unit's configuration and strategy as a search request; `calibration` (a name or file, when given)
// replaces the one the unit's cluster names.
// `selective`: whether the search may checkpoint selectively (false for osdp's executor).
search::PlanRequest unit_request(const Unit& unit, const std::string& calibration = "",
                                 bool selective = true);
// One unit searched: everything its evaluators need (report.outcome.plan when one fits).
struct PlannedUnit {
  search::PlanReport report;
  const search::PlanOutcome& outcome() const { return report.outcome; }
};
PlannedUnit plan_unit(const Unit& unit, const std::string& calibration = "", bool selective = true);

// A searched unit's row without its evaluations: names, sizes, the batch, the candidates, the plan
// summary. Every evaluator's row starts from it.
UnitResult unit_row(const Unit& unit, const PlannedUnit& planned);
// The choices per operator kind on one line ("embedding: ZDP x 1; attention: DP x 4"), for rows.
std::string plan_summary(const costmodel::Workload& w, const std::vector<costmodel::Choice>& choices);

// Throws osdp::Error for bad names or files (the sweep records those as failed rows).
UnitResult run_unit(const Unit& unit, const Experiment& e);

nlohmann::json to_json(const UnitResult& r);
UnitResult unit_result_from_json(const nlohmann::json& j);

}  // namespace osdp::experiments
