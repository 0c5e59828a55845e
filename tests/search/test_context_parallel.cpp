// Context parallelism (Plan::cp, issue 35): the CP slice and the plan cost model's terms against closed
// forms written here, the exact hybrid search against brute force with CP layouts, the simulator's
// schedule of a CP plan against the plan cost model, and the plan file's round trip.
//
// The model: llama-style (GQA: 4 query heads, 2 key/value heads of 16), h 64, seq 32, fp32 (e 4),
// causal fused attention. Per sample its attention takes K and V of kv = e s 2 g d = 4 x 32 x 64 =
// 8,192 bytes and Q of q = e s a d = 8,192 bytes. At degree c a rank holds s / c tokens of each sample:
// every per-sample figure divides by c, and per micro-batch (b = b0 t samples) its CP group of c ranks
// at stride t exchanges, with KV = b kv / c and Q = b q / c:
//   ring:       forward the c - 1 passes of AG(c KV), each p = alpha + KV beta overlapping a c-th of the
//               core's time a (the fused attention's kernels, `.flash*`): (c - 1) max(0, p - a / c);
//               backward the same with the backward's core, and RS(c KV) = (c - 1) p not overlapped
//   all-to-all: forward and backward A2A(Q + KV) + A2A(Q), A2A(S) = (c - 1)(alpha + S / c beta)
#include <cmath>
#include <random>

#include <catch2/catch.hpp>

#include "../costmodel/cost_fixtures.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/plan_cost.hpp"
#include "search/hybrid.hpp"
#include "sim/engine.hpp"
#include "sim/network.hpp"
#include "sim/schedule.hpp"

namespace osdp {
namespace {

using costmodel::Choice;
using costmodel::ClusterSpec;
using costmodel::CostOptions;
using costmodel::CpLayout;
using costmodel::ModelSpec;
using costmodel::Operator;
using costmodel::PlanCostModel;
using costmodel::cost_fixtures::kAlpha;
using costmodel::cost_fixtures::kBandwidth;
using costmodel::cost_fixtures::synthetic_cluster;

ModelSpec llama(int layers) {
  return costmodel::cost_fixtures::small_llama(layers, 2, "cp");
}

double rel(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-300});
}

// The time the cost model gives the fused attention's core among `kernels` (named `.flash*`, chosen
// here by name) at batch b: the blocks ring attention overlaps with its passes.
double core_s(const costmodel::CostModel& m, const std::vector<costmodel::Kernel>& kernels, int b) {
  std::vector<costmodel::Kernel> core;
  for (const auto& k : kernels)
    if (k.name.find(".flash") != std::string::npos) core.push_back(k);
  REQUIRE(!core.empty());
  return m.phase_s(core, b, 1);
}

}  // namespace

TEST_CASE("the CP slice: s / c tokens per rank, every per-sample figure divided by c", "[cp]") {
  const costmodel::Workload w = costmodel::lower(llama(1));
  for (const Operator& op : w.operators)
    for (const int c : {2, 4}) {
      CAPTURE(op.name, c);
      const Operator s = costmodel::cp_slice(op, c, false);
      CHECK(rel(s.forward_flops(3) * c, op.forward_flops(3)) < 1e-12);
      CHECK(rel(s.backward_flops(3) * c, op.backward_flops(3)) < 1e-12);
      CHECK(rel(s.saved_bytes_per_sample * c, op.saved_bytes_per_sample) < 1e-12);
      CHECK(rel(s.input_bytes_per_sample * c, op.input_bytes_per_sample) < 1e-12);
      CHECK(s.parameters() == op.parameters());
      // Ring attention holds two K/V blocks more; the all-to-all its send and receive buffers.
      const double ring = op.kind == costmodel::OperatorKind::kAttention ? 2 * 8192.0 / c : 0.0;
      CHECK(rel(s.workspace_bytes_per_sample, op.workspace_bytes_per_sample / c + ring) < 1e-12);
      const Operator u = costmodel::cp_slice(op, c, true);
      const double a2a = op.kind == costmodel::OperatorKind::kAttention ? 2 * (8192.0 + 8192.0) / c : 0.0;
      CHECK(rel(u.workspace_bytes_per_sample, op.workspace_bytes_per_sample / c + a2a) < 1e-12);
    }
  const Operator& attention = w.operators[1];
  REQUIRE(attention.kind == costmodel::OperatorKind::kAttention);
  CHECK(attention.kv_bytes_per_sample == 8192);
  CHECK(attention.q_bytes_per_sample == 8192);
  // Ulysses splits the key/value heads: 2 over 2 ranks, not over 4 (nor 2 at TP 2).
  CHECK(costmodel::cp_allowed(attention, 2, true));
  CHECK_FALSE(costmodel::cp_allowed(attention, 4, true));
  CHECK(costmodel::cp_allowed(attention, 4, false));
  CHECK_FALSE(costmodel::cp_allowed(costmodel::tp_slice(attention, 2, false, w), 2, true));
}

