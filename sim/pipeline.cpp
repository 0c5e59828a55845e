#include "sim/pipeline.hpp"

#include <algorithm>
#include <array>
#include <deque>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "costmodel/error.hpp"

namespace osdp::sim {

using costmodel::PipelineSchedule;

const char* to_string(PipeLane l) {
  switch (l) {
    case PipeLane::kCompute:
      return "compute";
    case PipeLane::kTp:
      return "tp";
    case PipeLane::kDp:
      return "dp";
    case PipeLane::kSendNext:
      return "send next";
    case PipeLane::kSendPrevious:
      return "send previous";
  }
  return "?";
}

const char* to_string(PipeTaskKind k) {
  switch (k) {
    case PipeTaskKind::kForward:
      return "F";
    case PipeTaskKind::kBackward:
      return "B";
    case PipeTaskKind::kTpForward:
      return "TP AR fwd";
    case PipeTaskKind::kTpBackward:
      return "TP AR bwd";
    case PipeTaskKind::kRelayoutForward:
      return "re-layout fwd";
    case PipeTaskKind::kRelayoutBackward:
      return "re-layout bwd";
    case PipeTaskKind::kSendActivations:
      return "send activations";
    case PipeTaskKind::kSendGradients:
      return "send gradients";
    case PipeTaskKind::kDpGather:
      return "DP gather";
    case PipeTaskKind::kGradSync:
      return "gradient sync";
    case PipeTaskKind::kTiedAllReduce:
      return "tied AR";
    case PipeTaskKind::kOptimizer:
      return "optimizer";
  }
  return "?";
}

PipelineSpec pipeline_spec(const costmodel::HybridWorkload& hw, const costmodel::HybridPlan& plan,
                           const costmodel::HybridCostModel& model) {
  // Checks the plan against its workload (and throws what evaluate throws).
  const costmodel::HybridEvaluation ev = model.evaluate(hw, plan);
  const auto& units = hw.units;
  const auto& ops = hw.workload.operators;
  const int pp = plan.pp, m = plan.micro_batches;
  const int seq = hw.workload.seq;
  PipelineSpec spec;
  spec.micro_batches = m;
  spec.schedule = plan.schedule;
  const double fixed = model.fixed_bytes(hw.workload);
  for (int s = 0; s < pp; ++s) {
    const auto& st = ev.stages[static_cast<std::size_t>(s)];
    PipelineStage stage;
    stage.resident_bytes = fixed;
    for (int u = st.first_unit; u < st.end_unit; ++u) {
      const int t = plan.unit_tp[static_cast<std::size_t>(u)];
      PipelineUnit pu;
      pu.name = units[static_cast<std::size_t>(u)].name;
      pu.tp = t;
      // A re-layout gathers forward when the degree grows, backward when it shrinks (hybrid.hpp).
      const auto relayout = model.relayout_into(hw, plan, s, u);
      (relayout.forward ? pu.relayout_forward_s : pu.relayout_backward_s) = relayout.seconds;
      const costmodel::CostModel& sub = model.dp_model(pp, t);
      for (int oi : units[static_cast<std::size_t>(u)].ops) {
        const auto& op = ops[static_cast<std::size_t>(oi)];
        const auto& ch = plan.choices[static_cast<std::size_t>(oi)];
        const auto x = model.op_parts(op, t, ch, plan.b0, pp, plan.sequence_parallel, hw.workload.bytes, seq);
        const auto c =
            model.op_cost(op, t, ch, plan.b0, m, pp, plan.sequence_parallel, hw.workload.bytes, seq);
        pu.forward_s += model.overlapped_s(sub, x.forward_s, x.zdp_forward_s);
        pu.backward_s += model.overlapped_s(sub, x.backward_s, x.zdp_backward_s);
        pu.tp_forward_s += x.tp_forward_s;
        pu.tp_backward_s += x.tp_backward_s;
        pu.dp_gather_s += x.dp_gather_s;
        pu.grad_sync_s += x.grad_sync_s;
        pu.optimizer_s += x.optimizer_s;
        pu.activation_bytes += c.act_bytes;
        pu.transient_bytes = std::max(pu.transient_bytes, c.transient_bytes);
        stage.resident_bytes += c.states_bytes;
      }
      stage.units.push_back(pu);
    }
    const int last = st.end_unit - 1;
    const auto exit =
        model.stage_exit(hw, pp, plan.b0, s, last, plan.unit_tp[static_cast<std::size_t>(last)]);
    stage.exit_relayout_backward_s = exit.relayout_s;
    stage.send_s = exit.send_s;
    spec.stages.push_back(std::move(stage));
  }
  spec.tied_allreduce_s = model.tied_sync_s(hw, pp, plan.unit_tp.back(), plan.sequence_parallel);
  return spec;
}

namespace {

struct Builder {
  std::vector<PipeTask> tasks;
  int add(PipeTask t) {
    tasks.push_back(std::move(t));
    return static_cast<int>(tasks.size()) - 1;
  }
};

}  // namespace

std::vector<std::pair<bool, int>> stage_program(costmodel::PipelineSchedule schedule, int pp, int s, int m) {
  std::vector<std::pair<bool, int>> out;
  if (schedule == costmodel::PipelineSchedule::kGpipe) {
    for (int i = 0; i < m; ++i) out.push_back({false, i});
    for (int i = 0; i < m; ++i) out.push_back({true, i});
    return out;
  }
  const int warmup = std::min(pp - s - 1, m);
  for (int i = 0; i < warmup; ++i) out.push_back({false, i});
  for (int i = 0; i + warmup < m; ++i) {
    out.push_back({false, warmup + i});
    out.push_back({true, i});
  }
  for (int i = m - warmup; i < m; ++i) out.push_back({true, i});
  return out;
}

PipelineResult simulate_pipeline(const PipelineSpec& spec) {
  const int pp = static_cast<int>(spec.stages.size());
  const int m = spec.micro_batches;
  if (pp < 1 || m < 1) throw Error("pipeline simulation: a pipeline needs a stage and a micro-batch");
  Builder b;
  // Per stage and micro-batch: the first task of its backward, its sends.
  std::vector<std::vector<int>> first_bwd(pp, std::vector<int>(m, -1)), send_act = first_bwd,
                                                                        send_grad = first_bwd;
  std::vector<std::vector<int>> syncs(pp);
  std::vector<int> last_program(pp, -1);  // per stage: the last compute or tp task
  int embedding_last_backward = -1, head_last_backward = -1;
  for (int s = 0; s < pp; ++s) {
    const PipelineStage& st = spec.stages[static_cast<std::size_t>(s)];
    const int nu = static_cast<int>(st.units.size());
    std::vector<int> gathers(nu, -1);
    for (int u = 0; u < nu; ++u)
      if (st.units[u].dp_gather_s > 0)
        gathers[u] = b.add({PipeTaskKind::kDpGather,
                            PipeLane::kDp,
                            s,
                            u,
                            -1,
                            to_ticks(st.units[u].dp_gather_s),
                            {},
                            0,
                            0,
                            0,
                            0});
    int prev = -1;  // the program's last task: compute and tp tasks run one at a time
    auto program_task = [&](PipeTaskKind kind, PipeLane lane, int u, int mb, double seconds,
                            std::vector<int> deps = {}) {
      if (prev >= 0) deps.push_back(prev);
      prev = b.add({kind, lane, s, u, mb, to_ticks(seconds), std::move(deps), 0, 0, 0, 0});
      return prev;
    };
    const auto order = stage_program(spec.schedule, pp, s, m);
    const int last_bwd_mb = order.back().second;
    for (const auto& [backward, mb] : order) {
      const std::size_t first = b.tasks.size();
      if (!backward) {
        for (int u = 0; u < nu; ++u) {
          const PipelineUnit& pu = st.units[u];
          std::vector<int> deps;
          if (u == 0 && s > 0) deps.push_back(send_act[s - 1][mb]);
          if (gathers[u] >= 0 && mb == 0) deps.push_back(gathers[u]);
          if (pu.relayout_forward_s > 0)
            program_task(PipeTaskKind::kRelayoutForward, PipeLane::kTp, u, mb, pu.relayout_forward_s,
                         std::exchange(deps, {}));
          const int f = program_task(PipeTaskKind::kForward, PipeLane::kCompute, u, mb, pu.forward_s, deps);
          b.tasks[f].alloc_bytes = pu.activation_bytes;
          if (pu.tp_forward_s > 0)
            program_task(PipeTaskKind::kTpForward, PipeLane::kTp, u, mb, pu.tp_forward_s);
        }
        if (s + 1 < pp)
          send_act[s][mb] = b.add({PipeTaskKind::kSendActivations,
                                   PipeLane::kSendNext,
                                   s,
                                   -1,
                                   mb,
                                   to_ticks(st.send_s),
                                   {prev},
                                   0,
                                   0,
                                   0,
                                   0});
      } else {
        if (st.exit_relayout_backward_s > 0)
          program_task(PipeTaskKind::kRelayoutBackward, PipeLane::kTp, nu, mb, st.exit_relayout_backward_s);
        for (int u = nu - 1; u >= 0; --u) {
          const PipelineUnit& pu = st.units[u];
          const int bw = program_task(PipeTaskKind::kBackward, PipeLane::kCompute, u, mb, pu.backward_s);
          b.tasks[bw].alloc_bytes = pu.transient_bytes;
          b.tasks[bw].free_bytes = pu.transient_bytes + pu.activation_bytes;
          if (mb == last_bwd_mb) {
            if (pu.grad_sync_s > 0)
              syncs[s].push_back(b.add({PipeTaskKind::kGradSync,
                                        PipeLane::kDp,
                                        s,
                                        u,
                                        -1,
                                        to_ticks(pu.grad_sync_s),
                                        {bw},
                                        0,
                                        0,
                                        0,
                                        0}));
            if (s == 0 && u == 0) embedding_last_backward = bw;
            if (s == pp - 1 && u == nu - 1) head_last_backward = bw;
          }
          if (pu.tp_backward_s > 0)
            program_task(PipeTaskKind::kTpBackward, PipeLane::kTp, u, mb, pu.tp_backward_s);
          if (pu.relayout_backward_s > 0)
            program_task(PipeTaskKind::kRelayoutBackward, PipeLane::kTp, u, mb, pu.relayout_backward_s);
        }
        first_bwd[s][mb] = static_cast<int>(first);
        if (s > 0)
          send_grad[s][mb] = b.add({PipeTaskKind::kSendGradients,
                                    PipeLane::kSendPrevious,
                                    s,
                                    -1,
                                    mb,
                                    to_ticks(spec.stages[static_cast<std::size_t>(s - 1)].send_s),
                                    {prev},
                                    0,
                                    0,
                                    0,
                                    0});
      }
    }
    last_program[s] = prev;
  }
  // A backward waits for its gradients from the next stage (built after it).
  for (int s = 0; s + 1 < pp; ++s)
    for (int mb = 0; mb < m; ++mb) b.tasks[first_bwd[s][mb]].deps.push_back(send_grad[s + 1][mb]);
  int tied = -1;
  if (spec.tied_allreduce_s > 0 && pp > 1)
    tied = b.add({PipeTaskKind::kTiedAllReduce,
                  PipeLane::kDp,
                  pp - 1,
                  -1,
                  -1,
                  to_ticks(spec.tied_allreduce_s),
                  {embedding_last_backward, head_last_backward},
                  0,
                  0,
                  0,
                  0});
  // The optimizer step, last in each stage's program.
  for (int s = 0; s < pp; ++s) {
    double opt = 0;
    for (const auto& u : spec.stages[static_cast<std::size_t>(s)].units) opt += u.optimizer_s;
    if (opt <= 0) continue;
    std::vector<int> deps = syncs[s];
    deps.push_back(last_program[s]);
    if (tied >= 0 && (s == 0 || s == pp - 1)) deps.push_back(tied);
    b.add({PipeTaskKind::kOptimizer, PipeLane::kCompute, s, -1, -1, to_ticks(opt), deps, 0, 0, 0, 0});
  }

  // Each lane of each stage runs its tasks in issue order: an edge from the one before.
  std::vector<PipeTask>& tasks = b.tasks;
  const std::size_t n = tasks.size();
  std::vector<std::array<int, kPipeLanes>> last_on_lane(pp);
  for (auto& l : last_on_lane) l.fill(-1);
  std::vector<std::vector<int>> dependents(n);
  std::vector<int> waiting(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    PipeTask& t = tasks[i];
    int& lane_prev = last_on_lane[t.stage][static_cast<int>(t.lane)];
    if (lane_prev >= 0) t.deps.push_back(lane_prev);
    lane_prev = static_cast<int>(i);
    std::sort(t.deps.begin(), t.deps.end());
    t.deps.erase(std::unique(t.deps.begin(), t.deps.end()), t.deps.end());
    for (int d : t.deps) dependents[d].push_back(static_cast<int>(i));
    waiting[i] = static_cast<int>(t.deps.size());
  }
  // Kahn's order: a task starts when the last of its dependencies ends.
  std::deque<int> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (waiting[i] == 0) ready.push_back(static_cast<int>(i));
  std::size_t done = 0;
  PipelineResult r;
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop_front();
    PipeTask& t = tasks[i];
    t.start = 0;
    for (int d : t.deps) t.start = std::max(t.start, tasks[d].end);
    t.end = t.start + t.duration;
    r.step = std::max(r.step, t.end);
    ++done;
    for (int j : dependents[i])
      if (--waiting[j] == 0) ready.push_back(j);
  }
  if (done != n)
    throw Error(
        fmt::format("pipeline simulation: {} of {} tasks can never start (a dependency cycle)", n - done, n));
  r.step_s = to_seconds(r.step);

