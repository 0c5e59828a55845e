// Run under mpirun with 2 or 4 ranks: one training step of plans with stages, micro-batches and TP
// degrees (the one executor of validate/executor/executor.hpp, running the plan's schedule) on the mpi
// backend. After the step every operator's weights and reduced gradients must equal those of one
// process running the unsharded plan (experiments::unsharded_step: all DP, the same executor) on the
// same global batch, and the loss must agree, within the tolerances of test_executor_mpi.
//
// 2 ranks: TP 2; PP 2 under GPipe and 1F1B, with 2 and 3 micro-batches and both stage splits; TP 2
// on a tied model (its LM head at the embedding's degree); TP 2 with splits within the TP slices and
// checkpointing.
// 4 ranks: TP 2 x DP 2; PP 2 x DP 2 under both schedules; PP 2 x TP 2; TP 4; degrees that change
// from unit to unit (1, 4, 2, 4: the activations re-laid out between them); and the same with splits,
// checkpointing and prefetch.
// Context parallelism (ring attention's loop of point-to-point sends), each sample's sequence cut over
// the CP group: on 2 ranks CP 2 (the GPT, whose attention saves the scores, with splits and
// checkpointing too; the llama model's, which saves none; qwen3 tied with splits and checkpointing); on
// 4 ranks CP 2 x DP 2 (FSDP: the ZDP choices shard over all four), CP 4 with splits and checkpointing
// (and the llama model's, a ring of four without scores), CP 2 x TP 2, PP 2 x CP 2, and the llama
// model's CP 2 x DP 2 with splits and checkpointing, without and with prefetch (the comm stream's
// gathers beside the compute stream's ring passes).
// Expert parallelism (llama models whose MLPs are MoE layers of 4 experts, top 2; some with a shared MLP):
// on 2 ranks EP 2 (the MoE MLPs' states DP, ZDP or REPLICATE over the one rank holding the same experts;
// checkpointed, 2 micro-batches) and EP 1 sharded over both; on 4 ranks EP 2 x ZDP 2 (FSDP over the two
// ranks holding the same experts), EP 4, EP 2 x DP 2 with prefetch, PP 2 x EP 2.
// Choices mix DP, ZDP (gathered again every micro-batch) and REPLICATE over the operators, and where a
// case asks for it split slices and checkpointing. Most cases run the GPT; some a llama-family model
// (grouped-query attention, gated MLP, RMSNorm, rotary positions; qwen2's QKV biases, qwen3's Q/K
// head norms): on 2 ranks TP 2 untied and tied, TP 2 with splits and checkpointing, PP 2; on 4 ranks
// TP 2 x DP 2 and PP 2 x TP 2 with splits, checkpointing and prefetch. Exit 0 when every case passes.
//
// With --backend nccl the steps run on GPUs (CudaDevice, NcclCommunicator; one GPU per rank), as
// validate/gpu-smoke.sh runs it; exit 77 (skipped) where that backend cannot run.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"
#include "executor_fixtures.hpp"
#include "experiments/numerics_check.hpp"
#include "sim/replay.hpp"
#include "sim/schedule.hpp"
#include "validate/backends.hpp"
#include "validate/executor/executor.hpp"
#include "validate/mpi/mpi_backend.hpp"

using namespace osdp;
using namespace osdp::validate;
using namespace osdp::validate::testing;

