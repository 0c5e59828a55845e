// A search as users ask for it, by names and option strings: what `osdp plan` and the Python package's
// osdp.plan() share. prepare_search() loads the model, cluster and calibration and parses the options
// (errors name the option, as the command line spells it); run_request() searches and reports.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"
#include "search/report.hpp"
#include "search/scheduler.hpp"
#include "search/strategy.hpp"

namespace osdp::search {

struct PlanRequest {
  std::string model, cluster;
  std::string calibration;  // name or file; empty: the cluster's own, if it names one
  std::string memory;       // "16GiB", a number of bytes; empty: the device's memory
  std::string strategy = "exact";
  std::string batch = "auto";       // a positive integer, or auto for the batch-size scheduler
  std::string checkpoint = "auto";  // auto, on, off
  std::string tier = "extended";    // extended, paper
  int split_max = 4, prefetch = 0;
  bool regather = false, groups = false;
  std::int64_t dfs_budget = 2'000'000;
};

// The loaded inputs, the cost model and the search options. The cost model refers to the context's
// calibration, so the whole is kept behind one pointer.
struct PreparedSearch {
  PlanContext ctx;
  costmodel::Workload workload;
  std::optional<costmodel::CostModel> model;
  SearchOptions options;
  StrategyRegistry registry;
  const Strategy* strategy = nullptr;
};

// `tool_version` goes into the plan. Throws InputError (files) or UsageError (options).
std::unique_ptr<PreparedSearch> prepare_search(const PlanRequest& r, const std::string& tool_version);

// Bytes from an option's text ("16GiB"), within the physical bounds of a device's memory.
double parse_memory_option(const std::string& text, const char* option);

}  // namespace osdp::search