  // Busy time, memory and micro-batches in flight per stage.
  r.stages.resize(pp);
  r.memory.resize(pp);
  for (int s = 0; s < pp; ++s) {
    // (time, order, delta bytes, delta in flight): at one instant, what ends frees before what starts.
    std::vector<std::tuple<Tick, int, double, int>> ev;
    Tick busy = 0;
    for (const PipeTask& t : tasks) {
      if (t.stage != s) continue;
      if (t.lane == PipeLane::kCompute || t.lane == PipeLane::kTp) busy += t.duration;
      if (t.alloc_bytes > 0) ev.emplace_back(t.start, 1, t.alloc_bytes, 0);
      if (t.free_bytes > 0) ev.emplace_back(t.end, 0, -t.free_bytes, 0);
      if (t.kind == PipeTaskKind::kForward && t.unit == 0) ev.emplace_back(t.start, 1, 0.0, 1);
      if (t.kind == PipeTaskKind::kBackward && t.unit == 0) ev.emplace_back(t.end, 0, 0.0, -1);
    }
    std::sort(ev.begin(), ev.end());
    auto& sr = r.stages[s];
    sr.busy_s = to_seconds(busy);
    double bytes = spec.stages[static_cast<std::size_t>(s)].resident_bytes;
    int in_flight = 0;
    sr.peak_bytes = bytes;
    r.memory[s].push_back({0, bytes});
    for (const auto& [time, order, delta, flight] : ev) {
      (void)order;
      bytes += delta;
      in_flight += flight;
      sr.max_in_flight = std::max(sr.max_in_flight, in_flight);
      if (delta != 0) r.memory[s].push_back({time, bytes});
      if (bytes > sr.peak_bytes) {
        sr.peak_bytes = bytes;
        sr.peak_time_s = to_seconds(time);
      }
    }
  }
  double busy = 0;
  for (const auto& sr : r.stages) busy += sr.busy_s;
  r.bubble_fraction = r.step > 0 ? 1.0 - busy / (pp * r.step_s) : 0.0;
  r.tasks = std::move(tasks);
  return r;
}

