// Selective activation checkpointing (issue 33, torchtitan's "selective op"): what an operator keeps
// and recomputes in closed form, its price against none and full, its TP slice, the plan file's word
// for it, the simulator's schedule of it, and the exact search over none, full and selective against
// brute force. Every expected number is derived here from the sizes.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "costmodel/cost_model.hpp"
#include "costmodel/error.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/workload.hpp"
#include "search/instance.hpp"
#include "search/solvers.hpp"
#include "search/space.hpp"
#include "sim/engine.hpp"
#include "sim/network.hpp"
#include "sim/replay.hpp"
#include "sim/schedule.hpp"

namespace {

using namespace osdp;
using costmodel::Choice;
using costmodel::Recompute;
using I = std::int64_t;

constexpr double kRel = 1e-12;

// A tiny Llama: hidden h, a query heads of size d over g key/value heads, SwiGLU of f, sequence s.
constexpr I h = 64, a = 4, g = 2, d = 16, f = 160, s = 32, V = 256, q = a * d, k = g * d;

costmodel::ModelSpec tiny_llama(int layers, costmodel::Precision p = costmodel::Precision::kBf16) {
  costmodel::ModelSpec m;
  costmodel::apply_family_defaults(m, "llama");
  m.name = "tiny-llama";
  costmodel::StageSpec st;
  st.layers = layers;
  st.hidden = static_cast<int>(h);
  st.heads = static_cast<int>(a);
  st.kv_heads = static_cast<int>(g);
  st.head_dim = static_cast<int>(d);
  st.ffn = static_cast<int>(f);
  m.stages = {st};
  m.seq = static_cast<int>(s);
  m.vocab = static_cast<int>(V);
  m.tied_embeddings = false;
  m.precision = p;
  return m;
}

const costmodel::Operator& find(const costmodel::Workload& w, const std::string& name) {
  for (const auto& op : w.operators)
    if (op.name == name) return op;
  FAIL("no operator " << name);
  return w.operators.front();
}

double bytes_of(const std::vector<costmodel::Kernel>& ks) {
  double b = 0;
  for (const auto& x : ks) {
    REQUIRE(x.kind == costmodel::KernelKind::kElementwise);  // selective recomputes no GEMM
    b += x.bytes_per_sample;
  }
  return b;
}

costmodel::ClusterSpec four_ranks() {
  costmodel::ClusterSpec c;
  c.name = "four";
  c.device_name = "test-device";
  c.nodes = 1;
  c.devices_per_node = 4;
  c.memory_bytes = 1LL << 30;
  c.reserve_bytes = 1 << 20;
  c.intra = costmodel::LinkSpec{10e-6, 12e9};
  return c;
}

}  // namespace

