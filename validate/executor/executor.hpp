// The executor (DESIGN.md section 7): runs a plan's schedule for real on a backend. Every task of
// the schedule is enqueued in issue order on its stream (compute or comm) after waiting for the
// events of its dependencies on the other stream; a task allocates its buffers when it starts and
// frees them when it ends, exactly as the simulator replays it. Compute tasks run the operator
// arithmetic of validate/numerics.hpp on the slice's weights; collectives move the real shards;
// the optimizer step runs Adam on each rank's shards.
//
// Node groups and two-level collectives (a schedule's collectives on the intra-node or inter-node
// ring) run on the communicator's rings of the schedule's nodes, the shards laid out as
// node_shards.hpp says. Every collective sums; the loss is scaled by the tokens of the whole job, so
// each sum is the mean gradient (never nodes times it).
//
// Memory: the schedule's resident buffers (shards, Adam states) are allocated once; the executor's
// own baseline (the activation and gradient carried between operators, tokens, the loss) is
// allocated beside them and reported, so that measured peak - baseline is what the simulator
// predicts (less the cluster's reserve).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"
#include "sim/schedule.hpp"
#include "validate/executor/backend.hpp"
#include "validate/executor/launch_list.hpp"
#include "validate/executor/node_shards.hpp"
#include "validate/executor/numerics.hpp"

namespace osdp::validate {

struct ExecutorOptions {
  AdamParams adam;
  // Samples of this rank are the global samples rank * batch .. + batch - 1 unless set (>= 0).
  std::int64_t sample_offset = -1;
  // Tokens the loss is averaged over (all ranks); 0: world * batch * seq.
  std::int64_t loss_tokens = 0;
  bool record_tasks = false;  // keep each task's start and end (StepStats::tasks)
  // bf16: GEMMs on bf16-rounded operands with fp32 sums (tensor cores); weights, activations and
  // gradients stay fp32, so memory is that of the fp32 plan.
  GemmMath gemm_math = GemmMath::kFp32;
};

struct TaskTiming {
  double start_s = 0, end_s = 0;  // from the step's start, timed by events on the task's stream
};

struct StepStats {
  double seconds = 0;              // this rank: from leaving the start barrier to both streams idle
  double loss = 0;                 // over all ranks
  std::size_t peak_bytes = 0;      // this rank's tracked peak during the step, baseline included
  std::size_t baseline_bytes = 0;  // the executor's own buffers (not in the schedule)
  std::size_t padding_bytes = 0;   // allocated beyond the schedule's sizes to give equal shards
  std::size_t device_free_bytes = 0, device_total_bytes = 0;  // the driver's view at the end (GPUs; else 0)
  std::vector<TaskTiming> tasks;  // with ExecutorOptions::record_tasks, per schedule task
};

class Executor {
 public:
  Executor(Device& dev, Communicator& comm, const costmodel::Workload& workload, const costmodel::Plan& plan,
           const sim::Schedule& schedule, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  StepStats step();

  // Collective: operator u's weights (or the gradient of the last step) in the IR's logical order
  // (its weights one after another, row-major), on every rank.
  std::vector<float> logical_weights(int u);
  std::vector<float> logical_gradients(int u);

 private:
  struct TaskPlan;
  void resolve();
  void allocate_resident();
  void run_task(int t);
  void run_compute(int t);
  void run_collective(int t);
  void run_optimizer();
  float* buffer(int id) const;
  std::vector<float> logical(int u, bool gradient);

  Device& dev_;
  Communicator& comm_;
  const costmodel::Workload& w_;
  const costmodel::Plan& plan_;
  const sim::Schedule& sched_;
  ExecutorOptions opt_;
  MathShape shape_;
  int world_;
  std::vector<OperatorLayout> layout_;
  NodeShards shards_;
  std::vector<Sharding> sharding_;  // per operator
  std::vector<TaskPlan> tasks_;
  std::vector<float*> mem_;               // schedule buffer -> memory while allocated
  std::vector<std::size_t> alloc_bytes_;  // schedule buffer -> bytes to allocate
  std::vector<int> states_, adam_;        // operator -> resident buffer ids
  std::vector<float*> carry_;             // forward activation, two backward gradients
  float* tokens_ = nullptr;
  float* targets_ = nullptr;
  float* loss_ = nullptr;
  std::size_t baseline_bytes_ = 0, padding_bytes_ = 0;
  int steps_ = 0;
  std::vector<Launch> launches_;  // the schedule's tasks as enqueued, with their waits
};

}  // namespace osdp::validate
