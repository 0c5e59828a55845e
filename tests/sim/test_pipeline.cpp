// The pipeline simulator (sim/pipeline.hpp) against schedules worked out by hand here, and its spec
// against the hybrid cost model's own stage terms.
#include <algorithm>
#include <cmath>

#include <catch2/catch.hpp>

#include "../costmodel/cost_fixtures.hpp"
#include "costmodel/error.hpp"
#include "costmodel/hybrid.hpp"
#include "sim/pipeline.hpp"

namespace osdp::sim {
namespace {

using costmodel::PipelineSchedule;

// pp stages of one unit each: forward f, backward bw (seconds), activations `act` per micro-batch.
PipelineSpec uniform(int pp, int m, PipelineSchedule schedule, double f, double bw, double act = 0) {
  PipelineSpec spec;
  spec.micro_batches = m;
  spec.schedule = schedule;
  for (int s = 0; s < pp; ++s) {
    PipelineStage st;
    PipelineUnit u;
    u.name = "layer";
    u.forward_s = f;
    u.backward_s = bw;
    u.activation_bytes = act;
    st.units.push_back(u);
    st.resident_bytes = 1000;
    spec.stages.push_back(st);
  }
  return spec;
}

double rel(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-300});
}

}  // namespace

// Equal stages, nothing but compute: every stage is busy m (F + B), and the step is
// (m + pp - 1)(F + B): pp - 1 forwards fill the pipeline, pp - 1 backwards drain it. The bubble
// fraction is then (pp - 1) / (m + pp - 1), for 1F1B and for GPipe alike.
TEST_CASE("the bubble of an unloaded pipeline is (pp - 1) / (m + pp - 1)", "[sim][pipeline]") {
  const double f = 1e-3, bw = 2e-3;
  for (const auto schedule : {PipelineSchedule::k1F1B, PipelineSchedule::kGpipe})
    for (const int pp : {1, 2, 4, 8})
      for (const int m : {1, 2, 3, 8, 16}) {
        CAPTURE(costmodel::to_string(schedule), pp, m);
        const PipelineResult r = simulate_pipeline(uniform(pp, m, schedule, f, bw));
        CHECK(r.step == (m + pp - 1) * (to_ticks(f) + to_ticks(bw)));
        CHECK(rel(r.bubble_fraction, (pp - 1.0) / (m + pp - 1.0)) < 1e-12);
        for (const auto& st : r.stages) CHECK(rel(st.busy_s, m * (f + bw)) < 1e-12);
      }
}

// Two unequal stages, 2 micro-batches, sends of 0.5 ms; times in ms, worked out by hand.
//   stage 0: F 1, B 2;  stage 1: F 3, B 1.
// GPipe:  stage 0 F0 [0,1] F1 [1,2];  sends of activations [1,1.5] [2,2.5];
//         stage 1 F0 [1.5,4.5] F1 [4.5,7.5] B0 [7.5,8.5] B1 [8.5,9.5];  gradients [8.5,9] [9.5,10];
//         stage 0 B0 [9,11] B1 [11,13]: 13 ms.
// 1F1B:   stage 1 runs F0 [1.5,4.5] B0 [4.5,5.5] F1 [5.5,8.5] B1 [8.5,9.5]; gradients [5.5,6] [9.5,10];
//         stage 0 (one warm-up forward: the same order as GPipe) B0 [6,8] B1 [10,12]: 12 ms.
// 1F1B holds one micro-batch at stage 1 (F1 starts as B0 ends, which frees first), GPipe two.
TEST_CASE("two unequal stages with sends: the schedules worked out by hand", "[sim][pipeline]") {
  auto spec = uniform(2, 2, PipelineSchedule::kGpipe, 1e-3, 2e-3, 100);
  spec.stages[1].units[0].forward_s = 3e-3;
  spec.stages[1].units[0].backward_s = 1e-3;
  spec.stages[0].send_s = 0.5e-3;
  const PipelineResult gpipe = simulate_pipeline(spec);
  CHECK(gpipe.step == to_ticks(13e-3));
  spec.schedule = PipelineSchedule::k1F1B;
  const PipelineResult ofob = simulate_pipeline(spec);
  CHECK(ofob.step == to_ticks(12e-3));
  // The bubble: busy 2 x 3 ms at stage 0 and 2 x 4 ms at stage 1, of 2 x 12 ms.
  CHECK(rel(ofob.bubble_fraction, 1.0 - 14.0 / 24.0) < 1e-12);
  CHECK(gpipe.stages[1].max_in_flight == 2);
  CHECK(ofob.stages[1].max_in_flight == 1);
  CHECK(gpipe.stages[1].peak_bytes == 1000 + 2 * 100);
  CHECK(ofob.stages[1].peak_bytes == 1000 + 100);
  // Stage 1's backward of micro-batch 0 under 1F1B: [4.5, 5.5] ms.
  const auto it = std::find_if(ofob.tasks.begin(), ofob.tasks.end(), [](const PipeTask& t) {
    return t.stage == 1 && t.kind == PipeTaskKind::kBackward && t.micro_batch == 0;
  });
  REQUIRE(it != ofob.tasks.end());
  CHECK(it->start == to_ticks(4.5e-3));
  CHECK(it->end == to_ticks(5.5e-3));
}

