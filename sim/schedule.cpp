#include "sim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "costmodel/error.hpp"

namespace osdp::sim {

using costmodel::Choice;
using costmodel::Kernel;
using costmodel::Operator;

std::vector<std::vector<int>> Schedule::dependents() const {
  std::vector<std::vector<int>> out(tasks.size());
  for (std::size_t t = 0; t < tasks.size(); ++t)
    for (int d : tasks[t].deps) out[static_cast<std::size_t>(d)].push_back(static_cast<int>(t));
  return out;
}

double Schedule::resident_bytes(int stage) const {
  double b = 0;
  for (int id : resident)
    if (buffers[static_cast<std::size_t>(id)].stage == stage)
      b += buffers[static_cast<std::size_t>(id)].bytes;
  return b;
}

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

namespace {

// One place an operator runs: its own place (site 0) or, for a tied embedding, the LM head (site 1).
struct Step {
  int op;
  int site;
};

// A gather a step needs: of which slice, and whether it feeds the recompute only (regather).
struct Need {
  int slice;
  bool for_recompute;
};

class Builder {
 public:
  Builder(const costmodel::Plan& plan, const costmodel::Workload& w, const costmodel::PlanCostModel& model)
      : plan_(plan), w_(w), model_(model) {
    costmodel::check_layout(plan, w, model.cluster());
    s_.world_size = model.world_size();
    s_.nodes = model.cluster().nodes;
    s_.per_node = model.cluster().devices_per_node;
    s_.pp = plan.pp;
    s_.batch = plan.batch_size;
    s_.micro_batches = plan.micro_batches;
    s_.prefetch = plan.prefetch;
    s_.reserve_bytes = model.cluster().reserve_bytes;
    const std::vector<int> unit_of = w.unit_of_operators();
    for (std::size_t u = 0; u < w.operators.size(); ++u) {
      const int t = plan.unit_tp[static_cast<std::size_t>(unit_of[u])];
      s_.op_tp.push_back(t);
      const Choice& c = plan.choices[u];
      sliced_.push_back(costmodel::plan_slice(w.operators[u], t, plan.sequence_parallel, w, c,
                                              model.options().expert_imbalance,
                                              {plan.cp, plan.cp_all_to_all}));
      if (!c.replicate && sliced_.back().splits(c.split).back() != c.split)
        throw UsageError(fmt::format("{}: its TP slice at degree {} cannot be split {} ways",
                                     w.operators[u].name, t, c.split));
    }
    op_unit_ = unit_of;
  }

  Schedule build() {
    s_.stage_begin.assign(1, 0);
    for (int s = 0; s < plan_.pp; ++s) {
      build_stage(s);
      s_.stage_begin.push_back(static_cast<int>(s_.tasks.size()));
    }
    // A receive waits for its send, on the peer rank of the other stage.
    for (const auto& [recv, key] : pending_recvs_)
      s_.tasks[static_cast<std::size_t>(recv)].deps.push_back(sends_.at(key));
    return std::move(s_);
  }

 private:
  using SendKey = std::tuple<int, bool, int>;  // sending stage, gradients?, micro-batch

  // ---- the operator at its degree -----------------------------------------------------------------
  const Choice& choice(int u) const { return plan_.choices[static_cast<std::size_t>(u)]; }
  int tp(int u) const { return s_.op_tp[static_cast<std::size_t>(u)]; }
  // The cost model of operator u's sharding group (its data-parallel group; with expert parallelism the
  // ranks holding the same experts).
  const costmodel::CostModel& sub(int u) const { return model_.sharding_model(plan_.pp, tp(u), choice(u)); }
  int ep(int u) const { return choice(u).ep; }
  const Operator& sliced(int u) const { return sliced_[static_cast<std::size_t>(u)]; }
  int batch(int u) const { return s_.batch * tp(u); }
  int slices(int u) const { return choice(u).replicate ? 1 : choice(u).split; }
  bool zdp_slice(int u, int j) const { return !choice(u).replicate && j < choice(u).zdp_slices; }
  costmodel::Recompute recompute(int u) const {
    return w_.operators[static_cast<std::size_t>(u)].recompute(choice(u));
  }
  bool checkpointed(int u) const { return recompute(u) == costmodel::Recompute::kFull; }
  bool selective(int u) const { return recompute(u) == costmodel::Recompute::kSelective; }
  double params(int u) const { return static_cast<double>(sliced(u).parameters()); }
  double slice_params(int u) const { return std::ceil(params(u) / slices(u)); }
  double shard_params(int u) const {
    return choice(u).replicate ? params(u) : std::ceil(params(u) / sub(u).shards(choice(u)));
  }
  const std::string& name(int u) const { return w_.operators[static_cast<std::size_t>(u)].name; }
  std::string mb_suffix() const { return s_.micro_batches > 1 ? fmt::format(".mb{}", mb_) : std::string(); }
  bool first_micro_batch() const { return mb_ == 0; }
  bool last_micro_batch() const { return mb_ == s_.micro_batches - 1; }

