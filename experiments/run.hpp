// Running one unit of an experiment: the plan search of its configuration and strategy, evaluated
// by the analytic model and, when asked, by the simulator (symmetric mode: exact on the bundled
// homogeneous clusters).
//
// world_size: a cluster with an inter-node link is resized in whole nodes (world_size must be a
// multiple of its devices per node); a single-level cluster becomes one flat node of world_size
// devices.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <optional>

#include "costmodel/cluster.hpp"
#include "costmodel/plan.hpp"
#include "experiments/experiment.hpp"
#include "search/scheduler.hpp"

namespace osdp::experiments {

struct Evaluation {
  std::string evaluator;  // analytic | sim
  bool feasible = false;
  double throughput = 0;  // samples/s over all ranks
  double time_s = 0;
  double peak_bytes = 0;
};

struct Candidate {  // the best plan of one batch size (analytic)
  int batch;
  double time_s, peak_bytes, throughput;
};

struct UnitResult {
  int index = 0;
  std::string key;
  std::string model, cluster, strategy;  // names for the tables
  int world_size = 0;
  double memory_limit_bytes = 0;
  bool feasible = false;
  int batch_size = 0;
  double min_fit_bytes = 0;  // when nothing fits
  std::string plan_summary;
  std::vector<Evaluation> evaluations;
  std::vector<Candidate> candidates;
};

costmodel::ClusterSpec resize(costmodel::ClusterSpec c, int world_size);

// One unit searched: everything its evaluators need.
struct PlannedUnit {
  costmodel::ModelSpec model;
  costmodel::ClusterSpec cluster;  // resized to the unit's world size
  std::optional<costmodel::Calibration> calibration;
  costmodel::CostOptions options;
  costmodel::Workload workload;
  search::SearchOptions search;
  search::SearchResult result;
  std::optional<costmodel::Plan> plan;  // when a plan fits
};
// `calibration` (when given) replaces the one the unit's cluster names.
PlannedUnit plan_unit(const Unit& unit,
                      const std::optional<costmodel::Calibration>& calibration = std::nullopt);

// Throws osdp::Error for bad names or files (the sweep records those as failed rows).
UnitResult run_unit(const Unit& unit, const Experiment& e);

nlohmann::json to_json(const UnitResult& r);
UnitResult unit_result_from_json(const nlohmann::json& j);

}  // namespace osdp::experiments