TEST_CASE("CP prices: the ring's passes or the all-to-alls on the CP group, TP traffic over c", "[cp]") {
  const ModelSpec model = llama(1);
  const costmodel::Workload w = costmodel::lower(model);
  const Operator& attention = w.operators[1];
  const Operator& mlp = w.operators[2];
  const ClusterSpec cluster = synthetic_cluster(1, 8);
  const PlanCostModel cost(cluster, nullptr, model.precision, CostOptions{});
  const double beta = 1 / kBandwidth;
  for (const int b0 : {1, 2})
    for (const bool ckpt : {false, true})
      for (const int c : {2, 4}) {
        CAPTURE(b0, ckpt, c);
        const Choice z{false, 1, 1, ckpt};
        const double kv = b0 * 8192.0 / c, q = b0 * 8192.0 / c;
        const auto ring = cost.op_parts(w, attention, 1, z, b0, 1, false, CpLayout{c, false});
        const double step = kAlpha + kv * beta;
        const Operator slice = costmodel::cp_slice(attention, c, false);
        const costmodel::CostModel& sub = cost.sharding_model(1, 1, z);
        const double block_f = core_s(sub, slice.forward, b0) / c,
                     block_b = core_s(sub, slice.backward, b0) / c;
        // Both regimes occur: at c = 2 a forward block is shorter than a pass, a backward one longer.
        CHECK(block_f > 0);
        if (c == 2) {
          CHECK(block_f < step);
          CHECK(block_b > step);
        }
        const double fwd = (c - 1) * std::max(0.0, step - block_f);
        const double bwd = (c - 1) * std::max(0.0, step - block_b) + (c - 1) * step;
        CHECK(rel(ring.cp_forward_s, fwd) < 1e-12);
        CHECK(rel(ring.cp_backward_s, bwd + (ckpt ? fwd : 0.0)) < 1e-12);
        if (c == 2) {
          const auto uly = cost.op_parts(w, attention, 1, z, b0, 1, false, CpLayout{c, true});
          const double a2a = (c - 1) * (kAlpha + (q + kv) / c * beta) + (c - 1) * (kAlpha + q / c * beta);
          CHECK(rel(uly.cp_forward_s, a2a) < 1e-12);
          CHECK(rel(uly.cp_backward_s, (ckpt ? 2 : 1) * a2a) < 1e-12);
        }
        // The MLP exchanges nothing; its compute is the CP slice's.
        const auto m = cost.op_parts(w, mlp, 1, z, b0, 1, false, CpLayout{c, false});
        CHECK(m.cp_forward_s == 0);
        CHECK(m.cp_backward_s == 0);
      }
  // At TP 2 the TP all-reduce carries b s h e / c: AR over 2 ranks of b0 2 x 32 x 64 x 4 / c bytes.
  const Choice z{false, 1, 1, false};
  const auto t2 = cost.op_parts(w, mlp, 2, z, 1, 1, false, CpLayout{2, false});
  const double bytes = 2.0 * 32 * 64 * 4 / 2;
  CHECK(rel(t2.tp_forward_s, 2 * (kAlpha + bytes / 2 * beta)) < 1e-12);
  // Across nodes of 4: CP 8 at TP 1 spans both, priced flat on the slower link.
  ClusterSpec two = synthetic_cluster(2, 4);
  two.inter = costmodel::LinkSpec{5 * kAlpha, kBandwidth / 5};
  const PlanCostModel across(two, nullptr, model.precision, CostOptions{});
  const auto far = across.op_parts(w, attention, 1, z, 1, 1, false, CpLayout{8, false});
  const double far_block =
      core_s(across.sharding_model(1, 1, z), costmodel::cp_slice(attention, 8, false).forward, 1) / 8;
  CHECK(rel(far.cp_forward_s, 7 * std::max(0.0, 5 * kAlpha + 8192.0 / 8 * 5 * beta - far_block)) < 1e-12);
  // A long sequence: every block of the core outlasts its pass, which shows no more; the gradients'
  // reduce-scatter still does.
  ModelSpec long_model = model;
  long_model.seq = 8192;
  const costmodel::Workload lw = costmodel::lower(long_model);
  const auto hidden = cost.op_parts(lw, lw.operators[1], 1, z, 1, 1, false, CpLayout{4, false});
  const double long_kv = 8192.0 * 8192 / 32 / 4;  // kv grows with the sequence: 8,192 bytes at 32 tokens
  CHECK(hidden.cp_forward_s == 0);
  CHECK(rel(hidden.cp_backward_s, 3 * (kAlpha + long_kv * beta)) < 1e-12);
}