  // The rings of operator u's data-parallel group (plan.hpp: d = N_s / t ranks of one TP index), by the
  // level its sub-cluster gives them; the world's rings (pp = t = 1) are the calibrated ones.
  // An expert-parallel operator's are those of the ranks holding its experts (stride t ep; flat only).
  Group dp_group(int u, costmodel::RingLevel level) const {
    const int t = tp(u) * ep(u), ns = s_.stage_size(), g = s_.per_node;
    switch (level) {
      case costmodel::RingLevel::kIntra:
        return {g / t, t};
      case costmodel::RingLevel::kInter:
        return {ns / g, g};
      case costmodel::RingLevel::kWorld:
        break;
    }
    return {ns / t, t};
  }
  bool dp_is_world(int u) const { return s_.stage_size() / (tp(u) * ep(u)) == s_.world_size; }

  // ---- buffers and tasks --------------------------------------------------------------------------
  int buffer(std::string name, double bytes, BufferRole role, int u, int slice = 0, int site = 0) {
    s_.buffers.push_back(
        {std::move(name), bytes, role, u, slice, site, stage_, per_micro_batch(role) ? mb_ : 0});
    return static_cast<int>(s_.buffers.size()) - 1;
  }
  static bool per_micro_batch(BufferRole r) {
    return r == BufferRole::kActivations || r == BufferRole::kForwardScratch ||
           r == BufferRole::kRecomputed || r == BufferRole::kWorkspace;
  }

  // Appends a task of the stage; with prefetch 0 every task also waits for the one issued before it,
  // except a send: a send returns once posted (the executor's do not wait for their receiver) and its
  // delivery, on its own stream, holds up only the receive. A task after a send waits for the one
  // before the send.
  int add(Task t) {
    t.stage = stage_;
    if (t.micro_batch != -1) t.micro_batch = mb_;
    if (s_.prefetch == 0) {
      int previous = static_cast<int>(s_.tasks.size()) - 1;
      while (previous >= stage_first_task_ &&
             s_.tasks[static_cast<std::size_t>(previous)].kind == TaskKind::kSend)
        --previous;
      if (previous >= stage_first_task_ && std::find(t.deps.begin(), t.deps.end(), previous) == t.deps.end())
        t.deps.push_back(previous);
    }
    s_.tasks.push_back(std::move(t));
    return static_cast<int>(s_.tasks.size()) - 1;
  }

  // A collective on the compute stream (TP all-reduces, re-layouts) after the compute so far.
  // Returns the task (-1: none, a group of one rank or nothing to move).
  int compute_collective(std::string task_name, TaskKind kind, Payload payload, Group group, double bytes,
                         int u, int site = 0) {
    if (group.size <= 1 || bytes <= 0) return -1;
    Task t;
    t.name = std::move(task_name) + mb_suffix();
    t.kind = kind;
    t.stream = Stream::kCompute;
    t.op = u;
    t.site = site;
    t.bytes = bytes;
    t.payload = payload;
    t.group = group;
    t.calibrated = false;
    if (last_program_ >= 0) t.deps.push_back(last_program_);
    last_program_ = add(std::move(t));
    return last_program_;
  }

  // The TP all-reduce of operator u's activations (forward) or their gradient (backward) at `site`.
  void tp_allreduce(int u, bool forward, const char* what, int site = 0) {
    const auto traffic = costmodel::tp_traffic(w_.operators[static_cast<std::size_t>(u)], w_.seq);
    const double elements = forward ? traffic.forward_elements : traffic.backward_elements;
    compute_collective(fmt::format("{}.{}tp.{}", name(u), site == 1 ? "head." : "", what),
                       TaskKind::kAllReduce, forward ? Payload::kActivations : Payload::kActivationGradients,
                       {tp(u), 1}, batch(u) * elements * w_.bytes.activation / plan_.cp, u, site);
  }

  // An expert-parallel operator's two all-to-alls (plan_cost.hpp) of one phase on its EP group (ep
  // ranks at stride t), on the compute stream: the dispatch and the combine (forward, recompute) or
  // their gradients (backward), each with its send and receive buffers (2 X) while it runs.
  void expert_all_to_alls(int u, bool forward, const char* what) {
    if (ep(u) <= 1) return;
    const double x = batch(u) * sliced(u).dispatch_bytes_per_sample;
    for (const char* part : {"dispatch", "combine"}) {
      const std::size_t before = s_.tasks.size();
      compute_collective(fmt::format("{}.{}.{}", name(u), part, what), TaskKind::kAllToAll,
                         forward ? Payload::kActivations : Payload::kActivationGradients, {ep(u), tp(u)}, x,
                         u);
      if (s_.tasks.size() == before) continue;
      const int buf = buffer(fmt::format("{}.{}.{}.buffers", name(u), part, what) + mb_suffix(), 2 * x,
                             BufferRole::kWorkspace, u);
      s_.tasks.back().allocs.push_back(buf);
      s_.tasks.back().frees.push_back(buf);
    }
  }

  // An expert-parallel operator's parameters that are not the experts' (the norm, the router, a shared
  // MLP; plan_cost.hpp): every EP rank holds them, so once their gradients are reduced over the
  // expert-data group (`after`), the EP group all-reduces them, on the comm stream, before the optimizer.
  void expert_shared_allreduce(int u, const std::vector<int>& after) {
    const double elements = costmodel::ep_shared_elements(sliced(u), choice(u), sub(u));
    if (ep(u) <= 1 || elements <= 0) return;
    Task t;
    t.name = name(u) + ".shared.allreduce";
    t.kind = TaskKind::kAllReduce;
    t.stream = Stream::kComm;
    t.op = u;
    t.bytes = w_.bytes.reduce * elements;
    t.payload = Payload::kGradients;
    t.group = {ep(u), tp(u)};
    t.calibrated = false;
    t.expert_shared = true;
    t.deps = after;
    const int id = add(std::move(t));
    collectives_.push_back(id);
    step_collectives_[current_step_].push_back(id);
  }

