// The plan cost model (costmodel/plan_cost.hpp) against closed forms written here, and the hybrid
// search (search/hybrid.hpp) against brute force on small instances.
#include <cmath>
#include <map>
#include <random>

#include <catch2/catch.hpp>

#include "../costmodel/cost_fixtures.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/error.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/plan_cost.hpp"
#include "search/hybrid.hpp"
#include "search/internal/hybrid_layout.hpp"

namespace osdp {
namespace {

using costmodel::Choice;
using costmodel::ClusterSpec;
using costmodel::CostModel;
using costmodel::CostOptions;
using costmodel::ModelSpec;
using costmodel::PipelineSchedule;
using costmodel::Plan;
using costmodel::PlanCostModel;
using costmodel::cost_fixtures::kAlpha;
using costmodel::cost_fixtures::kBandwidth;
using costmodel::cost_fixtures::synthetic_cluster;

ModelSpec small_gpt(int layers, int hidden, int heads, int seq, int vocab, bool tied = true) {
  ModelSpec m;
  m.name = "small";
  m.stages = {costmodel::StageSpec{layers, hidden, heads, 4 * hidden}};
  m.seq = seq;
  m.vocab = vocab;
  m.tied_embeddings = tied;
  return m;
}

double rel(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-300});
}

TEST_CASE("hybrid op cost at t = 1, m = 1, pp = 1 is CostModel::cost", "[hybrid]") {
  const ModelSpec model = small_gpt(2, 256, 8, 64, 1000);
  for (const bool overlap : {false, true}) {
    ClusterSpec cluster = synthetic_cluster(1, 4);
    cluster.overlap.enabled = overlap;
    cluster.overlap.interference = 1.2;
    CostOptions opts;
    opts.prefetch = overlap ? 1 : 0;
    const CostModel flat(cluster, nullptr, model.precision, opts);
    const PlanCostModel hybrid(cluster, nullptr, model.precision, opts);
    const auto hw = costmodel::lower(model, 1);
    const auto& w = hw;
    int checked = 0;
    for (const auto& op : w.operators)
      for (const Choice& c : costmodel::cost_fixtures::all_choices(op, 4))
        for (int b : {1, 3}) {
          const auto want = flat.cost(op, c, b, w.bytes);
          const auto got = hybrid.op_cost(w, op, 1, c, b, 1, 1, false);
          INFO(op.name << " " << c.label() << " b " << b);
          CHECK(rel(got.time_s, want.time_s) < 1e-12);
          CHECK(rel(got.states_bytes + got.act_bytes, want.persistent_bytes) < 1e-12);
          CHECK(rel(got.transient_bytes, want.transient_bytes) < 1e-12);
          ++checked;
        }
    CHECK(checked > 50);
  }
}

