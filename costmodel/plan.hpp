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

}  // namespace osdp::costmodel
