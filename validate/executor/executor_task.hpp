// Internal to the executor (executor.cpp runs a step, executor_setup.cpp sets it up): what each
// task reads and writes, resolved once from the schedule.
#pragma once

#include <cstddef>
#include <cstdint>

#include "validate/executor/executor.hpp"

namespace osdp::validate {

struct Executor::TaskPlan {
  int weights = -1;              // gathered buffer the task reads (compute) or fills (all-gather)
  int act = -1;                  // the operator's saved activations
  int internals = -1;            // a separate buffer for the internals (checkpointed: scratch or recomputed)
  int workspace = -1;            // backward scratch
  int grad = -1;                 // the gradient buffer written (backward) or reduced (reduce-scatter)
  std::int64_t grad_offset = 0;  // floats into `grad` (a tied gradient holds every slice)
  bool first = false;            // the first slice of its operator, site and kind
  bool last = false;
};

inline std::size_t floats_bytes(std::int64_t n) {
  return static_cast<std::size_t>(n) * sizeof(float);
}

}  // namespace osdp::validate