TEST_CASE("a TP slice of attention and MLP: Megatron's column and row split", "[hybrid]") {
  const int h = 256, a = 8, s = 64, t = 4;
  const ModelSpec model = small_gpt(1, h, a, s, 1000);
  const auto hw = costmodel::lower(model, 1);
  const auto& w = hw;
  const auto& attn = w.operators[1];
  const auto& mlp = w.operators[2];
  REQUIRE(attn.kind == costmodel::OperatorKind::kAttention);
  const auto sa = costmodel::tp_slice(attn, t, false, w);
  const auto sm = costmodel::tp_slice(mlp, t, false, w);
  // Attention: LN (2h) whole; QKV [h x 3h] and its bias split by columns; proj [h x h] by rows, its
  // bias whole.
  CHECK(sa.parameters() == 2 * h + h * 3 * h / t + 3 * h / t + h / t * h + h);
  // MLP: LN whole; fc1 [h x 4h] and bias by columns; fc2 [4h x h] by rows, bias whole.
  CHECK(sm.parameters() == 2 * h + h * 4 * h / t + 4 * h / t + 4 * h / t * h + h);
  // The GEMM flops divide by t exactly.
  CHECK(rel(sa.forward_flops(3) * t, attn.forward_flops(3)) < 1e-12);
  CHECK(rel(sm.backward_flops(3) * t, mlp.backward_flops(3)) < 1e-12);
  // Saved activations: (2e + 1) s h whole, the rest divided (e = 4, dropout masks 1 byte).
  const double e = 4, sh = double(s) * h;
  const double attn_saved = e * (6 * sh + 2.0 * a * s * s) + (double(a) * s * s + sh);
  CHECK(rel(attn.saved_bytes_per_sample, attn_saved) < 1e-12);
  CHECK(rel(sa.saved_bytes_per_sample, (2 * e + 1) * sh + (attn_saved - (2 * e + 1) * sh) / t) < 1e-12);
  // Sequence parallelism divides all of it, and the checkpointed input too.
  const auto sp = costmodel::tp_slice(attn, t, true, w);
  CHECK(rel(sp.saved_bytes_per_sample, attn_saved / t) < 1e-12);
  CHECK(rel(sp.input_bytes_per_sample, e * sh / t) < 1e-12);
  CHECK(sa.input_bytes_per_sample == attn.input_bytes_per_sample);
  // Elementwise bytes: the softmax divides, the layer norm does not (without SP).
  double ln = 0, ln_t = 0, soft = 0, soft_t = 0;
  for (std::size_t i = 0; i < attn.forward.size(); ++i) {
    if (attn.forward[i].name == "layer0.attention.ln1")
      ln = attn.forward[i].bytes_per_sample, ln_t = sa.forward[i].bytes_per_sample;
    if (attn.forward[i].name == "layer0.attention.softmax")
      soft = attn.forward[i].bytes_per_sample, soft_t = sa.forward[i].bytes_per_sample;
  }
  CHECK(ln > 0);
  CHECK(ln_t == ln);
  CHECK(soft > 0);
  CHECK(rel(soft_t * t, soft) < 1e-12);
}

TEST_CASE("TP collectives: one all-reduce of b s h e each way per operator, on the intra-node ring",
          "[hybrid]") {
  const int h = 256, s = 64;
  const ModelSpec model = small_gpt(1, h, 8, s, 1000);
  ClusterSpec cluster = synthetic_cluster(1, 8);
  cluster.device_name = "synthetic";
  const PlanCostModel hybrid(cluster, nullptr, model.precision, CostOptions{});
  const auto hw = costmodel::lower(model, 1);
  const auto& w = hw;
  const auto& attn = w.operators[1];
  // t = 2 on 8 devices: d = 4. Compare REPLICATE with and without the TP ring: the difference is the
  // TP traffic (t = 2, per-device micro-batch b = b0 t = 2).
  const int t = 2, b0 = 1, b = b0 * t;
  const auto c = hybrid.op_cost(w, attn, t, Choice{true, 1, 0, false}, b0, 1, 1, false);
  const double x = double(b) * s * h * 4;                                         // bytes of b s h fp32
  const double ar = 2 * ((t - 1) * kAlpha + double(t - 1) / t * x / kBandwidth);  // ring all-reduce on t
  CHECK(rel(c.tp_comm_s, 2 * ar) < 1e-12);
  // Checkpointed: the recompute repeats the forward one.
  const auto ck = hybrid.op_cost(w, attn, t, Choice{true, 1, 0, true}, b0, 1, 1, false);
  CHECK(rel(ck.tp_comm_s, 3 * ar) < 1e-12);
  // The data-parallel all-reduce of REPLICATE runs on d = 4 ranks, over the TP slice's gradient.
  const auto sliced = costmodel::tp_slice(attn, t, false, w);
  const double g = 4.0 * double(sliced.parameters());
  const double dp_ar = 2 * (3 * kAlpha + 0.75 * g / kBandwidth);
  CHECK(rel(c.dp_comm_s, dp_ar) < 1e-12);
  // With m micro-batches the gradient all-reduce runs once per step: 1/m of it per micro-batch.
  const auto c4 = hybrid.op_cost(w, attn, t, Choice{true, 1, 0, false}, b0, 4, 1, false);
  CHECK(rel(c4.dp_comm_s, dp_ar / 4) < 1e-12);
}

