// The batch-size scheduler (seed paper, Scheduler module; DESIGN.md section 5): raise the micro-batch
// size until even the smallest-memory plan no longer fits, search a plan at each batch size, and
// keep the one with the highest throughput (samples per second over all ranks, N b / T) — not the
// shortest iteration.
//
// Exact over every batch size from 1 to the largest that fits, bounded in ranges: a plan's step
// time per sample never rises with b, and a plan that fits at b fits at every smaller b, so the LP
// bound of the instance with times priced at a range's largest b and memory at its smallest bounds
// the time per sample at every b of it (scheduler.cpp has the argument). Best first by the
// throughput a bound allows, starting from b = 1..16 one by one and the rest as one range: each is bounded
// with the strategy's quick bound, then with its tight one once nothing better is left open; a single batch
// size is then solved, told the time it must beat, and a wider range is split in two. The search ends when no
// bound left can beat the best plan; what it skipped is in `skipped_ranges` with the bound that ruled it out.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"
#include "search/batch_solver.hpp"

namespace osdp::search {

struct SearchOptions {
  SpaceOptions space;
  std::optional<int> batch;  // a fixed micro-batch size instead of the scheduler
  int max_batch = 1 << 20;
  double memory_limit_bytes = 0;
  double reserve_bytes = 0;
  // The time budget: past it the search keeps the best plan found (complete false); batch sizes not
  // solved by then are left unproved.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct BatchCandidate {
  int batch = 0;
  bool feasible = false;
  bool skipped = false;  // plans fit, but none beats the best throughput found before it
  double time_s = 0, peak_bytes = 0, throughput = 0;
  std::int64_t nodes = 0;
  bool complete = true;
};

// Batch sizes from..to, none of which can beat the chosen plan: at most max_throughput.
struct SkippedRange {
  int from = 0, to = 0;
  double max_throughput = 0;
};

struct SearchResult {
  std::string strategy;
  bool feasible = false;
  int batch = 0;
  double time_s = 0, peak_bytes = 0, throughput = 0;
  double memory_limit_bytes = 0;
  double min_fit_bytes = 0;  // the smallest memory limit under which batch 1 fits (set when infeasible)
  std::vector<costmodel::Choice> choices;    // per operator
  SolverOutcome outcome;                   // of the chosen batch size (or of batch 1 when infeasible)
  std::vector<BatchCandidate> candidates;    // the batch sizes bounded or solved one by one, in order
  std::vector<SkippedRange> skipped_ranges;  // in order; with candidates, every b from 1 to the largest
  double search_seconds = 0;
  bool complete = true;  // false when a bounded strategy stopped early at some batch size
};

SearchResult run_search(const costmodel::Workload& workload, const costmodel::CostModel& model,
                        const BatchSolver& strategy, const SearchOptions& options);

}  // namespace osdp::search
