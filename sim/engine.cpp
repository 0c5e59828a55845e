#include "sim/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <queue>

#include <fmt/format.h>

#include "costmodel/error.hpp"

namespace osdp::sim {
namespace {

constexpr int kNone = -1;

struct Event {
  Tick time;
  std::uint64_t seq;
  int kind;  // kComputeDone or kTaskDone
  int rank;
  int a;  // compute: version; else: task
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};
constexpr int kComputeDone = 0;
constexpr int kTaskDone = 1;

bool is_kernel(TaskKind k) {
  return k == TaskKind::kForward || k == TaskKind::kRecompute || k == TaskKind::kBackward ||
         k == TaskKind::kOptimizer;
}

struct StreamState {
  std::size_t pos = 0;
  int task = kNone;
  Tick start = 0;
};

struct RankState {
  std::array<StreamState, kStreams> streams;
  bool computing = false;  // the compute stream runs a kernel (which interference slows)
  double remaining = 0;    // work left of the running kernel, in ticks at full speed
  Tick last_update = 0;
  double factor = 1;  // ticks per tick of work now (interference while comm runs)
  int version = 0;
  std::array<double, kMemoryCategories> in_use{};
  double total = 0;
  std::size_t done = 0;
  int in_flight = 0;  // micro-batches between their first forward and last backward
};

class Engine {
 public:
  Engine(const Schedule& s, const NetworkModel& net, const SimOptions& opt)
      : s_(s), net_(net), opt_(opt), world_(s.world_size), pp_(std::max(1, s.pp)) {
    stage_size_ = world_ / pp_;
    if (s.stage_begin.empty() ? pp_ != 1
                              : static_cast<int>(s.stage_begin.size()) != pp_ + 1 ||
                                    s.stage_begin.back() != static_cast<int>(s.tasks.size()))
      throw Error(fmt::format("the schedule's {} stages do not cover its {} tasks", pp_, s.tasks.size()));
    if (opt.symmetric) check_symmetric();
    ranks_ = opt.symmetric ? net.period(world_) : world_;
    speed_.assign(ranks_, 1.0);
    if (!opt.speed.empty()) {
      if (static_cast<int>(opt.speed.size()) != world_)
        throw UsageError(fmt::format("{} speed factors for {} ranks", opt.speed.size(), world_));
      for (int r = 0; r < ranks_; ++r) speed_[r] = opt.speed[r];
      if (opt.symmetric)
        for (double f : opt.speed)
          if (f != opt.speed[0]) throw UsageError("symmetric simulation needs every rank at the same speed");
    }
    order_.resize(pp_);
    for (std::size_t t = 0; t < s.tasks.size(); ++t) {
      const Task& task = s.tasks[t];
      order_[task.stage][static_cast<int>(task.stream)].push_back(static_cast<int>(t));
    }
    dependents_ = s.dependents();
    rank_offset_.resize(ranks_ + 1, 0);
    for (int r = 0; r < ranks_; ++r) rank_offset_[r + 1] = rank_offset_[r] + stage_count(stage_of(r));
    deps_left_.resize(rank_offset_[ranks_]);
    for (int r = 0; r < ranks_; ++r) {
      const int st = stage_of(r);
      for (int t = s.first_task(st); t < s.end_task(st); ++t)
        deps_left(r, t) = static_cast<int>(s.tasks[t].deps.size());
    }
    // A micro-batch enters at its stage's first forward and leaves at its last backward.
    flight_.assign(s.tasks.size(), 0);
    for (int st = 0; st < pp_; ++st) {
      std::vector<int> first(std::max(1, s.micro_batches), -1), last(std::max(1, s.micro_batches), -1);
      for (int t = s.first_task(st); t < s.end_task(st); ++t) {
        const Task& task = s.tasks[t];
        if (task.micro_batch < 0 || task.micro_batch >= static_cast<int>(first.size())) continue;
        if (task.kind == TaskKind::kForward && first[task.micro_batch] < 0) first[task.micro_batch] = t;
        if (task.kind == TaskKind::kBackward) last[task.micro_batch] = t;
      }
      for (std::size_t mb = 0; mb < first.size(); ++mb)
        if (first[mb] >= 0 && last[mb] >= 0) {
          flight_[first[mb]] += 1;
          flight_[last[mb]] -= 1;
        }
    }
    duration_.resize(s.tasks.size());
    for (std::size_t t = 0; t < s.tasks.size(); ++t) duration_[t] = to_ticks(s.tasks[t].duration_s);
    started_.assign(s.tasks.size(), 0);
    entry_.resize(s.tasks.size());
    sub_started_.resize(s.tasks.size());
    state_.resize(ranks_);
    stats_.resize(ranks_);
  }

