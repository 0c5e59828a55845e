// Experiment files (schema_version 1, strict like every input): a base configuration, sweep axes
// whose Cartesian product is run, labelled strategy configurations, evaluators and where results go.
//
//   {"schema_version": 1, "name": "paper-fig5", "description": "...",
//    "base": {"model": "nd-48x1024", "cluster": "titan-rtx-8", "memory": "8GB", "split_max": 1,
//             "checkpoint": "off", "prefetch": 0, "tier": "extended", "world_size": 8, "batch": "auto",
//             "pp": 1, "tp": 1, "micro_batches": 1},
//    "axes": {"model": [...], "cluster": [...], "world_size": [...], "memory": [...],
//             "split_max": [...], "checkpoint": [...], "checkpoint_regather": [...], "prefetch": [...],
//             "pp": [...], "tp": [...], "micro_batches": [...], "global_batch": [...], "schedule": [...]},
//    "strategies": [{"label": "fsdp", "strategy": "fsdp"},
//                   {"label": "exact+split", "strategy": "exact", "split_max": 4}],
//    "baseline": "fsdp", "evaluators": ["analytic", "sim"], "output": "results/paper-fig5"}
//
// A unit of work is one configuration (a point of the axes' product; axes are taken in the
// alphabetical order of their names — JSON objects are unordered — the last varying fastest) with
// one strategy (strategies innermost, in file order); it yields one result per evaluator. A unit is
// searched as `osdp plan` searches (search/request.hpp): over the whole space the cluster allows
// unless the configuration narrows it (pp, tp, micro_batches, global_batch, groups "off").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/evaluator.hpp"

namespace osdp::experiments {

struct Config {
  std::string model;
  int seq = 0;  // the sequence length; 0: the model's
  std::string cluster;
  int world_size = 0;  // 0: the cluster's own size
  std::string memory;  // a size string ("8GB"); empty: the device's memory
  int split_max = 1;
  std::string checkpoint = "off";  // off | on | auto
  int prefetch = 0;
  std::string tier = "extended";     // extended | paper
  bool checkpoint_regather = false;  // a checkpointed ZDP operator gathers again for its recompute
  std::optional<int> batch;          // samples per device per micro-batch; empty: searched
  // Node groups and two-level collectives: "auto" (where the cluster has two levels), "on", "off".
  std::string groups = "auto";
  // The layout space: a fixed pipeline degree, TP degree, micro-batch count, global batch (0: searched)
  // and the pipeline schedules ("1f1b", "gpipe" or "both").
  int pp = 0, tp = 0, micro_batches = 0, global_batch = 0;
  std::string schedule = "1f1b";
  // Files of schema_version 1 were written for the data-parallel space: what they leave open is
  // searched there (one stage, one micro-batch, TP 1, groups off). Not part of a unit's key.
  bool schema1_space = false;
};

struct StrategyConfig {
  std::string label;
  std::string strategy;          // a name of search::default_strategies()
  std::optional<int> split_max;  // overrides the configuration's
  std::optional<std::string> checkpoint;
  // The same for the layout (e.g. megatron-3d at pp 1, TP 8: "pure TP"): the degrees allowed (empty:
  // the configuration's) and a micro-batch count.
  std::vector<int> pp, tp;
  std::optional<int> micro_batches;
};

struct Unit {
  int index = 0;  // position in the expansion: the output order
  Config config;
  StrategyConfig strategy;
  std::string key() const;  // a stable identity (for resuming): every field that decides the result
};

// What `osdp validate` checks (the experiment's "validation" block).
struct SpeedupCheck {
  std::string faster, than;  // strategy labels, compared within each configuration
  double tolerance = 0.05;   // |measured speedup / predicted speedup - 1|
};
struct ValidationSpec {
  int warmup = 2;
  int iterations = 5;
  double time_median = 0.05;  // median |time error| over the plans
  double time_max = 0.10;     // largest |time error|
  double memory_max = 0.01;   // largest |peak memory error|
  bool order = true;          // plans predicted apart must measure in that order
  std::vector<SpeedupCheck> speedups;
};

struct Experiment {
  std::string file;
  std::string name;
  std::string description;
  Config base;
  std::vector<std::pair<std::string, std::vector<nlohmann::json>>> axes;  // in file order
  std::vector<StrategyConfig> strategies;
  std::string baseline;  // a strategy label, or empty
  std::vector<EvaluatorKind> evaluators;
  std::string output;  // results directory (relative to the working directory)
  ValidationSpec validation;
  nlohmann::json source;  // the file as read (recorded with the results)
};

// The most units one experiment file may expand to (the product of its axes' lengths and its number
// of strategies); more is an input error naming the product, checked before anything is expanded.
inline constexpr int kMaxUnits = 100000;

Experiment read_experiment(const nlohmann::json& doc, const std::string& file);
Experiment load_experiment(const std::string& path);

// Every unit, in output order: configurations in the axes' product order, strategies innermost.
std::vector<Unit> expand(const Experiment& e);

nlohmann::json to_json(const Config& c);

}  // namespace osdp::experiments
