// The "measured" evaluator (osdp validate): every plan run for real on a backend and held to the
// simulator's prediction. The plans come from an experiment (each unit searched, with the
// calibration given or the cluster's) or from plan files (run as they are, no search). For each:
// the simulator predicts its step time and peak memory; the executor runs warm-up steps, then timed
// ones (each the slowest rank's); the median is compared with the prediction.
//
// Rows are experiments::UnitResult, with the evaluations analytic, sim and measured and a
// Measurement; they go through the sweep's results directory (experiments/results_dir.hpp: fsync'd
// row log, directory lock, --resume, no finished row overwritten without --resume or --force) as
// the plans of each group finish (a group — a configuration, or all plan files — runs side by side,
// steps interleaved; or one plan after the other, each with the device to itself: GPUs). At the end
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
#include "costmodel/uncertainty.hpp"
#include "experiments/experiment.hpp"
#include "experiments/run.hpp"
#include "validate/executor/backend.hpp"

namespace osdp::experiments {

// The evaluators of a measured row, in order.
const std::vector<EvaluatorKind>& measured_evaluators();

// One plan to measure.
struct MeasuredItem {
  int index = 0;
  std::string key;     // identity for --resume
  std::string group;   // items of one group run side by side
  std::string label;   // the strategy label, or the plan file's name
  std::string origin;  // for messages: "unit 3 (fsdp, nd-48x1024 on titan-rtx-8)" or the file
  int world_size = 0;
  std::optional<Unit> unit;             // from an experiment: searched when it runs
  std::optional<costmodel::Plan> plan;  // from a plan file: run as it is
};

struct MeasuredJob {
  std::string name;    // the experiment's, or "plans"
  std::string output;  // default results directory
  std::vector<MeasuredItem> items;
  ValidationSpec validation;
  nlohmann::json source;  // recorded in summary.json: the experiment as read, or the plan files
};

// Every unit of `e` (world sizes resolved from the clusters, nothing searched yet).
MeasuredJob measured_job(const Experiment& e);
// The plan files, read and checked (throws InputError naming the file and pointer).
MeasuredJob measured_job(const std::vector<std::string>& plan_files, const ValidationSpec& validation);

// Throws UsageError naming the first item whose world size is not `ranks`: before anything runs.
void check_world_size(const MeasuredJob& job, int ranks);

struct SpeedupResult {
  std::string group, faster, than;
  double predicted = 0, measured = 0, error = 0;  // error: measured / predicted - 1
  bool ok = false;
};

// Two plans of one configuration predicted apart: the model is sure of their order (the 90% interval
// of their ratio draw by draw, both priced on the same draws of the calibration's errors, excludes 1;
// for rows with intervals but no draws, their intervals do not overlap; without either, no condition)
// and their predicted step times differ by more than either plan's measured spread ((max - min) /
// median of its timed steps: a smaller gap is below what the run can resolve). The measured order must
// be the predicted one: a reversal fails the validation.
struct OrderResult {
  std::string group, a, b;                // strategy labels; a predicted faster
  double predicted_gap = 0, spread = 0;   // predicted b / a - 1; the larger measured spread
  bool by_interval = false;               // judged by the draws or the intervals, not by the spread
  double measured_a = 0, measured_b = 0;  // median step times
  bool ok = false;                        // measured_a < measured_b
};

// Two plans of one configuration, both predicted on the same draws of the calibration's errors: b's
// measured median step over a's against its predicted 90% interval (the central 90% of b / a draw by
// draw), allowing for the measured ratio's own uncertainty: the two plans' timed steps resampled in
// pairs (step i of both ran side by side), ln(resampled ratio / measured ratio) added to ln(drawn
// ratio) for every draw and resample; the measured ratio must lie in the central 90% of those sums.
// The speedup intervals `osdp plan` prints are the drawn ones; this says whether they hold what a run
// measures.
struct RatioCoverage {
  std::string group, a, b;
  double measured = 0, predicted = 0;    // b / a: the medians of the timed steps; the nominal predictions
  double low = 0, high = 0;              // the drawn 90% interval of b / a
  double noise_low = 0, noise_high = 0;  // the 90% interval of the sums above, as a ratio
  bool inside_drawn = false;             // measured within [low, high]
  bool inside = false;                   // measured within [noise_low, noise_high]
};
// The RatioCoverage of b over a; nullopt unless both rows have the same draws (at least two) and
// measured steps. Deterministic: the resampling is seeded from the two rows' indices.
std::optional<RatioCoverage> ratio_coverage(const UnitResult& a, const UnitResult& b);

struct ValidationSummary {
  int plans = 0;  // feasible rows
  double median_abs_time_error = 0, max_abs_time_error = 0, max_abs_memory_error = 0;
  std::vector<SpeedupResult> speedups;
  int order_pairs = 0;                // pairs of plans within a configuration
  std::vector<OrderResult> orders;    // the pairs whose predicted gap exceeds the measured spread
  std::vector<std::string> failures;  // what passed a tolerance
  // Coverage: the plans whose prediction has a 90% interval, and those measured inside it (target:
  // about 90%; far fewer, the intervals are too narrow; nearly all, too wide to tell plans apart).
  int with_interval = 0, covered = 0;
  double coverage() const { return with_interval > 0 ? static_cast<double>(covered) / with_interval : 0.0; }
  // How far the intervals reach from their predictions: the median over those plans of low / predicted
  // - 1 and of high / predicted - 1 (a coverage near 100% with -30% / +50% says little).
  double interval_low = 0, interval_high = 0;
  // The same count with every measured step divided by the run's own level (composition's "level":
  // the probes' estimator over this run, configurations as groups); none without that level. A run's
  // plans share most of their error (the machine's level at that time), so its coverage is nearly all
  // or much less; about its own level, what is left is how well the intervals hold the plans' spread.
  std::optional<int> covered_about_level;
  // The count a run of these plans is expected to have inside, from the draws themselves: draw d taken
  // as the run (each plan's step in draw d, times its median's own noise: its timed steps resampled,
  // the plans of a configuration at the same indices, since they ran side by side), counted inside the
  // intervals. The draws share across plans what a run's plans share (the step's level, every GEMM and
  // collective they both price), so a run's count spreads far wider than a binomial's: with the level
  // most of an interval's width, a run is nearly all inside or far less. None unless every plan with an
  // interval has the same draws, at least 20.
  struct ExpectedCoverage {
    int draws = 0;
    int low = 0, median = 0, high = 0;  // the count's 5th percentile, median and 95th (order statistics)
    double in_band = 0;                 // the share of draws whose count is within kCoverageBand
  };
  std::optional<ExpectedCoverage> expected_coverage;
  // Every two plans of a configuration with draws, b the one predicted slower (RatioCoverage).
  std::vector<RatioCoverage> ratios;
  int ratios_inside(bool drawn_alone = false) const;  // inside the widened (or the drawn) intervals
  // The median over those pairs of the drawn interval's reach, sqrt(high / low) - 1 (0 without pairs).
  double ratio_reach() const;
  // The calibration probes' estimator (experiments/probes.hpp composition_fit) over this run's rows:
  // how far the plans of a configuration depart from their predictions between strategies beyond
  // their steps' noise and what the draws (the calibration's errors and its composition error)
  // already spread them by. Null without two plans in a configuration.
  nlohmann::json composition;
  bool memory_failed = false;  // a peak-memory error passed its tolerance (timing noise aside)
  // The torch backend's numerics check (Measurement::check_*): plans checked, the largest of each
  // difference, and whether one passed its tolerance (kCheck*; noise does not excuse it either).
  int checked = 0;
  double max_check_loss_error = 0, max_check_grad_diff = 0, max_check_weight_diff = 0;
  bool numerics_failed = false;
  // The machine's noise: the median over the plans of (slowest - fastest timed step) / median step.
  double spread = 0;
  double spread_tolerance = 0;  // the median step-time tolerance it is held to
  bool ok() const { return failures.empty() && plans > 0; }
  // Timing errors cannot be judged when the steps of one plan spread further than the tolerance:
  // the verdict is then inconclusive (unless memory failed, which noise does not excuse).
  bool inconclusive() const {
    return plans > 0 && !memory_failed && !numerics_failed && spread > spread_tolerance;
  }
  const char* verdict() const { return inconclusive() ? "inconclusive" : ok() ? "pass" : "fail"; }
};
// The numerics check's tolerances (fp32; python/osdp/torch/measure.py's _check says how each is
// measured): the loss relative; an operator's gradient as the norm of the difference over the norm
// (1e-3: fp32 rounding is 1e-7-1e-6, but a relu unit whose pre-activation rounds to the other side of
// the kink changes its rows' gradients outright: val-4x384 at micro-batch 4 measured 1.5e-4 in the
// embedding, whose rows few tokens share; a gradient scaled or a shard or slice lost is 1e-1 or
// more); the weights after Adam's first step absolute, where the step's sign is stable (the step moves
// each weight by about the learning rate, 1e-3).
inline constexpr double kCheckLoss = 1e-5, kCheckGrad = 1e-3, kCheckWeight = 5e-5;
// The band of a run's coverage the validations aim at: at least 85% of the plans inside their
// 90% intervals, at most 99%.
inline constexpr double kCoverageBand[2] = {0.85, 0.99};
ValidationSummary summarize(const std::vector<UnitResult>& rows, const ValidationSpec& spec);

using DeviceFactory = std::function<std::unique_ptr<validate::Device>(const costmodel::Plan&)>;
using Progress = std::function<void(const std::string&)>;

// A group of plans run outside this process (the torch backend: experiments/torch_measured.hpp)
// rather than by the executor on the communicator's ranks.
struct ExternalPlan {
  const costmodel::Plan* plan = nullptr;
  std::string label, origin;
};
struct ExternalResult {
  std::vector<double> steps_s;  // each timed step, the slowest rank's time
  double loss = 0;
  double param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;  // the largest rank's local shards
  // The numerics check (Measurement::check_*): -1 when the plan was not checked.
  double check_loss_error = -1, check_grad_diff = -1, check_weight_diff = -1;
  std::string check_note;  // the operators of the largest differences
};
// Runs the plans side by side (warm-up, then timed steps interleaved) and returns one result each.
using GroupRunner =
    std::function<std::vector<ExternalResult>(const std::vector<ExternalPlan>&, const ValidationSpec&)>;

// The bytes of parameters, gradients and optimizer states a rank holds at rest under `plan`: per
// operator (w+g+o) times its share of the P parameters (ceil(P/N) sharded over the world, ceil(P/G)
// in a node group, P under REPLICATE), w + g + o as the plan's precision prices them.
double states_at_rest_bytes(const costmodel::Plan& plan, const costmodel::Workload& workload);

struct ValidationOptions {
  std::string calibration;  // a name or file replacing the clusters' own (experiments only)
  std::string out_dir;
  bool resume = false;
  bool force = false;
  bool tasks = false;  // OUT/tasks/UNIT.csv: every task's predicted and measured time (rank 0, last step)
  validate::GemmMath gemm_math = validate::GemmMath::kFp32;  // see ExecutorOptions::gemm_math
  // ExecutorOptions::emulate_compute: the plans are predicted without interference (a wait does not
  // slow down beside communication), not checked against the unsharded step, and their rows say so
  // (Measurement::emulated).
  bool emulate_compute = false;
  Progress progress;  // called on rank 0
  // Draws of the calibration's uncertainty each plan's prediction is replayed under for its 90%
  // interval (rank 0; 0: none).
  int draws = costmodel::kDefaultDraws;
  // A plan that is not data-parallel first runs one step against the unsharded step
  // (experiments/numerics_check.hpp).
  bool check = true;
  // Searched plans may checkpoint selectively (the torch backend); osdp's executor runs none or full.
  bool selective = true;
  // Each plan runs alone: its device made, its steps run, the device released before the next plan's
  // (a GPU's memory holds one plan at the cap, not a group of them; its speed does not drift with a
  // shared host's load, which interleaving is for).
  bool one_at_a_time = false;
  int group_delay_ms = 0;  // test hook: each group waits this long first (OSDP_VALIDATE_TEST_DELAY_MS)
  // Set: each group's plans run there (the communicator is then a one-rank one, and make_device is not
  // called), and memory is compared at rest (Measurement::state_bytes).
  GroupRunner run_group;
};

// Collective: every rank runs every plan. Returns the rows (rank 0 has them all; it alone writes).
// Throws UsageError (on every rank) when the results directory refuses (finished rows without
// resume or force) or an item's world size is not the job's.
std::vector<UnitResult> run_measured(const MeasuredJob& job, validate::Communicator& comm,
                                     const DeviceFactory& make_device, const ValidationOptions& options);

// Rank 0: validation.csv and summary.json in `dir`, then the plot (returns a note when it could not
// be drawn).
std::string write_validation_outputs(const std::string& dir, const MeasuredJob& job,
                                     const std::vector<UnitResult>& rows, const ValidationSummary& summary,
                                     const nlohmann::json& provenance);

}  // namespace osdp::experiments
