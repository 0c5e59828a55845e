// Expert parallelism (Choice::ep, issue 35): the EP slice and the plan cost model's terms against
// closed forms written here, the exact hybrid search against brute force with EP in the space, and the
// simulator's schedule of an EP plan against the plan cost model.
//
// The model: llama-style, h 64, 4 heads, seq 32, fp32 (e 4 bytes), one or two layers whose MLP is an
// MoE of E = 8 experts of f_e = 32, top k = 2: per sample s k = 64 token slots, t = s k / E = 8 per
// expert. Its MLP operator holds the RMSNorm (h), the router (h E) and the experts (3 h f_e E):
// P = 64 + 512 + 49,152 = 49,728; at EP e the experts per rank are E / e, P_e = 576 + 49,152 / e.
// One all-to-all moves X = b0 s k h e_act bytes per rank (its tokens for the experts of its TP slice:
// b0 t samples' s k / t ... = b0 s k per rank), on the EP group of e ranks at stride t:
//   A2A(X, e) = (e - 1) (alpha + X / e beta)   (the pairwise exchange; flat on the slowest link)
// forward a dispatch and a combine, backward two more (four with full checkpointing).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "../costmodel/cost_fixtures.hpp"
#include "costmodel/collective.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/plan_cost.hpp"
#include "search/hybrid.hpp"
#include "search/request.hpp"
#include "search/space.hpp"
#include "sim/engine.hpp"
#include "sim/network.hpp"
#include "sim/schedule.hpp"

namespace osdp {
namespace {

using costmodel::Choice;
using costmodel::ClusterSpec;
using costmodel::CostOptions;
using costmodel::ModelSpec;
using costmodel::Operator;
using costmodel::PlanCostModel;
using costmodel::cost_fixtures::kAlpha;
using costmodel::cost_fixtures::kBandwidth;
using costmodel::cost_fixtures::synthetic_cluster;

constexpr double kH = 64, kS = 32, kE = 8, kTopK = 2, kFe = 32, kAct = 4;

ModelSpec moe_model(int layers) {
  ModelSpec m = costmodel::cost_fixtures::small_llama(layers, 4, "moe");
  m.moe.experts = 8;
  m.moe.top_k = 2;
  m.moe.expert_ffn = 32;
  return m;
}

const Operator& moe_op(const costmodel::Workload& w) {
  for (const auto& op : w.operators)
    if (op.experts > 0) return op;
  FAIL("no MoE operator");
  return w.operators.front();
}

double rel(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-300});
}

double a2a(double ranks, double alpha, double bandwidth, double bytes) {
  return (ranks - 1) * (alpha + bytes / ranks / bandwidth);
}

}  // namespace

TEST_CASE("the EP slice: E / e experts per rank on e times the tokens, the same FLOPs", "[ep]") {
  const costmodel::Workload w = costmodel::lower(moe_model(1));
  const Operator& op = moe_op(w);
  const double experts = 3 * kH * kFe * kE;
  CHECK(op.parameters() == 64 + 512 + 49152);
  CHECK(op.dispatch_bytes_per_sample == kS * kTopK * kH * kAct);
  for (const int e : {2, 4, 8}) {
    CAPTURE(e);
    const Operator s = costmodel::ep_slice(op, e, 1.0);
    CHECK(s.parameters() == 576 + static_cast<std::int64_t>(experts) / e);
    CHECK(rel(s.forward_flops(3), op.forward_flops(3)) < 1e-12);
    CHECK(rel(s.backward_flops(3), op.backward_flops(3)) < 1e-12);
    CHECK(s.split_units == 8 / e);
    CHECK(s.splits(8).back() == 8 / e);
  }
  // A busiest rank with 1.5 times its share: its expert GEMMs (2 s k h f_e each way of gate, up, down)
  // and its dispatch grow by half; the router's and the norm's work does not.
  const Operator g = costmodel::ep_slice(op, 4, 1.5);
  const double expert_fwd = 3 * 2 * kS * kTopK * kH * kFe;
  CHECK(rel(g.forward_flops(1), op.forward_flops(1) + 0.5 * expert_fwd) < 1e-12);
  CHECK(rel(g.dispatch_bytes_per_sample, 1.5 * op.dispatch_bytes_per_sample) < 1e-12);
  // Allowed degrees: powers of two dividing the group and the experts.
  CHECK(costmodel::ep_allowed(op, 8, 8));
  CHECK_FALSE(costmodel::ep_allowed(op, 8, 4));
  CHECK_FALSE(costmodel::ep_allowed(op, 16, 16));
  CHECK_FALSE(costmodel::ep_allowed(w.operators[1], 2, 8));  // attention has no experts
  // The search's space: every allowed degree, or those asked for.
  search::SpaceOptions space;
  CHECK(search::ep_degrees(op, space, 8) == std::vector<int>{1, 2, 4, 8});
  CHECK(search::ep_degrees(op, space, 0) == std::vector<int>{1});
  space.ep = {4};
  CHECK(search::ep_degrees(op, space, 8) == std::vector<int>{4});
  CHECK(search::ep_degrees(op, space, 2) == std::vector<int>{1});  // none fits: no EP
  space.ep = {1};
  CHECK(search::ep_degrees(op, space, 8) == std::vector<int>{1});
}