  // Context parallelism's exchanges of attention operator u (plan_cost.hpp) on its CP group (cp ranks at
  // stride t), on the compute stream: ring attention's K/V blocks (forward and recompute: an all-gather
  // of cp KV; backward: that and the gradients' reduce-scatter), or Ulysses' all-to-alls (Q, K, V and
  // the output, each phase).
  void context_exchanges(int u, bool forward, const char* what) {
    const int c = plan_.cp;
    if (c <= 1 || w_.operators[static_cast<std::size_t>(u)].kind != costmodel::OperatorKind::kAttention)
      return;
    const double kv = batch(u) * sliced(u).kv_bytes_per_sample, q = batch(u) * sliced(u).q_bytes_per_sample;
    const Payload payload = forward ? Payload::kActivations : Payload::kActivationGradients;
    const Group group{c, tp(u)};
    const auto run = [&](const char* part, TaskKind kind, double bytes) {
      compute_collective(fmt::format("{}.cp.{}.{}", name(u), part, what), kind, payload, group, bytes, u);
    };
    if (plan_.cp_all_to_all) {
      run("qkv", TaskKind::kAllToAll, q + kv);
      run("out", TaskKind::kAllToAll, q);
      return;
    }
    // The K/V passes overlap the core's blocks (its forward's in forward and recompute, its backward's
    // in backward); the gradients' reduce-scatter does not.
    const int pass = compute_collective(fmt::format("{}.cp.kv.{}", name(u), what), TaskKind::kAllGather,
                                        payload, group, c * kv, u);
    if (pass >= 0) s_.tasks[static_cast<std::size_t>(pass)].block_s = ring_block_s(u, kernels(u, 0, forward));
    if (!forward) run("dkv", TaskKind::kReduceScatter, c * kv);
  }

  // Activations `hidden` wide re-laid out from degree `from` to `to` (plan_cost.hpp): an all-gather on
  // the ring of max / min ranks, in forward when the degree grows, in backward (of the gradient) when
  // it shrinks.
  void relayout(int from, int to, int hidden, bool forward, const std::string& what, int u) {
    if (from == to || (forward != (to > from))) return;
    const int hi = std::max(from, to), lo = std::min(from, to);
    compute_collective(
        fmt::format("{}.relayout{}to{}", what, from, to), TaskKind::kAllGather,
        forward ? Payload::kActivations : Payload::kActivationGradients, {hi / lo, lo},
        static_cast<double>(s_.batch) * hi * (w_.seq / plan_.cp) * hidden * w_.bytes.activation, u);
  }

  // ---- a stage ------------------------------------------------------------------------------------
  void build_stage(int s) {
    stage_ = s;
    stage_first_task_ = static_cast<int>(s_.tasks.size());
    held_.assign(w_.operators.size(), {});
    act_.clear();
    grad_.clear();
    tied_grad_.assign(w_.operators.size(), -1);
    collectives_.clear();
    last_program_ = -1;
    first_unit_ = plan_.stage_first_unit[static_cast<std::size_t>(s)];
    end_unit_ = s + 1 < plan_.pp ? plan_.stage_first_unit[static_cast<std::size_t>(s + 1)]
                                 : static_cast<int>(w_.units.size());
    resident_states();
    std::vector<Step> fwd;
    for (int u = first_unit_; u < end_unit_; ++u)
      for (const int o : w_.units[static_cast<std::size_t>(u)].ops) fwd.push_back({o, 0});
    for (int u = first_unit_; u < end_unit_; ++u)
      for (const int o : w_.units[static_cast<std::size_t>(u)].ops)
        if (w_.operators[static_cast<std::size_t>(o)].tied_gradient) fwd.push_back({o, 1});
    const std::vector<Step> bwd(fwd.rbegin(), fwd.rend());
    const auto program = stage_program(plan_.schedule, plan_.pp, s, s_.micro_batches);
    for (std::size_t i = 0; i < program.size(); ++i) {
      const auto [backward, mb] = program[i];
      mb_ = mb;
      // A tied head keeps its gathered weights when its backward comes right after its forward.
      head_kept_ = !backward && i + 1 < program.size() && program[i + 1] == std::pair{true, mb};
      if (backward) {
        enter_backward();
        run_phase(bwd, false);
        leave_backward();
      } else {
        enter_forward();
        run_phase(fwd, true);
        leave_forward();
      }
    }
    mb_ = 0;
    tied_copy_allreduce();
    optimizer();
  }

  void resident_states() {
    const auto& B = w_.bytes;
    for (int un = first_unit_; un < end_unit_; ++un)
      for (const int u : w_.units[static_cast<std::size_t>(un)].ops) {
        const double e = shard_params(u);
        s_.resident.push_back(
            buffer(name(u) + ".states", (B.shard_weight + B.shard_gradient) * e, BufferRole::kStates, u));
        s_.resident.push_back(buffer(name(u) + ".adam", B.optimizer * e, BufferRole::kAdam, u));
      }
  }