std::string task_name(const PipelineSpec& spec, const PipeTask& t) {
  std::string name = to_string(t.kind);
  const auto& units = spec.stages[static_cast<std::size_t>(t.stage)].units;
  if (t.unit >= 0) name += " " + (t.unit < static_cast<int>(units.size()) ? units[t.unit].name : "output");
  if (t.micro_batch >= 0) name += fmt::format(" mb{}", t.micro_batch);
  return name;
}

nlohmann::json pipeline_trace(const PipelineSpec& spec, const PipelineResult& r) {
  nlohmann::json events = nlohmann::json::array();
  const auto us = [](Tick t) { return static_cast<double>(t) / 1e6; };
  for (int s = 0; s < static_cast<int>(spec.stages.size()); ++s) {
    events.push_back({{"ph", "M"},
                      {"pid", s},
                      {"name", "process_name"},
                      {"args", {{"name", fmt::format("stage {}", s)}}}});
    for (int l = 0; l < kPipeLanes; ++l)
      events.push_back({{"ph", "M"},
                        {"pid", s},
                        {"tid", l},
                        {"name", "thread_name"},
                        {"args", {{"name", to_string(static_cast<PipeLane>(l))}}}});
  }
  for (const PipeTask& t : r.tasks) {
    if (t.duration == 0) continue;
    nlohmann::json args{{"kind", to_string(t.kind)}};
    if (t.micro_batch >= 0) args["micro_batch"] = t.micro_batch;
    events.push_back({{"ph", "X"},
                      {"pid", t.stage},
                      {"tid", static_cast<int>(t.lane)},
                      {"name", task_name(spec, t)},
                      {"ts", us(t.start)},
                      {"dur", us(t.duration)},
                      {"args", args}});
  }
  for (int s = 0; s < static_cast<int>(r.memory.size()); ++s)
    for (const auto& [time, bytes] : r.memory[s])
      events.push_back(
          {{"ph", "C"}, {"pid", s}, {"name", "memory"}, {"ts", us(time)}, {"args", {{"bytes", bytes}}}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

nlohmann::json pipeline_summary(const PipelineSpec& spec, const PipelineResult& r) {
  nlohmann::json stages = nlohmann::json::array();
  for (std::size_t s = 0; s < r.stages.size(); ++s)
    stages.push_back({{"stage", s},
                      {"busy_s", r.stages[s].busy_s},
                      {"peak_memory_bytes", r.stages[s].peak_bytes},
                      {"peak_time_s", r.stages[s].peak_time_s},
                      {"max_micro_batches_in_flight", r.stages[s].max_in_flight}});
  return {{"iteration_time_s", r.step_s},
          {"bubble_fraction", r.bubble_fraction},
          {"micro_batches", spec.micro_batches},
          {"schedule", costmodel::to_string(spec.schedule)},
          {"tasks", r.tasks.size()},
          {"stages", stages}};
}

}  // namespace osdp::sim