// One node of 8 (alpha 10 us, 10 GB/s), t = 1, d = 8, ZDP at EP 4: the experts' states over the d / e
// = 2 ranks holding the same experts, the all-to-alls on 4 ranks of the node.
TEST_CASE("EP prices: all-to-alls on the EP group, states and gathers on the expert-data group", "[ep]") {
  const ModelSpec model = moe_model(1);
  const costmodel::Workload w = costmodel::lower(model);
  const Operator& op = moe_op(w);
  const ClusterSpec cluster = synthetic_cluster(1, 8);
  const PlanCostModel cost(cluster, nullptr, model.precision, CostOptions{});
  const auto B = w.bytes;
  for (const int b0 : {1, 3})
    for (const bool ckpt : {false, true}) {
      CAPTURE(b0, ckpt);
      Choice c{false, 1, 1, ckpt};
      c.ep = 4;
      const double pe = 576 + 49152 / 4;
      const double x = b0 * kS * kTopK * kH * kAct;
      const auto parts = cost.op_parts(w, op, 1, c, b0, 1, false);
      CHECK(rel(parts.ep_forward_s, 2 * a2a(4, kAlpha, kBandwidth, x)) < 1e-12);
      CHECK(rel(parts.ep_backward_s, (ckpt ? 4 : 2) * a2a(4, kAlpha, kBandwidth, x)) < 1e-12);
      // ZDP over 2 ranks: one all-gather of the EP slice's weights each way (Ps = P_e, ring of 2).
      const double gather = costmodel::cost_fixtures::ring(2, kAlpha, kBandwidth, B.weight * pe);
      CHECK(rel(parts.zdp_forward_s, gather) < 1e-12);
      const auto oc = cost.op_cost(w, op, 1, c, b0, 1, 1, false);
      CHECK(rel(oc.states_bytes, B.at_rest() * std::ceil(pe / 2)) < 1e-12);
      // Transient: the workspace, the gathered slice, the gradient in flight, what a checkpointed
      // forward computes but does not keep, and one all-to-all's send and receive buffers.
      const Operator s = costmodel::ep_slice(op, 4, 1.0);
      const double transient = b0 * s.workspace_bytes_per_sample + B.weight * pe +
                               B.gradient_in_flight() * pe +
                               b0 * (s.saved_bytes_per_sample - s.kept_bytes_per_sample(c)) + 2 * x;
      CHECK(rel(oc.transient_bytes, transient) < 1e-12);
      CHECK(rel(oc.tp_comm_s, parts.ep_forward_s + parts.ep_backward_s) < 1e-12);
      // The norm's and the router's gradients (576 elements, held by every EP rank) reduce-scattered
      // over the expert-data group of 2 with the experts', then all-reduced over the EP group of 4:
      // AR_4(g 576 / 2) = 2 (4 - 1) (alpha + g 288 / 4 beta).
      const double shared = 2 * 3 * (kAlpha + B.reduce * 288 / 4 / kBandwidth);
      CHECK(rel(parts.ep_shared_sync_s, shared) < 1e-12);
      CHECK(rel(parts.grad_sync_s,
                costmodel::cost_fixtures::ring(2, kAlpha, kBandwidth, B.reduce * pe) + shared) < 1e-12);
      // EP 1 has none of it.
      Choice one{false, 1, 1, ckpt};
      const auto p1 = cost.op_parts(w, op, 1, one, b0, 1, false);
      CHECK(p1.ep_forward_s == 0);
      CHECK(p1.ep_backward_s == 0);
    }
  // Across nodes (2 nodes of 4, the inter link 5 times slower): EP 8 spans both nodes, priced flat on
  // the inter link; its 8 ranks hold different experts, so the experts' group is one rank (no gather).
  ClusterSpec two = synthetic_cluster(2, 4);
  two.inter = costmodel::LinkSpec{5 * kAlpha, kBandwidth / 5};
  const PlanCostModel across(two, nullptr, model.precision, CostOptions{});
  Choice c8{false, 1, 1, false};
  c8.ep = 8;
  const double x = kS * kTopK * kH * kAct;
  const auto p8 = across.op_parts(w, op, 1, c8, 1, 1, false);
  CHECK(rel(p8.ep_forward_s, 2 * a2a(8, 5 * kAlpha, kBandwidth / 5, x)) < 1e-12);
  CHECK(p8.zdp_forward_s == 0);
  CHECK(rel(across.op_cost(w, op, 1, c8, 1, 1, 1, false).states_bytes, B.at_rest() * (576 + 49152 / 8)) <
        1e-12);
  // At TP 2 the EP group of 2 has stride 2 (ranks 0 and 2 of the node): within the node; the tokens
  // per rank are those for its TP half of the experts, b0 t s k h e / t.
  Choice c2{false, 1, 1, false};
  c2.ep = 2;
  const auto pt = across.op_parts(w, op, 2, c2, 1, 1, false);
  CHECK(rel(pt.ep_forward_s, 2 * a2a(2, kAlpha, kBandwidth, x)) < 1e-12);
  // The imbalance scales the bytes.
  CostOptions skew;
  skew.expert_imbalance = 1.5;
  const PlanCostModel skewed(cluster, nullptr, model.precision, skew);
  Choice c4{false, 1, 1, false};
  c4.ep = 4;
  CHECK(rel(skewed.op_parts(w, op, 1, c4, 1, 1, false).ep_forward_s,
            2 * a2a(4, kAlpha, kBandwidth, 1.5 * x)) < 1e-12);
}

