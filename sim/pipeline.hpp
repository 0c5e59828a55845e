// The pipeline simulator (issue 16): one training step of a hybrid plan (costmodel/hybrid.hpp) as
// per-stage, per-micro-batch tasks, each stage on its own lanes, timed by their dependencies alone.
// The bubble is what the dependencies leave idle, not a formula: with equal stages, nothing but
// compute and 1F1B, a stage is busy m (F + B) of (m + pp - 1)(F + B), a bubble of (pp - 1) / (m + pp - 1)
// (tests/sim/test_pipeline.cpp).
//
// A stage stands for each of its ranks (they run alike); its lanes:
//   compute    the units' forward and backward per micro-batch (a unit's ZDP slices' gathers
//              overlapped with its compute as cost_model.hpp prices them) and the optimizer step;
//   tp         the TP all-reduces after a unit's forward and backward, and the re-layouts between
//              units of different degrees, on the TP group's ring: the compute waits for them, so the
//              compute and tp tasks of a stage run one at a time, in its program's order;
//   dp         per step: each unit's DP slices' gathers before its first forward, its gradients'
//              reduction after its last backward, the tied copy's gradient all-reduce (the last
//              stage's lane), all beside the compute (no interference is modelled);
//   send next / send previous: the p2p sends of one micro-batch's activations to the next stage and
//              of its gradients to the previous one, on the link between them.
// The program of a stage: GPipe runs every forward, then every backward; 1F1B runs min(pp - s - 1, m)
// forwards, then alternates one forward and one backward, then the remaining backwards. A forward of
// micro-batch i at stage s > 0 waits for its activations from stage s - 1, a backward at s < pp - 1
// for its gradients from s + 1; the optimizer waits for every reduction of its stage (and the first and
// last stage for the tied all-reduce). Each lane runs its tasks in issue order. The step ends with the
// last task.
//
// Memory per stage: the resident bytes (reserve and model states) from the start; a unit's saved
// activations of a micro-batch from its forward's start to the end of its backward; its transient bytes
// during its backward. In flight: micro-batches whose first unit's forward has started and whose
// backward has not ended. 1F1B holds min(pp - s, m), GPipe m, at stage s.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/hybrid.hpp"
#include "sim/ticks.hpp"

namespace osdp::sim {

struct PipelineUnit {
  std::string name;
  int tp = 1;
  double relayout_forward_s = 0;  // per micro-batch, before its forward: its input to its degree
  double forward_s = 0;
  double tp_forward_s = 0;
  double backward_s = 0;  // with the recompute of checkpointed operators
  double tp_backward_s = 0;
  double relayout_backward_s = 0;  // per micro-batch, after its backward: its input's gradient
  double dp_gather_s = 0, grad_sync_s = 0, optimizer_s = 0;  // per step
  double activation_bytes = 0;                               // per micro-batch in flight
  double transient_bytes = 0;                                // during its backward
};

struct PipelineStage {
  std::vector<PipelineUnit> units;
  double exit_relayout_backward_s = 0;  // the output's gradient from the t = 1 layout (before a stage's
                                        // backward; its forward re-layout to t = 1 costs nothing)
  double send_s = 0;                    // one p2p send to or from the next stage (one micro-batch)
  double resident_bytes = 0;            // reserve and model states, the whole step
};

struct PipelineSpec {
  int micro_batches = 1;
  costmodel::PipelineSchedule schedule = costmodel::PipelineSchedule::k1F1B;
  std::vector<PipelineStage> stages;
  double tied_allreduce_s = 0;  // per step, between the first and the last stage
};

// The spec of a hybrid plan, priced by the cost model's op_parts (and op_cost for the bytes).
PipelineSpec pipeline_spec(const costmodel::HybridWorkload& hw, const costmodel::HybridPlan& plan,
                           const costmodel::HybridCostModel& model);

enum class PipeLane { kCompute, kTp, kDp, kSendNext, kSendPrevious };
constexpr int kPipeLanes = 5;
const char* to_string(PipeLane l);

enum class PipeTaskKind {
  kForward,
  kBackward,
  kTpForward,
  kTpBackward,
  kRelayoutForward,
  kRelayoutBackward,
  kSendActivations,
  kSendGradients,
  kDpGather,
  kGradSync,
  kTiedAllReduce,
  kOptimizer
};
const char* to_string(PipeTaskKind k);

struct PipeTask {
  PipeTaskKind kind = PipeTaskKind::kForward;
  PipeLane lane = PipeLane::kCompute;
  int stage = 0;
  int unit = -1;         // index within the stage
  int micro_batch = -1;  // -1: per step
  Tick duration = 0;
  std::vector<int> deps;
  double alloc_bytes = 0;  // allocated at its start
  double free_bytes = 0;   // freed at its end
  Tick start = 0, end = 0;
};

struct PipelineStageResult {
  double busy_s = 0;  // its compute and tp lanes (the program)
  double peak_bytes = 0;
  double peak_time_s = 0;
  int max_in_flight = 0;
};

struct PipelineResult {
  std::vector<PipeTask> tasks;
  Tick step = 0;
  double step_s = 0;
  double bubble_fraction = 0;  // 1 - sum of the stages' busy time / (pp x step)
  std::vector<PipelineStageResult> stages;
  // Per stage, the bytes in use after each change: (time, bytes).
  std::vector<std::vector<std::pair<Tick, double>>> memory;
};

// The order in which stage s of pp runs its m micro-batches: (backward?, micro-batch). GPipe every
// forward, then every backward; 1F1B min(pp - s - 1, m) forwards, then one forward and one backward
// in turn, then the backwards left. The simulator and the hybrid executor both follow it.
std::vector<std::pair<bool, int>> stage_program(costmodel::PipelineSchedule schedule, int pp, int s, int m);

// Builds the tasks of `spec` and times them. Throws osdp::Error if the tasks cannot all run (a cycle).
PipelineResult simulate_pipeline(const PipelineSpec& spec);

// A task's name in traces: "F layer3 mb2", "send activations mb0", "optimizer".
std::string task_name(const PipelineSpec& spec, const PipeTask& t);
// Chrome trace: one process per stage, one thread per lane, a memory counter per stage.
nlohmann::json pipeline_trace(const PipelineSpec& spec, const PipelineResult& r);
nlohmann::json pipeline_summary(const PipelineSpec& spec, const PipelineResult& r);

}  // namespace osdp::sim