  int unit_hidden(int unit) const { return w_.units[static_cast<std::size_t>(unit)].hidden; }
  int unit_tp(int unit) const { return plan_.unit_tp[static_cast<std::size_t>(unit)]; }
  const Operator* first_op_of(int unit) const {
    return &w_.operators[static_cast<std::size_t>(w_.units[static_cast<std::size_t>(unit)].ops.front())];
  }

  // The stage's input: received from the previous stage in the t = 1 layout.
  void enter_forward() {
    if (stage_ == 0) return;
    const int hidden = unit_hidden(first_unit_ - 1);
    transfer(false, Payload::kActivations, hidden);
  }
  // The stage's output: laid out to t = 1 (a local copy) and sent to the next stage.
  void leave_forward() {
    if (stage_ + 1 >= plan_.pp) return;
    transfer(true, Payload::kActivations, unit_hidden(end_unit_ - 1));
  }
  // The gradient of the stage's output: received in the t = 1 layout, gathered to the last unit's degree.
  void enter_backward() {
    if (stage_ + 1 >= plan_.pp) return;
    const int last = end_unit_ - 1;
    transfer(false, Payload::kActivationGradients, unit_hidden(last));
    relayout(unit_tp(last), 1, unit_hidden(last), false, "output",
             w_.units[static_cast<std::size_t>(last)].ops.back());
  }
  // The gradient of the stage's input: sent back to the previous stage.
  void leave_backward() {
    if (stage_ == 0) return;
    transfer(true, Payload::kActivationGradients, unit_hidden(first_unit_ - 1));
  }

  // A send (to the next stage with activations, to the previous with gradients) or a receive.
  void transfer(bool send, Payload payload, int hidden) {
    const bool activations = payload == Payload::kActivations;
    const int peer = (send == activations) ? 1 : -1;
    Task t;
    t.name = fmt::format("{}.{}{}", send ? "send" : "recv", activations ? "activations" : "gradients",
                         mb_suffix());
    t.kind = send ? TaskKind::kSend : TaskKind::kRecv;
    t.stream = !send ? Stream::kCompute : peer > 0 ? Stream::kSendNext : Stream::kSendPrevious;
    t.bytes = static_cast<double>(s_.batch) * (w_.seq / plan_.cp) * hidden * w_.bytes.activation;
    t.payload = payload;
    t.peer = peer;
    if (last_program_ >= 0) t.deps.push_back(last_program_);
    const int id = add(std::move(t));
    if (send) {
      sends_[{stage_, !activations, mb_}] = id;
    } else {
      pending_recvs_.push_back({id, SendKey{stage_ + peer, !activations, mb_}});
      last_program_ = id;
    }
  }

  // ---- the data-parallel part of an operator (per phase, as for one stage before) --------------------
  std::vector<Kernel> kernels(int u, int site, bool forward) const {
    std::vector<Kernel> out;
    for (const auto& k : forward ? sliced(u).forward : sliced(u).backward)
      if (k.site == site) out.push_back(k);
    return out;
  }
  // A slice's compute; under ring attention less the blocks of the core that overlap the c - 1 passes
  // (the exchange's steps take them: ring_block_s).
  double slice_duration(int u, int site, bool forward) const {
    const auto ks = kernels(u, site, forward);
    const double whole = sub(u).phase_s(ks, batch(u), slices(u));
    return (whole - (plan_.cp - 1) * ring_block_s(u, ks)) / slices(u);
  }
  // One block of operator u's core among `ks` (a c-th of its time) where ring attention passes K/V
  // blocks around the CP group while it computes; 0 elsewhere.
  double ring_block_s(int u, const std::vector<Kernel>& ks) const {
    if (plan_.cp <= 1 || plan_.cp_all_to_all ||
        w_.operators[static_cast<std::size_t>(u)].kind != costmodel::OperatorKind::kAttention)
      return 0.0;
    return sub(u).ring_block_s(ks, batch(u), slices(u)) / plan_.cp;
  }

  std::vector<Need> needs(const Step& st, bool forward) const {
    std::vector<Need> out;
    const int u = st.op;
    if (choice(u).replicate) return out;
    const bool tied = w_.operators[static_cast<std::size_t>(u)].tied_gradient;
    const auto& held = held_[static_cast<std::size_t>(u)];
    if (forward) {
      for (int j = 0; j < slices(u); ++j)
        if (st.site == 0 ? (zdp_slice(u, j) || !held.count(j)) : zdp_slice(u, j)) out.push_back({j, false});
      return out;
    }
    if (tied) {  // the head gathers again what it did not keep; the lookup's backward needs no weights
      if (st.site == 1)
        for (int j = 0; j < slices(u); ++j)
          if (zdp_slice(u, j) && !held.count(j)) out.push_back({j, false});
      return out;
    }
    // Regathers for the recompute first (each freed after its recompute), then the backward's.
    if (checkpointed(u) && model_.options().checkpoint_regather)
      for (int j = 0; j < slices(u); ++j)
        if (zdp_slice(u, j)) out.push_back({j, true});
    for (int j = 0; j < slices(u); ++j)
      if (zdp_slice(u, j)) out.push_back({j, false});
    return out;
  }