TEST_CASE("exact hybrid search with EP in the space equals brute force", "[ep][brute]") {
  std::mt19937 rng(20261129);
  int compared = 0, with_ep = 0;
  for (int trial = 0; trial < 10; ++trial) {
    const ModelSpec model = moe_model(1);
    ClusterSpec cluster = synthetic_cluster(trial % 2 ? 2 : 1, trial % 2 ? 2 : 4);
    if (trial % 2) cluster.inter = costmodel::LinkSpec{4 * kAlpha, kBandwidth / 4};
    cluster.overlap.enabled = rng() % 2 == 0;
    cluster.overlap.interference = 1.1;
    CostOptions opts;
    opts.prefetch = cluster.overlap.enabled ? 1 : 0;
    opts.expert_imbalance = rng() % 2 ? 1.0 : 1.25;
    PlanCostModel cost(cluster, nullptr, model.precision, opts);
    search::HybridSearchOptions so;
    // Brute force grows as choices ^ operators: splits or checkpointing, not both.
    so.space.split_max = trial % 3 == 0 ? 2 : 1;
    so.space.checkpoint = so.space.split_max == 1 && rng() % 2 ? search::CheckpointPolicy::kAuto
                                                               : search::CheckpointPolicy::kOff;
    const int pp = 1 << (rng() % 2);
    const search::HybridLayout layout{pp, 1 + static_cast<int>(rng() % 2), 1 + static_cast<int>(rng() % 4),
                                      costmodel::PipelineSchedule::k1F1B, false};
    const auto hw = costmodel::lower(model, pp);
    cost.set_capacity(1e18);
    const auto loose = search::brute_force_layout(cost, hw, layout, so);
    REQUIRE(loose);
    const double top = cost.evaluate(hw, *loose).peak_bytes;
    cost.set_capacity(top * std::uniform_real_distribution<double>(0.4, 1.0)(rng));
    const auto brute = search::brute_force_layout(cost, hw, layout, so);
    const auto exact = search::solve_layout_exact(cost, hw, layout, so);
    CAPTURE(trial, pp, layout.m, layout.b0);
    REQUIRE(bool(brute) == bool(exact));
    ++compared;
    if (!brute) continue;
    CHECK(rel(cost.evaluate(hw, *exact).time_s, cost.evaluate(hw, *brute).time_s) < 1e-9);
    for (const Choice& c : exact->choices) with_ep += c.ep > 1 ? 1 : 0;
  }
  CHECK(compared == 10);
  CHECK(with_ep > 0);  // the optimum uses EP somewhere: the test exercises it
}

