// Running the executor's step (executor.hpp; executor_setup.cpp sets it up): the rank's tasks in issue
// order on their streams, the collectives and transfers, the operators' arithmetic, the optimizer and
// the logical views.
#include "validate/executor/executor.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/executor/internal/executor_task.hpp"

namespace osdp::validate {

using costmodel::Operator;
using costmodel::OperatorKind;
using sim::BufferRole;
using sim::Payload;
using sim::TaskKind;
using I = std::int64_t;

namespace {

bool residual(const Operator& op) {
  return op.kind == OperatorKind::kAttention || op.kind == OperatorKind::kMlp;
}

}  // namespace

float* Executor::buffer(int id) const {
  return id < 0 ? nullptr : mem_[static_cast<std::size_t>(id)];
}

MathShape Executor::shape(int t) const {
  MathShape m;
  m.batch = I{sched_.batch} * t;
  m.seq = w_.seq / plan_.cp;
  m.context = plan_.cp;
  m.chunk = (local_ / t) % plan_.cp;  // the rank's place in its CP group {cp, t}
  m.vocab = plan_.model.vocab;
  m.math = opt_.gemm_math;
  return m;
}

StepStats Executor::step() {
  ++steps_;
  Stream& cs = dev_.compute_stream();
  Stream& ms = dev_.comm_stream();
  cs.enqueue([this] { dev_.fill(dev_.compute_stream(), loss_, 1, 0.0f); });
  cs.synchronize();
  comm_.barrier("the start of a step");
  dev_.reset_peak();
  const double t0 = dev_.now_s();
  // Per-task times come from events on the tasks' streams (on a GPU the host only launches).
  const bool timed = opt_.record_tasks;
  const int first = first_task();
  const std::size_t count = launches_.size();
  const EventPtr start = timed ? cs.record() : nullptr;
  std::vector<EventPtr> done(count), began(timed ? count : 0);
  for (const Launch& l : launches_) {
    const auto t = static_cast<std::size_t>(l.task - first);
    Stream& st = l.stream == 1 ? ms : cs;
    for (const int d : l.waits) st.wait(done[static_cast<std::size_t>(d - first)]);
    if (timed) began[t] = st.record();
    st.enqueue([this, task = l.task] { run_task(task); });
    if (l.record || timed) done[t] = st.record();
  }
  cs.enqueue([this] {
    comm_.flush_sends(dev_.compute_stream(), "the end of a step");
    if (context_ != nullptr) context_->flush_sends(dev_.compute_stream(), "the end of a step (the CP ring)");
  });
  cs.synchronize();
  ms.synchronize();
  StepStats r;
  r.seconds = dev_.now_s() - t0;
  const MemoryStats m = dev_.memory();
  r.peak_bytes = m.peak_bytes;
  r.baseline_bytes = baseline_bytes_;
  r.padding_bytes = padding_bytes_;
  r.device_free_bytes = m.device_free;
  r.device_total_bytes = m.device_total;
  if (timed) {
    r.tasks.resize(count);
    for (std::size_t t = 0; t < count; ++t) {
      done[t]->synchronize();
      r.tasks[t] = TaskTiming{began[t]->seconds_since(*start), done[t]->seconds_since(*start)};
    }
  }
  float loss = 0;
  cs.enqueue([this, &loss] { dev_.download(dev_.compute_stream(), loss_, &loss, 1); });
  cs.synchronize();
  r.loss = comm_.sum_over_ranks(static_cast<double>(loss));
  return r;
}

void Executor::run_task(int t) {
  const sim::Task& task = sched_.tasks[static_cast<std::size_t>(t)];
  for (const int b : task.allocs) {
    mem_[static_cast<std::size_t>(b)] = dev_.allocate(alloc_bytes_[static_cast<std::size_t>(b)],
                                                      sched_.buffers[static_cast<std::size_t>(b)].name);
    // A tied gradient collects the head's and the lookup's contributions: it starts at zero.
    if (sched_.buffers[static_cast<std::size_t>(b)].role == BufferRole::kTiedGradient)
      dev_.fill(dev_.compute_stream(), mem_[static_cast<std::size_t>(b)],
                alloc_bytes_[static_cast<std::size_t>(b)] / sizeof(float), 0.0f);
  }
  if (task.kind == TaskKind::kOptimizer && opt_.emulate_compute)
    wait_emulated(dev_.now_s(), task.duration_s);
  else if (task.kind == TaskKind::kOptimizer)
    run_optimizer();
  else if (task.kind == TaskKind::kSend || task.kind == TaskKind::kRecv)
    run_transfer(t);
  else if (sim::is_collective(task.kind))
    run_collective(t);
  else
    run_compute(t);
  for (const int b : task.frees) {
    dev_.deallocate(mem_[static_cast<std::size_t>(b)]);
    mem_[static_cast<std::size_t>(b)] = nullptr;
  }
}

// Carried rows of `from` samples per rank's group down to the rank's own part at degree `to` (each
// of the from / to groups of degree `to` within the one of degree `from` holds its b0 to samples).
void Executor::take_own(int carry, int from, int to, I width) {
  if (from == to) return;
  if (from < to)
    throw Error(fmt::format(
        "executor: activations at TP degree {} where {} is needed: no re-layout gathered them", from, to));
  Stream& s = dev_.compute_stream();
  const I part = shape(to).rows() * width;
  const I own = (local_ % from) / to;
  float*& x = carry_[static_cast<std::size_t>(carry)];
  dev_.copy(s, x + own * part, carry_[3], static_cast<std::size_t>(part));
  std::swap(x, carry_[3]);
}

void Executor::run_transfer(int t) {
  const sim::Task& task = sched_.tasks[static_cast<std::size_t>(t)];
  Stream& s = dev_.compute_stream();
  const bool activations = task.payload == Payload::kActivations;
  const int carry = activations ? 0 : 1;
  int& degree = activations ? forward_t_ : backward_t_;
  const I rows = shape(1).rows();
  const I width = static_cast<I>(task.bytes / sizeof(float)) / rows;
  const int peer = comm_.rank() + task.peer * per_stage_;
  const int tag = 2 * task.micro_batch + (activations ? 0 : 1);
  const std::string what =
      fmt::format("{} micro-batch {}'s {}", task.kind == TaskKind::kSend ? "sending" : "receiving",
                  task.micro_batch, activations ? "activations" : "gradient");
  if (task.kind == TaskKind::kSend) {
    take_own(carry, degree, 1, width);
    degree = 1;
    comm_.send(s, carry_[static_cast<std::size_t>(carry)], static_cast<std::size_t>(rows * width), peer, tag,
               what);
  } else {
    comm_.recv(s, carry_[static_cast<std::size_t>(carry)], static_cast<std::size_t>(rows * width), peer, tag,
               what);
    degree = 1;
  }
}

void Executor::run_collective(int t) {
  const sim::Task& task = sched_.tasks[static_cast<std::size_t>(t)];
  const TaskPlan& p = tasks_[static_cast<std::size_t>(t - first_task())];
  const std::size_t u = static_cast<std::size_t>(task.op);
  const OpRun& o = ops_[u];
  const Operator& op = w_.operators[u];
  const bool compute_stream = task.stream == sim::Stream::kCompute;
  Stream& s = compute_stream ? dev_.compute_stream() : dev_.comm_stream();
  const std::string what =
      fmt::format("{} of {} slice {} (task {})", costmodel::name_of(sim::collective_of(task.kind)), op.name,
                  task.slice, task.name);
  if (task.payload == Payload::kActivations || task.payload == Payload::kActivationGradients) {
    const bool forward = task.payload == Payload::kActivations;
    float*& x = carry_[forward ? 0 : 1];
    int& degree = forward ? forward_t_ : backward_t_;
    // Context parallelism's exchanges run inside the attention's tasks, where their data is (ring
    // attention's passes; numerics.hpp): the schedule's tasks that price them move nothing more. (CP
    // plans have one TP degree, so no re-layout is among them.) Likewise the expert all-to-alls: the
    // MoE operator's tasks dispatch and combine. With emulated compute they are these tasks.
    const bool exchange =
        task.kind == TaskKind::kAllToAll ||
        (plan_.cp > 1 && (task.kind == TaskKind::kAllGather || task.kind == TaskKind::kReduceScatter));
    if (exchange && opt_.emulate_compute) return run_emulated_exchange(task, s, what);
    if (exchange) return;
    Communicator& g = group(task.group);
    if (task.kind == TaskKind::kAllReduce) {  // the TP group's partial sums (whole samples at its degree)
      const I width = forward ? I{op.hidden} : width_in(op, task.site == 1 ? 1 : 0);
      g.all_reduce(s, x, static_cast<std::size_t>(shape(o.t).rows() * width), what);
      return;
    }
    // A re-layout: from degree lo to hi = lo x the group's ranks, each its lo group's samples.
    const int lo = task.group.stride, hi = lo * task.group.size;
    const I width = static_cast<I>(task.bytes / sizeof(float)) / shape(hi).rows();
    take_own(forward ? 0 : 1, degree, lo, width);
    g.all_gather(s, x, carry_[3], static_cast<std::size_t>(shape(lo).rows() * width), what);
    std::swap(x, carry_[3]);
    degree = hi;
    return;
  }
  const OperatorLayout& L = o.layout;
  const I c = o.c();
  float* st = buffer(states_[u]);
  // What every EP rank holds alike (the layout's shared prefix), reduced over the expert-data group:
  // all-reduced over the EP group, the rank's shard of it (REPLICATE: all of it).
  if (task.expert_shared) {
    const I prefix = shared_prefix(op, L, o.first_slice);
    const I from = plan_.choices[u].replicate ? 0 : I{o.shards->shard_of(o.sharding)} * L.shard_elems;
    const I to = std::min(prefix, from + L.shard_elems);
    if (to > from) group(task.group).all_reduce(s, st + c, static_cast<std::size_t>(to - from), what);
    return;
  }
  // REPLICATE all-reduces its whole gradient; a sharded slice's collectives move its shards.
  if (task.kind == TaskKind::kAllReduce && task.level == costmodel::RingLevel::kWorld) {
    o.dp->all_reduce(s, st + c, static_cast<std::size_t>(c), what);
    return;
  }
  const int j = task.slice;
  float* const grad = p.grad >= 0 ? buffer(p.grad) + p.grad_offset : nullptr;
  o.shards->collective(s, task.kind, task.level, o.sharding, st + j * L.shard_elems, buffer(p.weights), grad,
                       st + c + j * L.shard_elems, static_cast<std::size_t>(L.shard_elems), what);
}

void Executor::wait_emulated(double start_s, double seconds) const {
  // Absolute deadlines on the steady clock, with this thread's timer slack at 1 ns (Linux's default
  // 50 us would add to every task): lateness is never hidden, nothing spins.
  static thread_local const bool slack = prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) == 0;
  (void)slack;
  const double left = start_s + seconds - dev_.now_s();
  if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
}

