// The schedule (DESIGN.md section 2): the per-rank program of one training iteration built from a
// plan — compute tasks on a compute stream, collectives on a comm stream, buffer allocations and
// frees, dependencies. It is the single meaning of a plan: the simulator replays it in simulated
// time and the executor runs it for real. Every rank runs the same program (data parallelism).
//
// FSDP semantics, per operator u with n slices of which the first k are ZDP (sim/README.md draws
// one layer in each mode):
//   forward:  all-gather every slice, compute slice by slice; a ZDP slice is freed after its compute,
//             a DP slice is kept until its backward ends.
//   backward: a ZDP slice is gathered again, computed, freed; each slice's gradient is reduce-
//             scattered as soon as it is computed and freed when that ends. A checkpointed operator
//             first recomputes its forward: the recompute reuses the backward gathers (all ZDP
//             slices held together), or with checkpoint_regather gathers each slice once more.
//             REPLICATE keeps full weights and all-reduces its gradient.
//   A tied embedding runs twice: its lookup first and its LM head last (gathered again there when
//   ZDP and kept through the adjacent head backward); its full gradient lives from the head's
//   backward to the end, where it is reduce-scattered slice by slice.
//   The optimizer step runs after every collective has finished.
// Node groups and two-level collectives (issue 14): each all-gather or reduce-scatter of such a slice
// is two collective tasks on the comm stream, one per level (costmodel::level_collectives): two-level
// all-gather across nodes on S/G then within the node on S; reduce-scatter within then across on S/G;
// a node group gathers within the node and all-reduces its reduce-scattered shard across nodes. The
// gathered buffer is allocated by the first and freed as before; the gradient freed by the last.
// Prefetch depth p: p = 0 runs every task after the previous one (no overlap at all: the step time
// is the sum of compute and communication, the paper tier's sum); p >= 1 issues each all-gather up
// to p operators ahead of the compute that needs it and lets reduce-scatters run behind the compute,
// at most p + 1 operators behind.
#pragma once

#include <string>
#include <vector>

#include "costmodel/cost_model.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"

namespace osdp::sim {

enum class Stream { kCompute, kComm };
enum class TaskKind { kForward, kRecompute, kBackward, kOptimizer, kAllGather, kReduceScatter, kAllReduce };
enum class MemoryCategory { kShard, kOptimizer, kGatheredWeight, kGradient, kActivation, kWorkspace };
constexpr int kMemoryCategories = 6;
const char* to_string(TaskKind k);
const char* to_string(MemoryCategory c);
bool is_collective(TaskKind k);
// The collective a collective task runs (is_collective(k) must hold).
costmodel::Collective collective_of(TaskKind k);
// The collective task that runs collective `c`.
TaskKind task_kind_of(costmodel::Collective c);

// What a buffer is for. Whoever runs the schedule finds a buffer by its role, operator, slice and
// site, never by its name (names are for traces and messages only).
enum class BufferRole {
  kStates,          // resident: the operator's weight and gradient shards ((w + g) per element)
  kAdam,            // resident: its optimizer states (o per element)
  kGatheredWeight,  // a slice's full weights, gathered (site 1: at the LM head), freed when done
  kActivations,     // saved by the forward for the backward (checkpointed: the input only)
  kForwardScratch,  // a checkpointed operator's internals, alive through its forward only
  kRecomputed,      // a checkpointed operator's internals, recomputed for its backward
  kWorkspace,       // backward scratch (site 1: of a tied embedding's LM head)
  kGradient,        // a slice's full gradient, from its backward to the end of its reduce-scatter
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

  MemoryCategory category() const { return category_of(role); }
};

struct Task {
  std::string name;
  TaskKind kind = TaskKind::kForward;
  Stream stream = Stream::kCompute;
  int op = -1;            // operator index in the workload (-1: the optimizer step)
  int slice = 0;          // slice of the operator
  int site = 0;           // 0: the operator's place; 1: the LM head's place (tied embedding)
  double duration_s = 0;  // compute tasks: at speed 1, without interference
  double bytes = 0;       // collectives: the full buffer S (gathered or reduced) of its ring
  costmodel::RingLevel level = costmodel::RingLevel::kWorld;  // collectives: the ring they run on
  std::vector<int> deps;                                      // tasks of the same rank that must finish first
  std::vector<int> allocs;                                    // buffers allocated when the task starts
  std::vector<int> frees;                                     // buffers freed when the task ends
};

struct Schedule {
  int world_size = 1;
  int nodes = 1, per_node = 1;  // the cluster's shape: intra rings are per node, inter rings per local index
  int batch = 1;
  int prefetch = 0;
  double reserve_bytes = 0;
  std::vector<Buffer> buffers;
  std::vector<int> resident;  // buffers allocated before the step and kept (shards, optimizer states)
  std::vector<Task> tasks;    // issue order: each stream runs its own tasks in this order

  // For each task, the tasks that depend on it (the reverse of deps).
  std::vector<std::vector<int>> dependents() const;
  double resident_bytes() const;
};

// The schedule of `plan` (its batch size, choices and prefetch depth), with compute durations
// priced by `model` (whose tier decides between per-kernel times and b gamma).
Schedule build_schedule(const costmodel::Plan& plan, const costmodel::Workload& workload,
                        const costmodel::CostModel& model);

}  // namespace osdp::sim
