#include "sim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

namespace osdp::sim {

using costmodel::Choice;
using costmodel::Kernel;
using costmodel::Operator;

std::vector<std::vector<int>> Schedule::dependents() const {
  std::vector<std::vector<int>> out(tasks.size());
  for (std::size_t t = 0; t < tasks.size(); ++t)
    for (int d : tasks[t].deps) out[d].push_back(static_cast<int>(t));
  return out;
}

double Schedule::resident_bytes() const {
  double b = 0;
  for (int id : resident) b += buffers[id].bytes;
  return b;
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
  Builder(const costmodel::Plan& plan, const costmodel::Workload& w, const costmodel::CostModel& model)
      : plan_(plan), w_(w), model_(model) {
    s_.world_size = model.world_size();
    s_.nodes = plan.cluster.nodes;
    s_.per_node = plan.cluster.devices_per_node;
    s_.batch = plan.batch_size;
    s_.prefetch = plan.prefetch;
    s_.reserve_bytes = plan.cluster.reserve_bytes;
    held_.resize(w.operators.size());
    act_.assign(w.operators.size(), -1);
    tied_grad_.assign(w.operators.size(), -1);
  }

  Schedule build() {
    resident_states();
    std::vector<Step> fwd;
    for (int u = 0; u < static_cast<int>(w_.operators.size()); ++u) fwd.push_back({u, 0});
    for (int u = 0; u < static_cast<int>(w_.operators.size()); ++u)
      if (w_.operators[u].tied_gradient) fwd.push_back({u, 1});
    std::vector<Step> bwd(fwd.rbegin(), fwd.rend());
    run_phase(fwd, true);
    run_phase(bwd, false);
    optimizer();
    return std::move(s_);
  }

 private:
  const Choice& choice(int u) const { return plan_.operators[u].choice; }
  int slices(int u) const { return choice(u).replicate ? 1 : choice(u).split; }
  bool zdp_slice(int u, int j) const { return !choice(u).replicate && j < choice(u).zdp_slices; }
  bool checkpointed(int u) const { return choice(u).checkpoint && w_.operators[u].checkpointable; }
  double slice_params(int u) const {
    return std::ceil(static_cast<double>(w_.operators[u].parameters()) / slices(u));
  }
  double shard_params(int u) const {
    const auto p = w_.operators[u].parameters();
    return choice(u).replicate ? static_cast<double>(p)
                               : std::ceil(static_cast<double>(p) / model_.shards(choice(u)));
  }
  const std::string& name(int u) const { return w_.operators[u].name; }

  // A buffer of operator u; its name is for traces only, its role says what it holds.
  int buffer(std::string name, double bytes, BufferRole role, int u, int slice = 0, int site = 0) {
    s_.buffers.push_back({std::move(name), bytes, role, u, slice, site});
    return static_cast<int>(s_.buffers.size()) - 1;
  }

  // Appends a task; with prefetch 0 every task also waits for the one issued before it.
  int add(Task t) {
    const int previous = static_cast<int>(s_.tasks.size()) - 1;
    if (s_.prefetch == 0 && previous >= 0 &&
        std::find(t.deps.begin(), t.deps.end(), previous) == t.deps.end())
      t.deps.push_back(previous);
    s_.tasks.push_back(std::move(t));
    return static_cast<int>(s_.tasks.size()) - 1;
  }

  void resident_states() {
    const auto& B = w_.bytes;
    for (int u = 0; u < static_cast<int>(w_.operators.size()); ++u) {
      const double e = shard_params(u);
      s_.resident.push_back(buffer(name(u) + ".states", (B.weight + B.gradient) * e, BufferRole::kStates, u));
      s_.resident.push_back(buffer(name(u) + ".adam", B.optimizer * e, BufferRole::kAdam, u));
    }
  }

  std::vector<Kernel> kernels(int u, int site, bool forward) const {
    std::vector<Kernel> out;
    for (const auto& k : forward ? w_.operators[u].forward : w_.operators[u].backward)
      if (k.site == site) out.push_back(k);
    return out;
  }
  double slice_duration(int u, int site, bool forward) const {
    return model_.phase_s(kernels(u, site, forward), s_.batch, slices(u)) / slices(u);
  }

  std::vector<Need> needs(const Step& st, bool forward) const {
    std::vector<Need> out;
    const int u = st.op;
    if (choice(u).replicate) return out;
    const bool tied = w_.operators[u].tied_gradient;
    if (forward) {
      for (int j = 0; j < slices(u); ++j)
        if (st.site == 0 || zdp_slice(u, j)) out.push_back({j, false});
      return out;
    }
    if (tied) return out;  // the head keeps its gathered weights; the lookup's backward needs none
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
    const char* purpose =
        forward_phase_ ? (site == 1 ? "head." : "") : (nd.for_recompute ? "recompute." : "bwd.");
    const int buf = buffer(fmt::format("{}.{}w{}", name(u), purpose, nd.slice),
                           w_.bytes.weight * slice_params(u), BufferRole::kGatheredWeight, u, nd.slice, site);
    // One task per level (one on a world ring); the buffer comes with the first, the compute waits
    // for the last.
    const auto parts = model_.level_collectives(choice(u), costmodel::Collective::kAllGather,
                                                w_.bytes.weight * slice_params(u));
    int id = -1;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      Task t;
      t.name = fmt::format("{}.{}allgather{}{}", name(u), purpose, nd.slice, level_suffix(parts[i].level));
      t.kind = TaskKind::kAllGather;
      t.stream = Stream::kComm;
      t.op = u;
      t.slice = nd.slice;
      t.bytes = parts[i].bytes;
      t.level = parts[i].level;
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
    Task t;
    t.name = fmt::format("{}.{}{}{}", name(u), site == 1 ? "head." : "", to_string(kind), j);
    t.kind = kind;
    t.stream = Stream::kCompute;
    t.op = u;
    t.slice = j;
    t.site = site;
    t.duration_s = duration;
    t.deps = std::move(deps);
    return add(std::move(t));
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
      if (forward)
        forward_step(q, steps[q]);
      else
        backward_step(q, steps[q]);
    }
  }

