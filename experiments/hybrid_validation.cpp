#include "experiments/hybrid_validation.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "costmodel/cost_model.hpp"
#include "costmodel/error.hpp"
#include "costmodel/plan.hpp"
#include "sim/pipeline.hpp"
#include "sim/schedule.hpp"
#include "validate/cpu/cpu_device.hpp"
#include "validate/executor/executor.hpp"
#include "validate/executor/hybrid_executor.hpp"
#include "validate/executor/self_communicator.hpp"

namespace osdp::experiments {
namespace {

// The tolerances of the executor tests (tests/executor): gradients relative to the operator's
// largest, weights absolute (Adam's first step moves each by about lr).
constexpr double kGradientTolerance = 1e-4, kWeightTolerance = 5e-5;

}  // namespace

double max_difference(const std::vector<float>& a, const std::vector<float>& b, bool relative) {
  if (a.size() != b.size()) return INFINITY;
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return relative ? diff / std::max(scale, 1e-30) : diff;
}

ReferenceStep unsharded_step(const costmodel::ModelSpec& model, const costmodel::ClusterSpec& cluster,
                             int global_batch, validate::GemmMath math) {
  costmodel::Plan p;
  p.strategy = "dp";
  p.model = model;
  p.cluster = cluster;
  p.cluster.nodes = 1;
  p.cluster.devices_per_node = 1;
  p.cluster.memory_bytes = 1e15;
  p.memory_limit_bytes = 1e15;
  p.batch_size = global_batch;
  const costmodel::Workload w = costmodel::lower(p.model);
  for (const auto& op : w.operators) p.operators.push_back({op.name, costmodel::Choice{}});
  const costmodel::CostModel cost(p.cluster, nullptr, p.model.precision, p.cost_options);
  const sim::Schedule sched = sim::build_schedule(p, w, cost);
  validate::CpuDevice dev(validate::CpuDeviceOptions{0, false, 0});
  validate::SelfCommunicator self(dev);
  validate::ExecutorOptions opt;
  opt.sample_offset = 0;
  opt.loss_tokens = static_cast<std::int64_t>(global_batch) * w.seq;
  opt.gemm_math = math;
  validate::Executor ex(dev, self, w, p, sched, opt);
  ReferenceStep r;
  r.loss = ex.step().loss;
  for (int u = 0; u < static_cast<int>(w.operators.size()); ++u) {
    r.weights.push_back(ex.logical_weights(u));
    r.grads.push_back(ex.logical_gradients(u));
  }
  return r;
}

HybridValidationRow run_hybrid_validation(const costmodel::HybridPlanFile& file, const std::string& origin,
                                          validate::Device& dev, validate::Communicator& comm,
                                          const HybridValidationOptions& o) {
  const int N = file.cluster.world_size();
  if (comm.size() != N)
    throw UsageError(fmt::format("{}: the plan is for {} ranks, the job has {}", origin, N, comm.size()));
  const bool root = comm.rank() == 0;
  const auto say = [&](const std::string& line) {
    if (root && o.progress) o.progress(line);
  };
  HybridValidationRow row;
  row.origin = origin;
  row.file = file;
  row.predicted_s = file.predicted_time_s;
  {
    costmodel::HybridCostModel cost(file.cluster, file.calibration ? &*file.calibration : nullptr,
                                    file.model.precision, file.cost_options, file.model.dropout);
    cost.set_capacity(file.memory_limit_bytes);
    const costmodel::HybridWorkload hw = costmodel::hybrid_workload(file.model, file.plan.pp);
    row.simulated_s = sim::simulate_pipeline(sim::pipeline_spec(hw, file.plan, cost)).step_s;
  }
  validate::ExecutorOptions eo;
  eo.gemm_math = o.gemm_math;
  validate::HybridExecutor ex(dev, comm, file.model, file.plan, eo);
  const int batch = file.plan.global_batch(N);
  if (o.check) {
    say(fmt::format("{}: one step against the unsharded step of batch {}", origin, batch));
    const validate::HybridStepStats st = ex.step();
    row.loss = st.loss;
    const auto& ops = ex.workload().workload.operators;
    std::vector<std::vector<float>> weights, grads;
    for (int u = 0; u < static_cast<int>(ops.size()); ++u) {
      grads.push_back(ex.logical_gradients(u));
      weights.push_back(ex.logical_weights(u));
    }
    // Rank 0 runs the reference; the others wait at the broadcast of its verdict.
    double verdict[3] = {0, 0, 0};
    if (root) {
      const ReferenceStep ref = unsharded_step(file.model, file.cluster, batch, o.gemm_math);
      for (std::size_t u = 0; u < ops.size(); ++u) {
        const double g = max_difference(grads[u], ref.grads[u], true),
                     w = max_difference(weights[u], ref.weights[u], false);
        row.gradient_error = std::max(row.gradient_error, g);
        row.weight_error = std::max(row.weight_error, w);
        if (g > kGradientTolerance || w > kWeightTolerance)
          row.numerics_problem += fmt::format("{}{} (gradient {:.2e}, weights {:.2e})",
                                              row.numerics_problem.empty() ? "" : ", ", ops[u].name, g, w);
      }
      if (std::fabs(row.loss - ref.loss) > 1e-5 * std::fabs(ref.loss))
        row.numerics_problem +=
            fmt::format("{}loss {} against {}", row.numerics_problem.empty() ? "" : ", ", row.loss, ref.loss);
      verdict[0] = row.numerics_problem.empty() ? 1 : 0;
      verdict[1] = row.gradient_error;
      verdict[2] = row.weight_error;
    }
    row.checked = true;
    row.numerics_ok = comm.sum_over_ranks(verdict[0]) > 0;
    row.gradient_error = comm.sum_over_ranks(verdict[1]);
    row.weight_error = comm.sum_over_ranks(verdict[2]);
  }
  for (int i = 0; i < o.warmup; ++i) (void)ex.step();
  for (int i = 0; i < o.iterations; ++i) {
    const validate::HybridStepStats st = ex.step();
    row.steps_s.push_back(comm.max_over_ranks(st.seconds));
    row.loss = st.loss;
    say(fmt::format("{}: step {} of {}: {:.4f} s", origin, i + 1, o.iterations, row.steps_s.back()));
  }
  if (!row.steps_s.empty()) {
    std::vector<double> s = row.steps_s;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    row.median_s = n % 2 == 1 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    row.spread = row.median_s > 0 ? (s.back() - s.front()) / row.median_s : 0;
  }
  return row;
}

nlohmann::json to_json(const HybridValidationRow& r) {
  const auto& p = r.file.plan;
  nlohmann::json j{{"origin", r.origin},
                   {"model", r.file.model.name},
                   {"cluster", r.file.cluster.name},
                   {"strategy", r.file.strategy},
                   {"pp", p.pp},
                   {"micro_batches", p.micro_batches},
                   {"micro_batch_per_device", p.b0},
                   {"global_batch", p.global_batch(r.file.cluster.world_size())},
                   {"schedule", costmodel::to_string(p.schedule)},
                   {"stage_first_unit", p.stage_first_unit},
                   {"unit_tp", p.unit_tp},
                   {"predicted_time_s", r.predicted_s},
                   {"simulated_time_s", r.simulated_s},
                   {"measured_steps_s", r.steps_s},
                   {"measured_median_s", r.median_s},
                   {"spread", r.spread},
                   {"error_vs_predicted", r.predicted_s > 0 ? r.median_s / r.predicted_s - 1 : 0.0},
                   {"error_vs_simulated", r.simulated_s > 0 ? r.median_s / r.simulated_s - 1 : 0.0},
                   {"loss", r.loss},
                   {"numerics_checked", r.checked}};
  if (r.checked) {
    j["numerics_ok"] = r.numerics_ok;
    j["max_gradient_error"] = r.gradient_error;
    j["max_weight_error"] = r.weight_error;
    if (!r.numerics_problem.empty()) j["numerics_problem"] = r.numerics_problem;
  }
  return j;
}

}  // namespace osdp::experiments
