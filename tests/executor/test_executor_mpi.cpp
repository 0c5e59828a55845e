// Run under mpirun with 2 or 3 ranks: one training step of every plan pattern (DP, ZDP, REPLICATE,
// split k of n, checkpointed with and without regather, mixed), at prefetch 0 and 1, with and
// without a communication thread, on a tied and an untied GPT (the latter with a projection between
// two stages) and on llama-family models (grouped-query attention, a gated MLP, RMSNorm, rotary
// positions, an untied head; qwen2's QKV biases, qwen3's Q/K head norms: step_test_models). After
// the step every operator's weights and reduced gradients must equal those of one process running
// the unsharded plan (all DP, no splits) on the global batch, and the loss must agree. The measured
// peak memory is checked against the simulator's (see below). Exit 0 when every case passes; each
// failure is printed by rank 0.
//
// With --nodes N the job is N nodes of size/N ranks and the patterns are node groups (HSDP) and
// two-level collectives, alone and mixed (executor_fixtures.hpp): their rings are the communicator's
// node rings. The gradient-scale regression of multi-node sharding is part of the check: a node-
// sharded step's gradients must be the mean over the whole job (the released OSDP code's group
// sharding gives `nodes` times it), reported on its own line when they are a multiple of it.
//
// With --backend nccl the sharded steps run on GPUs (CudaDevice, NcclCommunicator; one GPU per rank)
// against the same CPU reference; without a GPU it prints why and exits 77 (CTest: skipped).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "costmodel/cost_model.hpp"
#include "executor_fixtures.hpp"
#include "sim/replay.hpp"
#include "sim/schedule.hpp"
#include "validate/backends.hpp"
#include "validate/cpu/cpu_device.hpp"
#include "validate/executor/executor.hpp"
#include "validate/executor/self_communicator.hpp"
#include "validate/mpi/mpi_backend.hpp"

using namespace osdp;
using namespace osdp::validate;
using namespace osdp::validate::testing;

