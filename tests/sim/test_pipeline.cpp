// Pipelines in the one schedule and engine: programs of stages written here by hand (one rank per
// stage, compute and sends only) against schedules worked out by hand, and the schedule of a plan of
// stages, micro-batches and TP degrees against the plan cost model's own stage terms.
#include <algorithm>
#include <cmath>
#include <map>

#include <catch2/catch.hpp>

#include "../costmodel/cost_fixtures.hpp"
#include "costmodel/collective.hpp"
#include "costmodel/error.hpp"
#include "costmodel/plan_cost.hpp"
#include "sim/engine.hpp"
#include "sim/network.hpp"
#include "sim/replay.hpp"
#include "sim/report.hpp"
#include "sim/schedule.hpp"

namespace osdp::sim {
namespace {

using costmodel::PipelineSchedule;

double rel(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-300});
}

// pp stages of one rank each, one unit per stage: per micro-batch a forward of f and a backward of bw
// seconds, `act` bytes of activations from the forward to the backward, and a send of each micro-batch's
// activations (gradients) to the next (previous) stage, taking the link's alpha. Each stage runs
// stage_program's order; a receive waits for its send on the other stage; a stage holds 1000 resident
// bytes.
struct HandPipeline {
  Schedule s;
  costmodel::ClusterSpec cluster;
};

HandPipeline hand_pipeline(int pp, int m, PipelineSchedule schedule, std::vector<double> f,
                           std::vector<double> bw, double act = 0, double send_s = 0) {
  HandPipeline h;
  h.cluster.nodes = 1;
  h.cluster.devices_per_node = pp;
  h.cluster.memory_bytes = 1e12;
  h.cluster.intra = costmodel::LinkSpec{send_s, 1e30};
  Schedule& s = h.s;
  s.world_size = pp;
  s.per_node = pp;
  s.pp = pp;
  s.micro_batches = m;
  s.stage_begin = {0};
  std::map<std::tuple<int, bool, int>, int> sends;  // (stage, gradients?, micro-batch) -> task
  std::vector<std::pair<int, std::tuple<int, bool, int>>> recvs;
  for (int st = 0; st < pp; ++st) {
    s.buffers.push_back({"resident", 1000, BufferRole::kStates, -1, 0, 0, st, 0});
    s.resident.push_back(static_cast<int>(s.buffers.size()) - 1);
    std::map<int, int> acts;
    auto add = [&](Task t) {
      t.stage = st;
      s.tasks.push_back(std::move(t));
      return static_cast<int>(s.tasks.size()) - 1;
    };
    for (const auto& [backward, mb] : stage_program(schedule, pp, st, m)) {
      const bool receives = backward ? st + 1 < pp : st > 0;
      const bool sends_on = backward ? st > 0 : st + 1 < pp;
      std::vector<int> deps;
      if (receives) {
        Task r;
        r.name = backward ? "recv gradients" : "recv activations";
        r.kind = TaskKind::kRecv;
        r.peer = backward ? 1 : -1;
        r.micro_batch = mb;
        const int id = add(r);
        recvs.push_back({id, {st + r.peer, backward, mb}});
        deps.push_back(id);
      }
      Task c;
      c.name = backward ? "B" : "F";
      c.kind = backward ? TaskKind::kBackward : TaskKind::kForward;
      c.micro_batch = mb;
      c.duration_s = backward ? bw[static_cast<std::size_t>(st)] : f[static_cast<std::size_t>(st)];
      c.deps = deps;
      if (!backward) {
        s.buffers.push_back({"act", act, BufferRole::kActivations, -1, 0, 0, st, mb});
        acts[mb] = static_cast<int>(s.buffers.size()) - 1;
        c.allocs = {acts[mb]};
      } else {
        c.frees = {acts.at(mb)};
      }
      const int compute = add(c);
      if (sends_on) {
        Task x;
        x.name = backward ? "send gradients" : "send activations";
        x.kind = TaskKind::kSend;
        x.stream = backward ? Stream::kSendPrevious : Stream::kSendNext;
        x.peer = backward ? -1 : 1;
        x.micro_batch = mb;
        x.deps = {compute};
        sends[{st, backward, mb}] = add(x);
      }
    }
    s.stage_begin.push_back(static_cast<int>(s.tasks.size()));
  }
  for (const auto& [recv, key] : recvs) s.tasks[static_cast<std::size_t>(recv)].deps.push_back(sends.at(key));
  return h;
}

