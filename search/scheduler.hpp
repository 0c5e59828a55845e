// The batch-size scheduler (seed paper, Scheduler module; DESIGN.md section 5): raise the micro-batch
// size until even the smallest-memory plan no longer fits, search a plan at each batch size, and
// keep the one with the highest throughput (samples per second over all ranks, N b / T) — not the
// shortest iteration.
//
// Batch sizes visited: every b up to 256, then a geometric grid (ratio 2^(1/8)) up to the largest b
// that fits, which is always visited. Batch sizes are solved in order of the throughput their lower
// bound on time allows (exact: the LP relaxation), each told the time it must beat; one that cannot
// beat the best found is marked skipped.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"
#include "search/strategy.hpp"

namespace osdp::search {

struct SearchOptions {
  SpaceOptions space;
  std::optional<int> batch;  // a fixed micro-batch size instead of the scheduler
  int max_batch = 1 << 20;
  double memory_limit_bytes = 0;
  double reserve_bytes = 0;
};

struct BatchCandidate {
  int batch = 0;
  bool feasible = false;
  bool skipped = false;  // plans fit, but none beats the best throughput found before it
  double time_s = 0, peak_bytes = 0, throughput = 0;
  std::int64_t nodes = 0;
  bool complete = true;
};

struct SearchResult {
  std::string strategy;
  bool feasible = false;
  int batch = 0;
  double time_s = 0, peak_bytes = 0, throughput = 0;
  double memory_limit_bytes = 0;
  double min_fit_bytes = 0;  // the smallest memory limit under which batch 1 fits (set when infeasible)
  std::vector<costmodel::Choice> choices;  // per operator
  StrategyOutcome outcome;                 // of the chosen batch size (or of batch 1 when infeasible)
  std::vector<BatchCandidate> candidates;
  double search_seconds = 0;
  bool complete = true;  // false when a bounded strategy stopped early at some batch size
};

SearchResult run_search(const costmodel::Workload& workload, const costmodel::CostModel& model,
                        const Strategy& strategy, const SearchOptions& options);

// The batch sizes the scheduler visits when the largest that fits is `b_max`.
std::vector<int> batch_grid(int b_max);

}  // namespace osdp::search