// Why a plan has one CP degree, not one per stage. Every stage holds N_s = N / pp ranks and runs the
// same micro-batch of B samples, so a stage at CP c holds b0 = B c / N_s samples per CP group: a stage
// above the least degree its micro-batch allows runs (2 b0, 2 c) where it could run (b0, c). Both hold
// the same tokens per rank (b0 s / c), shard the weights over the same N_s / t ranks and send the same
// activations between stages; (2 b0, 2 c) only cuts each GEMM of the core into shorter blocks and
// passes more of them. Checked here for each stage of two-stage plans (TP 1 and 2, checkpointed or not,
// both variants): its time is never shorter, its memory the same (from CP 1 no less: the exchange's
// buffers), the global batch the same. So
// per-stage degrees, besides the re-layout of activations between stages of different degrees, would
// never beat every stage at the least one, and the search loses nothing with one degree per plan.
TEST_CASE("a stage's CP degree above the least never pays: one degree for the plan loses nothing", "[cp]") {
  const ModelSpec model = llama(4);
  const ClusterSpec cluster = synthetic_cluster(1, 16);
  const PlanCostModel cost(cluster, nullptr, model.precision, CostOptions{});
  const costmodel::Workload w = costmodel::lower(model, 2);
  const int per_stage = 8;
  int compared = 0;
  for (const int t : {1, 2})
    for (const bool ckpt : {false, true})
      for (const bool all_to_all : {false, true})
        for (const int c : {1, 2})
          for (const int b0 : {1, 2}) {
            CAPTURE(t, ckpt, all_to_all, c, b0);
            if (per_stage % (t * 2 * c) != 0) continue;
            auto plan_at = [&](int batch, int cp) {
              costmodel::Plan plan;
              plan.model = model;
              plan.cluster = cluster;
              plan.pp = 2;
              plan.micro_batches = 2;
              plan.batch_size = batch;
              plan.cp = cp;
              plan.cp_all_to_all = all_to_all;
              plan.stage_first_unit = {0, 3};
              for (const auto& unit : w.units) {
                bool split = true;
                for (const int oi : unit.ops)
                  split = split && costmodel::tp_allowed(w.operators[static_cast<std::size_t>(oi)], t);
                plan.unit_tp.push_back(split ? t : 1);
              }
              for (const auto& op : w.operators)
                plan.choices.push_back(Choice{false, 1, 1, ckpt && op.checkpointable});
              return plan;
            };
            const costmodel::Plan low = plan_at(b0, c), high = plan_at(2 * b0, 2 * c);
            bool allowed = true;  // Ulysses needs the key/value heads of every TP slice divisible by 2c
            for (std::size_t u = 0; u < w.units.size(); ++u)
              for (const int oi : w.units[u].ops)
                allowed = allowed &&
                          costmodel::cp_allowed(costmodel::tp_slice(w.operators[static_cast<std::size_t>(oi)],
                                                                    high.unit_tp[u], false, w),
                                                2 * c, all_to_all);
            if (!allowed) continue;
            const costmodel::Evaluation a = cost.evaluate(w, low), b = cost.evaluate(w, high);
            CHECK(a.global_batch == b.global_batch);
            REQUIRE(a.stages.size() == 2);
            REQUIRE(b.stages.size() == 2);
            for (std::size_t s = 0; s < 2; ++s) {
              CAPTURE(s);
              CHECK(b.stages[s].time_s >= a.stages[s].time_s * (1 - 1e-12));
              CHECK(b.stages[s].compute_s >= a.stages[s].compute_s * (1 - 1e-12));
              // From CP 1 the exchange's buffers appear (the ring's two blocks, Ulysses' send and receive
              // buffers); between two CP degrees they are the same.
              if (c > 1)
                CHECK(rel(b.stages[s].peak_bytes, a.stages[s].peak_bytes) < 1e-12);
              else
                CHECK(b.stages[s].peak_bytes >= a.stages[s].peak_bytes * (1 - 1e-12));
              CHECK(rel(b.stages[s].p2p_s, a.stages[s].p2p_s) < 1e-12);
            }
            ++compared;
          }
  CHECK(compared >= 10);
}