// Memory: 1F1B holds min(pp - s, m) micro-batches' activations at stage s, GPipe all m; the peak is
// the resident bytes plus that many micro-batches (no transient bytes here).
TEST_CASE("micro-batches in flight: 1F1B min(pp - s, m), GPipe m", "[sim][pipeline]") {
  const int pp = 4;
  for (const int m : {2, 4, 8}) {
    const auto ofob = simulate_pipeline(uniform(pp, m, PipelineSchedule::k1F1B, 1e-3, 2e-3, 64));
    const auto gpipe = simulate_pipeline(uniform(pp, m, PipelineSchedule::kGpipe, 1e-3, 2e-3, 64));
    for (int s = 0; s < pp; ++s) {
      CAPTURE(m, s);
      CHECK(ofob.stages[s].max_in_flight == std::min(pp - s, m));
      CHECK(ofob.stages[s].peak_bytes == 1000 + 64.0 * std::min(pp - s, m));
      CHECK(gpipe.stages[s].max_in_flight == m);
      CHECK(gpipe.stages[s].peak_bytes == 1000 + 64.0 * m);
      CHECK(ofob.memory[s].front().second == 1000);
      CHECK(ofob.memory[s].back().second == 1000);  // everything allocated was freed
    }
  }
}

// Per-step work: the gradient reduction runs beside the backward of the units before it, and the
// optimizer waits for it. One stage, m = 1, units a then b (forward 1, backward 2 ms each); b's
// gradients reduce in 3 ms after its backward [2, 4] (to 7), a's in 1 ms after [4, 6]: the dp lane
// runs them in order, [4, 7] then [7, 8]; the optimizer (0.5 ms) [8, 8.5].
TEST_CASE("per-step reductions beside the backward, the optimizer after them", "[sim][pipeline]") {
  PipelineSpec spec = uniform(1, 1, PipelineSchedule::k1F1B, 1e-3, 2e-3);
  PipelineUnit b = spec.stages[0].units[0];
  b.name = "b";
  spec.stages[0].units[0].name = "a";
  spec.stages[0].units[0].grad_sync_s = 1e-3;
  spec.stages[0].units[0].optimizer_s = 0.25e-3;
  b.grad_sync_s = 3e-3;
  b.optimizer_s = 0.25e-3;
  spec.stages[0].units.push_back(b);
  const PipelineResult r = simulate_pipeline(spec);
  CHECK(r.step == to_ticks(8.5e-3));
  const auto opt = std::find_if(r.tasks.begin(), r.tasks.end(),
                                [](const PipeTask& t) { return t.kind == PipeTaskKind::kOptimizer; });
  REQUIRE(opt != r.tasks.end());
  CHECK(opt->start == to_ticks(8e-3));
}

