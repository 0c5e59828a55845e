// Turning a search's outcome into what users read: the plan, a JSON object, a per-kind summary of the
// choices and the TP degrees of a plan's stages.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/plan.hpp"
#include "costmodel/uncertainty.hpp"
#include "costmodel/workload.hpp"

namespace osdp::search {

struct PlanOutcome;  // strategy.hpp

// "attention: DP x 46, ZDP x 2" per operator kind, kinds in forward order, one entry per line.
std::vector<std::string> summarize_choices(const costmodel::Workload& w,
                                           const std::vector<costmodel::Choice>& choices);
// Per stage, its units' TP degrees as runs: "embedding tp2, layer0..layer15 tp1".
std::vector<std::string> stage_degrees(const costmodel::Workload& w, const costmodel::Plan& plan);

// What a plan records of where it comes from.
struct PlanContext {
  std::string tool_version;
  costmodel::ModelSpec model;
  costmodel::ClusterSpec cluster;
  std::optional<costmodel::Calibration> calibration;
  costmodel::CostOptions cost_options;
};
// The plan's provenance from the context (its decisions and predictions stay).
void stamp(costmodel::Plan& plan, const PlanContext& ctx, const std::string& strategy,
           double memory_limit_bytes);

struct SearchResult;  // scheduler.hpp
// The data-parallel plan of a batch-size scheduler's result (feasible), stamped with the context, its
// predictions the scheduler's.
costmodel::Plan make_plan(const PlanContext& ctx, const costmodel::Workload& w, const SearchResult& r);

// {feasible, strategy, complete, memory_limit_bytes, search_seconds; when feasible batch_size (per
//  device per micro-batch), micro_batches, pp, global_batch, throughput_samples_per_s,
//  iteration_time_s, peak_memory_bytes, bubble_fraction, choices, stages, plan; else
//  min_fit_memory_bytes; candidates and skipped_ranges (data-parallel strategies), layouts
//  (the others); with draws (PlanOutcome::drawn_time_s) iteration_time_interval_s and
//  throughput_interval, each [low, high] at interval_level, and draws}
nlohmann::json outcome_json(const PlanOutcome& o);

// An outcome's 90% intervals (costmodel/uncertainty.hpp) from its draws; unknown without them.
costmodel::Interval time_interval(const PlanOutcome& o);
costmodel::Interval throughput_interval(const PlanOutcome& o);
// The speedup of `a` over `b` (throughput over throughput) in each draw, both priced on the same draw.
costmodel::Interval speedup_interval(const PlanOutcome& a, const PlanOutcome& b);
// Whether a speedup's interval reaches 1: the gain (or loss) is within the calibration's error.
bool within_error(const costmodel::Interval& speedup);

}  // namespace osdp::search