TEST_CASE("exact hybrid search with CP layouts equals brute force", "[cp][brute]") {
  std::mt19937 rng(20261130);
  int compared = 0, feasible = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const ModelSpec model = llama(1);
    ClusterSpec cluster = synthetic_cluster(1, 4);
    cluster.overlap.enabled = rng() % 2 == 0;
    cluster.overlap.interference = 1.1;
    CostOptions opts;
    opts.prefetch = cluster.overlap.enabled ? 1 : 0;
    PlanCostModel cost(cluster, nullptr, model.precision, opts);
    search::HybridSearchOptions so;
    so.space.split_max = 2;
    so.space.checkpoint = rng() % 2 ? search::CheckpointPolicy::kAuto : search::CheckpointPolicy::kOff;
    search::HybridLayout layout{1 << (rng() % 2), 1 + static_cast<int>(rng() % 2),
                                1 + static_cast<int>(rng() % 2), costmodel::PipelineSchedule::k1F1B, false};
    layout.cp = 1 << (1 + rng() % 2);
    if (layout.cp * layout.pp > 4) layout.cp = 2;
    layout.cp_all_to_all = layout.cp == 2 && rng() % 2 == 0;
    const auto hw = costmodel::lower(model, layout.pp);
    cost.set_capacity(1e18);
    const auto loose = search::brute_force_layout(cost, hw, layout, so);
    REQUIRE(loose);
    CHECK(loose->cp == layout.cp);
    const double top = cost.evaluate(hw, *loose).peak_bytes;
    cost.set_capacity(top * std::uniform_real_distribution<double>(0.4, 1.0)(rng));
    const auto brute = search::brute_force_layout(cost, hw, layout, so);
    const auto exact = search::solve_layout_exact(cost, hw, layout, so);
    CAPTURE(trial, layout.pp, layout.m, layout.b0, layout.cp, layout.cp_all_to_all);
    REQUIRE(bool(brute) == bool(exact));
    ++compared;
    if (!brute) continue;
    ++feasible;
    CHECK(rel(cost.evaluate(hw, *exact).time_s, cost.evaluate(hw, *brute).time_s) < 1e-9);
  }
  CHECK(compared == 12);
  CHECK(feasible > 0);
}

TEST_CASE("search_hybrid takes CP where memory needs it", "[cp]") {
  // seq 4096: activations dominate. The least memory any plan without CP fits in (bisected on the exact
  // search's feasibility), less a tenth: only CP layouts fit there.
  ModelSpec model = llama(2);
  model.seq = 4096;
  const ClusterSpec cluster = synthetic_cluster(1, 8);
  PlanCostModel cost(cluster, nullptr, model.precision, CostOptions{});
  search::HybridSearchOptions so;
  so.space.checkpoint = search::CheckpointPolicy::kAuto;
  so.cp = {1};
  so.max_b0 = 1;
  double lo = 0, hi = cluster.memory_bytes;
  cost.set_capacity(hi);
  REQUIRE(search::search_hybrid(model, cost, search::LayoutSearch::kExact, so).feasible);
  for (int i = 0; i < 30; ++i) {
    const double mid = (lo + hi) / 2;
    cost.set_capacity(mid);
    (search::search_hybrid(model, cost, search::LayoutSearch::kExact, so).feasible ? hi : lo) = mid;
  }
  cost.set_capacity(0.9 * hi);
  CHECK_FALSE(search::search_hybrid(model, cost, search::LayoutSearch::kExact, so).feasible);
  so.cp.clear();  // every degree
  auto r = search::search_hybrid(model, cost, search::LayoutSearch::kExact, so);
  REQUIRE(r.feasible);
  CHECK(r.plan.cp > 1);
  CHECK(r.evaluation.global_batch == r.plan.batch_size * r.plan.micro_batches * 8 / r.plan.pp / r.plan.cp);
  // A fixed global batch holds for every layout, CP or not (odd b0 only for CP 4 and 8: 2 and 6 are not).
  cost.set_capacity(cluster.memory_bytes);
  for (const int global : {1, 2, 3, 4, 6, 8, 16}) {
    CAPTURE(global);
    search::HybridSearchOptions fixed = so;
    fixed.max_b0 = 64;
    fixed.global_batch = global;
    const auto g = search::search_hybrid(model, cost, search::LayoutSearch::kExact, fixed);
    REQUIRE(g.feasible);
    CHECK(g.evaluation.global_batch == global);
  }
  cost.set_capacity(0.9 * hi);
  // The plan file keeps it.
  r.plan.model = model;
  r.plan.cluster = cluster;
  r.plan.cluster.device_name = "synthetic device";
  r.plan.memory_limit_bytes = cost.capacity_bytes();
  const costmodel::Plan back = costmodel::read_plan(costmodel::to_json(r.plan), "cp.json");
  CHECK(back.cp == r.plan.cp);
  CHECK(back.cp_all_to_all == r.plan.cp_all_to_all);
}