void Executor::run_emulated_exchange(const sim::Task& task, Stream& s, const std::string& what) {
  const int n = task.group.size;
  Communicator& g =
      task.kind == TaskKind::kAllToAll && plan_.choices[static_cast<std::size_t>(task.op)].ep > 1
          ? *experts_.at(n)
          : *context_;
  // Per rank: an all-gather's or reduce-scatter's full buffer of `bytes` (a shard of bytes / n), an
  // all-to-all's `bytes` sent (bytes / n to each rank) and as many received.
  const auto part = static_cast<std::size_t>(task.bytes / sizeof(float) / n);
  if (task.block_s > 0) {
    // Ring attention's passes: at each of the n - 1 steps the rank sends its block on to the next rank
    // and receives the next from the previous one while it computes a block of the core (emulated:
    // the step takes at least block_s from its start).
    const int me = g.rank();
    for (int k = 1; k < n; ++k) {
      const double start = dev_.now_s();
      g.send(s, emulated_ + part * static_cast<std::size_t>((me - k + 1 + n) % n), part, (me + 1) % n, 0,
             what);
      g.recv(s, emulated_ + part * static_cast<std::size_t>((me - k + n) % n), part, (me - 1 + n) % n, 0,
             what);
      wait_emulated(start, task.block_s);
    }
    return;
  }
  switch (task.kind) {
    case TaskKind::kAllGather:
      g.all_gather(s, emulated_, emulated_ + part * n, part, what);
      break;
    case TaskKind::kReduceScatter:
      g.reduce_scatter(s, emulated_, emulated_ + part * n, part, what);
      break;
    default: {
      const std::vector<std::size_t> counts(static_cast<std::size_t>(n), part);
      g.all_to_all(s, emulated_, counts, emulated_ + part * n, counts, what);
    }
  }
}

