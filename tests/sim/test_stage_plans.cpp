// The schedule of a plan of stages, micro-batches and TP degrees against the plan cost model's own
// stage terms (its TP rings, re-layouts, sends and tied all-reduce, with and without a calibration of the
// node levels), the step between its critical chain and the analytic sum, and the plans the schedule
// refuses. Hand-written pipeline programs against hand-worked schedules: test_pipeline.cpp.
#include <algorithm>
#include <cmath>

#include <catch2/catch.hpp>

#include "../costmodel/cost_fixtures.hpp"
#include "costmodel/collective.hpp"
#include "costmodel/error.hpp"
#include "costmodel/plan_cost.hpp"
#include "sim/engine.hpp"
#include "sim/network.hpp"
#include "sim/schedule.hpp"

namespace osdp::sim {
namespace {

double rel(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-300});
}

// A tied 8-layer model (hidden 128, 4 heads, ffn 512, seq 32, vocab 512) on one node of 8.
costmodel::ModelSpec small_model() {
  costmodel::ModelSpec model;
  model.name = "small";
  model.stages = {costmodel::StageSpec{8, 128, 4, 512}};
  model.seq = 32;
  model.vocab = 512;
  model.tied_embeddings = true;
  return model;
}

// The closed form of a collective task on the intra-node link (costmodel/collective.hpp's ring).
double ring_s(const Task& t, const costmodel::ClusterSpec& c) {
  return costmodel::CollectiveOp{collective_of(t.kind), t.bytes, t.group.size}.ring_s(
      c.intra.alpha_s, c.intra.beta_s_per_byte());
}

// A plan of small_model() on `cluster`: pp stages (the second from unit 4), m micro-batches of batch 2
// in all, every unit at TP degree t, every operator DP.
costmodel::Plan stage_plan(const costmodel::ModelSpec& model, const costmodel::ClusterSpec& cluster,
                           const costmodel::Workload& w, int pp, int m, int t) {
  costmodel::Plan plan;
  plan.model = model;
  plan.cluster = cluster;
  plan.pp = pp;
  plan.micro_batches = m;
  plan.batch_size = 2;
  plan.stage_first_unit = {0, 4};
  plan.unit_tp.assign(w.units.size(), t);
  plan.choices.assign(w.operators.size(), costmodel::Choice{false, 1, 1, false});
  return plan;
}

}  // namespace

// The schedule of a plan carries the cost model's stage terms (plan_cost.hpp): per stage its TP
// all-reduces and re-layouts, at the ring formula on the TP group's link, add up to m times evaluate's
// (which charges them per micro-batch); each send is the cost model's p2p; the tied copy's gradient
// all-reduce is its tied_sync_s, once, in the first and the last stage together. The simulated peak of
// each stage stays within evaluate's bound.
TEST_CASE("the schedule of a plan of stages carries the cost model's terms", "[sim][pipeline]") {
  const costmodel::ModelSpec model = small_model();
  costmodel::ClusterSpec cluster = costmodel::cost_fixtures::synthetic_cluster(1, 8);
  costmodel::PlanCostModel cost(cluster, nullptr, model.precision, costmodel::CostOptions{});
  const int pp = 2, m = 4;
  const costmodel::Workload w = costmodel::lower(model, pp);
  costmodel::Plan plan = stage_plan(model, cluster, w, pp, m, 1);
  plan.unit_tp[2] = 2;  // layer1 at t = 2, layer2 at 4: re-layouts 1 -> 2 -> 4 -> 1 in stage 0
  plan.unit_tp[3] = 4;
  const costmodel::Evaluation ev = cost.evaluate(w, plan);
  const Schedule s = build_schedule(plan, w, cost);
  REQUIRE(s.pp == 2);
  REQUIRE(w.tied_copy);
  double sends = 0, charged = 0;
  for (int st = 0; st < pp; ++st) {
    CAPTURE(st);
    double tp = 0, relayout = 0;
    int tied = 0;
    for (int t = s.first_task(st); t < s.end_task(st); ++t) {
      const Task& task = s.tasks[static_cast<std::size_t>(t)];
      if (task.kind == TaskKind::kSend)
        sends += to_seconds(RingLinks(cluster, nullptr).p2p_ticks(task.bytes, 0, 4));
      if (!is_collective(task.kind)) continue;
      if (task.twin >= 0) {
        ++tied;
        CHECK(rel(ring_s(task, cluster), cost.tied_sync_s(w, pp, plan.unit_tp.back(), false)) < 1e-12);
      } else if (task.payload == Payload::kActivations || task.payload == Payload::kActivationGradients) {
        (task.kind == TaskKind::kAllReduce ? tp : relayout) += ring_s(task, cluster);
      }
    }
    const auto& es = ev.stages[static_cast<std::size_t>(st)];
    CHECK(tied == 1);
    CHECK(rel(tp, m * es.tp_comm_s) < 1e-12);
    CHECK(rel(relayout, m * es.relayout_s) < 1e-12);
    // p2p_s charges a boundary's sends both ways to the stage before it, and the tied all-reduce per
    // micro-batch to the last stage.
    charged += es.p2p_s - (st == pp - 1 ? cost.tied_sync_s(w, pp, plan.unit_tp.back(), false) / m : 0.0);
  }
  CHECK(rel(sends, m * charged) < 1e-9);
  // Stage 0 re-lays forward into layer1 (1 -> 2) and layer2 (2 -> 4), backward at its exit (4 -> 1).
  auto task_named = [&](const std::string& name) {
    return *std::find_if(s.tasks.begin(), s.tasks.end(), [&](const Task& t) { return t.name == name; });
  };
  CHECK(rel(ring_s(task_named("layer1.relayout1to2.mb0"), cluster), cost.relayout_s(1, 2, 2, 32, 128, 4)) <
        1e-12);
  CHECK(rel(ring_s(task_named("layer2.relayout2to4.mb0"), cluster), cost.relayout_s(2, 4, 2, 32, 128, 4)) <
        1e-12);
  CHECK(rel(ring_s(task_named("output.relayout4to1.mb0"), cluster), cost.relayout_s(4, 1, 2, 32, 128, 4)) <
        1e-12);
  // Memory: evaluate's bound holds on every rank of the simulated step.
  SimOptions o;
  const SimResult r = simulate(s, RingLinks(cluster, nullptr), o);
  for (int rank = 0; rank < 8; ++rank)
    CHECK(r.ranks[static_cast<std::size_t>(rank)].peak_bytes <=
          ev.stages[static_cast<std::size_t>(rank / 4)].peak_bytes * (1 + 1e-12));
}

