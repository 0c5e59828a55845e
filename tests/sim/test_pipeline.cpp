// Pipelines in the one schedule and engine: programs of stages written here by hand (one rank per
// stage, compute and sends only) against schedules worked out by hand. The schedule of a plan of
// stages against the plan cost model's own stage terms: test_stage_plans.cpp.
#include <algorithm>
#include <cmath>
#include <map>

#include <catch2/catch.hpp>

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

}  // namespace osdp::sim
