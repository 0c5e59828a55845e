// Internal to the executor (executor.cpp runs a step, executor_setup.cpp sets it up): what each
// operator of the rank's stage runs and what each task reads and writes, resolved once from the
// schedule.
#pragma once

#include <cstddef>
#include <cstdint>

#include "validate/executor/executor.hpp"

namespace osdp::validate {

struct Executor::OpRun {
  bool here = false;  // the operator runs on this rank's stage
  int t = 1;          // its TP degree
  int tp_index = 0;   // this rank's place in its TP group
  int n = 1;          // the split's slices within a TP slice
  int first_slice = 0;
  OperatorLayout layout;
  Sharding sharding = Sharding::kWorld;
  NodeShards* shards = nullptr;  // its data-parallel group's
  Communicator* dp = nullptr;
  Communicator* tp = nullptr;
  ExpertPlace place;               // an MoE operator's EP group and this rank's place in it
  Communicator* expert = nullptr;  // its EP group's communicator for the all-to-alls
  std::int64_t c() const { return n * layout.shard_elems; }  // floats of the rank's weight shards
};

struct Executor::TaskPlan {
  int weights = -1;              // gathered buffer the task reads (compute) or fills (all-gather)
  int act = -1;                  // the operator's saved activations
  int internals = -1;            // a separate buffer for the internals (checkpointed: scratch or recomputed)
  int workspace = -1;            // backward scratch
  int grad = -1;                 // the gradient buffer written (backward) or reduced (reduce-scatter)
  std::int64_t grad_offset = 0;  // floats into `grad` (a tied gradient holds every slice)
  bool first = false;            // the first slice of its operator, site, kind and micro-batch
  bool last = false;
  bool zero_grad = false;   // backward: the step's first to write its gradient: zero what accumulates
  bool accumulate = false;  // backward: earlier micro-batches' gradients are there: add to them
};

inline std::size_t floats_bytes(std::int64_t n) {
  return static_cast<std::size_t>(n) * sizeof(float);
}

}  // namespace osdp::validate