// With a calibration of the node levels (per_node 4 on 2 nodes x 4), a TP ring inside a node and a
// stage's send to the next node are priced step by step by the fit of their link (costmodel::level_step):
// TP all-reduce of S over t ranks = 2 (t - 1) (alpha + S/t beta) on the intra all-reduce segment that
// covers the node ring moving the same chunk (S/t x 4 bytes); a send of B = alpha + B beta on the inter
// all-gather segment covering B x 2. The simulator's steps (RingLinks) and the plan cost model
// (tp_comm_s, p2p_s) both take those, so they agree; without the levels both take the cluster's links.
TEST_CASE("a calibration's node levels price TP rings and sends by their links' fits", "[sim][pipeline]") {
  const costmodel::ModelSpec model = small_model();
  costmodel::ClusterSpec cluster = costmodel::cost_fixtures::synthetic_cluster(2, 4);
  cluster.inter = costmodel::LinkSpec{50e-6, 1e9};
  costmodel::Calibration cal;
  cal.per_node = 4;
  cal.intra.allreduce = {{2e5, 3e-6, 1 / 20e9}, {1e300, 7e-6, 1 / 30e9}};
  cal.inter.allgather = {{1e300, 80e-6, 1 / 0.5e9}};
  const int pp = 2, m = 2, t = 2;
  const costmodel::Workload w = costmodel::lower(model, pp);
  costmodel::Plan plan = stage_plan(model, cluster, w, pp, m, t);
  plan.unit_tp.front() = 1;  // the embedding's vocabulary does not split
  for (const bool levels : {true, false}) {
    CAPTURE(levels);
    costmodel::Calibration used = cal;
    if (!levels) used.per_node = 0;
    const costmodel::PlanCostModel cost(cluster, &used, model.precision, costmodel::CostOptions{});
    const costmodel::Evaluation ev = cost.evaluate(w, plan);
    const Schedule s = build_schedule(plan, w, cost);
    const RingLinks net(cluster, &used);
    int tp_tasks = 0;
    double tp = 0, sends = 0;
    for (int st = 0; st < pp; ++st) {
      for (int i = s.first_task(st); i < s.end_task(st); ++i) {
        const Task& task = s.tasks[static_cast<std::size_t>(i)];
        if (task.kind == TaskKind::kSend) {
          // Between stage 0's rank 0 and stage 1's rank 0, on node 1.
          const double got = to_seconds(net.p2p_ticks(task.bytes, 0, 4));
          CHECK(rel(got, levels ? 80e-6 + task.bytes / 0.5e9 : 50e-6 + task.bytes / 1e9) < 1e-6);
          sends += got;
        }
        const bool tp_ring =
            task.kind == TaskKind::kAllReduce && task.twin < 0 &&
            (task.payload == Payload::kActivations || task.payload == Payload::kActivationGradients);
        if (!tp_ring || st != 0) continue;
        REQUIRE(task.group.size == t);
        REQUIRE_FALSE(task.calibrated);
        const double chunk = task.bytes / t;
        const costmodel::Segment& seg = chunk * 4 <= 2e5 ? cal.intra.allreduce[0] : cal.intra.allreduce[1];
        const double want =
            levels ? 2 * (t - 1) * (seg.alpha_s + chunk * seg.beta_s_per_byte)
                   : 2 * (t - 1) * (cluster.intra.alpha_s + chunk * cluster.intra.beta_s_per_byte());
        const double got =
            2 * (t - 1) *
            to_seconds(net.ring_step_ticks(task.kind, task.bytes, t, 0, 1, task.level, task.calibrated));
        CHECK(rel(got, want) < 1e-6);
        tp += got;
        ++tp_tasks;
      }
    }
    REQUIRE(tp_tasks > 0);
    CHECK(rel(tp, m * ev.stages[0].tp_comm_s) < 1e-6);
    // p2p_s charges a boundary's sends both ways to the stage before it, and the tied all-reduce per
    // micro-batch to the last stage.
    const double tied = cost.tied_sync_s(w, pp, plan.unit_tp.back(), false) / m;
    CHECK(rel(sends, m * (ev.stages[0].p2p_s + ev.stages[1].p2p_s - tied)) < 1e-6);
  }
}