  SimResult run() {
    const auto wall = std::chrono::steady_clock::now();
    for (int r = 0; r < ranks_; ++r) {
      for (int b : s_.resident)
        if (s_.buffers[b].stage == stage_of(r)) alloc(r, b, 0);
      try_start(r, 0);
    }
    auto last_report = wall;
    const double all_tasks = static_cast<double>(rank_offset_[ranks_]);
    while (!queue_.empty()) {
      const Event e = queue_.top();
      queue_.pop();
      ++result_.queue_events;
      if (opt_.progress && (result_.queue_events & 0x3fff) == 0) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last_report >= std::chrono::seconds(1)) {
          last_report = now;
          opt_.progress(all_tasks > 0 ? static_cast<double>(tasks_done_) / all_tasks : 1.0,
                        std::chrono::duration<double>(now - wall).count());
        }
      }
      if (e.kind == kComputeDone) {
        if (e.a == state_[e.rank].version) finish_task(e.rank, s_.tasks.size(), e.time);
      } else {
        finish_task(e.rank, static_cast<std::size_t>(e.a), e.time);
      }
    }
    for (int r = 0; r < ranks_; ++r)
      if (state_[r].done != static_cast<std::size_t>(stage_count(stage_of(r))))
        throw Error(
            fmt::format("the schedule did not finish on rank {}: {} of {} tasks ran (a dependency cycle?)", r,
                        state_[r].done, stage_count(stage_of(r))));
    result_.world_size = world_;
    result_.ranks_simulated = ranks_;
    result_.reserve_bytes = s_.reserve_bytes;
    for (int r = 0; r < ranks_; ++r) {
      if (stats_[r].finish > result_.iteration) {
        result_.iteration = stats_[r].finish;
        result_.critical_rank = r;
      }
    }
    result_.ranks = std::move(stats_);
    result_.events += 2 * static_cast<std::int64_t>(rank_offset_[ranks_]);
    result_.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
    return std::move(result_);
  }

 private:
  // Symmetric mode takes one stage whose rings are the world's, a node's or across nodes.
  void check_symmetric() const {
    if (pp_ > 1)
      throw UsageError("symmetric simulation takes plans of one pipeline stage: simulate every rank");
    const int g = s_.per_node, m = s_.nodes;
    for (const Task& t : s_.tasks) {
      if (!is_collective(t.kind)) continue;
      const Group grp = t.group.resolved(world_);
      const bool ok = grp.size == world_ || (grp == Group{g, 1}) || (grp == Group{m, g});
      if (!ok)
        throw UsageError(
            fmt::format("symmetric simulation takes rings over every rank, a node or one rank per "
                        "node; task {} runs on {} ranks {} apart: simulate every rank",
                        t.name, grp.size, grp.stride));
    }
  }

  int stage_of(int r) const { return r / stage_size_; }
  int stage_count(int st) const { return s_.end_task(st) - s_.first_task(st); }
  int& deps_left(int r, int t) {
    return deps_left_[static_cast<std::size_t>(rank_offset_[r] + t - s_.first_task(stage_of(r)))];
  }

  void push(Tick time, int kind, int rank, int a) { queue_.push({time, seq_++, kind, rank, a}); }

  void alloc(int r, int b, Tick now) { memory(r, b, s_.buffers[b].bytes, now); }
  void release(int r, int b, Tick now) { memory(r, b, -s_.buffers[b].bytes, now); }
  void memory(int r, int b, double delta, Tick now) {
    RankState& st = state_[r];
    st.in_use[static_cast<int>(s_.buffers[b].category())] += delta;
    st.total += delta;
    const double with_reserve = st.total + s_.reserve_bytes;
    RankStats& rs = stats_[r];
    if (with_reserve > rs.peak_bytes) {
      rs.peak_bytes = with_reserve;
      rs.peak_time = now;
      rs.peak_breakdown = st.in_use;
    }
    if (r == opt_.memory_rank || opt_.memory_rank == SimOptions::kAllRanks)
      result_.memory.push_back({now, r, b, delta, with_reserve});
  }

