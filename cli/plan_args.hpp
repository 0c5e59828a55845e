// What `osdp plan` and `osdp plan --hybrid` share (cli/plan_command.cpp registers both and runs the
// data-parallel plan; cli/plan_hybrid_command.cpp runs the hybrid one): the parsed options, and the
// hybrid search as the plain plan shows it below the data-parallel one. Internal to cli/.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/hybrid.hpp"
#include "search/hybrid.hpp"
#include "search/request.hpp"

namespace osdp::cli {

struct PlanArgs {
  search::PlanRequest req;  // the search: names, files and option strings (search/request.hpp)
  std::string out, emit_costs, baseline = "fsdp", evaluate = "analytic";
  int evaluate_top = 5;
  bool json = false;
  // --hybrid (search/hybrid.hpp)
  bool hybrid = false, sequence_parallel = false, no_hybrid = false;
  std::vector<int> pp, tp;
  std::string schedule = "1f1b", trace;
  int max_micro_batches = 8, micro_batches = 0, global_batch = 0, max_b0 = 4096;
  double galvatron_overlap = 0;
};

// The hybrid cost model of a prepared search, its capacity the search's memory limit.
costmodel::HybridCostModel hybrid_cost_model(const search::PreparedSearch& prepared);
// The hybrid search's options from the command line and the prepared search's space.
search::HybridSearchOptions hybrid_options(const PlanArgs& a, const search::PreparedSearch& prepared);
// A hybrid result as `--json` writes it: strategy, layouts, the plan and its evaluation.
nlohmann::json hybrid_result_json(const search::HybridResult& x);
// One line per stage of a hybrid plan: its units' TP degrees, as runs.
std::vector<std::string> stage_degrees(const search::HybridResult& r);
// `osdp plan --hybrid`: returns the exit code.
int run_plan_hybrid(const PlanArgs& a);

}  // namespace osdp::cli