// REPLICATE everywhere, t = 1, one stage, one micro-batch, the paper tier (no optimizer): each
// gradient all-reduce runs beside the backward of the operators before it, so the step lies between
// the compute plus the first operator's all-reduce (which can start only after the whole backward)
// and the analytic step (the sum of everything).
TEST_CASE("a data-parallel plan's step between its critical chain and the analytic sum", "[sim][pipeline]") {
  const costmodel::ModelSpec model = small_model();
  const costmodel::ClusterSpec cluster = costmodel::cost_fixtures::synthetic_cluster(1, 8);
  costmodel::CostOptions paper;
  paper.tier = costmodel::Tier::kPaper;
  paper.prefetch = 1;
  costmodel::PlanCostModel cost(cluster, nullptr, model.precision, paper);
  const costmodel::Workload w = costmodel::lower(model);
  costmodel::Plan plan;
  plan.model = model;
  plan.cluster = cluster;
  plan.prefetch = 1;
  plan.cost_options = paper;
  costmodel::set_data_parallel(plan, w,
                               std::vector<costmodel::Choice>(w.operators.size(), {true, 1, 0, false}));
  const Schedule s = build_schedule(plan, w, cost);
  SimOptions o;
  o.record_tasks = true;
  const SimResult r = simulate(s, RingLinks(cluster, nullptr), o);
  double compute = 0, sync_of_first = 0;
  for (const Task& t : s.tasks) {
    if (!is_collective(t.kind)) compute += t.duration_s;
    if (is_collective(t.kind) && t.op == 0) sync_of_first = ring_s(t, cluster);
  }
  CHECK(to_seconds(r.iteration) >= compute + sync_of_first - 1e-9);
  CHECK(to_seconds(r.iteration) <= cost.evaluate(w, plan).time_s + 1e-9);
}

// A runtime's REPLICATE copies (ComputeSpec::replicate_overhead_s, replicate_bandwidth): with 3 ms and
// 2 GB/s, each REPLICATE operator of P parameters adds 3 ms + 4 P / 2e9 s (fp32) to the optimizer task of
// the step, once, whatever the micro-batches; with prefetch 0 (nothing overlaps) the simulated step and
// the plan cost model's both grow by the sum over the operators, written here from the parameters.
TEST_CASE("REPLICATE's runtime copies: once per step, in the optimizer task", "[sim][pipeline]") {
  const costmodel::ModelSpec model = small_model();
  costmodel::ClusterSpec plain = costmodel::cost_fixtures::synthetic_cluster(1, 8);
  costmodel::ClusterSpec fsdp2 = plain;
  fsdp2.compute.replicate_overhead_s = 3e-3;
  fsdp2.compute.replicate_bandwidth_bytes_per_s = 2e9;
  const costmodel::Workload w = costmodel::lower(model);
  for (const int m : {1, 2}) {
    CAPTURE(m);
    double copies = 0;
    std::vector<costmodel::Choice> choices;
    for (std::size_t u = 0; u < w.operators.size(); ++u) {
      const bool replicate = u % 2 == 0;  // every other operator, the rest ZDP
      choices.push_back({replicate, 1, replicate ? 0 : 1, false});
      if (replicate) copies += 3e-3 + 4.0 * static_cast<double>(w.operators[u].parameters()) / 2e9;
    }
    REQUIRE(copies > 0);
    double step[2], optimizer[2], analytic[2];
    for (int with = 0; with < 2; ++with) {
      const costmodel::ClusterSpec& cluster = with ? fsdp2 : plain;
      const costmodel::PlanCostModel cost(cluster, nullptr, model.precision, costmodel::CostOptions{});
      costmodel::Plan plan;
      plan.model = model;
      plan.cluster = cluster;
      costmodel::set_data_parallel(plan, w, choices);
      plan.micro_batches = m;
      const Schedule s = build_schedule(plan, w, cost);
      optimizer[with] = 0;
      for (const Task& t : s.tasks)
        if (t.kind == TaskKind::kOptimizer) optimizer[with] += t.duration_s;
      step[with] = to_seconds(simulate(s, RingLinks(cluster, nullptr), SimOptions{}).iteration);
      analytic[with] = cost.evaluate(w, plan).time_s;
    }
    CHECK(optimizer[1] - optimizer[0] == Approx(copies).epsilon(1e-12));
    CHECK(step[1] - step[0] == Approx(copies).margin(1e-6));
    CHECK(analytic[1] - analytic[0] == Approx(copies).epsilon(1e-9));
  }
}