  int gather_task(int u, int site, const Need& nd, int window_dep) {
    // Names say which gather this is: forward, at the LM head, for the backward or the recompute.
    const char* purpose = forward_phase_ ? (site == 1 ? "head." : "")
                                         : (site == 1          ? "head.bwd."
                                            : nd.for_recompute ? "recompute."
                                                               : "bwd.");
    const int buf = buffer(fmt::format("{}.{}w{}{}", name(u), purpose, nd.slice, mb_suffix()),
                           w_.bytes.weight * slice_params(u), BufferRole::kGatheredWeight, u, nd.slice, site);
    // One task per level (one on a flat ring); the buffer comes with the first, the compute waits
    // for the last.
    const auto parts = sub(u).level_collectives(choice(u), costmodel::Collective::kAllGather,
                                                w_.bytes.weight * slice_params(u));
    int id = -1;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      Task t;
      t.name = fmt::format("{}.{}allgather{}{}{}", name(u), purpose, nd.slice, level_suffix(parts[i].level),
                           mb_suffix());
      t.kind = TaskKind::kAllGather;
      t.stream = Stream::kComm;
      t.op = u;
      t.slice = nd.slice;
      t.site = site;
      t.bytes = parts[i].bytes;
      t.payload = Payload::kWeights;
      t.level = parts[i].level;
      t.group = dp_group(u, parts[i].level);
      t.calibrated = dp_is_world(u);
      if (i == 0) {
        t.allocs = {buf};
        if (window_dep >= 0) t.deps.push_back(window_dep);
      } else {
        t.deps.push_back(id);
      }
      id = add(std::move(t));
    }
    gather_buffer_[id] = buf;
    return id;
  }

  // The gather task of `need_index` of step q: issued earlier by prefetch, or now.
  int take_gather(std::size_t q, std::size_t need_index, const Step& st) {
    auto& ids = prefetched_[q];
    if (need_index < ids.size()) return ids[need_index];
    return gather_task(st.op, st.site, steps_needs_[q][need_index], -1);
  }

  void prefetch_upto(std::size_t last, const std::vector<Step>& steps) {
    if (s_.prefetch == 0) return;
    for (; next_prefetch_ <= last && next_prefetch_ < steps.size(); ++next_prefetch_) {
      const std::size_t q = next_prefetch_;
      // Issued once the compute of the step p + 1 before it has finished.
      const int window = q >= static_cast<std::size_t>(s_.prefetch) + 1
                             ? last_compute_[q - static_cast<std::size_t>(s_.prefetch) - 1]
                             : -1;
      for (const Need& nd : steps_needs_[q])
        prefetched_[q].push_back(gather_task(steps[q].op, steps[q].site, nd, window));
    }
  }

  int compute_task(TaskKind kind, int u, int site, int j, double duration, std::vector<int> deps) {
    // With prefetch p a backward step starts only when the reduce-scatters of the step p + 1 before
    // it are done: at most p + 1 operators' gradients are in flight.
    if (kind != TaskKind::kForward && s_.prefetch > 0 &&
        current_step_ > static_cast<std::size_t>(s_.prefetch)) {
      const auto& earlier = step_collectives_[current_step_ - static_cast<std::size_t>(s_.prefetch) - 1];
      deps.insert(deps.end(), earlier.begin(), earlier.end());
    }
    if (last_program_ >= 0 && std::find(deps.begin(), deps.end(), last_program_) == deps.end() &&
        is_program_sync(last_program_))
      deps.push_back(last_program_);
    Task t;
    t.name = fmt::format("{}.{}{}{}{}", name(u), site == 1 ? "head." : "", to_string(kind), j, mb_suffix());
    t.kind = kind;
    t.stream = Stream::kCompute;
    t.op = u;
    t.slice = j;
    t.site = site;
    t.duration_s = duration;
    t.deps = std::move(deps);
    last_program_ = add(std::move(t));
    return last_program_;
  }
  // Whether a task on the compute stream is a collective or a receive (compute waits for those in
  // stream order anyway; the dependency is written for the executor's and the critical path's sake).
  bool is_program_sync(int id) const {
    const Task& t = s_.tasks[static_cast<std::size_t>(id)];
    return t.stream == Stream::kCompute && (is_collective(t.kind) || t.kind == TaskKind::kRecv);
  }

  void run_phase(const std::vector<Step>& steps, bool forward) {
    forward_phase_ = forward;
    steps_needs_.clear();
    prefetched_.assign(steps.size(), {});
    last_compute_.assign(steps.size(), -1);
    next_prefetch_ = 0;
    for (const Step& st : steps) steps_needs_.push_back(needs(st, forward));
    step_collectives_.assign(steps.size(), {});
    for (std::size_t q = 0; q < steps.size(); ++q) {
      current_step_ = q;
      prefetch_upto(q + static_cast<std::size_t>(s_.prefetch), steps);
      if (forward) {
        relayout_at_entry(steps[q], true);
        forward_step(q, steps[q]);
      } else {
        backward_step(q, steps[q]);
        relayout_at_entry(steps[q], false);
      }
    }
  }