TEST_CASE("re-layout, p2p and the step of a pipeline: closed forms", "[hybrid]") {
  const int h = 128, s = 32;
  const ModelSpec model = small_gpt(8, h, 4, s, 512, /*tied=*/false);
  ClusterSpec cluster = synthetic_cluster(2, 4);
  cluster.inter = costmodel::LinkSpec{50e-6, 1e9};
  PlanCostModel hybrid(cluster, nullptr, model.precision, CostOptions{});
  // Re-layout 1 -> 4 of b0 = 2: all-gather of X = 2 * 4 s h e on a ring of 4 (intra link).
  const double x = 2.0 * 4 * s * h * 4;
  CHECK(rel(hybrid.relayout_s(1, 4, 2, s, h, 4), 3 * kAlpha + 0.75 * x / kBandwidth) < 1e-12);
  CHECK(hybrid.relayout_s(4, 1, 2, s, h, 4) == hybrid.relayout_s(1, 4, 2, s, h, 4));
  CHECK(hybrid.relayout_s(2, 2, 2, s, h, 4) == 0);
  // p2p with pp = 2 on 2 nodes of 4: stages on different nodes.
  CHECK(rel(hybrid.p2p_s(2, 2, s, h, 4), 50e-6 + 2.0 * s * h * 4 / 1e9) < 1e-12);
  // pp = 4: stages of 2 ranks, neighbours in one node.
  CHECK(rel(hybrid.p2p_s(4, 2, s, h, 4), kAlpha + 2.0 * s * h * 4 / kBandwidth) < 1e-12);

  // A pipeline of 4 stages, 8 micro-batches: T = sum c_s + (m - 1) max c_s; bubble from those.
  const int pp = 4, m = 8;
  const auto hw = costmodel::lower(model, pp);
  Plan plan;
  plan.pp = pp;
  plan.micro_batches = m;
  plan.batch_size = 1;
  plan.schedule = PipelineSchedule::k1F1B;
  // units: embedding, layer0..7, head: stages {emb, l0, l1}, {l2, l3}, {l4, l5}, {l6, l7, head}
  REQUIRE(hw.units.size() == 10);
  plan.stage_first_unit = {0, 3, 5, 7};
  plan.unit_tp.assign(hw.units.size(), 1);
  plan.unit_tp[4] = 2;  // layer3 at t = 2: re-layouts into it and back to 1 at the stage's end
  plan.choices.assign(hw.operators.size(), Choice{false, 1, 1, false});
  const auto ev = hybrid.evaluate(hw, plan);
  REQUIRE(ev.stages.size() == 4);
  double sum = 0, mx = 0;
  for (const auto& st : ev.stages) sum += st.time_s, mx = std::max(mx, st.time_s);
  CHECK(rel(ev.time_s, sum + (m - 1) * mx) < 1e-12);
  CHECK(rel(ev.bubble_fraction, 1 - m * sum / pp / ev.time_s) < 1e-12);
  CHECK(ev.global_batch == 1 * m * 8 / pp);
  // Stage 1 re-lays 1 -> 2 into layer3 and 2 -> 1 at its end; it sends twice (forward, backward).
  const double r = hybrid.relayout_s(1, 2, 1, s, h, 4);
  CHECK(rel(ev.stages[1].relayout_s, 2 * r) < 1e-12);
  CHECK(rel(ev.stages[1].p2p_s, 2 * hybrid.p2p_s(pp, 1, s, h, 4)) < 1e-12);
  CHECK(ev.stages[3].p2p_s == 0);  // the last stage sends nothing (untied: no copy to reduce)
  // Memory: 1F1B stage s holds min(pp - s, m) micro-batches, GPipe all m; the difference is
  // exactly that many micro-batches of the stage's activations.
  plan.schedule = PipelineSchedule::kGpipe;
  const auto gp = hybrid.evaluate(hw, plan);
  CHECK(gp.time_s == ev.time_s);
  for (int st = 0; st < pp; ++st) {
    CHECK(ev.stages[st].in_flight == std::min(pp - st, m));
    CHECK(gp.stages[st].in_flight == m);
  }
  // The activations per micro-batch of stage 2 (layers 4 and 5, ZDP, t = 1, b = 1): saved bytes.
  const auto& ops = hw.operators;
  double act = 0;
  for (int u = 5; u < 7; ++u)
    for (int oi : hw.units[u].ops) act += ops[oi].saved_bytes_per_sample;
  CHECK(rel(gp.stages[2].peak_bytes - ev.stages[2].peak_bytes, (m - 2) * act) < 1e-9);
}