  // Sets the compute slowdown of rank r from now on, rescheduling its running kernel.
  void set_factor(int r, double factor, Tick now) {
    RankState& st = state_[r];
    if (st.computing) {
      st.remaining -= static_cast<double>(now - st.last_update) / st.factor;
      if (st.remaining < 0) st.remaining = 0;
      st.last_update = now;
      st.factor = factor;
      push(now + static_cast<Tick>(std::ceil(st.remaining * factor)), kComputeDone, r, ++st.version);
    } else {
      st.factor = factor;
    }
  }

  bool busy(const RankState& st, Stream s) const { return st.streams[static_cast<int>(s)].task != kNone; }

  void try_start(int r, Tick now) {
    RankState& st = state_[r];
    const bool serial = !opt_.overlap;
    const int stage = stage_of(r);
    for (int k = 0; k < kStreams; ++k) {
      StreamState& ss = st.streams[k];
      if (ss.task != kNone) continue;
      const auto& order = order_[stage][k];
      if (ss.pos >= order.size()) continue;
      const int t = order[ss.pos];
      if (deps_left(r, t) != 0) continue;
      const Stream stream = static_cast<Stream>(k);
      if (serial && ((stream == Stream::kCompute && busy(st, Stream::kComm)) ||
                     (stream == Stream::kComm && busy(st, Stream::kCompute))))
        continue;
      ++ss.pos;
      ss.task = t;
      ss.start = now;
      const Task& task = s_.tasks[t];
      for (int b : task.allocs) alloc(r, b, now);
      if (flight_[t] > 0) {
        st.in_flight += flight_[t];
        stats_[r].max_in_flight = std::max(stats_[r].max_in_flight, st.in_flight);
      }
      if (is_kernel(task.kind)) {
        st.computing = true;
        st.remaining = static_cast<double>(duration_[t]) * speed_[r];
        st.last_update = now;
        push(now + static_cast<Tick>(std::ceil(st.remaining * st.factor)), kComputeDone, r, ++st.version);
      } else if (is_collective(task.kind)) {
        if (stream == Stream::kComm && opt_.overlap && opt_.interference != 1.0)
          set_factor(r, opt_.interference, now);
        enter_collective(r, t, now);
      } else if (task.kind == TaskKind::kSend) {
        push(now + net_.p2p_ticks(task.bytes, r, r + task.peer * stage_size_), kTaskDone, r, t);
      } else {  // a receive: its send has ended
        push(now, kTaskDone, r, t);
      }
    }
  }

  // The collective's key: a task, or the first of two twins (one collective two stages run).
  static int key_of(int t, const Task& task) { return task.twin >= 0 ? std::min(t, task.twin) : t; }

  void enter_collective(int r, int t, Tick now) {
    const Task& task = s_.tasks[t];
    const int key = key_of(t, task);
    auto& entry = entry_[key];
    if (entry.empty()) entry.assign(ranks_, 0);
    entry[r] = now;
    const Group g = task.group.resolved(world_);
    auto& counts = sub_started_[key];
    if (counts.empty()) counts.assign(ranks_, 0);
    const auto [first, size] = simulated_ring(g, r);
    if (++counts[first] == size) {
      members(g, r, members_);
      ring(key, g);
    }
    const int expected = stage_size_simulated() * (task.twin >= 0 ? 2 : 1);
    if (++started_[key] == expected) {
      entry.clear();
      entry.shrink_to_fit();
      counts.clear();
      counts.shrink_to_fit();
    }
  }
  int stage_size_simulated() const { return std::min(ranks_, stage_size_); }

  // The first simulated rank of rank r's ring of group g and the ring's count of simulated ranks (as
  // members() lists them, without listing them: every rank's entry asks).
  std::pair<int, int> simulated_ring(const Group& g, int r) const {
    if (ranks_ == world_) return {g.first(r), g.size};
    if (g.stride == 1) {
      const int block = std::min(g.size, ranks_);
      return {r / block * block, block};
    }
    return {r, 1};
  }

