// Validation of hybrid plans (issue 16, point 7): a plan file of `osdp plan --hybrid --out` runs for
// real on the job's ranks through the hybrid executor (validate/executor/hybrid_executor.hpp), and
// its measured step is held beside the plan's analytic prediction and the pipeline simulator's
// (sim/pipeline.hpp, recomputed from the plan's cluster, calibration and cost model). Before the
// timed steps, one step's gradients and updated weights are checked against the unsharded step of
// one process (all DP, the global batch, the executor of executor.hpp on the CPU), within the
// executor tests' tolerances.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/hybrid.hpp"
#include "costmodel/plan.hpp"
#include "validate/executor/backend.hpp"

namespace osdp::experiments {

struct HybridValidationOptions {
  int warmup = 2, iterations = 5;
  bool check = true;  // the numerics check against the unsharded step
  validate::GemmMath gemm_math = validate::GemmMath::kFp32;
  std::function<void(const std::string&)> progress;  // rank 0's progress lines
};

struct HybridValidationRow {
  std::string origin;
  costmodel::HybridPlanFile file;
  double predicted_s = 0;           // the plan file's analytic step
  double simulated_s = 0;           // the pipeline simulator's, from the plan file
  std::vector<double> steps_s;      // each timed step: the slowest rank's
  double median_s = 0, spread = 0;  // spread: (slowest - fastest) / median
  double loss = 0;
  bool checked = false, numerics_ok = true;
  double gradient_error = 0, weight_error = 0;  // largest relative gradient, absolute weight difference
  std::string numerics_problem;                 // the operators off, when not ok
};

// The step a hybrid plan is held to: one process on the CPU, every operator DP (the executor of
// executor.hpp), the global batch (samples 0 .. batch - 1, the loss over all their tokens): every
// operator's weights after the step and its gradient, in the IR's logical order.
struct ReferenceStep {
  double loss = 0;
  std::vector<std::vector<float>> weights, grads;
};
ReferenceStep unsharded_step(const costmodel::ModelSpec& model, const costmodel::ClusterSpec& cluster,
                             int global_batch, validate::GemmMath math);

// The largest |a - b|, relative to the largest |b| or absolute; infinite when the sizes differ.
double max_difference(const std::vector<float>& a, const std::vector<float>& b, bool relative);

// Collective over `comm` (every rank, the same plan): runs the plan and returns its row (the same on
// every rank). `dev` is this rank's device. Throws UsageError when the plan is for another number of
// ranks or the executor cannot run it.
HybridValidationRow run_hybrid_validation(const costmodel::HybridPlanFile& file, const std::string& origin,
                                          validate::Device& dev, validate::Communicator& comm,
                                          const HybridValidationOptions& options);

nlohmann::json to_json(const HybridValidationRow& row);

}  // namespace osdp::experiments
