// Running the executor's step (executor.hpp; executor_setup.cpp sets it up): the tasks in issue order
// on their streams, the collectives, the operators' arithmetic, the optimizer and the logical views.
#include "validate/executor/executor.hpp"

#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/executor/executor_task.hpp"

namespace osdp::validate {

using costmodel::Operator;
using costmodel::OperatorKind;
using sim::BufferRole;
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
  const EventPtr start = timed ? cs.record() : nullptr;
  std::vector<EventPtr> done(sched_.tasks.size()), began(timed ? sched_.tasks.size() : 0);
  for (const Launch& l : launches_) {
    const auto t = static_cast<std::size_t>(l.task);
    Stream& st = l.stream == 1 ? ms : cs;
    for (const int d : l.waits) st.wait(done[static_cast<std::size_t>(d)]);
    if (timed) began[t] = st.record();
    st.enqueue([this, t] { run_task(static_cast<int>(t)); });
    if (l.record || timed) done[t] = st.record();
  }
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
    r.tasks.resize(sched_.tasks.size());
    for (std::size_t t = 0; t < r.tasks.size(); ++t) {
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
  if (task.kind == TaskKind::kOptimizer)
    run_optimizer();
  else if (sim::is_collective(task.kind))
    run_collective(t);
  else
    run_compute(t);
  for (const int b : task.frees) {
    dev_.deallocate(mem_[static_cast<std::size_t>(b)]);
    mem_[static_cast<std::size_t>(b)] = nullptr;
  }
}

void Executor::run_collective(int t) {
  const sim::Task& task = sched_.tasks[static_cast<std::size_t>(t)];
  const TaskPlan& p = tasks_[static_cast<std::size_t>(t)];
  const std::size_t u = static_cast<std::size_t>(task.op);
  const OperatorLayout& L = layout_[u];
  const I c = L.slices * L.shard_elems;
  float* st = buffer(states_[u]);
  Stream& s = dev_.comm_stream();
  const std::string what =
      fmt::format("{} of {} slice {} (task {})", costmodel::name_of(sim::collective_of(task.kind)),
                  w_.operators[u].name, task.slice, task.name);
  // REPLICATE all-reduces its whole gradient; a sharded slice's collectives move its shards.
  if (task.kind == TaskKind::kAllReduce && task.level == costmodel::RingLevel::kWorld) {
    comm_.all_reduce(s, st + c, static_cast<std::size_t>(c), what);
    return;
  }
  float* const grad = p.grad >= 0 ? buffer(p.grad) + p.grad_offset : nullptr;
  shards_.collective(s, task.kind, task.level, sharding_[u], st + task.slice * L.shard_elems,
                     buffer(p.weights), grad, st + c + task.slice * L.shard_elems,
                     static_cast<std::size_t>(L.shard_elems), what);
}

void Executor::run_compute(int t) {
  const sim::Task& task = sched_.tasks[static_cast<std::size_t>(t)];
  const TaskPlan& p = tasks_[static_cast<std::size_t>(t)];
  const std::size_t u = static_cast<std::size_t>(task.op);
  const Operator& op = w_.operators[u];
  const OperatorLayout& L = layout_[u];
  const bool replicate = plan_.operators[u].choice.replicate;
  Device& d = dev_;
  Stream& s = dev_.compute_stream();
  const I rows = shape_.rows(), h = op.hidden;
  SliceArgs a;
  a.op = &op;
  a.layout = &L;
  a.slice = task.slice;
  a.site = task.site;
  float* states = buffer(states_[u]);
  a.weights = replicate ? states : buffer(p.weights);
  a.x = buffer(p.act);
  const I in = input_floats(op, shape_);
  a.internals = p.internals >= 0 ? buffer(p.internals) : (a.x == nullptr ? nullptr : a.x + in);
  a.y = carry_[0];
  a.dy = carry_[1];
  a.dx = carry_[2];
  a.workspace = buffer(p.workspace);
  a.tokens = reinterpret_cast<const std::int32_t*>(tokens_);
  // Elementwise kernels pass over the operator's activations (the carried activation when it has none).
  const I act_floats =
      p.act >= 0 ? static_cast<I>(alloc_bytes_[static_cast<std::size_t>(p.act)] / sizeof(float)) : 0;
  a.touch = act_floats > 0 ? buffer(p.act) : carry_[0];
  a.touch_floats = act_floats > 0 ? act_floats : rows * h;
  const bool head = op.kind == OperatorKind::kHead || (op.kind == OperatorKind::kEmbedding && task.site == 1);
  const I vocab = shape_.vocab;

  if (task.kind == TaskKind::kForward || task.kind == TaskKind::kRecompute) {
    if (p.first) {
      const bool recompute = task.kind == TaskKind::kRecompute;
      if (head) {
        d.copy(s, carry_[0], a.x, static_cast<std::size_t>(rows * h));
        d.fill(s, a.internals, static_cast<std::size_t>(rows * vocab), 0.0f);
      } else if (op.kind == OperatorKind::kEmbedding) {
        d.fill(s, carry_[0], static_cast<std::size_t>(rows * h), 0.0f);
      } else if (residual(op)) {
        if (recompute)
          d.copy(s, a.x, carry_[0], static_cast<std::size_t>(rows * h));
        else
          d.copy(s, carry_[0], a.x, static_cast<std::size_t>(rows * h));
      } else {  // projection
        d.copy(s, carry_[0], a.x, static_cast<std::size_t>(rows * width_in(op, 0)));
        d.fill(s, carry_[0], static_cast<std::size_t>(rows * h), 0.0f);
      }
    }
    forward_slice(d, s, shape_, a);
    if (p.last && head && task.kind == TaskKind::kForward) {
      const I tokens = opt_.loss_tokens > 0 ? opt_.loss_tokens : I{world_} * rows;
      d.mse_onehot(s, a.internals, rows, vocab, reinterpret_cast<const std::int32_t*>(targets_),
                   1.0f / static_cast<float>(tokens), loss_);
    }
    return;
  }
  // Backward.
  a.grads = replicate ? states + L.slices * L.shard_elems : buffer(p.grad) + p.grad_offset;
  const SliceLayout& sl = L.slice[static_cast<std::size_t>(task.slice)];
  const bool tied = op.tied_gradient;
  // GEMMs overwrite their weight blocks; the vector chunk and a lookup table's block accumulate.
  const I from = op.kind == OperatorKind::kEmbedding ? 0 : sl.vector_offset;
  if (!tied || (replicate && task.site == 1 && p.first))
    d.fill(s, a.grads + from, static_cast<std::size_t>(L.padded_elems - from), 0.0f);
  if (p.first && residual(op)) d.copy(s, carry_[1], carry_[2], static_cast<std::size_t>(rows * h));
  backward_slice(d, s, shape_, a);
  if (p.last && !(op.kind == OperatorKind::kEmbedding && task.site == 0)) std::swap(carry_[1], carry_[2]);
}

void Executor::run_optimizer() {
  AdamParams ap = opt_.adam;
  ap.step = steps_;
  for (std::size_t u = 0; u < w_.operators.size(); ++u) {
    const I c = layout_[u].slices * layout_[u].shard_elems;
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

std::vector<float> Executor::logical(int u, bool gradient) {
  const std::size_t uu = static_cast<std::size_t>(u);
  const OperatorLayout& L = layout_[uu];
  const I c = L.slices * L.shard_elems;
  float* src = buffer(states_[uu]) + (gradient ? c : 0);
  float* full = dev_.allocate(floats_bytes(L.padded_elems * L.slices), "executor logical copy");
  Stream& s = dev_.compute_stream();
  std::vector<float> host(static_cast<std::size_t>(L.padded_elems * L.slices));
  s.enqueue([&] {
    for (int j = 0; j < L.slices; ++j)
      shards_.gather(dev_, s, sharding_[uu], src + j * L.shard_elems, full + j * L.padded_elems,
                     static_cast<std::size_t>(L.shard_elems), "collecting weights for a check");
    dev_.download(s, full, host.data(), host.size());
  });
  s.synchronize();
  dev_.deallocate(full);
  std::vector<float> logical;
  for (int j = 0; j < L.slices; ++j)
    slice_to_logical(w_.operators[uu], L, j, host.data() + j * L.padded_elems, logical);
  return logical;
}

}  // namespace osdp::validate