  void forward_step(std::size_t q, const Step& st) {
    const int u = st.op;
    const Operator& op = w_.operators[u];
    const double b = s_.batch;
    std::size_t ni = 0;
    int scratch = -1;
    for (int j = 0; j < slices(u); ++j) {
      std::vector<int> deps;
      int gathered = -1;
      if (ni < steps_needs_[q].size() && steps_needs_[q][ni].slice == j) {
        const int g = take_gather(q, ni++, st);
        deps.push_back(g);
        gathered = gather_buffer_.at(g);
        held_[u][j] = gathered;
      }
      const int t = compute_task(TaskKind::kForward, u, st.site, j, slice_duration(u, st.site, true), deps);
      if (j == 0 && st.site == 0) {
        const double saved = checkpointed(u) ? op.input_bytes_per_sample : op.saved_bytes_per_sample;
        act_[u] = buffer(name(u) + ".activations", b * saved, BufferRole::kActivations, u);
        s_.tasks[t].allocs.push_back(act_[u]);
        // A checkpointed operator still computes its internals; they live through its forward only.
        if (checkpointed(u)) {
          scratch = buffer(name(u) + ".forward.scratch",
                           b * (op.saved_bytes_per_sample - op.input_bytes_per_sample),
                           BufferRole::kForwardScratch, u);
          s_.tasks[t].allocs.push_back(scratch);
        }
      }
      if (j == slices(u) - 1 && scratch >= 0) s_.tasks[t].frees.push_back(scratch);
      // A ZDP slice is freed after its forward, except at a tied head (its backward comes next).
      if (zdp_slice(u, j) && st.site == 0 && gathered >= 0) {
        s_.tasks[t].frees.push_back(gathered);
        held_[u].erase(j);
      }
      last_compute_[q] = t;
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
                           : model_.level_collectives(choice(u), collective_of(kind), bytes);
    int id = dep;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      Task t;
      t.kind = task_kind_of(parts[i].kind);
      t.name = fmt::format("{}.{}{}{}", name(u), to_string(t.kind), j, level_suffix(parts[i].level));
      t.stream = Stream::kComm;
      t.op = u;
      t.slice = j;
      t.bytes = parts[i].bytes;
      t.level = parts[i].level;
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
    const Operator& op = w_.operators[u];
    const auto& B = w_.bytes;
    const double b = s_.batch;
    const int n = slices(u);
    const bool tied = op.tied_gradient;
    const double grad_slice = B.gradient * slice_params(u);

    if (tied && st.site == 1) {  // the LM head's backward: weights still gathered, no gathers
      const int head_workspace = buffer(name(u) + ".head.workspace", b * op.workspace_bytes_per_sample,
                                        BufferRole::kWorkspace, u, 0, 1);
      for (int j = 0; j < n; ++j) {
        const int t = compute_task(TaskKind::kBackward, u, 1, j, slice_duration(u, 1, false), {});
        if (j == 0) {
          s_.tasks[t].allocs = {head_workspace};
          if (!choice(u).replicate) {  // REPLICATE keeps its full gradient among its states
            tied_grad_[u] = buffer(name(u) + ".grad", B.gradient * static_cast<double>(op.parameters()),
                                   BufferRole::kTiedGradient, u);
            s_.tasks[t].allocs.push_back(tied_grad_[u]);
          }
        }
        if (held_[u].count(j)) {
          s_.tasks[t].frees.push_back(held_[u][j]);
          held_[u].erase(j);
        }
        if (j == n - 1) s_.tasks[t].frees.push_back(head_workspace);
        last_compute_[q] = t;
      }
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
              buffer(name(u) + ".recomputed", b * (op.saved_bytes_per_sample - op.input_bytes_per_sample),
                     BufferRole::kRecomputed, u);
          s_.tasks[t].allocs.push_back(recompute_acts);
        }
        s_.tasks[t].frees = frees;
        last_compute_[q] = t;
      }
    }

