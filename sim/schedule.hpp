// The schedule (DESIGN.md section 2): the per-rank program of one training iteration built from a
// plan — compute tasks on a compute stream, collectives on a comm stream, point-to-point sends on
// their own streams, buffer allocations and frees, dependencies. It is the single meaning of a plan:
// the simulator replays it in simulated time and the executor runs it for real. Every rank of a
// pipeline stage runs its stage's program (a data-parallel plan has one stage: every rank alike).
//
// FSDP semantics, per operator u with n slices of which the first k are ZDP (sim/README.md draws
// one layer in each mode):
//   forward:  all-gather every slice, compute slice by slice; a ZDP slice is freed after its compute,
//             a DP slice is kept until its last backward ends.
//   backward: a ZDP slice is gathered again, computed, freed; each slice's gradient is reduce-
//             scattered as soon as it is computed and freed when that ends. A checkpointed operator
//             first recomputes its forward: the recompute reuses the backward gathers (all ZDP
//             slices held together), or with checkpoint_regather gathers each slice once more.
//             REPLICATE keeps full weights and all-reduces its gradient.
//   A tied embedding runs twice: its lookup first and its LM head last (gathered again there when
//   ZDP and kept through the head's backward when that comes next); its full gradient lives from the
//   head's backward to the end, where it is reduce-scattered slice by slice.
//   The optimizer step runs after every collective of the stage has finished.
// Node groups and two-level collectives (issue 14): each all-gather or reduce-scatter of such a slice
// is two collective tasks on the comm stream, one per level (costmodel::level_collectives): two-level
// all-gather across nodes on S/G then within the node on S; reduce-scatter within then across on S/G;
// a node group gathers within the node and all-reduces its reduce-scattered shard across nodes. The
// gathered buffer is allocated by the first and freed as before; the gradient freed by the last.
// Prefetch depth p: p = 0 runs every task of a stage after the previous one (no overlap at all: the
// step time is the sum of compute and communication, the paper tier's sum); p >= 1 issues each
// all-gather up to p operators ahead of the compute that needs it and lets reduce-scatters run behind
// the compute, at most p + 1 operators behind.
//
// Stages, micro-batches, tensor parallelism (costmodel/plan.hpp's layout, plan_cost.hpp's prices).
// Stage s runs its program (stage_program): per entry the forward or the backward of one micro-batch
// over its units, each operator as above at its unit's TP degree t (the TP slice of workload.hpp, b0 t
// samples, its collectives on the unit's data-parallel group of N_s / t ranks). Per micro-batch, ZDP
// slices gather in every forward and backward; DP slices gather in the first forward and stay until
// the last backward; gradients accumulate over the micro-batches and are reduced after the last one.
// The TP all-reduces of the activations (workload.hpp) run on the compute stream after the operator's
// forward (and its recompute) and backward; a unit whose degree differs from the one before re-lays
// its input out on the compute stream (an all-gather on the ring of max / min ranks, forward when the
// degree grows, backward when it shrinks); a stage receives its input (and sends its output's
// gradient back) in the t = 1 layout: a receive on the compute stream waits for the previous stage's
// send on its send stream. A tied copy's gradient is all-reduced between the first and the last stage
// before their optimizer step. The bubble is what these dependencies leave idle.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "costmodel/cost_model.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/workload.hpp"

