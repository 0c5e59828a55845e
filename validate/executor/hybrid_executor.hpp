// The hybrid executor (issue 16, point 5): runs one training step of a hybrid plan
// (costmodel/hybrid.hpp) for real on a backend, with tensor, pipeline and data parallelism, so that
// its gradients and updated weights can be checked against the unsharded step's.
//
// Ranks. The job's N ranks are pp stages of N_s = N / pp consecutive ranks; rank i of a stage (its
// local index) runs the stage's units. A unit of TP degree t: its TP group is the t consecutive local
// ranks i - i mod t .., its TP index i mod t; its DP group the N_s / t local ranks of the same TP
// index. Both are splits of the job's communicator, made for every degree on every rank at start.
//
// Data. Micro-batch k of local rank i holds the global samples k b0 N_s + i b0 .. + b0 - 1 (the
// t = 1 layout), so the m micro-batches of the stage's ranks are the global batch B = b0 m N_s once.
// A unit of degree t runs its TP group's b0 t samples on each of its ranks: a unit whose degree
// differs from the one before re-lays its input out (takes its own b0 samples, all-gathers them over
// the new TP group); the gradient goes back the same way. Stage boundaries hand the t = 1 layout to
// local rank i of the next stage (a send, and back a send of its gradient, tagged by micro-batch).
//
// Arithmetic (numerics.hpp). A unit of degree t cuts each operator into t slices (the Megatron split
// of its heads, ffn columns, rows) and runs slice i mod t: the partial sums of the slices are
// all-reduced over the TP group in forward (the output, the head's logits) and in backward (the
// input gradient); a residual and a lookup add their whole part on TP index 0 only. The gradient of
// each micro-batch is added into the step's accumulator; after the last micro-batch it is reduced
// over the DP group (REPLICATE: all-reduce, then Adam on the whole slice; DP and ZDP: reduce-scatter
// to this rank's shard, Adam on the shard, and the weights all-gathered at the next step's start).
// The loss is scaled by the tokens of the global batch, so the reduced gradient is the mean.
//
// Schedules. Each stage runs its program in order (sim::stage_program, as the pipeline simulator
// does). Sends do not wait for their receiver, so neither program can deadlock.
//
// What it does not do (yet): an operator's splits within its TP slice, ZDP's per-micro-batch
// re-gathers and checkpointing's recompute change when memory is used, not the arithmetic: the
// executor gathers a slice's weights once per step and keeps every saved activation. It times the
// step but does not track memory against a prediction. A tied embedding split across stages (its
// copy in the last stage) is refused. The backend must split its communicator and send between ranks;
// the mpi and nccl backends both do.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "costmodel/hybrid.hpp"
#include "validate/executor/backend.hpp"
#include "validate/executor/executor.hpp"
#include "validate/executor/numerics.hpp"

namespace osdp::validate {

struct HybridStepStats {
  double seconds = 0;  // this rank: from leaving the start barrier to the end of its program
  double loss = 0;     // over the global batch (every rank)
};

class HybridExecutor {
 public:
  // Collective over `comm` (it makes the TP and DP groups). The plan is for the hybrid workload of
  // `model` at its pipeline degree. ExecutorOptions' sample_offset and loss_tokens are not used:
  // samples and tokens follow from the plan (see above).
  HybridExecutor(Device& dev, Communicator& comm, const costmodel::ModelSpec& model,
                 const costmodel::HybridPlan& plan, ExecutorOptions options = {});
  ~HybridExecutor();
  HybridExecutor(const HybridExecutor&) = delete;
  HybridExecutor& operator=(const HybridExecutor&) = delete;

  HybridStepStats step();
  const costmodel::HybridWorkload& workload() const { return hw_; }

  // Collective over the job: operator u's weights (or its reduced gradient of the last step) in the
  // IR's logical order, on every rank.
  std::vector<float> logical_weights(int u);
  std::vector<float> logical_gradients(int u);

 private:
  struct OpState;
  struct Saved;
  struct Pass {
    int op = 0, site = 0, unit = 0;
  };

  // A pass's operator, its state at this rank, its shape at its degree, its input width and kind.
  struct PassView {
    const costmodel::Operator& op;
    OpState& st;
    MathShape m;
    std::int64_t win;
    bool head, lookup;
  };
  PassView view(const Pass& p) const;
  SliceArgs slice_args(const Pass& p, const OpState& st, const Saved& sv, std::int64_t input_floats) const;
  void forward(int k);
  void backward(int k);
  void reduce_and_update();
  void gather_weights();
  // Re-lays `x` (rows of b0 t_from samples, `width` floats each) out for degree t_to; returns the
  // buffer now holding it (x itself when the degrees agree).
  float* relayout(float* x, int t_from, int t_to, std::int64_t width, const char* what, int k);
  // The token ids (or, with `targets`, the next tokens) of micro-batch k's samples at degree t.
  float* samples(int k, int t, bool targets);
  std::vector<float> logical(int u, bool gradient);
  Communicator& tp(int t) const;
  Communicator& dp(int t) const;
  MathShape shape(int t) const;
  float* alloc(std::int64_t floats, const char* what);
  void release(float*& p);

  Device& dev_;
  Communicator& comm_;
  const costmodel::HybridWorkload hw_;
  const costmodel::HybridPlan plan_;
  std::int64_t vocab_ = 1;
  ExecutorOptions opt_;
  int world_ = 1, per_stage_ = 1, stage_ = 0, local_ = 0;
  std::vector<Pass> passes_;  // this stage's, in forward order
  std::map<int, Communicator*> tp_, dp_;
  std::vector<std::unique_ptr<OpState>> ops_;  // per workload operator (null when not on this stage)
  std::map<int, std::vector<Saved>> saved_;    // micro-batch -> per pass
  float* loss_ = nullptr;                      // the loss of this rank's head passes (TP index 0)
  float* ignored_ = nullptr;                   // where the other TP ranks' loss goes
  int steps_ = 0;
};

}  // namespace osdp::validate