TEST_CASE("without a pipeline, m micro-batches take m times one and leave no bubble", "[hybrid]") {
  // T = sum c_s + (m - 1) max c_s with one stage is m c; the bubble 1 - m sum c_s / (pp T) is 0.
  const ModelSpec model = small_gpt(4, 128, 4, 32, 512, false);
  const ClusterSpec cluster = synthetic_cluster(1, 4);
  const PlanCostModel hybrid(cluster, nullptr, model.precision, CostOptions{});
  for (int m : {1, 3, 8}) {
    const auto hw = costmodel::lower(model, 1);
    Plan plan;
    plan.pp = 1;
    plan.micro_batches = m;
    plan.stage_first_unit = {0};
    plan.unit_tp.assign(hw.units.size(), 1);
    plan.choices.assign(hw.operators.size(), Choice{true, 1, 0, false});
    const auto ev = hybrid.evaluate(hw, plan);
    CHECK(ev.bubble_fraction == Approx(0).margin(1e-12));
    CHECK(rel(ev.time_s, m * ev.stages[0].time_s) < 1e-12);
  }
}

struct Instance {
  ModelSpec model;
  ClusterSpec cluster;
  double memory;
};

TEST_CASE("exact hybrid search equals brute force on random small instances", "[hybrid][brute]") {
  std::mt19937 rng(20261126);
  int compared = 0, feasible = 0, refused = 0, raised_found = 0;
  std::map<int, int> by_pp;
  for (int trial = 0; trial < 24; ++trial) {
    // Brute force grows as (choices ^ operators) (degrees ^ units): splits, checkpointing or a
    // second layer, one at a time.
    const int kind = static_cast<int>(rng() % 3);
    const int layers = kind == 2 ? 2 : 1;
    const int hidden = 64 << (rng() % 2);
    ModelSpec model = small_gpt(layers, hidden, 4, 16 << (rng() % 2), 256, rng() % 2 == 0);
    ClusterSpec cluster = synthetic_cluster(1, 4);
    cluster.overlap.enabled = rng() % 2 == 0;
    cluster.overlap.interference = 1.1;
    CostOptions opts;
    opts.prefetch = cluster.overlap.enabled ? 1 : 0;
    PlanCostModel hybrid(cluster, nullptr, model.precision, opts);
    search::HybridSearchOptions so;
    so.space.split_max = kind == 0 ? 2 : 1;
    so.space.checkpoint = kind == 1 ? search::CheckpointPolicy::kAuto : search::CheckpointPolicy::kOff;
    so.space.replicate = true;
    // Two layers leave room for 4 stages (one unit each: the search's stages priced one by one,
    // each next to the ones priced before it).
    const int pp = 1 << (rng() % (layers == 2 ? 3 : 2));
    const search::HybridLayout layout{pp, 1 + static_cast<int>(rng() % 3), 1 + static_cast<int>(rng() % 2),
                                      rng() % 2 ? PipelineSchedule::k1F1B : PipelineSchedule::kGpipe,
                                      rng() % 3 == 0};
    const auto hw = costmodel::lower(model, pp);
    // A memory limit between the smallest and the largest peak of the layout's plans, found by
    // brute force without a limit and with none possible.
    hybrid.set_capacity(1e18);
    const auto loose = search::brute_force_layout(hybrid, hw, layout, so);
    REQUIRE(loose);
    const double top = hybrid.evaluate(hw, *loose).peak_bytes;
    const double frac = std::uniform_real_distribution<double>(0.3, 1.0)(rng);
    hybrid.set_capacity(top * frac);
    const auto brute = search::brute_force_layout(hybrid, hw, layout, so);
    const auto exact = search::solve_layout_exact(hybrid, hw, layout, so);
    INFO("trial " << trial << " pp " << pp << " m " << layout.m << " b0 " << layout.b0 << " layers "
                  << layers);
    ++by_pp[pp];
    REQUIRE(bool(brute) == bool(exact));
    // The memory-only check the search bisects b0 with: the relaxation fits exactly when the cheap
    // bound is finite, and whenever a plan fits.
    const bool fits = search::detail::layout_fits(hybrid, hw, layout, so, {});
    CHECK(fits == (search::detail::layout_lower_bound(hybrid, hw, layout, so, {}) < HUGE_VAL));
    if (brute) CHECK(fits);
    if (!fits) ++refused;
    ++compared;
    if (!brute) continue;
    ++feasible;
    const auto eb = hybrid.evaluate(hw, *brute);
    const auto ee = hybrid.evaluate(hw, *exact);
    CHECK(ee.fits);
    CHECK(rel(ee.time_s, eb.time_s) < 1e-9);
    // The layout's lower bound (the stages' LPs with their least entries and exits) is one.
    double lower = 0;
    search::detail::solve_layout(hybrid, hw, layout, so, {}, false, 0.0, nullptr, nullptr, &lower);
    CHECK(lower <= eb.time_s * (1 + 1e-12));
    CHECK(lower > 0.5 * eb.time_s);
    // Given a bound, solve_layout returns only a plan shorter than it: none just below the optimum
    // (the chains may keep labels whose plans turn out no shorter), the optimum just above it.
    const double below = eb.time_s * (1 - 1e-9);
    const auto under = search::detail::solve_layout(hybrid, hw, layout, so, {}, false, below, nullptr);
    if (under) CHECK(hybrid.evaluate(hw, *under).time_s < below);
    CHECK_FALSE(under);
    const auto above =
        search::detail::solve_layout(hybrid, hw, layout, so, {}, false, eb.time_s * (1 + 1e-9), nullptr);
    REQUIRE(above);
    CHECK(rel(hybrid.evaluate(hw, *above).time_s, eb.time_s) < 1e-9);
    // A bound just under the optimum, raised to the incumbent where that is within 50% of it: the
    // optimum (the incumbent only when nothing beats it), or none when the incumbent is further.
    const auto raised =
        search::detail::solve_layout(hybrid, hw, layout, so, {}, false, below, nullptr, nullptr, nullptr,
                                     {search::detail::Pricing::Order::kAuto, true, HUGE_VAL, 0.5});
    if (raised) {
      ++raised_found;
      CHECK(rel(hybrid.evaluate(hw, *raised).time_s, eb.time_s) < 1e-9);
    }
    // The chains alone, without the incumbents that lower the bound, in either order of pricing the
    // stages: each stage's chain is bounded by the others' LP or their priced cost.
    using Order = search::detail::Pricing::Order;
    for (const Order order : {Order::kFromLast, Order::kFromFirst}) {
      INFO("order " << (order == Order::kFromLast ? "from the last" : "from the first"));
      const auto chains =
          search::detail::solve_layout(hybrid, hw, layout, so, {}, false, eb.time_s * (1 + 1e-9), nullptr,
                                       nullptr, nullptr, {order, false});
      REQUIRE(chains);
      CHECK(rel(hybrid.evaluate(hw, *chains).time_s, eb.time_s) < 1e-9);
    }
  }
  CHECK(compared == 24);
  CHECK(by_pp[4] >= 2);
  CHECK(raised_found >= 4);
  CHECK(feasible >= 8);
  CHECK(refused >= 1);
}

