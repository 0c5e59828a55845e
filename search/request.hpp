// A search as users ask for it, by names and option strings: the one way into a search, shared by
// `osdp plan`, `osdp sweep` (experiments/run.hpp) and the Python package's osdp.plan().
// prepare_search() loads the model, cluster and calibration and parses the options (errors name the
// option as the command line spells it); run_request() searches with the requested strategy and the
// baselines asked for beside it; report_json() is what `osdp plan --json` prints and osdp.plan()
// returns.
//
// The space: by default the whole space the cluster allows (every pipeline degree, micro-batches 1 to
// 8, every TP degree within a node; on a cluster of several nodes of several devices, node groups and
// two-level collectives per operator). Options narrow it: pp, tp, micro_batches, groups off.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/cost_model.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/uncertainty.hpp"
#include "costmodel/workload.hpp"
#include "search/report.hpp"
#include "search/scheduler.hpp"
#include "search/strategy.hpp"

namespace osdp::search {

struct PlanRequest {
  std::string model, cluster;
  int seq = 0;              // the sequence length (0: the model file's; a Hugging Face config's default)
  int world_size = 0;       // the cluster resized to this many devices (costmodel::resized); 0: as it is
  std::string calibration;  // name or file; empty: the cluster's own, if it names one
  std::string memory;       // "16GiB", a number of bytes; empty: the device's memory
  std::string strategy = "exact";
  std::vector<std::string> baselines;  // strategies run beside it ("none": none)
  // Samples per device per step of a data-parallel plan, or auto (searched). Beyond data
  // parallelism it fixes the global batch at batch x devices (the layouts with that global batch).
  std::string batch = "auto";
  std::string checkpoint = "auto";  // auto, on (full), off, selective
  bool selective = true;            // offer selective checkpointing (false: plans for osdp's executor)
  std::string tier = "extended";    // extended, paper
  int split_max = 4, prefetch = 0;
  bool regather = false;
  std::string groups = "auto";  // auto: node groups and two-level collectives where the cluster has two
                                // levels; off: flat rings over all ranks only
  // The layout space: pipeline degrees and TP degrees allowed (empty: every valid one), micro-batches
  // 1..max_micro_batches or a fixed count (0: searched), a fixed global batch (0: any), the largest
  // micro-batch per device, the schedules ("1f1b", "gpipe" or "both"), sequence parallelism.
  std::vector<int> pp, tp;
  // Expert-parallel degrees offered MoE layers (empty: every valid one; {1}: none), and the busiest
  // expert rank's tokens over its share (costmodel::CostOptions::expert_imbalance).
  std::vector<int> ep;
  double expert_imbalance = 1.0;
  // Context-parallel degrees (empty: every power of two up to max_cp that divides a stage and cuts the
  // sequence; {1}: none) and the variant: "ring", "all-to-all" or "both".
  std::vector<int> cp;
  int max_cp = 16;
  std::string cp_variant = "ring";
  int max_micro_batches = 8, micro_batches = 0, global_batch = 0, max_b0 = 4096;
  std::string schedule = "1f1b";
  bool sequence_parallel = false;
  double galvatron_overlap = 0;  // galvatron only: its overlap coefficient (0: osdp's times)
  std::int64_t dfs_budget = 2'000'000;
  double time_budget_s = 60;  // every search stops by then with the best plan found, "not proved optimal"
  // Draws of the calibration's uncertainty each plan found is priced under, for its 90% intervals
  // (costmodel/uncertainty.hpp; 0: no intervals).
  int draws = costmodel::kDefaultDraws;
  // What the search maximizes: "throughput" (the predicted throughput) or "robust" (the throughput
  // with every fitted price at its 95th percentile: costmodel::at_quantile(kRobustZ); needs a
  // calibration that records errors).
  std::string objective = "throughput";
  // Progress of long searches (about once a second): a line for a terminal.
  std::function<void(const std::string&)> progress;
};

// The request's JSON form (Python's keyword arguments; the keys are PlanRequest's names): unknown
// keys and wrong types are errors naming the key.
PlanRequest read_plan_request(const nlohmann::json& j, const std::string& origin);

// The loaded inputs, the cost models and the search options. The cost models refer to the context's
// calibration, so the whole is kept behind one pointer.
struct PreparedSearch {
  PlanContext ctx;
  std::shared_ptr<const costmodel::Workload> workload;  // lower(model): one stage
  std::optional<costmodel::CostModel> model;            // data-parallel, on every rank
  std::optional<costmodel::PlanCostModel> plan_model;   // any plan; its capacity the memory limit
  SearchOptions options;                                // the batch-size scheduler's
  HybridSearchOptions layouts;                          // the layout search's (its space = options.space)
  StrategyRegistry registry;
  const Strategy* strategy = nullptr;
  std::vector<const Strategy*> baselines;  // those asked for, less the strategy itself
  double time_budget_s = 60;
  int draws = costmodel::kDefaultDraws;  // PlanRequest::draws
  // --objective robust: the calibration as loaded (ctx.calibration is then its 95th-percentile
  // copy, which the searches price with); run_strategy prices the plans found with this one.
  std::optional<costmodel::Calibration> nominal_calibration;
  // When the baselines' searches stop (options.deadline and layouts.deadline: the strategy's).
  std::chrono::steady_clock::time_point baselines_deadline = std::chrono::steady_clock::time_point::max();
};

// Plans record costmodel::tool_version(). Throws InputError (files) or UsageError (options).
std::unique_ptr<PreparedSearch> prepare_search(const PlanRequest& r);

// A strategy's outcome for a prepared search.
PlanOutcome run_strategy(const PreparedSearch& p, const Strategy& s);

struct PlanReport {
  std::unique_ptr<PreparedSearch> prepared;
  PlanOutcome outcome;
  std::vector<PlanOutcome> baselines;
  // The plan with every split operator whole (without_splits), when it has splits and that fits.
  std::optional<PlanOutcome> unsplit;
  // The plan with one choice per operator kind (one_choice_per_kind), when it has more and that fits.
  std::optional<PlanOutcome> uniform;
};

// The simpler plan a gain from splitting is weighed against: the plan with every split operator
// whole (ZDP where any of its slices was, else DP), the rest as it is, priced by the plan's cost
// model and under the same draws; strategy "without splits". None when no operator is split or the
// whole plan does not fit the memory limit.
std::optional<PlanOutcome> without_splits(const PreparedSearch& p, const PlanOutcome& o);
// The simpler plan a gain from mixing modes is weighed against: every operator of a kind (attention,
// MLP, an MoE layer's MLP, ...) takes the choice most of that kind's operators have in the plan (the first of
// them in operator order on a tie), the layout as it is; strategy "one choice per kind", priced like
// without_splits. None when every kind already has one choice or that plan does not fit the limit.
std::optional<PlanOutcome> one_choice_per_kind(const PreparedSearch& p, const PlanOutcome& o);
PlanReport run_request(const PlanRequest& r);

// What `osdp plan --json` prints: the outcome (outcome_json) with the model, the cluster, the world
// size and "baselines": each baseline's figures (outcome_json less its plan and per-candidate detail)
// with speedup_over_baseline, the plan's throughput over the baseline's (when both fit), and its
// speedup_interval (null without draws); "without_splits": the same for PlanReport::unsplit, or null;
// "one_choice_per_kind": for PlanReport::uniform.
nlohmann::json report_json(const PlanReport& r);

// Bytes from an option's text ("16GiB"), within the physical bounds of a device's memory.
double parse_memory_option(const std::string& text, const char* option);

}  // namespace osdp::search