TEST_CASE("selective: a llama layer keeps its input, GEMM outputs and attention output", "[selective]") {
  const double e = 2;  // bf16, no dropout
  const costmodel::Workload w = costmodel::lower(tiny_llama(1));
  const auto& att = find(w, "layer0.attention");
  const auto& mlp = find(w, "layer0.mlp");
  // Attention: the norm's input (s h), Q, K, V (s (q + 2k)), O (s q), the fp32 log-sum-exp (4 a s);
  // not the norm's output (s h), which full saving keeps.
  CHECK(att.selective_bytes_per_sample ==
        Approx(e * (s * h + s * (q + 2 * k) + s * q) + 4.0 * a * s).epsilon(kRel));
  CHECK(att.saved_bytes_per_sample - att.selective_bytes_per_sample == Approx(e * s * h).epsilon(kRel));
  // It recomputes the RMSNorm (read and write s h) and rotary on Q and K (read and write s (q + k)).
  CHECK(bytes_of(att.selective_recompute) == Approx(2 * e * s * h + 2 * e * s * (q + k)).epsilon(kRel));
  // MLP: the norm's input and gate and up (2 s f); not the norm's output nor silu(gate) * up.
  CHECK(mlp.selective_bytes_per_sample == Approx(e * (s * h + 2 * s * f)).epsilon(kRel));
  CHECK(mlp.saved_bytes_per_sample - mlp.selective_bytes_per_sample ==
        Approx(e * (s * h + s * f)).epsilon(kRel));
  // The norm again and the activation (5 passes of s f, as eager PyTorch runs silu and the product).
  CHECK(bytes_of(mlp.selective_recompute) == Approx(2 * e * s * h + 5 * e * s * f).epsilon(kRel));
  // Keeping: input < selective < saved; the others have no selective form.
  for (const auto* op : {&att, &mlp}) {
    CHECK(op->selectable());
    CHECK(op->input_bytes_per_sample < op->selective_bytes_per_sample);
    CHECK(op->selective_bytes_per_sample < op->saved_bytes_per_sample);
  }
  CHECK_FALSE(find(w, "embedding").selectable());
  CHECK_FALSE(find(w, "head").selectable());
  // Attention that materializes its scores has none (the paper's GPT); its MLP has one.
  costmodel::ModelSpec gpt;  // the gpt family's defaults: materialized attention, GELU MLP, dropout
  gpt.name = "tiny-gpt";
  gpt.stages = {costmodel::StageSpec{1, static_cast<int>(h), static_cast<int>(a), static_cast<int>(f)}};
  gpt.seq = static_cast<int>(s);
  gpt.vocab = static_cast<int>(V);
  const costmodel::Workload wg = costmodel::lower(gpt);
  CHECK_FALSE(find(wg, "layer0.attention").selectable());
  const auto& gmlp = find(wg, "layer0.mlp");
  REQUIRE(gmlp.selectable());
  // GPT's MLP (fp32, dropout mask): the norm's input, fc1's output, the mask.
  CHECK(gmlp.selective_bytes_per_sample ==
        Approx(4.0 * (s * h + s * gpt.stages[0].ffn) + s * h).epsilon(kRel));
  // A choice's kept bytes by its recompute; one that cannot be selective keeps everything.
  const Choice none{}, full{false, 1, 0, true}, sel{.selective = true};
  CHECK(att.kept_bytes_per_sample(none) == att.saved_bytes_per_sample);
  CHECK(att.kept_bytes_per_sample(full) == att.input_bytes_per_sample);
  CHECK(att.kept_bytes_per_sample(sel) == att.selective_bytes_per_sample);
  CHECK(find(wg, "layer0.attention").recompute(sel) == Recompute::kNone);
  CHECK(sel.label() == "DP+sel");
}

TEST_CASE("selective: priced as none plus its recompute, keeping its bytes", "[selective]") {
  const costmodel::ModelSpec m = tiny_llama(1);
  const costmodel::Workload w = costmodel::lower(m);
  const costmodel::CostModel model(four_ranks(), nullptr, m.precision, {});
  const int b = 3;
  for (const char* name : {"layer0.attention", "layer0.mlp"}) {
    const auto& op = find(w, name);
    INFO(name);
    for (const Choice base :
         {Choice{false, 1, 0}, Choice{false, 1, 1}, Choice{false, 2, 1}, Choice{true, 1, 0}}) {
      Choice full = base, sel = base;
      full.checkpoint = true;
      sel.selective = true;
      const auto c0 = model.cost(op, base, b, w.bytes);
      const auto cf = model.cost(op, full, b, w.bytes);
      const auto cs = model.cost(op, sel, b, w.bytes);
      const int n = base.replicate ? 1 : base.split;
      // Time: the recompute kernels' time on top of none, less than full's forward again.
      const double recompute = model.phase_s(op.selective_recompute, b, n);
      CHECK(recompute > 0);
      CHECK(cs.compute_s - c0.compute_s == Approx(recompute).epsilon(1e-9));
      CHECK(recompute < model.phase_s(op.forward, b, n));
      CHECK(cs.comm_s == c0.comm_s);  // no gather again, unlike full with regather
      // Memory: b (selective - saved) less at rest, the same back while its backward runs.
      CHECK(cs.persistent_bytes - c0.persistent_bytes ==
            Approx(b * (op.selective_bytes_per_sample - op.saved_bytes_per_sample)).epsilon(1e-12));
      CHECK(cs.transient_bytes - c0.transient_bytes ==
            Approx(b * (op.saved_bytes_per_sample - op.selective_bytes_per_sample)).epsilon(1e-12));
      CHECK(cf.persistent_bytes < cs.persistent_bytes);
    }
  }
}

