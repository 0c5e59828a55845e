// The executor (DESIGN.md section 7): runs a plan's schedule for real on a backend. A rank runs its
// pipeline stage's tasks (sim/schedule.hpp): each in issue order on its stream (compute or comm; sends
// go on the compute stream and do not wait for their receiver) after waiting for the events of its
// dependencies on the other stream; a task allocates its buffers when it starts and frees them when it
// ends, exactly as the simulator replays it. Compute tasks run the operator arithmetic of
// validate/numerics.hpp on the slice's weights; collectives move the real shards, activations and
// gradients; the optimizer step runs Adam on each rank's shards.
//
// Groups. A collective runs on its group's communicator (a split of the job's, made for every group
// shape of the schedule on every rank at start). An operator at TP degree t runs its TP slice's n
// split slices (numerics.hpp); its data-parallel collectives run on its data-parallel group of
// N_s / t ranks, whose rings within a node and across nodes (node groups and two-level collectives)
// lay the shards out as node_shards.hpp says. Every collective sums; the loss is scaled by the tokens
// of the global batch, so each sum is the mean gradient (never nodes times it).
//
// Data. Micro-batch k of local rank i of a stage of N_s ranks holds the global samples
// k b0 N_s + i b0 .. + b0 - 1 (the t = 1 layout); a unit of degree t runs its TP group's b0 t samples
// on each of its ranks. The TP all-reduces sum the partial outputs (a residual adds its input on TP
// index 0 only; a vocabulary-parallel head's ranks each add their columns' loss); a re-layout
// all-gathers the larger degree's samples (the schedule's task) or takes the rank's own part of them
// (a local copy, where the schedule has no task); a stage sends its output and receives its input in
// the t = 1 layout. Gradients accumulate over the micro-batches and are reduced after the last.
//
// Context parallelism (plan.cp = c > 1, ring attention's variant; the units share one TP degree t):
// the c ranks of a CP group ({c, t}: c ranks t apart) hold chunks of the same samples, the rank at place
// k of its group tokens k s/c .. (k + 1) s/c - 1 of each; a stage's micro-batch is b0 N_s / c samples.
// Every operator but attention works on its rows alone; attention runs ring attention's loop inside its
// tasks, where its data is: each chunk's Q K V block passed around the group by point-to-point sends,
// in backward with its K and V gradients (numerics.hpp); a block's send is posted before its
// arithmetic, the next block received before it (the MPI backend progresses a transfer only inside its
// calls: passes and blocks take turns). The schedule's exchange tasks price those passes (overlapped
// with the blocks, sim::Task::block_s) and move nothing more; with emulated compute they run as a ring
// of sends and receives, each step waiting at least its block's time. The ring's two blocks in flight are the
// executor's scratch, in the baseline. The passes run on a communicator of their own: the comm stream's
// collectives go on beside them.
//
// Expert parallelism (an MoE layer's MLP at Choice::ep = e > 1; at TP 1, unsplit): the e ranks of its
// EP group ({e, t}) hold different experts, and the ranks holding the same ones ({N_s / (t e), t e}, the
// expert-data group) shard and reduce its states as any operator's data-parallel group does (flat or
// REPLICATE). Its tasks route their tokens (numerics.hpp's moe: a fixed function of sample and
// position, computed for every micro-batch at start) and run the dispatch and combine all-to-alls
// inside themselves on a communicator of their own; the schedule's all-to-all tasks price them and move
// nothing more (their send and receive scratch, twice the most rows an expert rank receives, is the
// executor's, in the baseline). What every EP rank holds alike (the router, a shared MLP, the norm: the
// prefix of its layout) has its gradient all-reduced over the EP group after the reduction (the
// schedule's task, sim::Task::expert_shared).
//
// Memory: the schedule's resident buffers (shards, Adam states) of the rank's stage are allocated
// once; the executor's own baseline (the activations and gradients carried between operators, the
// tokens, the loss) is allocated beside them and reported, so that measured peak - baseline is what
// the simulator predicts (less the cluster's reserve).
//
// Not run: a tied embedding split over pipeline stages (its copy as the LM head of the last stage),
// mixed precision (the arithmetic is fp32), latent attention, MoE layers at TP > 1, split, sharded by
// node or two levels, or with context parallelism, and context parallelism's all-to-all variant
// (Ulysses) or with TP degrees that change from unit to unit;
// all are refused.
#pragma once