// At prefetch 0 a stage runs one task at a time in issue order, but a send returns once posted (the
// executor's sends do not wait for their receiver): its delivery, on its own stream, holds up only the
// receive on the other stage. Here the link is slow: the same schedule with the next task chained after
// each send (as if the stage waited for every delivery) is longer.
TEST_CASE("at prefetch 0 a send holds up only its receive", "[sim][pipeline]") {
  const costmodel::ModelSpec model = small_model();
  costmodel::ClusterSpec cluster = costmodel::cost_fixtures::synthetic_cluster(1, 8);
  cluster.intra = costmodel::LinkSpec{1e-4, 1e7};  // 10 MB/s: a micro-batch's activations take 3.3 ms
  const costmodel::PlanCostModel cost(cluster, nullptr, model.precision, costmodel::CostOptions{});
  const costmodel::Workload w = costmodel::lower(model, 2);
  for (const auto schedule : {costmodel::PipelineSchedule::k1F1B, costmodel::PipelineSchedule::kGpipe}) {
    CAPTURE(costmodel::to_string(schedule));
    costmodel::Plan plan = stage_plan(model, cluster, w, 2, 4, 1);
    plan.schedule = schedule;
    plan.prefetch = 0;
    const Schedule s = build_schedule(plan, w, cost);
    Schedule chained = s;
    int sends = 0;
    for (int st = 0; st < 2; ++st) {
      int previous = -1;  // the last task of the stage that is not a send
      for (int t = s.first_task(st); t < s.end_task(st); ++t) {
        const Task& task = s.tasks[static_cast<std::size_t>(t)];
        for (const int d : task.deps)
          if (s.tasks[static_cast<std::size_t>(d)].kind == TaskKind::kSend)
            CHECK(task.kind == TaskKind::kRecv);
        if (task.kind == TaskKind::kSend) {
          ++sends;
          auto& next = chained.tasks[static_cast<std::size_t>(t) + 1];
          if (t + 1 < s.end_task(st)) next.deps.push_back(t);
          continue;
        }
        // Every other task still waits for the one before it (sends aside).
        if (previous >= 0) CHECK(std::find(task.deps.begin(), task.deps.end(), previous) != task.deps.end());
        previous = t;
      }
    }
    CHECK(sends == 2 * 4);  // activations forward, gradients back, per micro-batch
    const RingLinks net(cluster, nullptr);
    const SimResult r = simulate(s, net, SimOptions{});
    const SimResult c = simulate(chained, net, SimOptions{});
    CHECK(r.iteration < c.iteration);
  }
}

TEST_CASE("a plan without a micro-batch or with an empty stage is refused", "[sim][pipeline]") {
  const costmodel::ModelSpec model = small_model();
  const costmodel::ClusterSpec cluster = costmodel::cost_fixtures::synthetic_cluster(1, 8);
  const costmodel::PlanCostModel cost(cluster, nullptr, model.precision, costmodel::CostOptions{});
  const costmodel::Workload w = costmodel::lower(model, 2);
  costmodel::Plan plan;
  plan.model = model;
  plan.cluster = cluster;
  plan.pp = 2;
  plan.stage_first_unit = {0, 4};
  plan.unit_tp.assign(w.units.size(), 1);
  plan.choices.assign(w.operators.size(), costmodel::Choice{});
  CHECK_NOTHROW(build_schedule(plan, w, cost));
  plan.micro_batches = 0;
  CHECK_THROWS_AS(build_schedule(plan, w, cost), UsageError);
  plan.micro_batches = 1;
  plan.stage_first_unit = {0, 0};
  CHECK_THROWS_AS(build_schedule(plan, w, cost), UsageError);
}

}  // namespace osdp::sim