TEST_CASE("selective: a TP slice keeps the norm's input whole, the rest divided", "[selective]") {
  const double e = 2;
  const costmodel::ModelSpec m = tiny_llama(1);
  const costmodel::Workload w = costmodel::lower(m);
  const auto& att = find(w, "layer0.attention");
  const auto& mlp = find(w, "layer0.mlp");
  const int t = 2;
  const auto sa = costmodel::tp_slice(att, t, false, w);
  const auto sm = costmodel::tp_slice(mlp, t, false, w);
  // Without SP the input e s h stays whole on each rank; Q, K, V, O, LSE, gate and up are divided.
  CHECK(sa.selective_bytes_per_sample ==
        Approx(e * s * h + (e * (s * (q + 2 * k) + s * q) + 4.0 * a * s) / t).epsilon(kRel));
  CHECK(sm.selective_bytes_per_sample == Approx(e * s * h + e * 2 * s * f / t).epsilon(kRel));
  // With SP all of it is divided.
  CHECK(costmodel::tp_slice(mlp, t, true, w).selective_bytes_per_sample ==
        Approx(mlp.selective_bytes_per_sample / t).epsilon(kRel));
  // The recomputed rotary and activation run 1/t of their bytes; the norm whole without SP.
  CHECK(bytes_of(sm.selective_recompute) == Approx(2 * e * s * h + 5 * e * s * f / t).epsilon(kRel));
}

TEST_CASE("selective: plan files write \"selective\" and read it back, and refuse it where it has no form",
          "[selective][json]") {
  const costmodel::ModelSpec m = tiny_llama(2);
  const costmodel::Workload w = costmodel::lower(m);
  costmodel::Plan plan;
  plan.model = m;
  plan.cluster = four_ranks();
  plan.batch_size = 2;
  plan.memory_limit_bytes = plan.cluster.memory_bytes;
  std::vector<Choice> choices(w.operators.size());
  for (std::size_t i = 0; i < choices.size(); ++i) choices[i].selective = w.operators[i].selectable();
  costmodel::set_data_parallel(plan, w, choices);
  const nlohmann::json j = costmodel::to_json(plan);
  CHECK(j["operators"][1]["checkpoint"] == "selective");
  CHECK(j["operators"][0]["checkpoint"] == false);
  const costmodel::Plan back = costmodel::read_plan(j, "p.json");
  CHECK(back.choices == plan.choices);
  // The words none/full are read too.
  nlohmann::json words = j;
  words["operators"][1]["checkpoint"] = "full";
  words["operators"][2]["checkpoint"] = "none";
  const costmodel::Plan wb = costmodel::read_plan(words, "p.json");
  CHECK(wb.choices[1].checkpoint);
  CHECK_FALSE(wb.choices[1].selective);
  CHECK(wb.choices[2].recompute() == Recompute::kNone);
  // The embedding cannot be checkpointed at all.
  nlohmann::json bad = j;
  bad["operators"][0]["checkpoint"] = "selective";
  try {
    costmodel::read_plan(bad, "p.json");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.pointer() == "/operators/0/checkpoint");
  }
}