  // The simulated ranks of rank r's ring of group g, in ring order, into `out`. Symmetric mode runs
  // one period of ranks (at most a node): the world's ring and a node's ring close over the simulated
  // ranks of the ring, and a ring across nodes is represented by its one simulated rank (its other
  // members, at the same local index on other nodes, behave alike).
  void members(const Group& g, int r, std::vector<int>& out) const {
    out.clear();
    if (ranks_ == world_) {
      for (int i = 0; i < g.size; ++i) out.push_back(g.member(r, i));
      return;
    }
    if (g.stride == 1) {
      const int block = std::min(g.size, ranks_);
      const int first = r / block * block;
      for (int i = 0; i < block; ++i) out.push_back(first + i);
      return;
    }
    out.push_back(r);
  }

  // An all-to-all's pairwise exchange over `members_` once they have all entered, for a group of
  // g.size real ranks (costmodel/collective.hpp): in step k = 1 .. g.size - 1 member i sends its chunk
  // to member i + k and receives member i - k's (indices modulo the members: in symmetric mode the
  // simulated ranks stand for the others, as in a ring), the send taking one step on the link between
  // rank i and its real partner g.index + k. A send starts once both of its pair have ended the step
  // before (the receiver has posted its buffer); a member's step ends once its send and its receive
  // have. Equal entries and links give (g.size - 1) steps, the closed form.
  void pairwise(int key, const Group& g) {
    const Task& task = s_.tasks[key];
    const std::vector<Tick>& entry = entry_[key];
    const int R = static_cast<int>(members_.size());
    const int steps = costmodel::ring_steps(collective_of(task.kind), g.size);
    entered_.resize(R);
    sent_.resize(R);
    for (int i = 0; i < R; ++i) entered_[i] = entry[members_[i]];
    Tick* done = entered_.data();
    Tick* sent = sent_.data();
    for (int k = 1; k <= steps; ++k) {
      for (int i = 0; i < R; ++i) {
        const int r = members_[i];
        const int to = g.member(r, (g.index(r) + k) % g.size);
        sent[i] = std::max(done[i], done[(i + k) % R]) +
                  net_.ring_step_ticks(task.kind, task.bytes, g.size, r, to, task.level, task.calibrated);
      }
      for (int i = 0; i < R; ++i) done[i] = std::max(sent[i], sent[((i - k) % R + R) % R]);
    }
    for (int i = 0; i < R; ++i) {
      const int r = members_[i];
      push(done[i], kTaskDone, r, stage_of(r) == task.stage ? key : task.twin);
    }
    result_.events += static_cast<std::int64_t>(steps) * R;
  }

  // The ring's step recurrence over `members_` (simulated ranks, in ring order) once they have all
  // entered, for a ring of g.size real ranks; schedules each member's completion.
  void ring(int key, const Group& g) {
    const Task& task = s_.tasks[key];
    if (costmodel::describe(collective_of(task.kind)).pairwise) return pairwise(key, g);
    const std::vector<Tick>& entry = entry_[key];
    const int R = static_cast<int>(members_.size());
    const int steps = costmodel::ring_steps(collective_of(task.kind), g.size);
    step_.resize(R);
    entered_.resize(R);
    for (int i = 0; i < R; ++i) {
      const int r = members_[i];
      const int next = g.member(r, (g.index(r) + 1) % g.size);
      step_[i] = net_.ring_step_ticks(task.kind, task.bytes, g.size, r, next, task.level, task.calibrated);
      if (task.block_s > 0)  // ring attention: the block computed while the pass is in flight
        step_[i] = std::max(step_[i], static_cast<Tick>(std::llround(to_ticks(task.block_s) * speed_[r])));
      entered_[i] = entry[r];
    }
    const Tick* s = entered_.data();
    sent_.resize(R);
    auto task_of = [&](int member) { return stage_of(member) == task.stage ? key : task.twin; };
    if (steps == 0) {
      for (int i = 0; i < R; ++i) push(s[i], kTaskDone, members_[i], task_of(members_[i]));
      return;
    }
    // Step 0: a rank sends once it and its successor have entered.
    for (int r = 0; r < R; ++r) sent_[r] = std::max(s[r], s[r + 1 < R ? r + 1 : 0]) + step_[r];
    // Step k: once the rank has sent step k - 1 and received step k - 1 from its predecessor (the
    // predecessor's send of step k - 1, carried along the ring in one pass).
    Tick* sent = sent_.data();
    const Tick* step = step_.data();
    for (int k = 1; k < steps; ++k) {
      Tick carry = sent[R - 1];
      for (int r = 0; r < R; ++r) {
        const Tick before = sent[r];
        sent[r] = std::max(before, carry) + step[r];
        carry = before;
      }
    }
    for (int r = 0; r < R; ++r)
      push(std::max(sent_[r], sent_[r > 0 ? r - 1 : R - 1]), kTaskDone, members_[r], task_of(members_[r]));
    result_.events += static_cast<std::int64_t>(steps) * R;
  }

