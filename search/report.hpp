// Turning a search result into what users read: a plan file, a JSON object and a per-kind summary.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"
#include "search/scheduler.hpp"

namespace osdp::search {

// "attention: DP x 46, ZDP x 2" per operator kind, kinds in forward order, one entry per line.
std::vector<std::string> summarize_choices(const costmodel::Workload& w,
                                           const std::vector<costmodel::Choice>& choices);

struct PlanContext {
  std::string tool_version;
  costmodel::ModelSpec model;
  costmodel::ClusterSpec cluster;
  std::optional<costmodel::Calibration> calibration;
  costmodel::CostOptions cost_options;
};

costmodel::Plan make_plan(const PlanContext& ctx, const costmodel::Workload& w, const SearchResult& r);

// {feasible, strategy, batch_size, throughput_samples_per_s, iteration_time_s, peak_memory_bytes,
//  memory_limit_bytes, search_seconds, complete, candidates[...], plan | min_fit_memory_bytes}
nlohmann::json result_json(const PlanContext& ctx, const costmodel::Workload& w, const SearchResult& r);

}  // namespace osdp::search