TEST_CASE("selective: the schedule keeps the selective bytes and runs the recompute before the backward",
          "[selective][sim]") {
  const costmodel::ModelSpec m = tiny_llama(2, costmodel::Precision::kFp32);
  const costmodel::Workload w = costmodel::lower(m);
  const costmodel::ClusterSpec cluster = four_ranks();
  costmodel::Plan plan;
  plan.model = m;
  plan.cluster = cluster;
  plan.batch_size = 2;
  plan.prefetch = 0;
  std::vector<Choice> choices(w.operators.size(), Choice{false, 1, 1});
  for (std::size_t i = 0; i < choices.size(); ++i) choices[i].selective = w.operators[i].selectable();
  costmodel::set_data_parallel(plan, w, choices);
  const auto pcm = sim::plan_cost_model(plan);
  const sim::Schedule sched = sim::build_schedule(plan, w, pcm);
  const double b = plan.batch_size;
  int recomputes = 0;
  for (const auto& t : sched.tasks) {
    if (t.kind != sim::TaskKind::kRecompute) continue;
    ++recomputes;
    const auto& op = w.operators[static_cast<std::size_t>(t.op)];
    // One task per operator and micro-batch, as long as its recompute kernels.
    CHECK(t.duration_s ==
          Approx(pcm.dp_model(1, 1).phase_s(op.selective_recompute, plan.batch_size, 1)).epsilon(1e-12));
  }
  CHECK(recomputes == 4);  // two layers' attention and MLP
  for (const auto& buf : sched.buffers) {
    const auto& op = w.operators[static_cast<std::size_t>(std::max(buf.op, 0))];
    if (buf.role == sim::BufferRole::kActivations && op.selectable())
      CHECK(buf.bytes == Approx(b * op.selective_bytes_per_sample).epsilon(kRel));
    if (buf.role == sim::BufferRole::kRecomputed)
      CHECK(buf.bytes ==
            Approx(b * (op.saved_bytes_per_sample - op.selective_bytes_per_sample)).epsilon(kRel));
  }
  // At prefetch 0 the simulated step is the analytic sum, and the analytic peak bounds the simulated one.
  const sim::RingLinks net(cluster, nullptr);
  const auto r = sim::simulate(sched, net, {});
  const auto ev = pcm.evaluate(w, plan);
  const double rounding = 0.5e-12 * static_cast<double>(sched.tasks.size()) * 2 * cluster.world_size();
  CHECK(std::abs(sim::to_seconds(r.iteration) - ev.time_s) <= rounding);
  CHECK(r.peak_rank().peak_bytes <= ev.peak_bytes);
}

TEST_CASE(
    "selective: exact over none, full and selective equals brute force, and picks selective where it pays",
    "[selective][exact]") {
  const costmodel::ModelSpec m = tiny_llama(2);
  const costmodel::Workload w = costmodel::lower(m);
  const costmodel::ClusterSpec cluster = four_ranks();
  const costmodel::CostModel model(cluster, nullptr, m.precision, {});
  search::SpaceOptions space;
  space.split_max = 2;
  space.checkpoint = search::CheckpointPolicy::kAuto;
  const int batch = 4;
  const search::BatchCosts costs = search::price_batch(w, model, space, batch, 1e12, cluster.reserve_bytes);
  // Each layer operator offers none and full for every choice, selective for the unsplit ones: DP, ZDP,
  // REPLICATE; split 2 adds three (k = 0, 1, 2) to none and to full.
  for (const auto& po : costs.ops)
    if (po.op->selectable()) {
      int by[3] = {0, 0, 0};
      for (const auto& c : po.choices()) ++by[static_cast<int>(c.recompute())];
      CHECK(by[0] == 6);
      CHECK(by[1] == 6);
      CHECK(by[2] == 3);
    }
  search::Instance inst = search::to_instance(costs);
  const double lo = search::min_peak_bytes(inst);
  // Uniform full and uniform none (everything else DP) bracket the capacities tried.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> frac(0.0, 1.0);
  int chose_selective = 0;
  for (int trial = 0; trial < 40; ++trial) {
    inst.capacity_bytes = lo * (1.0 + 0.6 * frac(rng));
    const search::Solution brute = search::solve_brute_force(inst);
    const search::Solution exact = search::solve_exact(inst);
    REQUIRE(exact.feasible == brute.feasible);
    if (!brute.feasible) continue;
    REQUIRE(exact.time_s == Approx(brute.time_s).epsilon(1e-9));
    for (std::size_t gi = 0; gi < inst.groups.size(); ++gi)
      chose_selective +=
          costs.ops[gi].choices()[static_cast<std::size_t>(exact.chosen[gi])].selective ? 1 : 0;
  }
  // Between the smallest peak (full everywhere) and none's, selective's lower recompute wins somewhere.
  CHECK(chose_selective > 0);
}