TEST_CASE("exact hybrid is never below the baselines it contains", "[hybrid]") {
  const ModelSpec model = small_gpt(4, 128, 4, 32, 512);
  ClusterSpec cluster = synthetic_cluster(1, 4);
  cluster.memory_bytes = 64.0 * 1024 * 1024;
  PlanCostModel hybrid(cluster, nullptr, model.precision, CostOptions{});
  search::HybridSearchOptions so;
  so.space.checkpoint = search::CheckpointPolicy::kAuto;
  so.max_micro_batches = 8;
  so.max_b0 = 16;
  const auto ex = search::search_hybrid(model, hybrid, search::LayoutSearch::kExact, so);
  REQUIRE(ex.feasible);
  search::HybridSearchOptions dp_only = so;  // dp-only: exact within one stage, one micro-batch, TP 1
  dp_only.pp = {1};
  dp_only.tp = {1};
  dp_only.micro_batches = 1;
  const std::vector<std::tuple<const char*, search::LayoutSearch, search::HybridSearchOptions>> others{
      {"galvatron", search::LayoutSearch::kGalvatron, so},
      {"megatron-3d", search::LayoutSearch::kMegatron3d, so},
      {"dp-only", search::LayoutSearch::kExact, dp_only}};
  for (const auto& [name, kind, options] : others) {
    const auto r = search::search_hybrid(model, hybrid, kind, options);
    INFO(name);
    if (r.feasible) CHECK(ex.evaluation.throughput >= r.evaluation.throughput * (1 - 1e-12));
  }
}