  // Into the first operator of a unit (forward: from the unit before it, the stage's input (t = 1)
  // or, for a tied head, the last unit) and out of it (backward: the gradient of its input back to the
  // layout before).
  void relayout_at_entry(const Step& st, bool forward) {
    const int unit = op_unit_[static_cast<std::size_t>(st.op)];
    if (st.site == 1) {
      relayout(unit_tp(end_unit_ - 1), tp(st.op), unit_hidden(end_unit_ - 1), forward, name(st.op) + ".head",
               st.op);
      return;
    }
    if (w_.units[static_cast<std::size_t>(unit)].ops.front() != st.op) return;
    if (unit == first_unit_ && stage_ == 0) return;  // the embedding takes no activation
    const int from = unit == first_unit_ ? 1 : unit_tp(unit - 1);
    relayout(from, unit_tp(unit), unit_hidden(unit - 1), forward,
             w_.units[static_cast<std::size_t>(unit)].name, st.op);
  }

  void forward_step(std::size_t q, const Step& st) {
    const int u = st.op;
    const Operator& op = sliced(u);
    const double b = batch(u);
    auto& held = held_[static_cast<std::size_t>(u)];
    std::size_t ni = 0;
    int scratch = -1;
    for (int j = 0; j < slices(u); ++j) {
      std::vector<int> deps;
      int gathered = -1;
      if (ni < steps_needs_[q].size() && steps_needs_[q][ni].slice == j) {
        const int g = take_gather(q, ni++, st);
        deps.push_back(g);
        gathered = gather_buffer_.at(g);
        held[j] = gathered;
      }
      const int t = compute_task(TaskKind::kForward, u, st.site, j, slice_duration(u, st.site, true), deps);
      if (j == 0 && st.site == 0) {
        const double kept = op.kept_bytes_per_sample(choice(u));
        const int act = buffer(name(u) + ".activations" + mb_suffix(), b * kept, BufferRole::kActivations, u);
        act_[{u, mb_}] = act;
        s_.tasks[static_cast<std::size_t>(t)].allocs.push_back(act);
        // A checkpointed operator still computes what it does not keep; that lives through its forward.
        if (checkpointed(u) || selective(u)) {
          scratch = buffer(name(u) + ".forward.scratch" + mb_suffix(), b * (op.saved_bytes_per_sample - kept),
                           BufferRole::kForwardScratch, u);
          s_.tasks[static_cast<std::size_t>(t)].allocs.push_back(scratch);
        }
      }
      if (j == slices(u) - 1 && scratch >= 0) s_.tasks[static_cast<std::size_t>(t)].frees.push_back(scratch);
      // A ZDP slice is freed after its forward, except at a tied head whose backward comes next.
      if (zdp_slice(u, j) && gathered >= 0 && (st.site == 0 || !head_kept_)) {
        s_.tasks[static_cast<std::size_t>(t)].frees.push_back(gathered);
        held.erase(j);
      }
      last_compute_[q] = t;
    }
    if (st.site == 0) {
      expert_all_to_alls(u, true, "fwd");
      context_exchanges(u, true, "fwd");
      tp_allreduce(u, true, "allreduce");
    }
  }

  static std::string level_suffix(costmodel::RingLevel l) {
    return l == costmodel::RingLevel::kWorld ? std::string() : fmt::format(".{}", costmodel::to_string(l));
  }

  // A collective of operator u after task `dep`, one task per level; `frees` go with the last.
  int collective(TaskKind kind, int u, int j, double bytes, int dep, std::vector<int> frees) {
    const auto parts = kind == TaskKind::kAllReduce
                           ? std::vector<costmodel::LevelCollective>{{costmodel::Collective::kAllReduce,
                                                                      bytes, costmodel::RingLevel::kWorld}}
                           : sub(u).level_collectives(choice(u), collective_of(kind), bytes);
    int id = dep;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      Task t;
      t.kind = task_kind_of(parts[i].kind);
      t.name = fmt::format("{}.{}{}{}", name(u), to_string(t.kind), j, level_suffix(parts[i].level));
      t.stream = Stream::kComm;
      t.op = u;
      t.slice = j;
      t.bytes = parts[i].bytes;
      t.payload = Payload::kGradients;
      t.level = parts[i].level;
      t.group = dp_group(u, parts[i].level);
      t.calibrated = dp_is_world(u);
      t.deps = {id};
      if (i + 1 == parts.size()) t.frees = std::move(frees);
      id = add(std::move(t));
      collectives_.push_back(id);
      step_collectives_[current_step_].push_back(id);
    }
    return id;
  }