SimResult run(const HandPipeline& h, bool record = false) {
  const RingLinks net(h.cluster, nullptr);
  SimOptions o;
  o.record_tasks = record;
  o.memory_rank = SimOptions::kAllRanks;
  return simulate(h.s, net, o);
}

std::vector<double> same(int pp, double x) {
  return std::vector<double>(static_cast<std::size_t>(pp), x);
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
        const HandPipeline h = hand_pipeline(pp, m, schedule, same(pp, f), same(pp, bw));
        const SimResult r = run(h);
        CHECK(r.iteration == (m + pp - 1) * (to_ticks(f) + to_ticks(bw)));
        const auto summary = summary_json(h.s, r);
        CHECK(rel(summary["bubble_fraction"].get<double>(), (pp - 1.0) / (m + pp - 1.0)) < 1e-12);
        for (const auto& st : r.ranks) CHECK(rel(to_seconds(st.compute_busy), m * (f + bw)) < 1e-12);
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
  const std::vector<double> f{1e-3, 3e-3}, bw{2e-3, 1e-3};
  const HandPipeline gpipe = hand_pipeline(2, 2, PipelineSchedule::kGpipe, f, bw, 100, 0.5e-3);
  const SimResult g = run(gpipe);
  CHECK(g.iteration == to_ticks(13e-3));
  const HandPipeline ofob = hand_pipeline(2, 2, PipelineSchedule::k1F1B, f, bw, 100, 0.5e-3);
  const SimResult o = run(ofob, true);
  CHECK(o.iteration == to_ticks(12e-3));
  // The bubble: busy 2 x 3 ms at stage 0 and 2 x 4 ms at stage 1, of 2 x 12 ms.
  CHECK(rel(summary_json(ofob.s, o)["bubble_fraction"].get<double>(), 1.0 - 14.0 / 24.0) < 1e-12);
  // In flight at stage 1: GPipe both micro-batches' activations, 1F1B one.
  CHECK(g.ranks[1].peak_bytes == 1000 + 2 * 100);
  CHECK(o.ranks[1].peak_bytes == 1000 + 100);
  // Stage 1's backward of micro-batch 0 under 1F1B: [4.5, 5.5] ms.
  const auto it = std::find_if(o.tasks.begin(), o.tasks.end(), [&](const TaskRecord& rec) {
    const Task& t = ofob.s.tasks[static_cast<std::size_t>(rec.task)];
    return rec.rank == 1 && t.kind == TaskKind::kBackward && t.micro_batch == 0;
  });
  REQUIRE(it != o.tasks.end());
  CHECK(it->start == to_ticks(4.5e-3));
  CHECK(it->end == to_ticks(5.5e-3));
}