void Executor::run_compute(int t) {
  const double start = dev_.now_s();
  const sim::Task& task = sched_.tasks[static_cast<std::size_t>(t)];
  const TaskPlan& p = tasks_[static_cast<std::size_t>(t - first_task())];
  const std::size_t u = static_cast<std::size_t>(task.op);
  const Operator& op = w_.operators[u];
  const OpRun& o = ops_[u];
  const OperatorLayout& L = o.layout;
  const bool replicate = plan_.choices[u].replicate;
  const MathShape shape_t = shape(o.t);
  Device& d = dev_;
  Stream& s = dev_.compute_stream();
  const I rows = shape_t.rows(), h = op.hidden;
  const bool head = op.kind == OperatorKind::kHead || (op.kind == OperatorKind::kEmbedding && task.site == 1);
  const bool lookup = op.kind == OperatorKind::kEmbedding && task.site == 0;
  const bool forward = task.kind == TaskKind::kForward || task.kind == TaskKind::kRecompute;
  const int slice = o.first_slice + task.slice;
  // The carried activations (forward) and gradient (backward) at this operator's degree.
  if (p.first && task.kind == TaskKind::kForward) {
    if (!lookup) take_own(0, forward_t_, o.t, width_in(op, task.site));
    forward_t_ = o.t;
  }
  if (p.first && !forward && !head) {
    take_own(1, backward_t_, o.t, h);
    backward_t_ = o.t;
  }
  if (opt_.emulate_compute) {  // the degrees of what is carried kept, the arithmetic waited for
    wait_emulated(start, task.duration_s);
    if (!forward && p.last && !lookup) backward_t_ = o.t;
    return;
  }
  SliceArgs a;
  a.op = &op;
  a.layout = &L;
  a.slice = slice;
  a.internal = task.slice;
  a.site = task.site;
  float* states = buffer(states_[u]);
  a.weights = replicate ? states : buffer(p.weights);
  a.x = buffer(p.act);
  const I in = input_floats(op, shape_t);
  a.internals = p.internals >= 0 ? buffer(p.internals) : (a.x == nullptr ? nullptr : a.x + in);
  a.y = carry_[0];
  a.dy = carry_[1];
  a.dx = carry_[2];
  a.workspace = buffer(p.workspace);
  if (plan_.cp > 1 && op.kind == OperatorKind::kAttention) {
    a.context_group = context_;
    a.gathered = gathered_;
  }
  if (op.experts > 0) {
    const std::pair<int, int> key{task.micro_batch, static_cast<int>(u)};
    a.route = &routes_.at(key);
    a.send_rows = reinterpret_cast<const std::int32_t*>(route_ids_.at(key).first);
    a.gate_at = reinterpret_cast<const std::int32_t*>(route_ids_.at(key).second);
    a.expert_group = o.expert;
    a.send = ep_send_;
    a.recv = ep_recv_;
  }
  const auto tokens = tokens_.find({task.micro_batch, static_cast<int>(u)});
  a.tokens = tokens == tokens_.end() ? nullptr : reinterpret_cast<const std::int32_t*>(tokens->second);
  // Elementwise kernels pass over the operator's activations (the carried activation when it has none).
  const I act_floats =
      p.act >= 0 ? static_cast<I>(alloc_bytes_[static_cast<std::size_t>(p.act)] / sizeof(float)) : 0;
  a.touch = act_floats > 0 ? buffer(p.act) : carry_[0];
  a.touch_floats = act_floats > 0 ? act_floats : rows * h;
  const I vocab = vocab_width(L, slice, shape_t);

  if (forward) {
    if (p.first) {
      const bool recompute = task.kind == TaskKind::kRecompute;
      if (head) {
        d.copy(s, carry_[0], a.x, static_cast<std::size_t>(rows * h));
        d.fill(s, a.internals, static_cast<std::size_t>(rows * vocab), 0.0f);
      } else if (lookup) {
        d.fill(s, carry_[0], static_cast<std::size_t>(rows * h), 0.0f);
      } else if (residual(op)) {
        // The input is added once: on TP index 0 (the TP all-reduce sums the ranks' partial outputs).
        if (recompute)
          d.copy(s, a.x, carry_[0], static_cast<std::size_t>(rows * h));
        else
          d.copy(s, carry_[0], a.x, static_cast<std::size_t>(rows * h));
        if (o.tp_index != 0) d.fill(s, carry_[0], static_cast<std::size_t>(rows * h), 0.0f);
      } else {  // projection
        d.copy(s, carry_[0], a.x, static_cast<std::size_t>(rows * width_in(op, 0)));
        d.fill(s, carry_[0], static_cast<std::size_t>(rows * h), 0.0f);
      }
    }
    forward_slice(d, s, shape_t, a);
    if (p.last && head && task.kind == TaskKind::kForward) {
      const I tokens_total = opt_.loss_tokens > 0 ? opt_.loss_tokens : I{plan_.global_batch(world_)} * w_.seq;
      const auto targets = targets_.at({task.micro_batch, static_cast<int>(u)});
      d.mse_onehot(s, a.internals, rows, vocab, reinterpret_cast<const std::int32_t*>(targets),
                   1.0f / static_cast<float>(tokens_total), loss_);
    }
    return;
  }
  // Backward.
  a.grads = replicate ? states + o.c() : buffer(p.grad) + p.grad_offset;
  a.accumulate = p.accumulate;
  const SliceLayout& sl = L.slice[static_cast<std::size_t>(slice)];
  // GEMMs overwrite their weight blocks (or add to them, a later micro-batch); the vector chunk and a
  // lookup table's block add: zero them first.
  const I from = op.kind == OperatorKind::kEmbedding ? 0 : sl.vector_offset;
  if (p.zero_grad) d.fill(s, a.grads + from, static_cast<std::size_t>(L.padded_elems - from), 0.0f);
  if (p.first && residual(op)) {
    if (o.tp_index == 0)
      d.copy(s, carry_[1], carry_[2], static_cast<std::size_t>(rows * h));
    else
      d.fill(s, carry_[2], static_cast<std::size_t>(rows * h), 0.0f);
  }
  backward_slice(d, s, shape_t, a);
  if (p.last && !lookup) {
    std::swap(carry_[1], carry_[2]);
    backward_t_ = o.t;
  }
}

