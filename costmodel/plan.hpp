// Plan files: what a plan decides — its layout (pipeline stages, micro-batches and their schedule, a
// tensor-parallel degree per unit), the samples per device of a micro-batch and the per-operator
// choices within each unit's data-parallel group — with everything needed to reproduce it (the
// model, the cluster, the calibration, the cost model that produced it) and its predicted step time,
// peak memory and throughput. A data-parallel plan is the case of one stage, one micro-batch and TP
// degree 1 everywhere. Another program (the simulator, the executor, a training script) reads this
// file.
//
// The layout (plan_cost.hpp has the formulas). N = M G devices (M nodes of G). The pipeline degree pp
// is a power of two dividing N; stage s holds the N_s = N / pp consecutive ranks s N_s .. (s+1) N_s - 1
// and a contiguous run of the units of lower(model, pp) (the embedding in the first stage, the LM head
// in the last). A unit u has a tensor-parallel degree t_u, a power of two with t_u <= G and t_u | N_s:
// its TP groups are t_u consecutive ranks (inside a node), its data-parallel group the d_u = N_s / t_u
// ranks of a stage at one TP index. m micro-batches of b0 samples per device at t = 1 (`batch_size`):
// the global batch is b0 m N / pp; a unit of degree t runs micro-batches of b0 t samples on each rank
// of its TP group. GPipe runs every forward, then every backward; 1F1B runs min(pp - s - 1, m)
// forwards, then alternates one forward and one backward, then the backwards left.
//
// The file (schema_version 2; versions 1 of data-parallel and hybrid plan files are read too):
//   {"schema_version": 2, "kind": "osdp-plan", "tool_version", "strategy", "model", "cluster",
//    "calibration"?, "cost_model": {tier, checkpoint_regather, expert_imbalance?}, "memory_limit_bytes",
//    "batch_size": b0, "prefetch",
//    "pipeline": {"stages": pp, "micro_batches": m, "schedule": "1f1b"|"gpipe", "sequence_parallel",
//                 "context_parallel"?: {"degree": cp, "variant": "ring"|"all-to-all"} (when cp > 1)},
//    "units": [{"name", "stage", "tp"}],            every unit of lower(model, pp), in order
//    "operators": [{"name", "mode", "split", "zdp_slices", "checkpoint" (false, true or
//                     "selective"), "group"?, "comm"?, "ep"? (an MoE layer's MLP: its expert-parallel
//                     degree, when above 1)}],
//    "predicted": {"iteration_time_s", "peak_memory_bytes", "throughput_samples_per_s", "global_batch",
//                  "bubble_fraction"?, "stages"?: [per-stage figures, for people]}}
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

enum class PipelineSchedule { kGpipe, k1F1B };
const char* to_string(PipelineSchedule s);
std::optional<PipelineSchedule> schedule_from_string(const std::string& s);

struct Workload;

struct Plan {
  // Where it comes from.
  std::string tool_version;
  std::string strategy;
  ModelSpec model;
  ClusterSpec cluster;
  std::optional<Calibration> calibration;
  CostOptions cost_options;
  double memory_limit_bytes = 0;
  // What it decides.
  int batch_size = 1;  // b0: samples per device per micro-batch at TP degree 1
  int prefetch = 0;    // all-gathers issued ahead of the operator that needs them (0: none)
  int pp = 1;
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  bool sequence_parallel = false;
  // Context parallelism (plan_cost.hpp): each sample's sequence over cp ranks at stride t of every
  // unit's data-parallel group; its attention passes K/V around a ring (cp_all_to_all false) or
  // re-shards by heads with all-to-alls (Ulysses). One degree for every stage: stages of N / pp ranks
  // running the same micro-batch, a stage above the least degree that micro-batch allows would run
  // (2 b0, 2 c) where it could run (b0, c), never faster nor smaller (docs/parallelism.md).
  int cp = 1;
  bool cp_all_to_all = false;
  std::vector<int> stage_first_unit{0};  // pp entries: stage s holds units [first[s], first[s+1])
  std::vector<int> unit_tp;              // per unit of lower(model, pp)
  std::vector<Choice> choices;           // per operator of lower(model, pp)
  // What the cost model predicts.
  double predicted_iteration_time_s = 0;
  double predicted_peak_memory_bytes = 0;
  double predicted_throughput_samples_per_s = 0;

  int global_batch(int world) const { return batch_size * micro_batches * world / pp / cp; }
  int stage_of_unit(int unit) const;
  // One stage, one micro-batch, TP 1 everywhere, no expert or context parallelism: the plans of the
  // data-parallel strategies.
  bool data_parallel() const;
  // The layout in words: "1 stage, 1 micro-batch, TP 1" or "2 stages (1f1b), 8 micro-batches, TP 1 to 2
  // by unit", with ", EP 8" (or "EP 2 to 8 by MoE layer") where MoE layers are expert-parallel.
  std::string layout_summary() const;
};

// The layout of a data-parallel plan over `w` (one stage, one micro-batch, TP 1 for every unit) with
// the given choices; the rest of the plan as it was.
void set_data_parallel(Plan& plan, const Workload& w, std::vector<Choice> choices);

// Checks a plan's layout against its workload (lower(model, plan.pp)) and a cluster: pp a power of two
// dividing the world, every stage non-empty, TP degrees valid for their stage (valid_degrees) and
// allowed for every operator of their unit, one choice per operator. Throws UsageError naming what is
// wrong.
void check_layout(const Plan& plan, const Workload& w, const ClusterSpec& cluster);
// Every parallel degree of a plan (pp, t, cp, ep, split counts) is a power of two.
inline bool power_of_two(int x) {
  return x >= 1 && (x & (x - 1)) == 0;
}
// Whether (pp, t) is a valid layout on a cluster: pp a power of two dividing N, t a power of two with
// t <= G and t | N / pp, and a stage's data-parallel group a whole number of ranks per node.
bool valid_degrees(const ClusterSpec& cluster, int pp, int t);

struct Evaluation;  // plan_cost.hpp
// The plan file; with the evaluation its per-stage figures too (for people: readers skip them).
nlohmann::json to_json(const Plan& plan, const Evaluation* evaluation = nullptr);

class JsonReader;
struct Operator;
// An operator's choice as plan files write it ("mode", "split", "zdp_slices", "checkpoint", and
// "group", "comm" when not the default), and read back: checked against the operator (its splits,
// whether it can be checkpointed) and the cluster (node groups need several nodes); the reader's
// errors name the file and the JSON pointer.
nlohmann::json choice_json(const Choice& c);
Choice read_choice(JsonReader& o, const Operator& op, const ClusterSpec& cluster);
// Reads a plan file of any version; checks its operators and units against the model's lowering at
// its pipeline degree, in order. Errors name the file and the JSON pointer.
Plan read_plan(const nlohmann::json& doc, const std::string& file);

}  // namespace osdp::costmodel
