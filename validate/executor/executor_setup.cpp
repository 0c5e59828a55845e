// Setting up the executor's step (executor.hpp): the tasks' buffers resolved from the schedule, the
// resident states and Adam moments allocated and initialised, the baseline buffers and the tokens.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/executor/executor.hpp"
#include "validate/executor/executor_task.hpp"

namespace osdp::validate {

using costmodel::Operator;
using sim::BufferRole;
using sim::TaskKind;
using I = std::int64_t;

namespace {

// Whether operator u has a collective on a node's ring or across nodes (the schedule decides: on one
// node, or with one rank per node, node groups and two-level collectives are world ones).
std::vector<bool> on_node_rings(const sim::Schedule& schedule, std::size_t ops) {
  std::vector<bool> leveled(ops, false);
  for (const auto& t : schedule.tasks)
    if (t.op >= 0 && t.level != costmodel::RingLevel::kWorld) leveled[static_cast<std::size_t>(t.op)] = true;
  return leveled;
}

bool any(const std::vector<bool>& v) {
  return std::find(v.begin(), v.end(), true) != v.end();
}

}  // namespace

Executor::Executor(Device& dev, Communicator& comm, const costmodel::Workload& workload,
                   const costmodel::Plan& plan, const sim::Schedule& schedule, ExecutorOptions options)
    : dev_(dev),
      comm_(comm),
      w_(workload),
      plan_(plan),
      sched_(schedule),
      opt_(options),
      world_(comm.size()),
      shards_(comm, schedule.nodes, schedule.per_node,
              any(on_node_rings(schedule, workload.operators.size()))) {
  if (workload.precision != costmodel::Precision::kFp32)
    throw UsageError(fmt::format("the {} backend computes in fp32; model {} is mixed precision",
                                 comm.backend(), workload.model_name));
  if (schedule.world_size != world_)
    throw UsageError(fmt::format("the plan is for {} ranks, the job has {}", schedule.world_size, world_));
  const std::size_t ops = workload.operators.size();
  const std::vector<bool> leveled = on_node_rings(schedule, ops);
  shape_.batch = plan.batch_size;
  shape_.seq = workload.seq;
  shape_.vocab = plan.model.vocab;
  shape_.math = options.gemm_math;
  for (std::size_t u = 0; u < ops; ++u) {
    const auto& ch = plan.operators[u].choice;
    const Sharding sh = ch.replicate    ? Sharding::kReplicated
                        : !leveled[u]   ? Sharding::kWorld
                        : ch.node_group ? Sharding::kNode
                                        : Sharding::kTwoLevel;
    sharding_.push_back(sh);
    const int shards = shards_.shards(sh);
    layout_.push_back(make_layout(w_.operators[u], ch.replicate ? 1 : ch.split, shards));
  }
  resolve();
  allocate_resident();
  launches_ = launch_list(schedule, &dev.comm_stream() == &dev.compute_stream());
}

Executor::~Executor() {
  for (float*& p : mem_) {
    if (p != nullptr) dev_.deallocate(p);
    p = nullptr;
  }
  for (float* p : carry_) dev_.deallocate(p);
  dev_.deallocate(tokens_);
  dev_.deallocate(targets_);
  dev_.deallocate(loss_);
}

// Which buffers each task reads and writes, found by walking the schedule in issue order: a buffer
// is known by its role, operator and slice (sim::Buffer), never by its name.
void Executor::resolve() {
  const auto& tasks = sched_.tasks;
  tasks_.assign(tasks.size(), TaskPlan{});
  mem_.assign(sched_.buffers.size(), nullptr);
  alloc_bytes_.resize(sched_.buffers.size());
  for (std::size_t b = 0; b < sched_.buffers.size(); ++b)
    alloc_bytes_[b] = static_cast<std::size_t>(sched_.buffers[b].bytes);
  const std::size_t ops = w_.operators.size();
  std::vector<int> act(ops, -1), scratch(ops, -1), recomputed(ops, -1), workspace(ops, -1),
      tied_grad(ops, -1);
  std::map<std::pair<int, int>, std::vector<int>> live;  // (op, slice) -> gathered buffers alive
  std::map<int, std::pair<int, int>> gathered_of;        // gathered buffer -> (op, slice)
  std::map<std::tuple<int, int, int>, int> seen;         // (op, site, kind) -> tasks so far

  // Activations must fit the IR's sizes (else the IR and the arithmetic disagree: an error);
  // weights and gradients may need a few elements more, padding slices to equal shards.
  auto need = [&](int id, I floats, const std::string& what) {
    const std::size_t bytes = floats_bytes(floats);
    if (bytes > alloc_bytes_[static_cast<std::size_t>(id)])
      throw Error(fmt::format("executor: {} needs {} bytes, the schedule gives {} ({})",
                              sched_.buffers[static_cast<std::size_t>(id)].name, bytes,
                              alloc_bytes_[static_cast<std::size_t>(id)], what));
  };
  auto pad_to = [&](int id, I floats) {
    const std::size_t bytes = floats_bytes(floats);
    if (bytes <= alloc_bytes_[static_cast<std::size_t>(id)]) return;
    padding_bytes_ += bytes - alloc_bytes_[static_cast<std::size_t>(id)];
    alloc_bytes_[static_cast<std::size_t>(id)] = bytes;
  };

  for (std::size_t t = 0; t < tasks.size(); ++t) {
    const sim::Task& task = tasks[t];
    TaskPlan& p = tasks_[t];
    if (task.op < 0) continue;
    const int u = task.op;
    const Operator& op = w_.operators[static_cast<std::size_t>(u)];
    const OperatorLayout& L = layout_[static_cast<std::size_t>(u)];
    for (const int b : task.allocs) {
      const sim::Buffer& buf = sched_.buffers[static_cast<std::size_t>(b)];
      if (buf.op != u)
        throw Error(fmt::format("executor: task {} (operator {}) allocates {}, a buffer of operator {}",
                                task.name, u, buf.name, buf.op));
      switch (buf.role) {
        case BufferRole::kActivations: {
          act[static_cast<std::size_t>(u)] = b;
          const bool ckpt =
              plan_.operators[static_cast<std::size_t>(u)].choice.checkpoint && op.checkpointable;
          need(b, input_floats(op, shape_) + (ckpt ? 0 : internal_floats(op, L.slices, shape_)),
               "saved activations");
          break;
        }
        case BufferRole::kForwardScratch:
          scratch[static_cast<std::size_t>(u)] = b;
          need(b, internal_floats(op, L.slices, shape_), "checkpointed forward");
          break;
        case BufferRole::kRecomputed:
          recomputed[static_cast<std::size_t>(u)] = b;
          need(b, internal_floats(op, L.slices, shape_), "recomputed activations");
          break;
        case BufferRole::kWorkspace:
          if (buf.site != 0) break;  // the LM head's: no kernel of a head's backward needs scratch
          workspace[static_cast<std::size_t>(u)] = b;
          need(b, workspace_floats(op, L.slices, shape_), "backward workspace");
          break;
        case BufferRole::kTiedGradient:
          tied_grad[static_cast<std::size_t>(u)] = b;
          pad_to(b, L.slices * L.padded_elems);
          break;
        case BufferRole::kGradient:
          p.grad = b;
          pad_to(b, L.padded_elems);
          break;
        case BufferRole::kGatheredWeight:
          pad_to(b, L.padded_elems);
          live[{u, buf.slice}].push_back(b);
          gathered_of[b] = {u, buf.slice};
          p.weights = b;
          break;
        case BufferRole::kStates:
        case BufferRole::kAdam:
          throw Error(fmt::format("executor: task {} allocates {}, a resident buffer", task.name, buf.name));
      }
    }
    const bool compute = task.stream == sim::Stream::kCompute;
    if (compute) {
      const int n = seen[{u, task.site, static_cast<int>(task.kind)}]++;
      p.first = n == 0;
      p.last = n == L.slices - 1;
      p.act = act[static_cast<std::size_t>(u)];
      if (task.kind == TaskKind::kRecompute) p.internals = recomputed[static_cast<std::size_t>(u)];
      if (task.kind == TaskKind::kForward) p.internals = scratch[static_cast<std::size_t>(u)];
      if (task.kind == TaskKind::kBackward) p.internals = recomputed[static_cast<std::size_t>(u)];
      p.workspace = workspace[static_cast<std::size_t>(u)];
      if (task.kind == TaskKind::kBackward && p.grad < 0 && tied_grad[static_cast<std::size_t>(u)] >= 0) {
        p.grad = tied_grad[static_cast<std::size_t>(u)];
        p.grad_offset = task.slice * L.padded_elems;
      }
      // The weights: a gather this task waits for, else the slice's buffer held since the forward.
      if (!plan_.operators[static_cast<std::size_t>(u)].choice.replicate) {
        p.weights = -1;
        for (const int d : task.deps)
          if (tasks[static_cast<std::size_t>(d)].kind == TaskKind::kAllGather &&
              tasks[static_cast<std::size_t>(d)].op == u &&
              tasks[static_cast<std::size_t>(d)].slice == task.slice)
            p.weights = tasks_[static_cast<std::size_t>(d)].weights;
        const auto& alive = live[{u, task.slice}];
        if (p.weights < 0 && !alive.empty()) p.weights = alive.back();
        if (p.weights < 0 && task.kind != TaskKind::kBackward)
          throw Error(fmt::format("executor: task {} has no gathered weights", task.name));
      }
    } else if (task.kind == TaskKind::kAllGather && task.allocs.empty()) {
      // The second level of a two-level gather completes the buffer the first one filled.
      p.weights = tasks_[static_cast<std::size_t>(task.deps.at(0))].weights;
    } else if (task.kind == TaskKind::kReduceScatter ||
               (task.kind == TaskKind::kAllReduce && task.level != costmodel::RingLevel::kWorld)) {
      // A slice's gradient is freed by its reduce-scatter; a tied gradient's slices are reduced in place.
      for (const int b : task.frees)
        if (sched_.buffers[static_cast<std::size_t>(b)].role == BufferRole::kGradient) p.grad = b;
      if (p.grad < 0) {
        p.grad = tied_grad[static_cast<std::size_t>(u)];
        p.grad_offset = task.slice * L.padded_elems;
      }
    }
    for (const int b : task.frees) {
      auto it = gathered_of.find(b);
      if (it == gathered_of.end()) continue;
      auto& v = live[it->second];
      v.erase(std::remove(v.begin(), v.end(), b), v.end());
    }
  }
  // A reduction in two levels: the first (within the node) reduces the gradient its last level frees.
  for (std::size_t t = tasks.size(); t-- > 0;) {
    const sim::Task& task = tasks[t];
    if (task.level != costmodel::RingLevel::kInter ||
        (task.kind != TaskKind::kReduceScatter && task.kind != TaskKind::kAllReduce))
      continue;
    TaskPlan& first = tasks_[static_cast<std::size_t>(task.deps.at(0))];
    if (first.grad < 0) {
      first.grad = tasks_[t].grad;
      first.grad_offset = tasks_[t].grad_offset;
    }
  }
}

void Executor::allocate_resident() {
  Stream& s = dev_.compute_stream();
  const std::size_t ops = w_.operators.size();
  states_.assign(ops, -1);
  adam_.assign(ops, -1);
  for (const int b : sched_.resident) {
    const auto& buf = sched_.buffers[static_cast<std::size_t>(b)];
    if (buf.op < 0 || static_cast<std::size_t>(buf.op) >= ops)
      throw Error(fmt::format("executor: resident buffer {} has no operator", buf.name));
    const auto u = static_cast<std::size_t>(buf.op);
    if (buf.role == BufferRole::kStates)
      states_[u] = b;
    else if (buf.role == BufferRole::kAdam)
      adam_[u] = b;
    else
      continue;
    const I c = layout_[u].slices * layout_[u].shard_elems;
    const std::size_t bytes = floats_bytes(2 * c);
    if (bytes > alloc_bytes_[static_cast<std::size_t>(b)]) {
      padding_bytes_ += bytes - alloc_bytes_[static_cast<std::size_t>(b)];
      alloc_bytes_[static_cast<std::size_t>(b)] = bytes;
    }
  }
  for (std::size_t u = 0; u < ops; ++u)
    if (states_[u] < 0 || adam_[u] < 0)
      throw Error(fmt::format("executor: the schedule has no resident states of {}", w_.operators[u].name));
  for (std::size_t u = 0; u < ops; ++u) {
    const OperatorLayout& L = layout_[u];
    const I c = L.slices * L.shard_elems;
    float* st = mem_[static_cast<std::size_t>(states_[u])] =
        dev_.allocate(alloc_bytes_[static_cast<std::size_t>(states_[u])],
                      sched_.buffers[static_cast<std::size_t>(states_[u])].name);
    float* ad = mem_[static_cast<std::size_t>(adam_[u])] =
        dev_.allocate(alloc_bytes_[static_cast<std::size_t>(adam_[u])],
                      sched_.buffers[static_cast<std::size_t>(adam_[u])].name);
    // This rank's shard of every slice (the whole slice when replicated).
    const int rank = shards_.shard_of(sharding_[u]);
    std::vector<float> host(static_cast<std::size_t>(2 * c), 0.0f);
    for (int j = 0; j < L.slices; ++j) {
      const auto full = initial_slice(w_.operators[u], L, j);
      std::copy_n(full.begin() + rank * L.shard_elems, L.shard_elems, host.begin() + j * L.shard_elems);
    }
    s.enqueue([this, st, ad, c, host = std::move(host)] {
      dev_.upload(dev_.compute_stream(), host.data(), st, host.size());
      dev_.fill(dev_.compute_stream(), ad, static_cast<std::size_t>(2 * c), 0.0f);
    });
  }
  // The executor's baseline: carried activations and gradients, tokens, targets, the loss.
  I width = 0;
  for (const auto& op : w_.operators) width = std::max({width, width_in(op, 0), I{op.hidden}});
  const I rows = shape_.rows();
  for (int i = 0; i < 3; ++i) carry_.push_back(dev_.allocate(floats_bytes(rows * width), "executor carry"));
  tokens_ = dev_.allocate(floats_bytes(rows), "executor tokens");
  targets_ = dev_.allocate(floats_bytes(rows), "executor targets");
  loss_ = dev_.allocate(sizeof(float), "executor loss");
  baseline_bytes_ = floats_bytes(3 * rows * width + 2 * rows + 1);
  const I offset = opt_.sample_offset >= 0 ? opt_.sample_offset : I{comm_.rank()} * shape_.batch;
  std::vector<std::int32_t> tok(static_cast<std::size_t>(rows)), tgt(static_cast<std::size_t>(rows));
  for (I i = 0; i < shape_.batch; ++i)
    for (I t = 0; t < shape_.seq; ++t) {
      tok[static_cast<std::size_t>(i * shape_.seq + t)] = token_of(offset + i, t, shape_.vocab);
      tgt[static_cast<std::size_t>(i * shape_.seq + t)] = token_of(offset + i, t + 1, shape_.vocab);
    }
  s.enqueue([this, tok = std::move(tok), tgt = std::move(tgt)] {
    dev_.upload(dev_.compute_stream(), reinterpret_cast<const float*>(tok.data()), tokens_, tok.size());
    dev_.upload(dev_.compute_stream(), reinterpret_cast<const float*>(tgt.data()), targets_, tgt.size());
  });
  s.synchronize();
}

}  // namespace osdp::validate