// One stage's first incumbent is a heuristic chain's plan (Pricing::beam labels per unit); however
// narrow, the layout's optimum is the one found without it. On 6 layers with splits and checkpointing
// a chain of 1 or 2 labels per unit often misses the optimum: the exact chains must then find it
// under the heuristic's plan and replace it.
TEST_CASE("one stage's heuristic incumbent leaves the optimum as it is", "[hybrid]") {
  const ModelSpec model = small_gpt(6, 128, 4, 32, 512);
  ClusterSpec cluster = synthetic_cluster(1, 4);
  PlanCostModel hybrid(cluster, nullptr, model.precision, CostOptions{});
  search::HybridSearchOptions so;
  so.space.checkpoint = search::CheckpointPolicy::kAuto;
  so.space.split_max = 2;
  const auto hw = costmodel::lower(model, 1);
  int compared = 0;
  for (const double mib : {6.0, 8.0, 10.0, 12.0, 16.0, 24.0})
    for (const int b0 : {1, 2, 4, 8}) {
      hybrid.set_capacity(mib * 1024 * 1024);
      const search::HybridLayout layout{1, 1 + b0 % 3, b0, PipelineSchedule::k1F1B, false};
      using search::detail::Pricing;
      const auto none =
          search::detail::solve_layout(hybrid, hw, layout, so, {}, false, HUGE_VAL, nullptr, nullptr, nullptr,
                                       {Pricing::Order::kAuto, true, 0, 0, 0});
      for (const std::size_t beam : {1, 2, 16}) {
        const auto with =
            search::detail::solve_layout(hybrid, hw, layout, so, {}, false, HUGE_VAL, nullptr, nullptr,
                                         nullptr, {Pricing::Order::kAuto, true, 0, 0, beam});
        INFO(mib << " MiB, b0 " << b0 << ", beam " << beam);
        REQUIRE(bool(none) == bool(with));
        if (!none) continue;
        CHECK(rel(hybrid.evaluate(hw, *with).time_s, hybrid.evaluate(hw, *none).time_s) < 1e-12);
        ++compared;
      }
    }
  CHECK(compared >= 30);
}

