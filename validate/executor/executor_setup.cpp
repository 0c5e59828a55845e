// Setting up the executor's step (executor.hpp): the groups' communicators, the operators of the
// rank's stage at their TP degree, the tasks' buffers resolved from the schedule, the resident states
// and Adam moments allocated and initialised, the baseline buffers and the tokens.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/executor/executor.hpp"
#include "validate/executor/internal/executor_task.hpp"

namespace osdp::validate {

using costmodel::Operator;
using costmodel::OperatorKind;
using sim::BufferRole;
using sim::TaskKind;
using I = std::int64_t;

Executor::Executor(Device& dev, Communicator& comm, const costmodel::Workload& workload,
                   const costmodel::Plan& plan, const sim::Schedule& schedule, ExecutorOptions options)
    : dev_(dev),
      comm_(comm),
      w_(workload),
      plan_(plan),
      sched_(schedule),
      opt_(options),
      world_(comm.size()) {
  if (plan.cp > 1 && plan.cp_all_to_all && !options.emulate_compute)
    throw UsageError(
        fmt::format("executor: the plan's context parallelism (CP {}) is the all-to-all variant (Ulysses); "
                    "osdp plans and "
                    "simulates it, and its executor runs ring attention's variant only",
                    plan.cp));
  if (plan.cp > 1 &&
      std::any_of(plan.unit_tp.begin(), plan.unit_tp.end(), [&](int t) { return t != plan.unit_tp.front(); }))
    throw UsageError(fmt::format(
        "executor: the plan is context-parallel (CP {}) with TP degrees that change from unit to unit; its "
        "executor runs CP plans whose units share one TP degree (no re-layouts between them)",
        plan.cp));
  if (workload.precision != costmodel::Precision::kFp32)
    throw UsageError(fmt::format("the {} backend computes in fp32; model {} is mixed precision",
                                 comm.backend(), workload.model_name));
  if (workload.tied_copy)
    throw UsageError(
        fmt::format("model {}: a tied embedding split over pipeline stages (its copy as the LM head of the "
                    "last stage) is not executed; run it untied or with one stage",
                    workload.model_name));
  if (schedule.world_size != world_)
    throw UsageError(fmt::format("the plan is for {} ranks, the job has {}", schedule.world_size, world_));
  per_stage_ = schedule.stage_size();
  stage_ = schedule.stage_of(comm.rank());
  local_ = comm.rank() % per_stage_;
  make_groups();
  setup_operators();
  resolve();
  allocate_resident();
  allocate_baseline();
  launches_ = launch_list(schedule, first_task(), end_task(), &dev.comm_stream() == &dev.compute_stream());
}

Executor::~Executor() {
  for (float*& p : mem_) {
    if (p != nullptr) dev_.deallocate(p);
    p = nullptr;
  }
  for (float* p : carry_) dev_.deallocate(p);
  for (auto* ids : {&tokens_, &targets_})
    for (auto& [key, p] : *ids) dev_.deallocate(p);
  if (loss_ != nullptr) dev_.deallocate(loss_);
  for (float* p : {gathered_, ep_send_, ep_recv_, emulated_})
    if (p != nullptr) dev_.deallocate(p);
  for (auto& [key, ids] : route_ids_) {
    dev_.deallocate(ids.first);
    dev_.deallocate(ids.second);
  }
}

int Executor::first_task() const {
  return sched_.first_task(stage_);
}
int Executor::end_task() const {
  return sched_.end_task(stage_);
}

Communicator& Executor::group(const sim::Group& g) const {
  return *groups_.at(g.resolved(world_));
}

// Every group shape of the schedule (all stages, so every rank splits alike) and every operator's TP
// and data-parallel group: a communicator each, split from the job's in one order on every rank.
void Executor::make_groups() {
  std::set<sim::Group> shapes;
  for (const sim::Task& t : sched_.tasks)
    if (sim::is_collective(t.kind)) shapes.insert(t.group.resolved(world_));
  for (const int t : sched_.op_tp) {
    shapes.insert({t, 1});
    shapes.insert({per_stage_ / t, t});
  }
  std::set<std::pair<int, int>> ep_groups;  // (e, t) of the expert-parallel operators
  for (std::size_t u = 0; u < plan_.choices.size() && u < sched_.op_tp.size(); ++u) {
    const int e = plan_.choices[u].ep, t = sched_.op_tp[u];
    if (e <= 1) continue;
    shapes.insert({per_stage_ / (t * e), t * e});
    ep_groups.insert({e, t});
  }
  const int r = comm_.rank();
  for (const sim::Group& g : shapes) {
    if (g.size == world_) {
      groups_[g] = &comm_;
      continue;
    }
    groups_[g] = &comm_.split(g.first(r), g.index(r),
                              fmt::format("making the groups of {} ranks {} apart", g.size, g.stride));
  }
  // Context parallelism's exchanges run on the compute stream inside the attention's tasks while the
  // comm stream moves weights and gradients: a communicator of their own, never one the comm stream
  // may use at the same time (a node's ring can be the same ranks as a CP group).
  if (plan_.cp > 1) {
    const sim::Group g{plan_.cp, plan_.unit_tp.front()};
    context_ = &comm_.split(g.first(r), g.index(r),
                            fmt::format("making the context-parallel groups of {} ranks", plan_.cp));
  }
  // The expert all-to-alls likewise, on the compute stream inside the MoE operators' tasks.
  for (const auto& [e, t] : ep_groups) {
    if (experts_.count(e))
      throw UsageError(
          fmt::format("executor: expert parallelism of degree {} at two TP degrees; its executor "
                      "runs MoE layers at TP 1",
                      e));
    const sim::Group g{e, t};
    experts_[e] = &comm_.split(g.first(r), g.index(r), fmt::format("making the EP groups of {} ranks", e));
  }
}

void Executor::setup_operators() {
  for (const costmodel::Operator& op : w_.operators) {
    if (op.experts > 0 && plan_.cp > 1)
      throw UsageError(fmt::format(
          "executor: {} is a mixture-of-experts layer in a context-parallel plan (CP {}); osdp plans and "
          "simulates such plans, and its executor runs MoE layers without context parallelism",
          op.name, plan_.cp));
    if (op.latent)
      throw UsageError(fmt::format(
          "executor: {} is a multi-head latent attention; osdp plans and simulates such models, and its "
          "executor runs grouped-query attention only",
          op.name));
  }
  const std::size_t ops = w_.operators.size();
  ops_.assign(ops, OpRun{});
  // Whether an operator has a collective on its data-parallel group's node ring or across nodes (the
  // schedule decides: on one node, or with one rank per node, node groups and two-level collectives
  // are flat).
  std::vector<bool> leveled(ops, false);
  for (const auto& t : sched_.tasks)
    if (t.op >= 0 && t.level != costmodel::RingLevel::kWorld) leveled[static_cast<std::size_t>(t.op)] = true;
  const int G = sched_.per_node;
  std::map<int, NodeShards*> by_degree;
  const std::set<int> degrees(sched_.op_tp.begin(), sched_.op_tp.end());
  // The data-parallel groups of the rank's stage, in one order on every rank of a group.
  const std::vector<int> unit_of = w_.unit_of_operators();
  for (const int t : degrees) {
    bool rings = false, here = false;
    for (std::size_t u = 0; u < ops; ++u) {
      const bool mine = plan_.stage_of_unit(unit_of[u]) == stage_;
      if (sched_.op_tp[u] != t || !mine) continue;
      here = true;
      rings = rings || leveled[u];
    }
    if (!here) continue;
    const int d = per_stage_ / t;
    const int nodes = per_stage_ <= G ? 1 : per_stage_ / G;
    const int per_node = per_stage_ <= G ? d : G / t;
    shards_.push_back(std::make_unique<NodeShards>(group({d, t}), nodes, per_node, rings));
    by_degree[t] = shards_.back().get();
  }
  for (std::size_t u = 0; u < ops; ++u) {
    OpRun& o = ops_[u];
    o.here = plan_.stage_of_unit(unit_of[u]) == stage_;
    if (!o.here) continue;
    const auto& ch = plan_.choices[u];
    o.t = sched_.op_tp[u];
    o.tp_index = local_ % o.t;
    o.n = ch.replicate ? 1 : ch.split;
    o.first_slice = o.tp_index * o.n;
    o.sharding = ch.replicate    ? Sharding::kReplicated
                 : !leveled[u]   ? Sharding::kWorld
                 : ch.node_group ? Sharding::kNode
                                 : Sharding::kTwoLevel;
    o.shards = by_degree.at(o.t);
    o.dp = &group({per_stage_ / o.t, o.t});
    o.tp = &group({o.t, 1});
    if (const int e = ch.ep; e > 1) {
      // The ranks holding the same experts shard and reduce its states (flat or replicated).
      if (o.sharding != Sharding::kWorld && o.sharding != Sharding::kReplicated)
        throw UsageError(fmt::format(
            "executor: {} is expert-parallel (EP {}) with its states sharded by node or in two levels; its "
            "executor runs EP with flat sharding or REPLICATE",
            w_.operators[u].name, e));
      const int d = per_stage_ / (o.t * e);
      o.dp = &group({d, o.t * e});
      shards_.push_back(std::make_unique<NodeShards>(*o.dp, 1, d, false));
      o.shards = shards_.back().get();
      o.place = {e, (local_ / o.t) % e};
      o.expert = experts_.at(e);
    }
    o.layout = make_layout(w_.operators[u], o.t, o.n, o.shards->shards(o.sharding), o.place);
  }
}

// Which buffers each task of the rank's stage reads and writes, found by walking them in issue order:
// a buffer is known by its role, operator, slice and micro-batch (sim::Buffer), never by its name.
void Executor::resolve() {
  const auto& tasks = sched_.tasks;
  const int first = first_task(), end = end_task();
  tasks_.assign(static_cast<std::size_t>(end - first), TaskPlan{});
  mem_.assign(sched_.buffers.size(), nullptr);
  alloc_bytes_.resize(sched_.buffers.size());
  for (std::size_t b = 0; b < sched_.buffers.size(); ++b)
    alloc_bytes_[b] = static_cast<std::size_t>(sched_.buffers[b].bytes);
  using Key = std::pair<int, int>;  // (operator, micro-batch)
  std::map<Key, int> act, scratch, recomputed, workspace;
  std::map<int, int> tied_grad;
  std::map<Key, std::vector<int>> live;                // (op, slice) -> gathered buffers alive
  std::map<int, Key> gathered_of;                      // gathered buffer -> (op, slice)
  std::map<Key, int> live_grad;                        // (op, slice) -> its gradient buffer
  std::map<std::tuple<int, int, int, int>, int> seen;  // (op, site, kind, micro-batch) -> tasks so far

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
  auto at = [](const std::map<Key, int>& m, Key k) {
    const auto it = m.find(k);
    return it == m.end() ? -1 : it->second;
  };

  for (int t = first; t < end; ++t) {
    const sim::Task& task = tasks[static_cast<std::size_t>(t)];
    TaskPlan& p = tasks_[static_cast<std::size_t>(t - first)];
    if (task.op < 0) continue;
    const int u = task.op;
    const Operator& op = w_.operators[static_cast<std::size_t>(u)];
    const OpRun& o = ops_[static_cast<std::size_t>(u)];
    const OperatorLayout& L = o.layout;
    const MathShape m = shape(o.t);
    const int mb = task.micro_batch;
    for (const int b : task.allocs) {
      const sim::Buffer& buf = sched_.buffers[static_cast<std::size_t>(b)];
      if (buf.op != u)
        throw Error(fmt::format("executor: task {} (operator {}) allocates {}, a buffer of operator {}",
                                task.name, u, buf.name, buf.op));
      switch (buf.role) {
        case BufferRole::kActivations: {
          act[{u, mb}] = b;
          const costmodel::Recompute rc = op.recompute(plan_.choices[static_cast<std::size_t>(u)]);
          if (rc == costmodel::Recompute::kSelective)
            throw UsageError(fmt::format(
                "executor: {} is checkpointed selectively; osdp's executor runs operators with none or full "
                "checkpointing (run selective plans with --backend torch)",
                op.name));
          const bool ckpt = rc == costmodel::Recompute::kFull;
          need(b, input_floats(op, m) + (ckpt ? 0 : internal_floats(op, L, m)), "saved activations");
          break;
        }
        case BufferRole::kForwardScratch:
          scratch[{u, mb}] = b;
          need(b, internal_floats(op, L, m), "checkpointed forward");
          break;
        case BufferRole::kRecomputed:
          recomputed[{u, mb}] = b;
          need(b, internal_floats(op, L, m), "recomputed activations");
          break;
        case BufferRole::kWorkspace:
          if (buf.site != 0) break;  // the LM head's: no kernel of a head's backward needs scratch
          if (task.kind == TaskKind::kAllToAll) break;  // an expert all-to-all's send and receive buffers
          workspace[{u, mb}] = b;
          need(b, workspace_floats(op, L, m), "backward workspace");
          break;
        case BufferRole::kTiedGradient:
          tied_grad[u] = b;
          pad_to(b, o.n * L.padded_elems);
          break;
        case BufferRole::kGradient:
          p.grad = b;
          live_grad[{u, buf.slice}] = b;
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
    const bool kernel = task.kind == TaskKind::kForward || task.kind == TaskKind::kRecompute ||
                        task.kind == TaskKind::kBackward;
    const bool replicate = plan_.choices[static_cast<std::size_t>(u)].replicate;
    if (kernel) {
      const int k = seen[{u, task.site, static_cast<int>(task.kind), mb}]++;
      p.first = k == 0;
      p.last = k == L.local_slices() - 1;
      p.act = at(act, {u, mb});
      if (task.kind == TaskKind::kRecompute) p.internals = at(recomputed, {u, mb});
      if (task.kind == TaskKind::kForward) p.internals = at(scratch, {u, mb});
      if (task.kind == TaskKind::kBackward) p.internals = at(recomputed, {u, mb});
      p.workspace = at(workspace, {u, mb});
      if (task.kind == TaskKind::kBackward) {
        if (p.grad < 0 && tied_grad.count(u)) {
          p.grad = tied_grad[u];
          p.grad_offset = task.slice * L.padded_elems;
        } else if (p.grad < 0 && live_grad.count({u, task.slice})) {
          p.grad = live_grad[{u, task.slice}];
        }
        // The first micro-batch's backward writes the gradient (of a tied embedding: its head's, which
        // runs before its lookup's, whose lookup adds to it); later micro-batches add to it. What adds
        // (vector chunks, a lookup's table) is zeroed first: a slice's region by its task; a tied
        // gradient's on allocation, or with REPLICATE (the states' gradient) by the head's first task.
        if (!op.tied_gradient) {
          p.zero_grad = mb == 0;
          p.accumulate = mb > 0;
        } else {
          p.zero_grad = replicate && task.site == 1 && mb == 0 && p.first;
          p.accumulate = task.site == 1 && mb > 0;
        }
      }
      // The weights: a gather this task waits for, else the slice's buffer held since the forward.
      if (!replicate) {
        p.weights = -1;
        for (const int d : task.deps)
          if (tasks[static_cast<std::size_t>(d)].kind == TaskKind::kAllGather &&
              tasks[static_cast<std::size_t>(d)].op == u &&
              tasks[static_cast<std::size_t>(d)].slice == task.slice &&
              tasks[static_cast<std::size_t>(d)].payload == sim::Payload::kWeights)
            p.weights = tasks_[static_cast<std::size_t>(d - first)].weights;
        const auto& alive = live[{u, task.slice}];
        if (p.weights < 0 && !alive.empty()) p.weights = alive.back();
        if (p.weights < 0 && task.kind != TaskKind::kBackward)
          throw Error(fmt::format("executor: task {} has no gathered weights", task.name));
      }
    } else if (task.payload == sim::Payload::kWeights && task.kind == TaskKind::kAllGather &&
               task.allocs.empty()) {
      // The second level of a two-level gather completes the buffer the first one filled.
      p.weights = tasks_[static_cast<std::size_t>(task.deps.at(0) - first)].weights;
    } else if (task.payload == sim::Payload::kGradients &&
               (task.kind == TaskKind::kReduceScatter ||
                (task.kind == TaskKind::kAllReduce && task.level != costmodel::RingLevel::kWorld))) {
      // A slice's gradient is freed by its reduce-scatter; a tied gradient's slices are reduced in place.
      for (const int b : task.frees)
        if (sched_.buffers[static_cast<std::size_t>(b)].role == BufferRole::kGradient) p.grad = b;
      if (p.grad < 0 && live_grad.count({u, task.slice})) p.grad = live_grad[{u, task.slice}];
      if (p.grad < 0 && tied_grad.count(u)) {
        p.grad = tied_grad[u];
        p.grad_offset = task.slice * L.padded_elems;
      }
    }
    for (const int b : task.frees) {
      const sim::Buffer& buf = sched_.buffers[static_cast<std::size_t>(b)];
      if (buf.role == BufferRole::kGradient) live_grad.erase({buf.op, buf.slice});
      auto it = gathered_of.find(b);
      if (it == gathered_of.end()) continue;
      auto& v = live[it->second];
      v.erase(std::remove(v.begin(), v.end(), b), v.end());
    }
  }
  // A reduction in two levels: the first (within the node) reduces the gradient its last level frees.
  for (int t = end; t-- > first;) {
    const sim::Task& task = tasks[static_cast<std::size_t>(t)];
    if (task.level != costmodel::RingLevel::kInter || task.payload != sim::Payload::kGradients ||
        (task.kind != TaskKind::kReduceScatter && task.kind != TaskKind::kAllReduce))
      continue;
    TaskPlan& head = tasks_[static_cast<std::size_t>(task.deps.at(0) - first)];
    if (head.grad < 0) {
      head.grad = tasks_[static_cast<std::size_t>(t - first)].grad;
      head.grad_offset = tasks_[static_cast<std::size_t>(t - first)].grad_offset;
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
    if (buf.stage != stage_) continue;
    if (buf.op < 0 || static_cast<std::size_t>(buf.op) >= ops)
      throw Error(fmt::format("executor: resident buffer {} has no operator", buf.name));
    const auto u = static_cast<std::size_t>(buf.op);
    if (buf.role == BufferRole::kStates)
      states_[u] = b;
    else if (buf.role == BufferRole::kAdam)
      adam_[u] = b;
    else
      continue;
    const std::size_t bytes = floats_bytes(2 * ops_[u].c());
    if (bytes > alloc_bytes_[static_cast<std::size_t>(b)]) {
      padding_bytes_ += bytes - alloc_bytes_[static_cast<std::size_t>(b)];
      alloc_bytes_[static_cast<std::size_t>(b)] = bytes;
    }
  }
  for (std::size_t u = 0; u < ops; ++u)
    if (ops_[u].here && (states_[u] < 0 || adam_[u] < 0))
      throw Error(fmt::format("executor: the schedule has no resident states of {}", w_.operators[u].name));
  for (std::size_t u = 0; u < ops; ++u) {
    const OpRun& o = ops_[u];
    if (!o.here) continue;
    const OperatorLayout& L = o.layout;
    const I c = o.c();
    float* st = mem_[static_cast<std::size_t>(states_[u])] =
        dev_.allocate(alloc_bytes_[static_cast<std::size_t>(states_[u])],
                      sched_.buffers[static_cast<std::size_t>(states_[u])].name);
    float* ad = mem_[static_cast<std::size_t>(adam_[u])] =
        dev_.allocate(alloc_bytes_[static_cast<std::size_t>(adam_[u])],
                      sched_.buffers[static_cast<std::size_t>(adam_[u])].name);
    // This rank's shard of each of its slices (the whole slice when replicated).
    const int rank = o.shards->shard_of(o.sharding);
    std::vector<float> host(static_cast<std::size_t>(2 * c), 0.0f);
    for (int j = 0; j < o.n; ++j) {
      const auto full = initial_slice(w_.operators[u], L, o.first_slice + j);
      std::copy_n(full.begin() + rank * L.shard_elems, L.shard_elems, host.begin() + j * L.shard_elems);
    }
    s.enqueue([this, st, ad, c, host = std::move(host)] {
      dev_.upload(dev_.compute_stream(), host.data(), st, host.size());
      dev_.fill(dev_.compute_stream(), ad, static_cast<std::size_t>(2 * c), 0.0f);
    });
  }
  s.synchronize();
}

// The executor's baseline: carried activations and gradients, tokens and targets per micro-batch, the
// loss.
void Executor::allocate_baseline() {
  Stream& s = dev_.compute_stream();
  I width = 0, rows = 0;
  for (std::size_t u = 0; u < w_.operators.size(); ++u) {
    if (!ops_[u].here) continue;
    const Operator& op = w_.operators[u];
    width = std::max({width, width_in(op, 0), I{op.hidden}});
    rows = std::max(rows, shape(ops_[u].t).rows());
  }
  rows = std::max(rows, shape(1).rows());
  for (int i = 0; i < 4; ++i) carry_.push_back(dev_.allocate(floats_bytes(rows * width), "executor carry"));
  // Emulated compute writes no activations: what the TP all-reduces sum starts at zero.
  if (opt_.emulate_compute)
    s.enqueue([this, n = static_cast<std::size_t>(rows * width)] {
      for (float* c : carry_) dev_.fill(dev_.compute_stream(), c, n, 0.0f);
    });
  loss_ = dev_.allocate(sizeof(float), "executor loss");
  baseline_bytes_ = floats_bytes(4 * rows * width + 1);
  // Emulated compute: the compute stream's exchanges (CP, EP) run as the schedule's tasks, from a
  // scratch of each one's send and receive buffers; the arithmetic's scratch below is not needed.
  if (opt_.emulate_compute) {
    I floats = 0;
    for (int t = first_task(); t < end_task(); ++t) {
      const sim::Task& task = sched_.tasks[static_cast<std::size_t>(t)];
      const bool exchange =
          task.stream == sim::Stream::kCompute && sim::is_collective(task.kind) &&
          (task.kind == TaskKind::kAllToAll || (plan_.cp > 1 && task.kind != TaskKind::kAllReduce));
      if (exchange) floats = std::max(floats, 2 * static_cast<I>(task.bytes / sizeof(float)));
    }
    if (floats > 0) {
      emulated_ = dev_.allocate(floats_bytes(floats), "executor emulated exchanges");
      s.enqueue([this, floats] {
        dev_.fill(dev_.compute_stream(), emulated_, static_cast<std::size_t>(floats), 0.0f);
      });
      baseline_bytes_ += floats_bytes(floats);
    }
  }
  // Context parallelism: ring attention's blocks in flight (numerics.hpp), the largest slice's.
  I exchange = 0;
  for (std::size_t u = 0; u < w_.operators.size() && !opt_.emulate_compute; ++u)
    if (ops_[u].here)
      exchange = std::max(
          exchange, attention_exchange_floats(w_.operators[u], ops_[u].layout.slices, shape(ops_[u].t)));
  if (exchange > 0) {
    gathered_ = dev_.allocate(floats_bytes(exchange), "executor CP ring blocks");
    baseline_bytes_ += floats_bytes(exchange);
  }
  // The first global sample of local rank `local`'s rows at degree t in micro-batch k (a stage's
  // micro-batch is b0 N_s / c samples under context parallelism).
  const I b0 = sched_.batch, cp = plan_.cp, seq = w_.seq / cp, vocab = plan_.model.vocab;
  const auto first_sample = [&](int k, int local, int t) {
    return opt_.sample_offset >= 0 ? opt_.sample_offset + I{k} * b0 * per_stage_ / cp
                                   : I{k} * b0 * per_stage_ / cp + I{local / (t * cp)} * b0 * t;
  };
  // Expert parallelism: each MoE operator's routes per micro-batch (its EP ranks' samples), their
  // device copies, and the all-to-alls' scratch.
  I ep_floats = 0;
  for (std::size_t u = 0; u < w_.operators.size() && !opt_.emulate_compute; ++u) {
    const OpRun& o = ops_[u];
    const Operator& op = w_.operators[u];
    if (!o.here || op.experts <= 0) continue;
    const MathShape m = shape(o.t);
    ep_floats = std::max(ep_floats, moe_exchange_floats(op, o.place.ep, m));
    for (int k = 0; k < sched_.micro_batches; ++k) {
      std::vector<I> firsts;
      for (int q = 0; q < o.place.ep; ++q)
        firsts.push_back(first_sample(k, local_ + (q - o.place.index) * o.t, o.t));
      MoeRoute route = moe_route(op, o.place, firsts, m.batch, m.seq, m.chunk * m.seq);
      std::pair<float*, float*> ids;
      for (const bool gates : {false, true}) {
        const auto& host = gates ? route.gate_at : route.send_rows;
        float* buf = dev_.allocate(floats_bytes(static_cast<I>(host.size())),
                                   gates ? "executor MoE gate positions" : "executor MoE send rows");
        baseline_bytes_ += floats_bytes(static_cast<I>(host.size()));
        (gates ? ids.second : ids.first) = buf;
        s.enqueue([this, buf, &host] {
          dev_.upload(dev_.compute_stream(), reinterpret_cast<const float*>(host.data()), buf, host.size());
        });
      }
      s.synchronize();
      route_ids_[{k, static_cast<int>(u)}] = ids;
      routes_[{k, static_cast<int>(u)}] = std::move(route);
    }
  }
  if (ep_floats > 0) {
    ep_send_ = dev_.allocate(floats_bytes(ep_floats), "executor EP send scratch");
    ep_recv_ = dev_.allocate(floats_bytes(ep_floats), "executor EP receive scratch");
    baseline_bytes_ += 2 * floats_bytes(ep_floats);
  }
  // The token ids of a lookup and the targets of a head, per micro-batch, at the operator's degree and
  // less its vocabulary columns' first.
  // Under context parallelism (CP degree c) the ranks of a CP group hold chunks of the same samples: a
  // stage's micro-batch is b0 N_s / c samples, and a rank's tokens are its chunk's seq / c positions.
  for (std::size_t u = 0; u < w_.operators.size(); ++u) {
    const OpRun& o = ops_[u];
    const Operator& op = w_.operators[u];
    if (!o.here) continue;
    const bool lookup = op.kind == OperatorKind::kEmbedding;
    const bool head = op.kind == OperatorKind::kHead || (lookup && op.tied_gradient);
    if (!lookup && !head) continue;
    const I v0 = o.layout.slice[static_cast<std::size_t>(o.first_slice)].vocab0;
    const I count = b0 * o.t;
    const I position0 = shape(o.t).chunk * seq;  // the rank's chunk's first position
    for (int k = 0; k < sched_.micro_batches; ++k) {
      const I first = first_sample(k, local_, o.t);
      for (const bool targets : {false, true}) {
        if ((targets && !head) || (!targets && !lookup)) continue;
        std::vector<std::int32_t> ids(static_cast<std::size_t>(count * seq));
        for (I i = 0; i < count; ++i)
          for (I p = 0; p < seq; ++p)
            ids[static_cast<std::size_t>(i * seq + p)] =
                static_cast<std::int32_t>(token_of(first + i, position0 + p + (targets ? 1 : 0), vocab) - v0);
        float* buf =
            dev_.allocate(floats_bytes(count * seq), targets ? "executor targets" : "executor tokens");
        baseline_bytes_ += floats_bytes(count * seq);
        (targets ? targets_ : tokens_)[{k, static_cast<int>(u)}] = buf;
        s.enqueue([this, buf, ids = std::move(ids)] {
          dev_.upload(dev_.compute_stream(), reinterpret_cast<const float*>(ids.data()), buf, ids.size());
        });
      }
    }
  }
  s.synchronize();
}

}  // namespace osdp::validate
