#include "experiments/numerics_check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "costmodel/plan_cost.hpp"
#include "experiments/measured.hpp"
#include "sim/replay.hpp"
#include "sim/schedule.hpp"
#include "validate/cpu/cpu_device.hpp"
#include "validate/executor/self_communicator.hpp"

namespace osdp::experiments {

double max_difference(const std::vector<float>& a, const std::vector<float>& b, bool relative) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
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
  p.cluster.inter.reset();
  p.cluster.memory_bytes = 1e15;
  p.memory_limit_bytes = 1e15;
  p.batch_size = global_batch;
  const costmodel::Workload w = costmodel::lower(p.model);
  costmodel::set_data_parallel(p, w, std::vector<costmodel::Choice>(w.operators.size(), costmodel::Choice{}));
  const sim::Schedule sched = sim::build_schedule(p, w, sim::plan_cost_model(p));
  validate::CpuDevice dev(validate::CpuDeviceOptions{0, false, 0});
  validate::SelfCommunicator self(dev);
  validate::ExecutorOptions opt;
  opt.sample_offset = 0;
  opt.loss_tokens = static_cast<std::int64_t>(global_batch) * w.seq;
  opt.gemm_math = math;
  validate::Executor ex(dev, self, w, p, sched, opt);
  ReferenceStep r;
  for (int u = 0; u < static_cast<int>(w.operators.size()); ++u) r.initial.push_back(ex.logical_weights(u));
  r.loss = ex.step().loss;
  for (int u = 0; u < static_cast<int>(w.operators.size()); ++u) {
    r.weights.push_back(ex.logical_weights(u));
    r.grads.push_back(ex.logical_gradients(u));
  }
  return r;
}

StepCheck check_step(validate::Executor& ex, const costmodel::Plan& plan, const costmodel::Workload& w,
                     validate::Communicator& comm, validate::GemmMath math) {
  const double loss = ex.step().loss;
  std::vector<std::vector<float>> weights, grads;
  for (int u = 0; u < static_cast<int>(w.operators.size()); ++u) {
    grads.push_back(ex.logical_gradients(u));
    weights.push_back(ex.logical_weights(u));
  }
  // Rank 0 runs the reference; the others wait at the sums of its figures.
  StepCheck c;
  double figures[3] = {0, 0, 0};
  if (comm.rank() == 0) {
    const ReferenceStep ref = unsharded_step(plan.model, plan.cluster, plan.global_batch(plan.cluster.world_size()),
                                             math);
    for (std::size_t u = 0; u < w.operators.size(); ++u) {
      const double g = max_difference(grads[u], ref.grads[u], true);
      const double x = max_difference(weights[u], ref.weights[u], false);
      c.grad_diff = std::max(c.grad_diff, g);
      c.weight_diff = std::max(c.weight_diff, x);
      if (g > kCheckGrad || x > kCheckWeight)
        c.note += fmt::format("{}{} (gradient {:.2e}, weights {:.2e})", c.note.empty() ? "" : ", ",
                              w.operators[u].name, g, x);
    }
    c.loss_error = std::fabs(loss - ref.loss) / std::max(std::fabs(ref.loss), 1e-30);
    if (c.loss_error > kCheckLoss)
      c.note += fmt::format("{}loss {} against {}", c.note.empty() ? "" : ", ", loss, ref.loss);
    figures[0] = c.loss_error;
    figures[1] = c.grad_diff;
    figures[2] = c.weight_diff;
  }
  c.loss_error = comm.sum_over_ranks(figures[0]);
  c.grad_diff = comm.sum_over_ranks(figures[1]);
  c.weight_diff = comm.sum_over_ranks(figures[2]);
  return c;
}

}  // namespace osdp::experiments