  // Task t of rank r has ended (t = the task count: the running kernel of its compute stream).
  void finish_task(int r, std::size_t t, Tick now) {
    RankState& st = state_[r];
    if (t == s_.tasks.size()) {
      st.computing = false;
      t = static_cast<std::size_t>(st.streams[static_cast<int>(Stream::kCompute)].task);
    }
    const Task& task = s_.tasks[t];
    StreamState& ss = st.streams[static_cast<int>(task.stream)];
    const Tick start = ss.start;
    ss.task = kNone;
    if (task.stream == Stream::kComm && is_collective(task.kind) && opt_.overlap && opt_.interference != 1.0)
      set_factor(r, 1.0, now);
    complete(r, static_cast<int>(t), start, now);
    try_start(r, now);
    for (const int other : woken_) try_start(other, now);
    woken_.clear();
  }

  void complete(int r, int t, Tick start, Tick now) {
    RankState& st = state_[r];
    const Task& task = s_.tasks[t];
    for (int b : task.frees) release(r, b, now);
    if (flight_[t] < 0) st.in_flight += flight_[t];
    ++st.done;
    ++tasks_done_;
    for (int d : dependents_[t]) {
      const int other_stage = s_.tasks[d].stage;
      if (other_stage == task.stage) {
        --deps_left(r, d);
      } else {  // a receive of the other stage, on the rank at the same local index
        const int peer = r + (other_stage - task.stage) * stage_size_;
        --deps_left(peer, d);
        woken_.push_back(peer);
      }
    }
    RankStats& rs = stats_[r];
    (task.stream == Stream::kCompute ? rs.compute_busy
     : task.stream == Stream::kComm  ? rs.comm_busy
                                     : rs.send_busy) += now - start;
    rs.finish = std::max(rs.finish, now);
    if (opt_.record_tasks) result_.tasks.push_back({r, t, start, now});
  }

  const Schedule& s_;
  const NetworkModel& net_;
  const SimOptions& opt_;
  int world_, pp_, stage_size_ = 1;
  int ranks_ = 1;
  std::vector<double> speed_;
  std::vector<std::array<std::vector<int>, kStreams>> order_;  // per stage and stream: its tasks
  std::vector<std::vector<int>> dependents_;
  std::vector<int> rank_offset_;  // where each rank's counters start in deps_left_
  std::vector<int> deps_left_;
  std::vector<Tick> duration_;
  std::vector<int> flight_;   // per task: +1 a micro-batch's first forward, -1 its last backward
  std::vector<int> started_;  // per collective key: ranks entered
  std::vector<std::vector<Tick>> entry_;
  std::vector<std::vector<int>> sub_started_;  // per collective key: entered, per ring (by first member)
  std::vector<int> members_, woken_;
  std::vector<Tick> step_, sent_, entered_;
  std::vector<RankState> state_;
  std::uint64_t tasks_done_ = 0;  // over all ranks, for progress
  std::vector<RankStats> stats_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  std::uint64_t seq_ = 0;
  SimResult result_;
};

}  // namespace

const RankStats& SimResult::peak_rank() const {
  return *std::max_element(ranks.begin(), ranks.end(), [](const RankStats& a, const RankStats& b) {
    return a.peak_bytes < b.peak_bytes;
  });
}

SimResult simulate(const Schedule& schedule, const NetworkModel& network, const SimOptions& options) {
  return Engine(schedule, network, options).run();
}

}  // namespace osdp::sim