namespace {

struct Outcome {
  double loss = 0;
  double measured_peak = 0;  // this rank: tracked peak less the executor's baseline
  double padding = 0;        // bytes allocated beyond the schedule's sizes (equal shards)
  double simulated_peak = 0;
  double analytic_peak = 0;
  std::vector<std::vector<float>> weights, grads;
};

Outcome run_plan(Device& dev, Communicator& comm, const costmodel::Plan& plan, const costmodel::Workload& w,
                 const ExecutorOptions& opt) {
  const sim::Schedule sched = sim::build_schedule(plan, w, sim::plan_cost_model(plan));
  Executor ex(dev, comm, w, plan, sched, opt);
  Outcome o;
  const StepStats st = ex.step();
  o.loss = st.loss;
  o.measured_peak = static_cast<double>(st.peak_bytes - st.baseline_bytes);
  o.padding = static_cast<double>(st.padding_bytes);
  const sim::Replay replay = sim::replay_plan(plan, sim::SimOptions{});
  o.simulated_peak = replay.result.ranks[static_cast<std::size_t>(comm.rank())].peak_bytes;
  o.analytic_peak = replay.analytic_peak_bytes;
  for (int u = 0; u < static_cast<int>(w.operators.size()); ++u) {
    o.weights.push_back(ex.logical_weights(u));
    o.grads.push_back(ex.logical_gradients(u));
  }
  return o;
}

// Largest |a - b| relative to the largest |b| of the operator (gradients), or absolute (weights:
// Adam's first step moves each weight by about lr, so the tolerance is a fraction of lr).
double max_diff(const std::vector<float>& a, const std::vector<float>& b, bool relative) {
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  if (a.size() != b.size()) return 1e30;
  return relative ? diff / std::max(scale, 1e-30) : diff;
}

// The ratio a to b in the least-squares sense (sum a b / sum b b): 1 for equal gradients, `nodes`
// for gradients `nodes` times the mean.
double scale_of(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, bb = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return bb > 0 ? ab / bb : 1.0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  bool nccl = false;
  int nodes = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--backend" && value == "nccl") {
      nccl = true;
    } else if (key == "--nodes") {
      nodes = std::stoi(value);
    } else if (key != "--backend" || value != "mpi") {
      std::fprintf(stderr, "usage: test_executor_mpi [--backend mpi|nccl] [--nodes N]\n");
      return 2;
    }
  }
  // The sharded runs' devices and communicator: CPU and MPI, or GPUs and NCCL (as osdp validate's).
  const std::string backend_name = nccl ? "nccl" : "mpi";
  const std::unique_ptr<BackendSession> backend = open_test_backend(backend_name);
  if (!backend) return 77;
  Communicator& comm = backend->comm();
  const int ranks = comm.size(), rank = comm.rank();
  if (nodes < 1 || ranks % nodes != 0 || (nodes > 1 && ranks / nodes < 2)) {
    if (rank == 0)
      std::fprintf(stderr, "--nodes %d: %d ranks are not nodes of 2 or more ranks\n", nodes, ranks);
    return 2;
  }
  const std::vector<NamedPlan> patterns = nodes > 1 ? leveled_patterns() : plan_patterns();
  int failures = 0, cases = 0;
  const int batch = 2;
  for (const costmodel::ModelSpec& m : step_test_models()) {
    const costmodel::Workload w = costmodel::lower(m);
    // The reference: one process, all DP, unsplit, the global batch.
    Outcome ref;
    {
      CpuDevice dev(CpuDeviceOptions{0, false, 0});
      SelfCommunicator self(dev);
      const costmodel::ClusterSpec one = tiny_cluster(1, false);
      NamedPlan dp = plan_patterns().front();
      const costmodel::Plan p = make_plan(m, one, w, batch * ranks, 0, dp);
      ExecutorOptions opt;
      opt.sample_offset = 0;
      opt.loss_tokens = static_cast<std::int64_t>(ranks) * batch * m.seq;
      ref = run_plan(dev, self, p, w, opt);
    }
    for (const NamedPlan& pattern : patterns)
      for (const int prefetch : {0, 1})
        for (const bool overlap : {false, true}) {
          ++cases;
          const std::unique_ptr<Device> dev = backend->make_device(overlap);
          const costmodel::Plan p =
              make_plan(m, tiny_cluster(ranks, overlap, nodes), w, batch, prefetch, pattern);
          const Outcome got = run_plan(*dev, comm, p, w, ExecutorOptions{});
          std::string why;
          if (std::fabs(got.loss - ref.loss) > 1e-5 * std::fabs(ref.loss))
            why += fmt::format(" loss {} vs {};", got.loss, ref.loss);
          for (std::size_t u = 0; u < w.operators.size(); ++u) {
            const double scale = scale_of(got.grads[u], ref.grads[u]);
            if (std::fabs(scale - 1.0) > 1e-3)
              why += fmt::format(" {} gradient is {:.3f} times the mean over the job;", w.operators[u].name,
                                 scale);
            const double g = max_diff(got.grads[u], ref.grads[u], true);
            const double wd = max_diff(got.weights[u], ref.weights[u], false);
            if (g > 1e-4)
              why += fmt::format(" {} gradient off by {:.2e} (relative);", w.operators[u].name, g);
            if (wd > 5e-5) why += fmt::format(" {} weights off by {:.2e};", w.operators[u].name, wd);
          }
          // Memory. A serial schedule (prefetch 0) allocates in one order: the measured peak is the
          // simulator's to the byte (padding for equal shards aside). With prefetch the order of
          // allocations follows real timing, which the simulator predicts only approximately: the
          // measured peak must then stay under the analytic bound.
          const double excess = got.measured_peak - got.simulated_peak;
          if (prefetch == 0 && (excess < 0 || excess > got.padding))
            why += fmt::format(" peak {} B measured, {} B simulated (padding {} B);", got.measured_peak,
                               got.simulated_peak, got.padding);
          if (prefetch > 0 && got.measured_peak > got.analytic_peak + got.padding)
            why += fmt::format(" peak {} B measured, above the analytic bound {} B;", got.measured_peak,
                               got.analytic_peak);
          const std::string name =
              fmt::format("{} {} prefetch {} {} on {} ranks{}", m.name, pattern.name, prefetch,
                          overlap ? "comm thread" : "one thread", ranks,
                          nodes > 1 ? fmt::format(" ({} nodes of {})", nodes, ranks / nodes) : "");
          if (!why.empty()) ++failures;
          if (rank == 0) std::printf("%s: %s%s\n", why.empty() ? "ok  " : "FAIL", name.c_str(), why.c_str());
        }
  }
  if (rank == 0) std::printf("%d of %d cases failed\n", failures, cases);
  return failures == 0 && cases > 0 ? 0 : 1;
}
