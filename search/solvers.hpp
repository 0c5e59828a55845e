// Solvers for the multiple-choice knapsack with a max-transient term (instance.hpp).
//
// exact: for every threshold T among the transient values, only items with transient <= T are
//   allowed and the persistent budget is R = capacity - M0 - T; the optimum over all T is the
//   optimum of the instance (a selection's largest transient is one of the thresholds). Each T is a
//   plain multiple-choice knapsack, solved exactly by a Pareto dynamic program over (persistent,
//   time) states with two prunings that never drop an optimal state:
//     - feasibility: persistent + (smallest persistent of the groups still to come) <= R;
//     - the LP bound of the groups still to come at the budget they have left (their convex hulls'
//       increments bought greedily, a fractional last one): a state whose time plus that bound
//       cannot beat the best time found is dropped; only states within the LP gap survive.
//   Thresholds are visited in order of their LP bound and the search stops when the bound reaches
//   the best time found. Identical groups (every layer of a model) share their LP work.
// brute_force: every combination; for tests.
// dfs: the seed paper's depth-first search with memory and time pruning, stopped by a node budget.
#pragma once

#include <cstddef>
#include <cstdint>
#include <chrono>
#include <limits>

#include "search/instance.hpp"

namespace osdp::search {

// The most DP states solve_exact keeps for the way back to the best selection (8 bytes each:
// 512 MiB). Past it the search keeps the best selection found so far and reports itself incomplete
// (Solution::complete false) instead of growing without bound: a 100,000-layer model once took
// 23 GB before the kernel killed it.
inline constexpr std::size_t kMaxDpStates = std::size_t{64} << 20;
// Selections taking `time_cutoff_s` or longer are of no interest (the scheduler already has a
// better throughput); the result is then infeasible with complete = true. Past `deadline` it stops as
// it does past max_states: the best selection so far, complete false.
Solution solve_exact(const Instance& inst, double time_cutoff_s = std::numeric_limits<double>::infinity(),
                     std::size_t max_states = kMaxDpStates,
                     std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

// A lower bound on the time of any feasible selection (LP relaxation, best threshold); infinity
// when nothing fits.
double lower_bound_time(const Instance& inst);
// A looser bound at the cost of one LP instead of one per threshold: every item allowed, under the
// persistent budget left by the smallest largest-transient any selection can have. Never above
// lower_bound_time; infinity when that budget is already exceeded.
double quick_lower_bound_time(const Instance& inst);

Solution solve_brute_force(const Instance& inst);

Solution solve_dfs(const Instance& inst, std::int64_t node_budget);

}  // namespace osdp::search