// The schedule of a CP plan (one node of 8, t = 1, ZDP everywhere, prefetch 0): per attention operator
// and micro-batch the ring's all-gather forward and all-gather and reduce-scatter backward on groups
// of c ranks at stride 1 (Ulysses: two all-to-alls each way), each the cost model's; the simulated
// step the plan cost model's, its peak within evaluate's bound.
TEST_CASE("the schedule of a CP plan carries the cost model's exchanges", "[cp][sim]") {
  const ModelSpec model = llama(2);
  const ClusterSpec cluster = synthetic_cluster(1, 8);
  const PlanCostModel cost(cluster, nullptr, model.precision, CostOptions{});
  const costmodel::Workload w = costmodel::lower(model);
  for (const bool all_to_all : {false, true})
    for (const int m : {1, 2}) {
      CAPTURE(all_to_all, m);
      costmodel::Plan plan;
      plan.model = model;
      plan.cluster = cluster;
      costmodel::set_data_parallel(plan, w,
                                   std::vector<Choice>(w.operators.size(), Choice{false, 1, 1, false}));
      plan.cp = 2;
      plan.cp_all_to_all = all_to_all;
      plan.micro_batches = m;
      plan.batch_size = 2;
      CHECK_FALSE(plan.data_parallel());
      double cp_terms = 0;
      for (const auto& op : w.operators) {
        const auto p = cost.op_parts(w, op, 1, plan.choices[0], 2, 1, false, CpLayout{2, all_to_all});
        cp_terms += p.cp_forward_s + p.cp_backward_s;
      }
      const sim::Schedule s = sim::build_schedule(plan, w, cost);
      int tasks = 0, overlapped = 0;
      double seconds = 0;
      for (const sim::Task& t : s.tasks) {
        if (t.name.find(".cp.") == std::string::npos) continue;
        ++tasks;
        CHECK(t.group.size == 2);
        CHECK(t.group.stride == 1);
        // A ring's K/V pass (1 step at c = 2) shows only beyond its block of the core, whose compute
        // task is that much shorter.
        const double ring =
            costmodel::CollectiveOp{sim::collective_of(t.kind), t.bytes, 2}.ring_s(kAlpha, 1 / kBandwidth);
        const bool pass = !all_to_all && t.kind == sim::TaskKind::kAllGather;
        CHECK((t.block_s > 0) == pass);
        overlapped += pass;
        seconds += pass ? std::max(0.0, ring - t.block_s) : ring;
      }
      CHECK(overlapped == (all_to_all ? 0 : 2 * 2 * m));
      CHECK(tasks == 2 * 2 * m * (all_to_all ? 2 : 1) + (all_to_all ? 0 : 2 * m));  // 2 layers
      CHECK(rel(seconds, m * cp_terms) < 1e-12);
      const costmodel::Evaluation ev = cost.evaluate(w, plan);
      const sim::SimResult r = sim::simulate(s, sim::RingLinks(cluster, nullptr), sim::SimOptions{});
      CHECK(sim::to_seconds(r.iteration) == Approx(ev.time_s).epsilon(1e-6));
      for (const auto& rank : r.ranks) CHECK(rank.peak_bytes <= ev.peak_bytes * (1 + 1e-12));
    }
}

}  // namespace osdp