void Executor::run_optimizer() {
  AdamParams ap = opt_.adam;
  ap.step = steps_;
  for (std::size_t u = 0; u < w_.operators.size(); ++u) {
    if (!ops_[u].here) continue;
    const I c = ops_[u].c();
    float* st = buffer(states_[u]);
    float* ad = buffer(adam_[u]);
    dev_.adam(dev_.compute_stream(), st, st + c, ad, ad + c, static_cast<std::size_t>(c), ap);
  }
}

std::vector<float> Executor::logical_weights(int u) {
  return logical(u, false);
}
std::vector<float> Executor::logical_gradients(int u) {
  return logical(u, true);
}

// Every rank holding the operator gathers its slices over its data-parallel group; the first rank of
// that group writes them into the logical order, and a sum over the job puts them together (every
// element written by one rank).
std::vector<float> Executor::logical(int u, bool gradient) {
  const std::size_t uu = static_cast<std::size_t>(u);
  const Operator& op = w_.operators.at(uu);
  const OpRun& o = ops_[uu];
  std::vector<float> logical(static_cast<std::size_t>(op.parameters()), 0.0f);
  Stream& s = dev_.compute_stream();
  float* sum = dev_.allocate(floats_bytes(op.parameters()), "executor logical sum");
  s.enqueue([&] {
    if (o.here) {
      const OperatorLayout& L = o.layout;
      float* src = buffer(states_[uu]) + (gradient ? o.c() : 0);
      float* full = dev_.allocate(floats_bytes(L.padded_elems * o.n), "executor logical copy");
      std::vector<float> host(static_cast<std::size_t>(L.padded_elems * o.n));
      for (int j = 0; j < o.n; ++j)
        o.shards->gather(dev_, s, o.sharding, src + j * L.shard_elems, full + j * L.padded_elems,
                         static_cast<std::size_t>(L.shard_elems), "collecting weights for a check");
      dev_.download(s, full, host.data(), host.size());
      dev_.deallocate(full);
      // Of an expert-parallel operator, every EP rank writes its experts, the first also the rest.
      if (o.dp->rank() == 0)
        for (int j = 0; j < o.n; ++j)
          slice_to_logical(op, L, o.first_slice + j, host.data() + j * L.padded_elems, logical,
                           o.place.index != 0);
    }
    dev_.upload(s, logical.data(), sum, logical.size());
    comm_.all_reduce(s, sum, logical.size(), "collecting weights for a check");
    dev_.download(s, sum, logical.data(), logical.size());
  });
  s.synchronize();
  dev_.deallocate(sum);
  return logical;
}

}  // namespace osdp::validate