// The forward chains of a pipeline share the steps they have in common (search/internal/hybrid_memo.hpp):
// on identical layers, at every start of every stage. Nothing changes but the work: the same labels,
// the same plan, with and without, at memories from tight to loose, with the forward stages' micro-batches
// in flight equal (1F1B with one or two, GPipe) or not (1F1B with four: nothing shared).
TEST_CASE("the chains' shared steps leave every label and plan as they are", "[hybrid]") {
  const ModelSpec model = small_gpt(24, 128, 4, 32, 512);
  ClusterSpec cluster = synthetic_cluster(1, 8);
  PlanCostModel hybrid(cluster, nullptr, model.precision, CostOptions{});
  search::HybridSearchOptions so;
  so.space.checkpoint = search::CheckpointPolicy::kAuto;
  so.space.split_max = 2;
  int compared = 0, found = 0;
  for (const int pp : {4, 8})
    for (const auto& [m, schedule] :
         {std::pair{1, PipelineSchedule::k1F1B}, std::pair{2, PipelineSchedule::k1F1B},
          std::pair{4, PipelineSchedule::kGpipe}, std::pair{4, PipelineSchedule::k1F1B}})
      for (const double mib : {10.0, 11.0, 12.0, 14.0, 16.0, 20.0}) {
        hybrid.set_capacity(mib * 1024 * 1024);
        const auto hw = costmodel::lower(model, pp);
        const search::HybridLayout layout{pp, m, 1, schedule, false};
        using search::detail::Pricing;
        std::int64_t labels_with = 0, labels_without = 0;
        Pricing with, without;
        without.share_steps = false;
        const auto a = search::detail::solve_layout(hybrid, hw, layout, so, {}, false, HUGE_VAL, &labels_with,
                                                    nullptr, nullptr, with);
        const auto b = search::detail::solve_layout(hybrid, hw, layout, so, {}, false, HUGE_VAL,
                                                    &labels_without, nullptr, nullptr, without);
        INFO("pp " << pp << ", m " << m << ", " << mib << " MiB");
        CHECK(labels_with == labels_without);
        REQUIRE(bool(a) == bool(b));
        ++compared;
        if (!a) continue;
        CHECK(a->stage_first_unit == b->stage_first_unit);
        CHECK(a->unit_tp == b->unit_tp);
        CHECK(a->choices == b->choices);
        ++found;
      }
  CHECK(compared == 48);
  CHECK(found >= 36);
}

// The search over layouts (best first over bounds, each group's b0 in one range split in two when it
// comes first) finds what solving every layout one by one finds: the ranges' and layouts' bounds
// never drop the best.
TEST_CASE("exact hybrid over every layout equals each layout solved in turn", "[hybrid]") {
  const ModelSpec model = small_gpt(3, 128, 4, 32, 512);
  ClusterSpec cluster = synthetic_cluster(1, 4);
  PlanCostModel hybrid(cluster, nullptr, model.precision, CostOptions{});
  search::HybridSearchOptions so;
  so.space.checkpoint = search::CheckpointPolicy::kAuto;
  so.max_micro_batches = 3;
  so.max_b0 = 24;
  so.schedules = {PipelineSchedule::k1F1B, PipelineSchedule::kGpipe};
  int beyond_singles = 0;  // memory limits under which a b0 > 16 fits (ranges exercised)
  for (const double mib : {6.0, 10.0, 16.0, 40.0}) {
    hybrid.set_capacity(mib * 1024 * 1024);
    double best = 0;
    int best_b0 = 0, largest_b0 = 0;
    for (int pp : {1, 2, 4})
      for (const auto schedule : so.schedules)
        for (int m = 1; m <= so.max_micro_batches; ++m)
          for (int b0 = 1; b0 <= so.max_b0; ++b0) {
            const auto hw = costmodel::lower(model, pp);
            const search::HybridLayout layout{pp, m, b0, schedule, false};
            const auto plan = search::solve_layout_exact(hybrid, hw, layout, so);
            if (!plan) continue;
            const auto ev = hybrid.evaluate(hw, *plan);
            REQUIRE(ev.fits);
            largest_b0 = std::max(largest_b0, b0);
            if (ev.throughput > best) {
              best = ev.throughput;
              best_b0 = b0;
            }
          }
    const auto r = search::search_hybrid(model, hybrid, search::LayoutSearch::kExact, so);
    INFO(mib << " MiB: every layout " << best << " samples/s (b0 " << best_b0 << "), the search "
             << r.evaluation.throughput << " after " << r.layouts << " bounds and " << r.solved << " solved");
    REQUIRE(r.feasible == (best > 0));
    if (best > 0) CHECK(rel(r.evaluation.throughput, best) < 1e-9);
    if (largest_b0 > 16) ++beyond_singles;
  }
  CHECK(beyond_singles >= 2);
}

}  // namespace
}  // namespace osdp