// The schedule of an EP plan (one node of 8, t = 1, every operator ZDP, the MoE MLPs at EP 4, prefetch
// 0: nothing overlaps): four all-to-alls per MoE operator and micro-batch on groups of 4 ranks at
// stride 1, each the cost model's A2A; their sum m times evaluate's EP terms; the simulated step the
// plan cost model's, and its peak within evaluate's bound.
TEST_CASE("the schedule of an EP plan carries the cost model's all-to-alls", "[ep][sim]") {
  const ModelSpec model = moe_model(2);
  const ClusterSpec cluster = synthetic_cluster(1, 8);
  const PlanCostModel cost(cluster, nullptr, model.precision, CostOptions{});
  const costmodel::Workload w = costmodel::lower(model);
  for (const int m : {1, 2}) {
    CAPTURE(m);
    costmodel::Plan plan;
    plan.model = model;
    plan.cluster = cluster;
    std::vector<Choice> choices(w.operators.size(), Choice{false, 1, 1, false});
    int moe = 0;
    double ep_terms = 0;
    for (std::size_t i = 0; i < w.operators.size(); ++i)
      if (w.operators[i].experts > 0) {
        choices[i].ep = 4;
        ++moe;
        const auto p = cost.op_parts(w, w.operators[i], 1, choices[i], 2, 1, false);
        ep_terms += p.ep_forward_s + p.ep_backward_s;
      }
    REQUIRE(moe == 2);
    costmodel::set_data_parallel(plan, w, choices);
    plan.batch_size = 2;
    plan.micro_batches = m;
    CHECK_FALSE(plan.data_parallel());
    CHECK(plan.layout_summary() ==
          fmt::format("1 stage, {} micro-batch{}, TP 1, EP 4", m, m > 1 ? "es" : ""));
    const sim::Schedule s = sim::build_schedule(plan, w, cost);
    int a2a_tasks = 0;
    double a2a_s = 0;
    for (const sim::Task& t : s.tasks) {
      if (t.kind != sim::TaskKind::kAllToAll) continue;
      ++a2a_tasks;
      CHECK(t.group.size == 4);
      CHECK(t.group.stride == 1);
      CHECK(t.bytes == 2 * kS * kTopK * kH * kAct);
      a2a_s += a2a(4, kAlpha, kBandwidth, t.bytes);
    }
    CHECK(a2a_tasks == 4 * moe * m);
    CHECK(rel(a2a_s, m * ep_terms) < 1e-12);
    const costmodel::Evaluation ev = cost.evaluate(w, plan);
    const sim::SimResult r = sim::simulate(s, sim::RingLinks(cluster, nullptr), sim::SimOptions{});
    CHECK(sim::to_seconds(r.iteration) == Approx(ev.time_s).epsilon(1e-6));
    for (const auto& rank : r.ranks) CHECK(rank.peak_bytes <= ev.peak_bytes * (1 + 1e-12));
  }
}

// "one choice per kind" (the uniform plan beside the optimum) keeps an MoE layer's MLP apart from the
// dense MLPs: on a small DeepSeek-V3 (its first layer dense, two MoE layers of 4 experts) planned on a
// cluster of 8 with EP 2 required, the dense MLP never takes an expert-parallel choice, and the MoE
// MLPs keep theirs.
TEST_CASE("one choice per kind: MoE MLPs are a kind of their own", "[ep][request]") {
  const std::string path = "test_ep_deepseek.json";
  {
    std::ofstream f(path);
    f << R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
             "num_key_value_heads": 4, "intermediate_size": 96, "moe_intermediate_size": 16, "n_routed_experts": 4,
             "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 16,
             "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 12,
             "vocab_size": 256, "max_position_embeddings": 64})";
  }
  search::PlanRequest r;
  r.model = path;
  r.cluster = "a100-8";
  r.seq = 64;
  r.pp = {1};
  r.tp = {1};
  r.ep = {2};
  r.draws = 0;
  const auto p = search::prepare_search(r);
  search::PlanOutcome o = search::run_strategy(*p, *p->strategy);
  REQUIRE(o.feasible);
  const auto& ops = o.workload->operators;
  std::vector<std::size_t> dense, moe, attention;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == costmodel::OperatorKind::kMlp) (ops[i].experts > 0 ? moe : dense).push_back(i);
    if (ops[i].kind == costmodel::OperatorKind::kAttention) attention.push_back(i);
  }
  REQUIRE(dense.size() == 1);
  REQUIRE(moe.size() == 2);
  for (const std::size_t i : moe) CHECK(o.plan.choices[i].ep == 2);
  CHECK(o.plan.choices[dense[0]].ep == 1);
  // Two MoE MLPs and the dense one with different choices: per kind the first wins.
  o.plan.choices[moe[1]] = o.plan.choices[moe[0]];
  o.plan.choices[moe[1]].checkpoint = !o.plan.choices[moe[0]].checkpoint;
  o.plan.choices[moe[1]].selective = false;
  const auto u = search::one_choice_per_kind(*p, o);
  REQUIRE(u);
  CHECK(u->plan.choices[dense[0]] == o.plan.choices[dense[0]]);
  for (const std::size_t i : moe) CHECK(u->plan.choices[i] == o.plan.choices[moe[0]]);
  std::remove(path.c_str());
}

}  // namespace osdp