namespace osdp::sim {

// Compute: kernels, TP all-reduces, re-layouts, receives (in program order). Comm: the data-parallel
// collectives. Sends to the next and to the previous stage on streams of their own.
enum class Stream { kCompute, kComm, kSendNext, kSendPrevious };
constexpr int kStreams = 4;
const char* to_string(Stream s);

enum class TaskKind {
  kForward,
  kRecompute,
  kBackward,
  kOptimizer,
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kAllToAll,
  kSend,
  kRecv
};
enum class MemoryCategory { kShard, kOptimizer, kGatheredWeight, kGradient, kActivation, kWorkspace };
constexpr int kMemoryCategories = 6;
const char* to_string(TaskKind k);
const char* to_string(MemoryCategory c);
bool is_collective(TaskKind k);
// The collective a collective task runs (is_collective(k) must hold).
costmodel::Collective collective_of(TaskKind k);
// The collective task that runs collective `c`.
TaskKind task_kind_of(costmodel::Collective c);

// What a collective or a transfer moves: an operator's weights or gradients (the data-parallel
// collectives, the tied copy's all-reduce), or activations and their gradients (TP all-reduces,
// re-layouts, a stage's input and output).
enum class Payload { kWeights, kGradients, kActivations, kActivationGradients };
const char* to_string(Payload p);

// The ranks of a collective: `size` ranks `stride` apart (size 0: every rank of the job). Rank r's
// group starts at r - r mod (size stride) + r mod stride (its block of size x stride ranks, at r's
// offset in it), so every rank is in exactly one group of a shape: the world is {N, 1}, a node {G, 1},
// the ranks of one local index across nodes {M, G}, a TP group of degree t {t, 1}, a stage's
// data-parallel group at degree t {N_s / t, t}.
struct Group {
  int size = 0;
  int stride = 1;
  Group resolved(int world) const { return size == 0 ? Group{world, 1} : *this; }
  int first(int rank) const { return rank - rank % (size * stride) + rank % stride; }
  int member(int rank, int i) const { return first(rank) + i * stride; }   // the i-th, in ring order
  int index(int rank) const { return (rank % (size * stride)) / stride; }  // rank's place in its ring
  friend bool operator==(const Group&, const Group&) = default;
  friend auto operator<=>(const Group&, const Group&) = default;
};

// What a buffer is for. Whoever runs the schedule finds a buffer by its role, operator, slice, site
// and micro-batch, never by its name (names are for traces and messages only).
enum class BufferRole {
  kStates,          // resident: the operator's weight and gradient shards ((w + g) per element)
  kAdam,            // resident: its optimizer states (o per element)
  kGatheredWeight,  // a slice's full weights, gathered (site 1: at the LM head), freed when done
  kActivations,     // saved by the forward for the backward (checkpointed: the input only)
  kForwardScratch,  // a checkpointed operator's internals, alive through its forward only
  kRecomputed,      // a checkpointed operator's internals, recomputed for its backward
  kWorkspace,       // backward scratch (site 1: of a tied embedding's LM head)
  kGradient,        // a slice's full gradient, from its (first) backward to the end of its reduce-scatter
  kTiedGradient,    // a tied embedding's full gradient (every slice), from the head's backward on
};
const char* to_string(BufferRole r);
// The memory category a buffer of role `r` is counted in (inline: the engine asks at every
// allocation and free).
constexpr MemoryCategory category_of(BufferRole r) {
  switch (r) {
    case BufferRole::kStates:
      return MemoryCategory::kShard;
    case BufferRole::kAdam:
      return MemoryCategory::kOptimizer;
    case BufferRole::kGatheredWeight:
      return MemoryCategory::kGatheredWeight;
    case BufferRole::kActivations:
    case BufferRole::kForwardScratch:
    case BufferRole::kRecomputed:
      return MemoryCategory::kActivation;
    case BufferRole::kWorkspace:
      return MemoryCategory::kWorkspace;
    case BufferRole::kGradient:
    case BufferRole::kTiedGradient:
      return MemoryCategory::kGradient;
  }
  return MemoryCategory::kActivation;
}

struct Buffer {
  std::string name;  // for traces and messages
  double bytes = 0;
  BufferRole role = BufferRole::kActivations;
  int op = -1;    // operator index in the workload
  int slice = 0;  // gathered weights and gradients: the slice; else 0
  int site = 0;   // 0: the operator's place; 1: the LM head's place (tied embedding)
  int stage = 0;
  int micro_batch = 0;  // activations, scratch, workspace: the micro-batch; else 0