#include <cstddef>
#include <map>
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
  // Unless set (>= 0), micro-batch k of local rank i at TP degree t runs the global samples
  // k b0 N_s + (i - i mod t) b0 ..; set, the rank's samples start there (+ k b0 N_s).
  std::int64_t sample_offset = -1;
  // Tokens the loss is averaged over (all ranks); 0: the global batch's.
  std::int64_t loss_tokens = 0;
  bool record_tasks = false;  // keep each task's start and end (StepStats::tasks)
  // bf16: GEMMs on bf16-rounded operands with fp32 sums (tensor cores); weights, activations and
  // gradients stay fp32, so memory is that of the fp32 plan.
  GemmMath gemm_math = GemmMath::kFp32;
  // Emulated compute (issue 36): every compute task and the optimizer wait, on their stream, until the
  // schedule's duration (Task::duration_s, the calibration's) has passed since they started, instead
  // of computing; collectives, sends and receives move real bytes (their values are whatever the
  // buffers hold), buffers are allocated and freed as the schedule says. The exchanges a real step
  // runs inside its compute tasks (context parallelism's ring, the expert all-to-alls) then run as
  // the schedule's tasks, with the bytes it prices, on the same communicators of their own. The loss
  // is not computed (0). For host devices (the mpi backend): a GPU's work is not the host's to wait.
  bool emulate_compute = false;
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
  std::vector<TaskTiming> tasks;  // with ExecutorOptions::record_tasks, per task of the rank's stage
};

class Executor {
 public:
  // Collective over `comm` (it makes the groups' communicators). `workload` is lower(plan.model,
  // plan.pp) and `schedule` the plan's.
  Executor(Device& dev, Communicator& comm, const costmodel::Workload& workload, const costmodel::Plan& plan,
           const sim::Schedule& schedule, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  StepStats step();
  // The Adam step's learning rate from the next step on (the kernels are the same at any rate).
  void set_learning_rate(float lr) { opt_.adam.lr = lr; }

  // Collective over the job: operator u's weights (or its reduced gradient of the last step) in the
  // IR's logical order (its weights one after another, row-major), on every rank.
  std::vector<float> logical_weights(int u);
  std::vector<float> logical_gradients(int u);

  int stage() const { return stage_; }
  // The rank's tasks: [first_task(), end_task()) of the schedule.
  int first_task() const;
  int end_task() const;

 private:
  struct TaskPlan;
  struct OpRun;
  void make_groups();
  void setup_operators();
  void resolve();
  void allocate_resident();
  void allocate_baseline();
  void run_task(int t);
  void run_compute(int t);
  void run_collective(int t);
  void run_transfer(int t);
  void run_optimizer();
  // Emulated compute: waits until `seconds` have passed since `start_s` (Device::now_s).
  void wait_emulated(double start_s, double seconds) const;
  // Emulated compute: a compute-stream exchange of the schedule (CP, EP) with the bytes it prices.
  void run_emulated_exchange(const sim::Task& task, Stream& s, const std::string& what);
  float* buffer(int id) const;
  std::vector<float> logical(int u, bool gradient);
  Communicator& group(const sim::Group& g) const;
  // The rank's rows of `x` (b0 `from` samples of `width` floats each) at degree `to` < `from`.
  void take_own(int carry, int from, int to, std::int64_t width);
  MathShape shape(int t) const;

  Device& dev_;
  Communicator& comm_;
  const costmodel::Workload& w_;
  const costmodel::Plan& plan_;
  const sim::Schedule& sched_;
  ExecutorOptions opt_;
  int world_, stage_ = 0, local_ = 0, per_stage_ = 1;
  std::map<sim::Group, Communicator*> groups_;
  Communicator* context_ = nullptr;  // the rank's CP group (context parallelism), its ranks in chunk order
  std::vector<std::unique_ptr<NodeShards>> shards_;  // per data-parallel group shape in use
  std::vector<OpRun> ops_;                           // per operator of the workload (its stage's set up)
  std::vector<TaskPlan> tasks_;                      // per task of the rank's stage
  std::vector<float*> mem_;                          // schedule buffer -> memory while allocated
  std::vector<std::size_t> alloc_bytes_;             // schedule buffer -> bytes to allocate
  std::vector<int> states_, adam_;                   // operator -> resident buffer ids
  // Carried between operators: 0 the forward activation, 1 and 2 the backward's output gradient and
  // input gradient, 3 scratch for re-layouts; their degrees (the samples they hold: b0 t).
  std::vector<float*> carry_;
  int forward_t_ = 1, backward_t_ = 1;
  std::map<std::pair<int, int>, float*> tokens_, targets_;  // (micro-batch, operator) -> ids at its degree
  float* loss_ = nullptr;
  float* gathered_ = nullptr;  // context parallelism: the ring's blocks in flight (SliceArgs::gathered)
  float* emulated_ = nullptr;  // emulated compute: the exchanges' send and receive scratch
  // Expert parallelism: the EP groups' communicators (by degree), the routes of each (micro-batch, MoE
  // operator) and their device copies (send_rows, gate_at), the all-to-alls' scratch.
  std::map<int, Communicator*> experts_;
  std::map<std::pair<int, int>, MoeRoute> routes_;
  std::map<std::pair<int, int>, std::pair<float*, float*>> route_ids_;
  float* ep_send_ = nullptr;
  float* ep_recv_ = nullptr;
  std::size_t baseline_bytes_ = 0, padding_bytes_ = 0;
  int steps_ = 0;
  std::vector<Launch> launches_;  // the rank's tasks as enqueued, with their waits
};

}  // namespace osdp::validate