namespace {

// The degree a unit can take: `want` when every operator of it can be cut that many ways, else 1.
int degree_for(const costmodel::Workload& hw, int unit, int want) {
  for (const int o : hw.units[static_cast<std::size_t>(unit)].ops) {
    const costmodel::Operator& op = hw.operators[static_cast<std::size_t>(o)];
    if (!costmodel::tp_allowed(op, want)) return 1;
    const auto s = op.splits(want);
    if (want > 1 && std::find(s.begin(), s.end(), want) == s.end()) return 1;
  }
  return want;
}

struct Case {
  std::string name;
  bool tied = false;
  int pp = 1, m = 1;
  costmodel::PipelineSchedule schedule = costmodel::PipelineSchedule::k1F1B;
  // TP degree wanted for unit u of `units`; stage starts (empty: even by unit count).
  std::function<int(int u, int units)> tp;
  std::vector<int> starts;
  bool splits = false;  // every fourth operator split 2 ways (1 slice ZDP) and checkpointed where it can be
  int prefetch = 0;
  std::string family = {};  // empty: the GPT; else a llama-family model (executor_fixtures.hpp's llama_model)
  int cp = 1;               // context parallelism: each sample's sequence cut over cp ranks (ring variant)
  int ep = 1;               // expert parallelism of the MoE MLPs ("moe" families)
  int moe_choice = -1;      // the MoE MLPs' choice: 0 DP, 1 ZDP, 2 REPLICATE; -1 the others' turn
  bool ulysses = false;     // context parallelism's all-to-all variant (emulated compute only)
};

// The case's model: the GPT (two stages untied), or the llama-family one (tied when the case is).
costmodel::ModelSpec model_for(const Case& c) {
  costmodel::ModelSpec m;
  if (c.family.empty()) {
    m = tiny_model(c.tied, c.tied ? 1 : 2);
    m.vocab = 128;  // a vocabulary-parallel head's columns hold its 2h vector parameters (numerics.hpp)
  } else if (c.family.rfind("moe", 0) == 0) {
    // MoE MLPs (4 experts of f_e 16, top 2; "moe-shared": and a shared MLP of 16) in the llama model.
    m = llama_model("llama");
    m.name = "tiny-" + c.family;
    m.moe.experts = 4;
    m.moe.top_k = 2;
    m.moe.expert_ffn = 16;
    m.moe.shared_ffn = c.family == "moe-shared" ? 16 : 0;
  } else {
    m = llama_model(c.family);
    m.tied_embeddings = c.tied;
  }
  return m;
}

costmodel::Plan make_plan(const costmodel::ModelSpec& model, const costmodel::ClusterSpec& cluster,
                          const Case& c) {
  const costmodel::Workload hw = costmodel::lower(model, c.pp);
  const int units = static_cast<int>(hw.units.size());
  costmodel::Plan p;
  p.strategy = c.name;
  p.model = model;
  p.cluster = cluster;
  p.pp = c.pp;
  p.micro_batches = c.m;
  p.batch_size = 1;
  p.prefetch = p.cost_options.prefetch = c.prefetch;
  p.schedule = c.schedule;
  p.cp = c.cp;
  p.cp_all_to_all = c.ulysses;
  p.stage_first_unit = c.starts;
  if (p.stage_first_unit.empty())
    for (int s = 0; s < c.pp; ++s) p.stage_first_unit.push_back(s * units / c.pp);
  for (int u = 0; u < units; ++u) p.unit_tp.push_back(degree_for(hw, u, c.tp(u, units)));
  const std::vector<int> unit_of = hw.unit_of_operators();
  // DP, ZDP and REPLICATE in turn over the operators; with `splits` every fourth split 2 ways within its
  // TP slice (where that slice splits) and checkpointed (where it can be).
  for (std::size_t o = 0; o < hw.operators.size(); ++o) {
    costmodel::Choice ch;
    ch.replicate = o % 3 == 2;
    ch.zdp_slices = o % 3 == 1 ? 1 : 0;
    const costmodel::Operator sliced =
        costmodel::tp_slice(hw.operators[o], p.unit_tp[static_cast<std::size_t>(unit_of[o])], false, hw);
    const bool moe = hw.operators[o].experts > 0;  // executed unsplit
    if (c.splits && o % 4 == 3 && !moe && sliced.splits(2).back() == 2) ch = {false, 2, 1, false};
    if (c.splits && o % 4 == 3) ch.checkpoint = hw.operators[o].checkpointable;
    if (moe && c.moe_choice >= 0) {
      ch.replicate = c.moe_choice == 2;
      ch.zdp_slices = c.moe_choice == 1 ? 1 : 0;
    }
    if (moe) ch.ep = c.ep;
    p.choices.push_back(ch);
  }
  return p;
}

std::vector<Case> cases_for(int ranks) {
  using costmodel::PipelineSchedule;
  const auto all = [](int t) { return [t](int, int) { return t; }; };
  std::vector<Case> c;
  if (ranks == 2) {
    c.push_back({"TP 2", false, 1, 1, PipelineSchedule::k1F1B, all(2), {}});
    c.push_back({"TP 2, 2 micro-batches", false, 1, 2, PipelineSchedule::k1F1B, all(2), {}});
    c.push_back({"TP 2 (tied)", true, 1, 1, PipelineSchedule::k1F1B, all(2), {}});
    c.push_back({"TP 2, splits and checkpointing, 2 micro-batches",
                 false,
                 1,
                 2,
                 PipelineSchedule::k1F1B,
                 all(2),
                 {},
                 true});
    // Grouped-query attention, gated MLPs, RMSNorm, rotary positions (llama_model).
    c.push_back({"TP 2", false, 1, 1, PipelineSchedule::k1F1B, all(2), {}, false, 0, "llama"});
    c.push_back({"TP 2 (tied)", true, 1, 1, PipelineSchedule::k1F1B, all(2), {}, false, 0, "qwen2"});
    c.push_back({"TP 2, splits and checkpointing, 2 micro-batches",
                 false,
                 1,
                 2,
                 PipelineSchedule::k1F1B,
                 all(2),
                 {},
                 true,
                 0,
                 "qwen3"});
    c.push_back({"PP 2 1f1b m 2", false, 2, 2, PipelineSchedule::k1F1B, all(1), {}, false, 0, "qwen2"});
    // Context parallelism: the GPT saves its scores (materialized attention: S = c Q K^T over every
    // chunk's keys), the llama model saves K^T V (fused attention); FSDP over the CP pair (the ZDP choices).
    c.push_back({"CP 2", false, 1, 1, PipelineSchedule::k1F1B, all(1), {}, false, 0, "", 2});
    c.push_back({"CP 2, splits and checkpointing, 2 micro-batches",
                 false,
                 1,
                 2,
                 PipelineSchedule::k1F1B,
                 all(1),
                 {},
                 true,
                 0,
                 "",
                 2});
    c.push_back({"CP 2", false, 1, 1, PipelineSchedule::k1F1B, all(1), {}, false, 0, "llama", 2});
    c.push_back({"CP 2 (tied)", true, 1, 2, PipelineSchedule::k1F1B, all(1), {}, true, 0, "qwen3", 2});
    // Expert parallelism: the MoE MLPs' experts over both ranks (dispatch and combine all-to-alls), the
    // router and norm (and a shared MLP) on both, all-reduced; their states over the expert-data group
    // (one rank: ZDP and DP hold everything) or replicated; and EP 1 sharded over both.
    c.push_back({"EP 2", false, 1, 1, PipelineSchedule::k1F1B, all(1), {}, false, 0, "moe", 1, 2});
    c.push_back(
        {"EP 2 REPLICATE", false, 1, 1, PipelineSchedule::k1F1B, all(1), {}, false, 0, "moe", 1, 2, 2});
    c.push_back({"EP 2, checkpointing, 2 micro-batches",
                 false,
                 1,
                 2,
                 PipelineSchedule::k1F1B,
                 all(1),
                 {},
                 true,
                 0,
                 "moe-shared",
                 1,
                 2,
                 1});
    c.push_back({"EP 1, FSDP over 2",
                 false,
                 1,
                 1,
                 PipelineSchedule::k1F1B,
                 all(1),
                 {},
                 false,
                 0,
                 "moe-shared",
                 1,
                 1,
                 1});
    for (const auto sched : {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B})
      for (const int m : {2, 3}) {
        const std::string name = fmt::format("PP 2 {} m {}", costmodel::to_string(sched), m);
        c.push_back({name, false, 2, m, sched, all(1), {}});
        c.push_back({name + " (one unit in stage 0)", false, 2, m, sched, all(1), {0, 1}});
      }
  } else if (ranks == 4) {
    c.push_back({"TP 2 x DP 2", false, 1, 1, PipelineSchedule::k1F1B, all(2), {}});
    c.push_back({"TP 2 x DP 2 (tied)", true, 1, 2, PipelineSchedule::k1F1B, all(2), {}});
    c.push_back({"TP 4", false, 1, 1, PipelineSchedule::k1F1B, all(4), {}});
    for (const auto sched : {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B}) {
      const std::string s = costmodel::to_string(sched);
      c.push_back({"PP 2 x DP 2 " + s, false, 2, 2, sched, all(1), {}});
      c.push_back({"PP 2 x TP 2 " + s, false, 2, 3, sched, all(2), {}});
    }
    c.push_back({"TP 1, 4, 2, 4 by unit",
                 false,
                 1,
                 2,
                 PipelineSchedule::k1F1B,
                 [](int u, int) { return u == 0       ? 1
                                         : u % 2 == 1 ? 4
                                                      : 2; },
                 {}});
    c.push_back({"PP 2 x TP 2, splits, checkpointing, prefetch 1",
                 false,
                 2,
                 2,
                 PipelineSchedule::k1F1B,
                 all(2),
                 {},
                 true,
                 1});
    c.push_back({"TP 2 x DP 2", false, 1, 1, PipelineSchedule::k1F1B, all(2), {}, false, 0, "llama"});
    c.push_back({"CP 2 x DP 2", false, 1, 1, PipelineSchedule::k1F1B, all(1), {}, false, 0, "", 2});
    c.push_back({"CP 4", false, 1, 2, PipelineSchedule::k1F1B, all(1), {}, true, 0, "", 4});
    c.push_back({"CP 4", false, 1, 1, PipelineSchedule::k1F1B, all(1), {}, false, 0, "llama", 4});
    c.push_back({"CP 2 x TP 2 (tied)", true, 1, 1, PipelineSchedule::k1F1B, all(2), {}, false, 0, "", 2});
    c.push_back({"PP 2 x CP 2 1f1b", false, 2, 2, PipelineSchedule::k1F1B, all(1), {}, false, 0, "", 2});
    for (const int prefetch : {0, 1}) {
      const std::string name = prefetch > 0 ? "CP 2 x DP 2, splits and checkpointing, prefetch 1"
                                            : "CP 2 x DP 2, splits and checkpointing";
      c.push_back({name, false, 1, 2, PipelineSchedule::k1F1B, all(1), {}, true, prefetch, "llama", 2});
    }
    c.push_back({"PP 2 x TP 2, splits, checkpointing, prefetch 1",
                 false,
                 2,
                 2,
                 PipelineSchedule::k1F1B,
                 all(2),
                 {},
                 true,
                 1,
                 "qwen3"});
    // Expert parallelism with FSDP: EP 2 x ZDP 2 (each expert's states sharded over the two ranks holding
    // it), EP 4 (every rank its expert; a shared MLP), EP 2 x DP 2 with prefetch, PP 2 x EP 2.
    c.push_back({"EP 2 x ZDP 2", false, 1, 1, PipelineSchedule::k1F1B, all(1), {}, false, 0, "moe", 1, 2, 1});
    c.push_back({"EP 4, checkpointing, 2 micro-batches",
                 false,
                 1,
                 2,
                 PipelineSchedule::k1F1B,
                 all(1),
                 {},
                 true,
                 0,
                 "moe-shared",
                 1,
                 4,
                 1});
    c.push_back({"EP 2 x DP 2, prefetch 1, 2 micro-batches",
                 false,
                 1,
                 2,
                 PipelineSchedule::k1F1B,
                 all(1),
                 {},
                 false,
                 1,
                 "moe",
                 1,
                 2,
                 0});
    c.push_back({"PP 2 x EP 2 1f1b",
                 false,
                 2,
                 2,
                 PipelineSchedule::k1F1B,
                 all(1),
                 {},
                 false,
                 0,
                 "moe-shared",
                 1,
                 2,
                 1});
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  std::string backend_name = "mpi";
  if (argc == 3 && std::string(argv[1]) == "--backend" &&
      (std::string(argv[2]) == "mpi" || std::string(argv[2]) == "nccl")) {
    backend_name = argv[2];
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: test_layout_executor_mpi [--backend mpi|nccl]\n");
    return 2;
  }
  const std::unique_ptr<BackendSession> backend = open_test_backend(backend_name);
  if (!backend) return 77;
  Communicator& comm = backend->comm();
  const int ranks = comm.size(), rank = comm.rank();
  const std::vector<Case> cases = cases_for(ranks);
  if (cases.empty()) {
    if (rank == 0) std::fprintf(stderr, "test_layout_executor_mpi runs on 2 or 4 ranks, not %d\n", ranks);
    return 2;
  }
  int failures = 0;
  for (const Case& c : cases) {
    const costmodel::ModelSpec m = model_for(c);
    const costmodel::Plan plan = make_plan(m, tiny_cluster(ranks, c.prefetch > 0), c);
    const int batch = plan.global_batch(ranks);
    const experiments::ReferenceStep ref =
        experiments::unsharded_step(m, tiny_cluster(1, false), batch, GemmMath::kFp32);
    const std::unique_ptr<Device> dev = backend->make_device(c.prefetch > 0);
    const costmodel::Workload w = costmodel::lower(m, plan.pp);
    const sim::Schedule schedule = sim::build_schedule(plan, w, sim::plan_cost_model(plan));
    Executor ex(*dev, comm, w, plan, schedule);
    const StepStats st = ex.step();
    std::string why;
    if (std::fabs(st.loss - ref.loss) > 1e-5 * std::fabs(ref.loss))
      why += fmt::format(" loss {} vs {};", st.loss, ref.loss);
    for (std::size_t u = 0; u < w.operators.size(); ++u) {
      const double g =
          experiments::max_difference(ex.logical_gradients(static_cast<int>(u)), ref.grads[u], true);
      const double wd =
          experiments::max_difference(ex.logical_weights(static_cast<int>(u)), ref.weights[u], false);
      if (g > 1e-4) why += fmt::format(" {} gradient off by {:.2e} (relative);", w.operators[u].name, g);
      if (wd > 5e-5) why += fmt::format(" {} weights off by {:.2e};", w.operators[u].name, wd);
    }
    std::string degrees;
    for (const int t : plan.unit_tp) degrees += std::to_string(t);
    if (!why.empty()) ++failures;
    if (rank == 0)
      std::printf("%s: %s on %d ranks, %s (%s, batch %d, TP by unit %s)%s\n", why.empty() ? "ok  " : "FAIL",
                  c.name.c_str(), ranks, backend_name.c_str(), m.name.c_str(), batch, degrees.c_str(),
                  why.c_str());
  }
  // Emulated compute (ExecutorOptions::emulate_compute): the same plans' steps with every compute task a
  // wait, the exchanges their compute tasks run (CP's ring, the expert all-to-alls) then the schedule's
  // own tasks with the bytes it prices, and CP's all-to-all variant (Ulysses), which only an emulated
  // step runs. Each rank's peak is the simulator's for that rank, to the byte (at prefetch 0).
  std::vector<Case> emulated;
  for (const Case& c : cases)
    if (c.cp > 1 || c.ep > 1 || c.pp > 1) emulated.push_back(c);
  for (const int cp : {2, 4}) {
    // The llama model's 2 key/value heads split over 2 ranks; the GPT's 4 over 4.
    Case u;
    u.pp = 1;
    u.m = 2;
    u.tp = [](int, int) { return 1; };
    u.family = cp == 2 ? "llama" : "";
    u.cp = cp;
    u.name = fmt::format("CP {} all-to-all (Ulysses)", cp);
    u.ulysses = true;
    if (cp <= ranks) emulated.push_back(u);
  }
  int emulated_failures = 0;
  for (const Case& c : emulated) {
    const costmodel::ModelSpec m = model_for(c);
    const costmodel::Plan plan = make_plan(m, tiny_cluster(ranks, c.prefetch > 0), c);
    const costmodel::Workload w = costmodel::lower(m, plan.pp);
    const sim::Replay replay = sim::replay_plan(plan, w, sim::SimOptions{});
    const std::unique_ptr<Device> dev = backend->make_device(c.prefetch > 0);
    ExecutorOptions o;
    o.emulate_compute = true;
    o.record_tasks = true;
    // Ring attention's K/V passes wait at each of their c - 1 steps for the block of the core computed
    // meanwhile. The tiny model's blocks take microseconds, less than a pass: here they take 2 ms, so a
    // pass that did not wait for its block would end sooner (a lower bound the waits guarantee whatever
    // the load). Memory does not depend on it.
    sim::Schedule sched = replay.schedule;
    for (sim::Task& task : sched.tasks)
      if (task.block_s > 0) task.block_s = 2e-3;
    Executor ex(*dev, comm, w, plan, sched, o);
    ex.step();
    const StepStats st = ex.step();
    const double measured = static_cast<double>(st.peak_bytes - st.baseline_bytes);
    const double predicted =
        replay.result.ranks[static_cast<std::size_t>(rank)].peak_bytes - replay.result.reserve_bytes;
    int short_passes = 0, passes = 0;
    const int stage = sched.stage_of(rank), first = sched.first_task(stage);
    for (int t = first; t < sched.end_task(stage); ++t) {
      const sim::Task& task = sched.tasks[static_cast<std::size_t>(t)];
      if (task.block_s <= 0) continue;
      ++passes;
      const TaskTiming& tt = st.tasks[static_cast<std::size_t>(t - first)];
      if (tt.end_s - tt.start_s < (task.group.size - 1) * task.block_s * (1 - 1e-9)) ++short_passes;
    }
    if (c.cp > 1 && !c.ulysses && passes == 0) ++short_passes;  // a ring plan has such passes
    // With prefetch the two streams' allocations interleave as they happen to: the peak is held to the
    // simulator's at prefetch 0.
    const bool ok = comm.sum_over_ranks(
                        (measured == predicted || c.prefetch > 0) && short_passes == 0 ? 0.0 : 1.0) == 0.0;
    if (!ok) ++emulated_failures;
    if (rank == 0)
      std::printf(
          "%s: %s on %d ranks, emulated compute, %s (%s): peak %.0f bytes, simulated %.0f; rank 0: %d "
          "of %d K/V passes shorter than their blocks\n",
          ok ? "ok  " : "FAIL", c.name.c_str(), ranks, backend_name.c_str(), m.name.c_str(), measured,
          predicted, short_passes, passes);
  }
  if (rank == 0)
    std::printf("%d of %zu cases failed; emulated: %d of %zu\n", failures, cases.size(), emulated_failures,
                emulated.size());
  return failures == 0 && emulated_failures == 0 ? 0 : 1;
}
