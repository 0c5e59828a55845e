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
  int kind;  // kComputeDone or kCommDone
  int rank;
  int a;  // compute: version; comm: task
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};
constexpr int kComputeDone = 0;
constexpr int kCommDone = 1;

struct RankState {
  std::size_t compute_pos = 0, comm_pos = 0;
  int compute_task = kNone, comm_task = kNone;
  Tick compute_start = 0, comm_start = 0;
  double remaining = 0;  // work left of the running compute task, in ticks at full speed
  Tick last_update = 0;
  double factor = 1;  // ticks per tick of work now (interference while comm runs)
  int version = 0;
  std::array<double, kMemoryCategories> in_use{};
  double total = 0;
  std::size_t done = 0;
};

class Engine {
 public:
  Engine(const Schedule& s, const NetworkModel& net, const SimOptions& opt)
      : s_(s), net_(net), opt_(opt), world_(s.world_size) {
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
    for (std::size_t t = 0; t < s.tasks.size(); ++t)
      (s.tasks[t].stream == Stream::kCompute ? compute_order_ : comm_order_).push_back(static_cast<int>(t));
    dependents_ = s.dependents();
    std::vector<int> ndeps(s.tasks.size());
    for (std::size_t t = 0; t < s.tasks.size(); ++t) ndeps[t] = static_cast<int>(s.tasks[t].deps.size());
    deps_left_.resize(static_cast<std::size_t>(ranks_) * s.tasks.size());
    for (int r = 0; r < ranks_; ++r)
      std::copy(ndeps.begin(), ndeps.end(),
                deps_left_.begin() + static_cast<std::ptrdiff_t>(r * s.tasks.size()));
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
      for (int b : s_.resident) alloc(r, b, 0);
      try_start(r, 0);
    }
    auto last_report = wall;
    const double all_tasks = static_cast<double>(ranks_) * static_cast<double>(s_.tasks.size());
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
        if (e.a == state_[e.rank].version) finish_compute(e.rank, e.time);
      } else {
        finish_comm(e.rank, e.a, e.time);
      }
    }
    for (int r = 0; r < ranks_; ++r)
      if (state_[r].done != s_.tasks.size())
        throw Error(
            fmt::format("the schedule did not finish on rank {}: {} of {} tasks ran (a dependency cycle?)", r,
                        state_[r].done, s_.tasks.size()));
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
    result_.events += 2 * static_cast<std::int64_t>(s_.tasks.size()) * ranks_;
    result_.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
    return std::move(result_);
  }

 private:
  int& deps_left(int r, int t) { return deps_left_[static_cast<std::size_t>(r) * s_.tasks.size() + t]; }

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

  // Sets the compute slowdown of rank r from now on, rescheduling its running compute task.
  void set_factor(int r, double factor, Tick now) {
    RankState& st = state_[r];
    if (st.compute_task != kNone) {
      st.remaining -= static_cast<double>(now - st.last_update) / st.factor;
      if (st.remaining < 0) st.remaining = 0;
      st.last_update = now;
      st.factor = factor;
      push(now + static_cast<Tick>(std::ceil(st.remaining * factor)), kComputeDone, r, ++st.version);
    } else {
      st.factor = factor;
    }
  }

  void try_start(int r, Tick now) {
    RankState& st = state_[r];
    const bool serial = !opt_.overlap;
    if (st.compute_task == kNone && st.compute_pos < compute_order_.size() &&
        !(serial && st.comm_task != kNone)) {
      const int t = compute_order_[st.compute_pos];
      if (deps_left(r, t) == 0) {
        ++st.compute_pos;
        st.compute_task = t;
        st.compute_start = now;
        for (int b : s_.tasks[t].allocs) alloc(r, b, now);
        st.remaining = static_cast<double>(duration_[t]) * speed_[r];
        st.last_update = now;
        push(now + static_cast<Tick>(std::ceil(st.remaining * st.factor)), kComputeDone, r, ++st.version);
      }
    }
    if (st.comm_task == kNone && st.comm_pos < comm_order_.size() && !(serial && st.compute_task != kNone)) {
      const int t = comm_order_[st.comm_pos];
      if (deps_left(r, t) == 0) {
        ++st.comm_pos;
        st.comm_task = t;
        st.comm_start = now;
        for (int b : s_.tasks[t].allocs) alloc(r, b, now);
        if (opt_.overlap && opt_.interference != 1.0) set_factor(r, opt_.interference, now);
        enter_collective(r, t, now);
      }
    }
  }

  void enter_collective(int r, int t, Tick now) {
    auto& entry = entry_[t];
    if (entry.empty()) entry.assign(ranks_, 0);
    entry[r] = now;
    const costmodel::RingLevel level = s_.tasks[t].level;
    if (level == costmodel::RingLevel::kWorld) {
      if (++started_[t] == ranks_) {
        members_.resize(ranks_);
        for (int i = 0; i < ranks_; ++i) members_[i] = i;
        ring(t, world_);
        entry_[t].clear();
        entry_[t].shrink_to_fit();
      }
      return;
    }
    // A ring within r's node or across nodes at r's local index: it runs once its own members have
    // entered, whatever the other rings do.
    const int size = sub_ring(level, r, members_);
    auto& counts = sub_started_[t];
    if (counts.empty()) counts.assign(ranks_, 0);
    if (++counts[members_.front()] == static_cast<int>(members_.size())) ring(t, size);
    if (++started_[t] == ranks_) {
      entry_[t].clear();
      entry_[t].shrink_to_fit();
      counts.clear();
      counts.shrink_to_fit();
    }
  }

  // The simulated ranks of rank r's ring at `level`, in ring order, into `out`; returns the ring's
  // size in real ranks. Ranks are numbered node by node (G per node, M nodes). Symmetric mode runs
  // one period of ranks (at most a node): a node's ring closes over the simulated ranks of the node,
  // and an inter-node ring is represented by its one simulated rank (its other members, at the same
  // local index on other nodes, behave alike).
  int sub_ring(costmodel::RingLevel level, int r, std::vector<int>& out) const {
    const int G = s_.per_node, M = s_.nodes;
    out.clear();
    if (level == costmodel::RingLevel::kIntra) {
      const int block = std::min(G, ranks_);
      const int first = r / block * block;
      for (int i = 0; i < block; ++i) out.push_back(first + i);
      return G;
    }
    if (ranks_ == world_) {
      for (int k = 0; k < M; ++k) out.push_back(r % G + k * G);
    } else {
      out.push_back(r);
    }
    return M;
  }

  // The ring's step recurrence over `members_` (simulated ranks, in ring order) once they have all
  // entered, for a ring of `size` real ranks; schedules each member's completion.
  void ring(int t, int size) {
    const Task& task = s_.tasks[t];
    const std::vector<Tick>& entry = entry_[t];
    const int R = static_cast<int>(members_.size());
    const int steps = costmodel::ring_steps(collective_of(task.kind), size);
    const bool world = task.level == costmodel::RingLevel::kWorld;
    step_.resize(R);
    entered_.resize(R);
    for (int i = 0; i < R; ++i) {
      const int r = members_[i];
      step_[i] = world ? net_.step_ticks(task.kind, task.bytes, world_, r)
                       : net_.level_step_ticks(task.kind, task.bytes, size, task.level);
      entered_[i] = entry[r];
    }
    const Tick* s = entered_.data();
    sent_.resize(R);
    if (steps == 0) {
      for (int i = 0; i < R; ++i) push(s[i], kCommDone, members_[i], t);
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
      push(std::max(sent_[r], sent_[r > 0 ? r - 1 : R - 1]), kCommDone, members_[r], t);
    result_.events += static_cast<std::int64_t>(steps) * R;
  }

  void complete(int r, int t, Tick start, Tick now) {
    RankState& st = state_[r];
    for (int b : s_.tasks[t].frees) release(r, b, now);
    ++st.done;
    ++tasks_done_;
    for (int d : dependents_[t]) --deps_left(r, d);
    RankStats& rs = stats_[r];
    (s_.tasks[t].stream == Stream::kCompute ? rs.compute_busy : rs.comm_busy) += now - start;
    rs.finish = std::max(rs.finish, now);
    if (opt_.record_tasks) result_.tasks.push_back({r, t, start, now});
  }

  void finish_compute(int r, Tick now) {
    RankState& st = state_[r];
    const int t = st.compute_task;
    st.compute_task = kNone;
    complete(r, t, st.compute_start, now);
    try_start(r, now);
  }

  void finish_comm(int r, int t, Tick now) {
    RankState& st = state_[r];
    st.comm_task = kNone;
    if (opt_.overlap && opt_.interference != 1.0) set_factor(r, 1.0, now);
    complete(r, t, st.comm_start, now);
    try_start(r, now);
  }

  const Schedule& s_;
  const NetworkModel& net_;
  const SimOptions& opt_;
  int world_;
  int ranks_;
  std::vector<double> speed_;
  std::vector<int> compute_order_, comm_order_;
  std::vector<std::vector<int>> dependents_;
  std::vector<int> deps_left_;
  std::vector<Tick> duration_;
  std::vector<int> started_;
  std::vector<std::vector<Tick>> entry_;
  std::vector<std::vector<int>>
      sub_started_;  // per task on a node or inter-node ring: entered, per ring (by first member)
  std::vector<int> members_;
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