    const int workspace =
        buffer(name(u) + ".workspace", b * op.workspace_bytes_per_sample, BufferRole::kWorkspace, u);
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
      } else if (held_[u].count(j)) {
        gathered = held_[u][j];  // a DP slice kept since the forward
      }
      held_[u].erase(j);
      const int t = compute_task(TaskKind::kBackward, u, 0, j, slice_duration(u, 0, false), deps);
      Task& task = s_.tasks[t];
      if (j == 0) task.allocs.push_back(workspace);
      int grad = -1;
      if (!choice(u).replicate && !tied) {
        grad = buffer(fmt::format("{}.grad{}", name(u), j), grad_slice, BufferRole::kGradient, u, j);
        task.allocs.push_back(grad);
      }
      if (gathered >= 0) task.frees.push_back(gathered);
      if (j == n - 1) {
        task.frees.push_back(workspace);
        if (recompute_acts >= 0) task.frees.push_back(recompute_acts);
        task.frees.push_back(act_[u]);
      }
      last_compute_[q] = t;
      if (choice(u).replicate) {
        collective(TaskKind::kAllReduce, u, j, B.gradient * static_cast<double>(op.parameters()), t, {});
      } else if (!tied) {
        collective(TaskKind::kReduceScatter, u, j, grad_slice, t, {grad});
      }
    }
    if (tied && !choice(u).replicate) {  // the tied gradient, complete after the lookup's backward
      for (int j = 0; j < n; ++j)
        collective(TaskKind::kReduceScatter, u, j, grad_slice, last_compute_[q],
                   j == n - 1 ? std::vector<int>{tied_grad_[u]} : std::vector<int>{});
    }
  }

  void optimizer() {
    double seconds = 0;
    if (model_.options().tier == costmodel::Tier::kExtended)
      for (int u = 0; u < static_cast<int>(w_.operators.size()); ++u)
        seconds += model_.optimizer_s(shard_params(u), w_.bytes);
    Task t;
    t.name = "optimizer.step";
    t.kind = TaskKind::kOptimizer;
    t.stream = Stream::kCompute;
    t.duration_s = seconds;
    t.deps = collectives_;
    add(std::move(t));
  }

  const costmodel::Plan& plan_;
  const costmodel::Workload& w_;
  const costmodel::CostModel& model_;
  Schedule s_;
  std::vector<std::map<int, int>> held_;  // operator -> slice -> gathered buffer
  std::vector<int> act_;                  // operator -> saved activations buffer
  std::vector<int> tied_grad_;
  std::map<int, int> gather_buffer_;  // gather task -> its buffer
  std::vector<std::vector<Need>> steps_needs_;
  std::vector<std::vector<int>> prefetched_;
  std::vector<int> last_compute_;
  std::size_t next_prefetch_ = 0;
  std::size_t current_step_ = 0;
  bool forward_phase_ = true;
  std::vector<std::vector<int>> step_collectives_;  // reduce-scatters and all-reduces per step
  std::vector<int> collectives_;
};

}  // namespace

Schedule build_schedule(const costmodel::Plan& plan, const costmodel::Workload& workload,
                        const costmodel::CostModel& model) {
  return Builder(plan, workload, model).build();
}

}  // namespace osdp::sim