  void backward_step(std::size_t q, const Step& st) {
    const int u = st.op;
    const Operator& op = sliced(u);
    const auto& B = w_.bytes;
    const double b = batch(u);
    const int n = slices(u);
    const bool tied = op.tied_gradient;
    const bool last = last_micro_batch();
    const double grad_slice = B.gradient_in_flight() * slice_params(u);  // in memory
    const double reduce_slice = B.reduce * slice_params(u);              // on the wire
    auto& held = held_[static_cast<std::size_t>(u)];

    if (tied && st.site == 1) {  // the LM head's backward: its kept or gathered-again weights
      const int head_workspace = buffer(name(u) + ".head.workspace" + mb_suffix(),
                                        b * op.workspace_bytes_per_sample, BufferRole::kWorkspace, u, 0, 1);
      std::size_t ni = 0;
      for (int j = 0; j < n; ++j) {
        std::vector<int> deps;
        if (ni < steps_needs_[q].size() && steps_needs_[q][ni].slice == j) {
          const int g = take_gather(q, ni++, st);
          deps.push_back(g);
          held[j] = gather_buffer_.at(g);
        }
        const int t = compute_task(TaskKind::kBackward, u, 1, j, slice_duration(u, 1, false), deps);
        Task& task = s_.tasks[static_cast<std::size_t>(t)];
        if (j == 0) {
          task.allocs = {head_workspace};
          if (!choice(u).replicate && tied_grad_[static_cast<std::size_t>(u)] < 0) {
            // REPLICATE keeps its full gradient among its states.
            tied_grad_[static_cast<std::size_t>(u)] =
                buffer(name(u) + ".grad", B.gradient * params(u), BufferRole::kTiedGradient, u);
            task.allocs.push_back(tied_grad_[static_cast<std::size_t>(u)]);
          }
        }
        if (held.count(j) && (zdp_slice(u, j) || last)) {
          task.frees.push_back(held[j]);
          held.erase(j);
        }
        if (j == n - 1) task.frees.push_back(head_workspace);
        last_compute_[q] = t;
      }
      tp_allreduce(u, false, "allreduce.bwd", 1);
      return;
    }

    // Recompute of a checkpointed operator.
    std::size_t ni = 0;
    std::map<int, int> gather_of;  // slice -> gather task feeding the backward
    int recompute_acts = -1;
    if (checkpointed(u)) {
      const bool regather = model_.options().checkpoint_regather;
      for (int j = 0; j < n; ++j) {
        std::vector<int> deps;
        std::vector<int> frees;
        if (ni < steps_needs_[q].size() && steps_needs_[q][ni].slice == j) {
          const Need nd = steps_needs_[q][ni];
          const int g = take_gather(q, ni++, st);
          deps.push_back(g);
          if (regather && nd.for_recompute)
            frees.push_back(gather_buffer_.at(g));  // freed after its recompute
          else
            gather_of[j] = g;  // reused by the backward
        }
        const int t = compute_task(TaskKind::kRecompute, u, 0, j, slice_duration(u, 0, true), deps);
        if (j == 0) {
          recompute_acts =
              buffer(name(u) + ".recomputed" + mb_suffix(),
                     b * (op.saved_bytes_per_sample - op.input_bytes_per_sample), BufferRole::kRecomputed, u);
          s_.tasks[static_cast<std::size_t>(t)].allocs.push_back(recompute_acts);
        }
        s_.tasks[static_cast<std::size_t>(t)].frees = frees;
        last_compute_[q] = t;
      }
      expert_all_to_alls(u, true, "recompute");
      context_exchanges(u, true, "recompute");
      tp_allreduce(u, true, "allreduce.recompute");
    }
    // Selective: the norms, rotary and activation run again, one task before the backward's first; no
    // weights gathered for it (their vectors come with the backward's gather) and no TP collective.
    if (selective(u)) {
      const int t = compute_task(TaskKind::kRecompute, u, 0, 0,
                                 sub(u).phase_s(op.selective_recompute, batch(u), slices(u)), {});
      recompute_acts = buffer(name(u) + ".recomputed" + mb_suffix(),
                              b * (op.saved_bytes_per_sample - op.kept_bytes_per_sample(choice(u))),
                              BufferRole::kRecomputed, u);
      s_.tasks[static_cast<std::size_t>(t)].allocs.push_back(recompute_acts);
      last_compute_[q] = t;
    }

    const int workspace = buffer(name(u) + ".workspace" + mb_suffix(), b * op.workspace_bytes_per_sample,
                                 BufferRole::kWorkspace, u);
    std::vector<int> reduced;  // the last micro-batch's gradient reductions of the slices
    for (int j = 0; j < n; ++j) {
      std::vector<int> deps;
      int gathered = -1;
      if (gather_of.count(j)) {
        deps.push_back(gather_of[j]);
        gathered = gather_buffer_.at(gather_of[j]);
      } else if (ni < steps_needs_[q].size() && steps_needs_[q][ni].slice == j) {
        const int g = take_gather(q, ni++, st);
        deps.push_back(g);
        gathered = gather_buffer_.at(g);
      } else if (held.count(j)) {
        gathered = held[j];  // a DP slice kept since the first forward
      }
      const bool release = gathered >= 0 && (zdp_slice(u, j) || last);
      if (release) held.erase(j);
      const int t = compute_task(TaskKind::kBackward, u, 0, j, slice_duration(u, 0, false), deps);
      Task& task = s_.tasks[static_cast<std::size_t>(t)];
      if (j == 0) task.allocs.push_back(workspace);
      // A slice's gradient: one backward's with one micro-batch; else accumulated from the first
      // backward to the last, then reduced.
      int grad = -1;
      if (!choice(u).replicate && !tied) {
        const auto key = std::pair{u, j};
        if (s_.micro_batches == 1 || first_micro_batch()) {
          grad = buffer(fmt::format("{}.grad{}", name(u), j), grad_slice, BufferRole::kGradient, u, j);
          task.allocs.push_back(grad);
          grad_[key] = grad;
        } else {
          grad = grad_.at(key);
        }
      }
      if (release) task.frees.push_back(gathered);
      if (j == n - 1) {
        task.frees.push_back(workspace);
        if (recompute_acts >= 0) task.frees.push_back(recompute_acts);
        task.frees.push_back(act_.at({u, mb_}));
      }
      last_compute_[q] = t;
      if (!last) continue;
      if (choice(u).replicate)
        reduced.push_back(collective(TaskKind::kAllReduce, u, j, B.reduce * params(u), t, {}));
      else if (!tied)
        reduced.push_back(collective(TaskKind::kReduceScatter, u, j, reduce_slice, t, {grad}));
    }
    if (!reduced.empty()) expert_shared_allreduce(u, reduced);
    if (tied && !choice(u).replicate && last) {  // the tied gradient, complete after the last lookup backward
      for (int j = 0; j < n; ++j)
        collective(
            TaskKind::kReduceScatter, u, j, reduce_slice, last_compute_[q],
            j == n - 1 ? std::vector<int>{tied_grad_[static_cast<std::size_t>(u)]} : std::vector<int>{});
    }
    if (!(w_.operators[static_cast<std::size_t>(u)].kind == costmodel::OperatorKind::kEmbedding)) {
      expert_all_to_alls(u, false, "bwd");
      context_exchanges(u, false, "bwd");
      tp_allreduce(u, false, "allreduce.bwd");
    }
  }

