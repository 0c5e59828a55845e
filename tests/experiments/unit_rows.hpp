// Rows for the experiments tests: an evaluation and a unit's result with fixed, readable fields.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "experiments/run.hpp"

namespace osdp::experiments::testing {

// An evaluation (by the evaluator of that name) of throughput `throughput` samples/s; time is
// 8 samples / throughput.
inline Evaluation ev(const std::string& name, bool feasible, double throughput) {
  return {evaluator_named(name).value(), feasible, throughput, feasible ? 8.0 / throughput : 0.0,
          feasible ? 1e9 : 0.0,          {},       {}};
}

// Unit `index` of strategy `strategy` (model "m", cluster "c", 8 ranks, 8 GB), feasible as its
// first evaluation is.
inline UnitResult result(int index, const std::string& strategy, std::vector<Evaluation> evs,
                         std::string summary = "") {
  UnitResult r;
  r.index = index;
  r.key = "k" + std::to_string(index);
  r.model = "m";
  r.cluster = "c";
  r.strategy = strategy;
  r.world_size = 8;
  r.memory_limit_bytes = 8e9;
  r.feasible = evs.front().feasible;
  r.batch_size = r.feasible ? 4 : 0;
  r.global_batch = r.feasible ? 32 : 0;  // one stage, one micro-batch: the batch on every device
  r.min_fit_bytes = r.feasible ? 0 : 9.5e9;
  r.plan_summary = std::move(summary);
  r.evaluations = std::move(evs);
  return r;
}

}  // namespace osdp::experiments::testing