// Memory: 1F1B holds min(pp - s, m) micro-batches' activations at stage s, GPipe all m; the peak is
// the resident bytes plus that many micro-batches (no transient bytes here), and everything
// allocated is freed by the end.
TEST_CASE("micro-batches in flight: 1F1B min(pp - s, m), GPipe m", "[sim][pipeline]") {
  const int pp = 4;
  for (const int m : {2, 4, 8}) {
    const SimResult ofob =
        run(hand_pipeline(pp, m, PipelineSchedule::k1F1B, same(pp, 1e-3), same(pp, 2e-3), 64));
    const SimResult gpipe =
        run(hand_pipeline(pp, m, PipelineSchedule::kGpipe, same(pp, 1e-3), same(pp, 2e-3), 64));
    for (int s = 0; s < pp; ++s) {
      CAPTURE(m, s);
      CHECK(ofob.ranks[static_cast<std::size_t>(s)].peak_bytes == 1000 + 64.0 * std::min(pp - s, m));
      CHECK(gpipe.ranks[static_cast<std::size_t>(s)].peak_bytes == 1000 + 64.0 * m);
      // The count the engine keeps from the tasks alone agrees with the memory.
      CHECK(ofob.ranks[static_cast<std::size_t>(s)].max_in_flight == std::min(pp - s, m));
      CHECK(gpipe.ranks[static_cast<std::size_t>(s)].max_in_flight == m);
      double first = -1, last = -1;
      for (const MemoryEvent& e : ofob.memory)
        if (e.rank == s) {
          if (first < 0) first = e.total;
          last = e.total;
        }
      CHECK(first == 1000);
      CHECK(last == 1000);
    }
  }
}

// Per-step work: a gradient reduction runs on the comm stream beside the backward of the units before
// it, and the optimizer waits for every reduction. One stage of two ranks (a data-parallel group),
// m = 1, units a then b (forward 1, backward 2 ms each): b's gradient all-reduce takes 3 ms after its
// backward [2, 4] (to 7), a's 1 ms after [4, 6]: the comm stream runs them in order, [4, 7] then
// [7, 8]; the optimizer (0.5 ms) [8, 8.5]. An all-reduce over 2 ranks is 2 steps of alpha + S/2 beta:
// at alpha 0.5 ms and 1 GB/s, S = 2 MB takes 2 (0.5 + 1) = 3 ms, S = 0 takes 1 ms.
TEST_CASE("per-step reductions beside the backward, the optimizer after them", "[sim][pipeline]") {
  costmodel::ClusterSpec c;
  c.nodes = 1;
  c.devices_per_node = 2;
  c.memory_bytes = 1e12;
  c.intra = costmodel::LinkSpec{0.5e-3, 1e9};
  Schedule s;
  s.world_size = 2;
  s.per_node = 2;
  auto add = [&](Task t) {
    s.tasks.push_back(std::move(t));
    return static_cast<int>(s.tasks.size()) - 1;
  };
  auto compute = [](const char* name, TaskKind k, double d) {
    Task t;
    t.name = name;
    t.kind = k;
    t.duration_s = d;
    return t;
  };
  auto allreduce = [](const char* name, double bytes, int dep) {
    Task t;
    t.name = name;
    t.kind = TaskKind::kAllReduce;
    t.stream = Stream::kComm;
    t.payload = Payload::kGradients;
    t.group = {2, 1};
    t.bytes = bytes;
    t.deps = {dep};
    return t;
  };
  add(compute("F a", TaskKind::kForward, 1e-3));
  add(compute("F b", TaskKind::kForward, 1e-3));
  const int bb = add(compute("B b", TaskKind::kBackward, 2e-3));
  const int sb = add(allreduce("sync b", 2e6, bb));
  const int ba = add(compute("B a", TaskKind::kBackward, 2e-3));
  const int sa = add(allreduce("sync a", 0, ba));
  Task opt = compute("optimizer", TaskKind::kOptimizer, 0.5e-3);
  opt.deps = {sb, sa};
  add(opt);
  SimOptions o;
  o.record_tasks = true;
  const SimResult r = simulate(s, RingLinks(c, nullptr), o);
  CHECK(r.iteration == to_ticks(8.5e-3));
  for (const TaskRecord& rec : r.tasks)
    if (rec.rank == 0 && s.tasks[static_cast<std::size_t>(rec.task)].kind == TaskKind::kOptimizer)
      CHECK(rec.start == to_ticks(8e-3));
}

namespace {

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
