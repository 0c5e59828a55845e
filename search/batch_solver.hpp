// The data-parallel solvers: what a data-parallel strategy (search/strategy.hpp) runs at each batch
// size the batch-size scheduler (scheduler.hpp) tries, behind one interface, chosen by name:
//   exact     the optimum of the analytic model over the whole space (solvers.hpp)
//   fsdp      every operator ZDP (ZeRO-3 / FSDP full shard)
//   zero2     every operator DP (gathered once, kept through backward)
//   ddp       every operator REPLICATE
//   osdp-ref  the released OSDP code's space: per layer attention ZDP or not x MLP ZDP or not, no
//             splitting, solved by a group knapsack over whole MiB
//   dfs       the seed paper's depth-first search, bounded by a node budget
// With checkpointing "auto" the uniform strategies (fsdp, zero2, ddp) try none, full and selective
// checkpointing of every operator (osdp-ref, the released space: none and full) and keep the fastest
// plan; exact and dfs decide per operator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "search/space.hpp"

namespace osdp::search {

struct SolverOutcome {
  Instance instance;  // what the strategy solved (for --emit-costs)
  Solution solution;
  std::vector<costmodel::Choice> choices;  // per operator, when feasible
};

class BatchSolver {
 public:
  virtual ~BatchSolver() = default;
  virtual std::string name() const = 0;
  virtual std::string summary() const = 0;
  // The part of the requested space this solver searches.
  virtual SpaceOptions space(const SpaceOptions& requested) const = 0;
  // Best selection with time below `time_cutoff_s` (a strategy may ignore the cutoff), or an
  // infeasible outcome; `bounded` marks one where selections fit but none beats the cutoff.
  virtual SolverOutcome solve(const BatchCosts& costs, double time_cutoff_s) const = 0;
  // A lower bound on the time of any selection that fits (infinity: none fits). The scheduler solves
  // batch sizes in order of the throughput this bound allows and skips those it rules out; the
  // default is the LP relaxation over the choices the strategy priced, valid for every strategy.
  virtual double lower_bound_s(const BatchCosts& costs) const;
  // A cheaper bound, never above lower_bound_s: the scheduler bounds every range with it first and
  // asks for lower_bound_s only for the ranges it cannot rule out. The default is one LP over every
  // choice priced (quick_lower_bound_time).
  virtual double quick_lower_bound_s(const BatchCosts& costs) const;
  // The smallest peak any selection of this strategy reaches (what memory would let it fit).
  virtual double min_peak_bytes(const BatchCosts& costs) const;
};

class SolverRegistry {
 public:
  void add(std::unique_ptr<BatchSolver> s);
  // Throws UsageError naming the known strategies.
  const BatchSolver& get(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<BatchSolver>> items_;
};

struct SolverLimits {
  std::int64_t dfs_node_budget = 2'000'000;
};

// The built-in solvers, registered by explicit calls.
SolverRegistry default_solvers(const SolverLimits& limits = {});

}  // namespace osdp::search
