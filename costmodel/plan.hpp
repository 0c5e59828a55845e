// Plan files: the micro-batch size and per-operator choices, with everything needed to reproduce
// them — the model, the cluster, the calibration, and the cost model that produced the plan — and
// its predicted step time, peak memory and throughput. Another program (the simulator, the
// executor, a training script) reads this file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/choice.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/hybrid.hpp"
#include "costmodel/model.hpp"

namespace osdp::costmodel {

struct OperatorPlan {
  std::string name;
  Choice choice;
};

struct Plan {
  std::string tool_version;
  std::string strategy;
  ModelSpec model;
  ClusterSpec cluster;
  std::optional<Calibration> calibration;
  CostOptions cost_options;
  double memory_limit_bytes = 0;
  int batch_size = 1;
  int prefetch = 0;  // all-gathers issued ahead of the operator that needs them (0: none)
  std::vector<OperatorPlan> operators;
  double predicted_iteration_time_s = 0;
  double predicted_peak_memory_bytes = 0;
  double predicted_throughput_samples_per_s = 0;
};

nlohmann::json to_json(const Plan& plan);

class JsonReader;
struct Operator;
// An operator's choice as plan files write it ("mode", "split", "zdp_slices", "checkpoint", and
// "group", "comm" when not the default), and read back: checked against the operator (its splits,
// whether it can be checkpointed) and the cluster (node groups need several nodes); the reader's
// errors name the file and the JSON pointer.
nlohmann::json choice_json(const Choice& c);
Choice read_choice(JsonReader& o, const Operator& op, const ClusterSpec& cluster);
// Checks that the operators are exactly those of the model's lowering, in order.
Plan read_plan(const nlohmann::json& doc, const std::string& file);

// A hybrid plan file (osdp plan --hybrid --out): kind "hybrid", schema_version 1, the model, the
// cluster, the calibration (when one priced the plan), the cost model's tier, the memory limit and
// the "hybrid" block (hybrid.hpp's to_json). hybrid_plan_file_json writes one.
struct HybridPlanFile {
  std::string tool_version, strategy;
  ModelSpec model;
  ClusterSpec cluster;
  std::optional<Calibration> calibration;  // the one the plan was priced with, if any
  CostOptions cost_options;                // its tier and checkpoint_regather
  double memory_limit_bytes = 0;
  HybridPlan plan;
  double predicted_time_s = 0, predicted_peak_bytes = 0, predicted_throughput = 0;
};
// Checks the stages against the model's hybrid workload at the plan's pipeline degree: the units in
// order, each stage non-empty, TP degrees powers of two dividing a stage's ranks and allowed for
// every operator of the unit, and each operator's choice (plan.hpp's read_choice). Errors name the
// file and the JSON pointer.
HybridPlanFile read_hybrid_plan(const nlohmann::json& doc, const std::string& file);
nlohmann::json hybrid_plan_file_json(const HybridPlanFile& f, const HybridWorkload& hw,
                                     const HybridEvaluation& ev);

}  // namespace osdp::costmodel
