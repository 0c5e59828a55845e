// The numerics check of `osdp validate` for plans that are not data-parallel (stages, micro-batches,
// TP degrees): before its timed steps, one step of the plan on its ranks is held to the unsharded step
// of one process (every operator DP, the global batch, the executor on the CPU): the loss, every
// operator's gradient and its weights after the step. Its figures go into the row's Measurement
// (check_*), which experiments::summarize judges as it judges the torch backend's check.
#pragma once

#include <string>
#include <vector>

#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"
#include "validate/executor/backend.hpp"
#include "validate/executor/executor.hpp"

namespace osdp::experiments {

// The unsharded step (samples 0 .. global_batch - 1, the loss over all their tokens): every operator's
// weights before it and after it and its gradient, in the IR's logical order. The torch backend's check
// holds FSDP2 to it too (torch_measured.hpp).
struct ReferenceStep {
  double loss = 0;
  std::vector<std::vector<float>> initial, weights, grads;
};
ReferenceStep unsharded_step(const costmodel::ModelSpec& model, const costmodel::ClusterSpec& cluster,
                             int global_batch, validate::GemmMath math);

// The largest |a - b|, relative to the largest |b| or absolute; infinite when the sizes differ.
double max_difference(const std::vector<float>& a, const std::vector<float>& b, bool relative);

struct StepCheck {
  double loss_error = 0;   // |loss - reference| / |reference|
  double grad_diff = 0;    // the largest of the operators' gradient differences, relative to their largest
  double weight_diff = 0;  // the largest weight difference after the step, absolute
  std::string note;        // the operators over the tolerances of the executor tests, or ""
};
// Collective over `comm`: one step of `executor` (of `plan`, lowered as `workload`) against the
// unsharded step, which rank 0 runs; every rank returns rank 0's figures. The note names what passes
// the tolerances summarize() holds the figures to (measured.hpp's kCheck*).
StepCheck check_step(validate::Executor& executor, const costmodel::Plan& plan, const costmodel::Workload& workload,
                     validate::Communicator& comm, validate::GemmMath math);

}  // namespace osdp::experiments