  MemoryCategory category() const { return category_of(role); }
};

struct Task {
  std::string name;
  TaskKind kind = TaskKind::kForward;
  Stream stream = Stream::kCompute;
  int stage = 0;
  int op = -1;            // operator index in the workload (-1: the optimizer step, sends, receives)
  int slice = 0;          // slice of the operator
  int site = 0;           // 0: the operator's place; 1: the LM head's place (tied embedding)
  int micro_batch = 0;    // -1: once per step (the optimizer, the tied all-reduce)
  double duration_s = 0;  // compute tasks: at speed 1, without interference
  // Collectives and transfers:
  double bytes = 0;  // collectives: the full buffer S (gathered or reduced) of the ring; sends: the message
  // Ring attention's passes of K/V blocks (an all-gather on the CP group): each step takes at least the
  // block of the attention's core computed while it is in flight (at speed 1; 0: none). The core's
  // compute tasks are that much shorter (plan_cost.hpp).
  double block_s = 0;
  Payload payload = Payload::kWeights;
  Group group;  // collectives: the ring's ranks
  // Collectives of an operator's data-parallel group: the group's level (its flat ring, within its
  // node or across nodes: how the executor lays the shards out). `calibrated`: priced by the
  // calibration's segments of the level (the world's rings); else by the links of each step.
  costmodel::RingLevel level = costmodel::RingLevel::kWorld;
  bool calibrated = true;
  int peer = 0;   // sends and receives: the other stage, relative (+1 the next, -1 the previous)
  int twin = -1;  // a collective two stages run together (the tied copy's): the other stage's task
  // An expert-parallel operator's all-reduce, over its EP group, of the gradients of its parameters
  // that are not the experts' (the norm, the router, a shared MLP): of the rank's shard of them.
  bool expert_shared = false;
  std::vector<int> deps;    // tasks that must finish first (a receive: its send, on the peer rank)
  std::vector<int> allocs;  // buffers allocated when the task starts
  std::vector<int> frees;   // buffers freed when the task ends
};

struct Schedule {
  int world_size = 1;
  int nodes = 1, per_node = 1;  // the cluster's shape: intra rings are per node, inter rings per local index
  int pp = 1;                   // stages of world_size / pp consecutive ranks
  int batch = 1;                // b0: samples per device per micro-batch at TP degree 1
  int micro_batches = 1;
  int prefetch = 0;
  double reserve_bytes = 0;
  std::vector<int> op_tp;  // per operator: its unit's TP degree (b0 t samples per rank)
  std::vector<Buffer> buffers;
  std::vector<int> resident;  // buffers allocated before the step and kept (shards, optimizer states)
  // Issue order: each stream of each stage runs its own tasks in this order. Stage s's tasks are
  // [stage_begin[s], stage_begin[s + 1]) (pp + 1 entries; empty: one stage of every task).
  std::vector<Task> tasks;
  std::vector<int> stage_begin;

  int stage_size() const { return world_size / pp; }
  int stage_of(int rank) const { return rank / stage_size(); }
  int first_task(int stage) const {
    return stage_begin.empty() ? 0 : stage_begin[static_cast<std::size_t>(stage)];
  }
  int end_task(int stage) const {
    return stage_begin.empty() ? static_cast<int>(tasks.size())
                               : stage_begin[static_cast<std::size_t>(stage + 1)];
  }
  // For each task, the tasks that depend on it (the reverse of deps).
  std::vector<std::vector<int>> dependents() const;
  // The resident bytes of a stage's ranks.
  double resident_bytes(int stage = 0) const;
};

// The order in which stage s of pp runs its m micro-batches: (backward?, micro-batch). GPipe every
// forward, then every backward; 1F1B min(pp - s - 1, m) forwards, then one forward and one backward in
// turn, then the backwards left.
std::vector<std::pair<bool, int>> stage_program(costmodel::PipelineSchedule schedule, int pp, int s, int m);

// The schedule of `plan` (checked against `workload` = lower(plan.model, plan.pp)), with compute
// durations priced by `model` (whose tier decides between per-kernel times and b gamma).
Schedule build_schedule(const costmodel::Plan& plan, const costmodel::Workload& workload,
                        const costmodel::PlanCostModel& model);

}  // namespace osdp::sim