// The spec of a cost-model plan carries the cost model's stage terms: its TP all-reduces, re-layouts
// and sends add up to evaluate's, and its memory to evaluate's peak (the activations of the
// micro-batches in flight and the largest transient). With everything REPLICATE and t = 1 nothing
// runs beside the compute, and the simulated step of one micro-batch is the sum of the stages.
TEST_CASE("the pipeline spec of a hybrid plan carries the cost model's terms", "[sim][pipeline]") {
  costmodel::ModelSpec model;
  model.name = "small";
  model.stages = {costmodel::StageSpec{8, 128, 4, 512}};
  model.seq = 32;
  model.vocab = 512;
  model.tied_embeddings = true;
  costmodel::ClusterSpec cluster = costmodel::cost_fixtures::synthetic_cluster(1, 8);
  costmodel::HybridCostModel cost(cluster, nullptr, model.precision, costmodel::CostOptions{}, model.dropout);
  const int pp = 2, m = 4;
  const auto hw = costmodel::hybrid_workload(model, pp);
  costmodel::HybridPlan plan;
  plan.pp = pp;
  plan.micro_batches = m;
  plan.b0 = 2;
  plan.stage_first_unit = {0, 4};
  plan.unit_tp.assign(hw.units.size(), 1);
  plan.unit_tp[2] = 2;  // layer1 at t = 2, layer2 at 4: re-layouts 1 -> 2 -> 4 -> 1 in stage 0
  plan.unit_tp[3] = 4;
  plan.choices.assign(hw.workload.operators.size(), costmodel::Choice{false, 1, 1, false});
  const auto ev = cost.evaluate(hw, plan);
  const PipelineSpec spec = pipeline_spec(hw, plan, cost);
  REQUIRE(spec.stages.size() == 2);
  CHECK(spec.tied_allreduce_s > 0);
  for (int s = 0; s < pp; ++s) {
    CAPTURE(s);
    const auto& st = spec.stages[s];
    const auto& es = ev.stages[s];
    double tp = 0, relayout = st.exit_relayout_backward_s, act = 0, trans = 0;
    for (const auto& u : st.units) {
      tp += u.tp_forward_s + u.tp_backward_s;
      relayout += u.relayout_forward_s + u.relayout_backward_s;
      act += u.activation_bytes;
      trans = std::max(trans, u.transient_bytes);
    }
    CHECK(rel(tp, es.tp_comm_s) < 1e-12);
    CHECK(rel(relayout, es.relayout_s) < 1e-12);
    CHECK(rel(st.resident_bytes + es.in_flight * act + trans, es.peak_bytes) < 1e-12);
    const double sends = 2 * st.send_s + (s == pp - 1 ? spec.tied_allreduce_s / m : 0.0);
    CHECK(rel(sends, es.p2p_s) < 1e-12);
  }
  // Stage 0 re-lays forward into layer1 (1 -> 2) and layer2 (2 -> 4), backward at its exit (4 -> 1).
  CHECK(spec.stages[0].units[2].relayout_forward_s == cost.relayout_s(1, 2, 2, 32, 128, 4));
  CHECK(spec.stages[0].units[3].relayout_forward_s == cost.relayout_s(2, 4, 2, 32, 128, 4));
  CHECK(spec.stages[0].exit_relayout_backward_s == cost.relayout_s(4, 1, 2, 32, 128, 4));

  // REPLICATE everywhere, t = 1, one stage, one micro-batch, no optimizer (paper tier): the step is
  // the program's sum, which is the analytic step less the per-step all-reduces run beside it.
  costmodel::CostOptions paper;
  paper.tier = costmodel::Tier::kPaper;
  costmodel::HybridCostModel pcost(cluster, nullptr, model.precision, paper, model.dropout);
  const auto hw1 = costmodel::hybrid_workload(model, 1);
  costmodel::HybridPlan one;
  one.stage_first_unit = {0};
  one.unit_tp.assign(hw1.units.size(), 1);
  one.choices.assign(hw1.workload.operators.size(), costmodel::Choice{true, 1, 0, false});
  const PipelineSpec s1 = pipeline_spec(hw1, one, pcost);
  const PipelineResult r1 = simulate_pipeline(s1);
  double compute = 0, sync_of_first = 0;
  for (const auto& u : s1.stages[0].units) compute += u.forward_s + u.backward_s;
  sync_of_first = s1.stages[0].units.front().grad_sync_s;
  // The first unit's reduction can start only after the whole backward; the others run beside the
  // backward of the units before them, so the step lies between that and the analytic sum.
  CHECK(r1.step_s >= compute + sync_of_first - 1e-12);
  CHECK(r1.step_s <= pcost.evaluate(hw1, one).time_s + 1e-12);
}

TEST_CASE("a pipeline without a stage or a micro-batch is refused", "[sim][pipeline]") {
  PipelineSpec spec;
  CHECK_THROWS_AS(simulate_pipeline(spec), Error);
  spec = uniform(2, 1, PipelineSchedule::k1F1B, 1e-3, 1e-3);
  spec.micro_batches = 0;
  CHECK_THROWS_AS(simulate_pipeline(spec), Error);
}

}  // namespace osdp::sim