  // The tied copy (plan_cost.hpp): the first stage's token table and the last stage's LM head, their
  // gradients all-reduced between the two once per step, before the optimizer.
  void tied_copy_allreduce() {
    tied_task_ = -1;
    if (!w_.tied_copy || plan_.pp < 2 || (stage_ != 0 && stage_ != plan_.pp - 1)) return;
    const int head = w_.units.back().ops.back();
    const int u = stage_ == 0 ? w_.units.front().ops.front() : head;
    Task t;
    t.name = "tied.allreduce";
    t.kind = TaskKind::kAllReduce;
    t.stream = Stream::kComm;
    t.op = u;
    t.micro_batch = -1;
    t.bytes = w_.bytes.reduce * params(head);
    t.payload = Payload::kGradients;
    t.group = {2, (plan_.pp - 1) * s_.stage_size()};
    t.calibrated = false;
    t.deps = {last_program_};
    tied_task_ = add(std::move(t));
    if (stage_ == 0) {
      first_tied_ = tied_task_;
    } else {
      s_.tasks[static_cast<std::size_t>(tied_task_)].twin = first_tied_;
      s_.tasks[static_cast<std::size_t>(first_tied_)].twin = tied_task_;
    }
  }

  void optimizer() {
    double seconds = 0;
    if (model_.options().tier == costmodel::Tier::kExtended)
      for (int un = first_unit_; un < end_unit_; ++un)
        for (const int u : w_.units[static_cast<std::size_t>(un)].ops)
          seconds += sub(u).per_step_s(choice(u), params(u), w_.bytes);
    Task t;
    t.name = "optimizer.step";
    t.kind = TaskKind::kOptimizer;
    t.stream = Stream::kCompute;
    t.micro_batch = -1;
    t.duration_s = seconds;
    t.deps = collectives_;
    if (tied_task_ >= 0) t.deps.push_back(tied_task_);
    if (last_program_ >= 0 && std::find(t.deps.begin(), t.deps.end(), last_program_) == t.deps.end() &&
        is_program_sync(last_program_))
      t.deps.push_back(last_program_);
    add(std::move(t));
  }

  const costmodel::Plan& plan_;
  const costmodel::Workload& w_;
  const costmodel::PlanCostModel& model_;
  Schedule s_;
  std::vector<Operator> sliced_;  // per operator: its TP slice at its unit's degree
  std::vector<int> op_unit_;
  // The stage being built.
  int stage_ = 0, stage_first_task_ = 0, first_unit_ = 0, end_unit_ = 0;
  int mb_ = 0;
  bool head_kept_ = false;
  int last_program_ = -1;                    // the compute stream's last task
  std::vector<std::map<int, int>> held_;     // operator -> slice -> gathered buffer
  std::map<std::pair<int, int>, int> act_;   // (operator, micro-batch) -> saved activations
  std::map<std::pair<int, int>, int> grad_;  // (operator, slice) -> its gradient buffer
  std::vector<int> tied_grad_;
  std::vector<int> collectives_;  // the stage's reductions: the optimizer waits for them
  int tied_task_ = -1, first_tied_ = -1;
  // The phase being built.
  std::map<int, int> gather_buffer_;  // gather task -> its buffer
  std::vector<std::vector<Need>> steps_needs_;
  std::vector<std::vector<int>> prefetched_;
  std::vector<int> last_compute_;
  std::size_t next_prefetch_ = 0;
  std::size_t current_step_ = 0;
  bool forward_phase_ = true;
  std::vector<std::vector<int>> step_collectives_;  // reduce-scatters and all-reduces per step
  // Across stages.
  std::map<SendKey, int> sends_;
  std::vector<std::pair<int, SendKey>> pending_recvs_;
};

}  // namespace

Schedule build_schedule(const costmodel::Plan& plan, const costmodel::Workload& workload,
                        const costmodel::PlanCostModel& model) {
  return Builder(plan, workload, model).build();
}

}  // namespace osdp::sim
