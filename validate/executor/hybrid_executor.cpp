#include "validate/executor/hybrid_executor.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "sim/pipeline.hpp"

namespace osdp::validate {

using costmodel::Operator;
using costmodel::OperatorKind;
using I = std::int64_t;

struct HybridExecutor::OpState {
  int t = 1, tp_index = 0, d = 1;
  bool replicate = false;
  OperatorLayout layout;     // t slices, padded to a multiple of the DP group
  float* weights = nullptr;  // the whole TP slice (sharded: gathered at the step's start)
  float* shard = nullptr;    // sharded: this rank's shard of the slice
  float* grad = nullptr;     // the step's accumulated gradient of the whole slice
  float* grad_shard = nullptr;
  float* scratch = nullptr;  // one backward's gradient
  float* adam = nullptr;     // m then v, of the shard (or of the slice when replicated)
  I update_elems() const { return replicate ? layout.padded_elems : layout.shard_elems; }
};

struct HybridExecutor::Saved {
  float* x = nullptr;          // the pass's input at its degree
  float* internals = nullptr;  // attention, MLP, head: what the backward reads
  float* tokens = nullptr;     // a lookup's token ids
};

namespace {

bool residual(const Operator& op) {
  return op.kind == OperatorKind::kAttention || op.kind == OperatorKind::kMlp;
}
bool is_head(const Operator& op, int site) {
  return op.kind == OperatorKind::kHead || (op.kind == OperatorKind::kEmbedding && site == 1);
}
bool is_lookup(const Operator& op, int site) {
  return op.kind == OperatorKind::kEmbedding && site == 0;
}
bool power_of_two(int x) {
  return x > 0 && (x & (x - 1)) == 0;
}

}  // namespace

HybridExecutor::HybridExecutor(Device& dev, Communicator& comm, const costmodel::ModelSpec& model,
                               const costmodel::HybridPlan& plan, ExecutorOptions options)
    : dev_(dev),
      comm_(comm),
      hw_(costmodel::hybrid_workload(model, plan.pp)),
      plan_(plan),
      vocab_(model.vocab),
      opt_(options),
      world_(comm.size()) {
  const costmodel::Workload& w = hw_.workload;
  if (w.precision != costmodel::Precision::kFp32)
    throw UsageError(fmt::format("the {} backend computes in fp32; model {} is mixed precision",
                                 comm.backend(), w.model_name));
  if (hw_.tied_copy)
    throw UsageError(fmt::format(
        "model {}: a tied embedding split over pipeline stages (its copy as the LM head of the last stage) "
        "is not executed yet; run it untied or with pp 1",
        w.model_name));
  const int pp = plan.pp;
  if (pp < 1 || world_ % pp != 0)
    throw UsageError(fmt::format("the plan's pipeline degree {} does not divide the {} ranks", pp, world_));
  per_stage_ = world_ / pp;
  stage_ = comm.rank() / per_stage_;
  local_ = comm.rank() % per_stage_;
  const int units = static_cast<int>(hw_.units.size());
  const auto& starts = plan.stage_first_unit;
  if (static_cast<int>(starts.size()) != pp || starts.front() != 0 || starts.back() >= units ||
      std::adjacent_find(starts.begin(), starts.end(), [](int a, int b) { return a >= b; }) != starts.end())
    throw UsageError(
        fmt::format("the plan's stage starts do not cut the {} units into {} stages", units, pp));
  if (static_cast<int>(plan.unit_tp.size()) != units || plan.choices.size() != w.operators.size())
    throw UsageError(fmt::format("the plan has {} TP degrees and {} choices for {} units and {} operators",
                                 plan.unit_tp.size(), plan.choices.size(), units, w.operators.size()));
  if (plan.micro_batches < 1 || plan.b0 < 1)
    throw UsageError(
        fmt::format("the plan's micro-batches ({}) and samples per micro-batch ({}) must be positive",
                    plan.micro_batches, plan.b0));
  for (int u = 0; u < units; ++u) {
    const int t = plan.unit_tp[static_cast<std::size_t>(u)];
    if (!power_of_two(t) || per_stage_ % t != 0)
      throw UsageError(
          fmt::format("unit {}: TP degree {} is not a power of two dividing the stage's {} ranks",
                      hw_.units[static_cast<std::size_t>(u)].name, t, per_stage_));
  }
  // Every rank makes every degree's groups, in the same order (the splits are collective).
  for (int t = 1; t <= per_stage_; t *= 2) {
    tp_[t] = &comm.split(stage_ * per_stage_ + local_ / t, local_ % t,
                         fmt::format("making the TP groups of {}", t));
    dp_[t] = &comm.split(stage_ * per_stage_ + local_ % t, local_ / t,
                         fmt::format("making the DP groups of {}", t));
  }

  const int first = plan.stage_first_unit[static_cast<std::size_t>(stage_)];
  const int end = stage_ + 1 < pp ? plan.stage_first_unit[static_cast<std::size_t>(stage_ + 1)] : units;
  ops_.resize(w.operators.size());
  Stream& s = dev_.compute_stream();
  for (int u = first; u < end; ++u) {
    const int t = plan.unit_tp[static_cast<std::size_t>(u)];
    for (const int o : hw_.units[static_cast<std::size_t>(u)].ops) {
      const Operator& op = w.operators[static_cast<std::size_t>(o)];
      passes_.push_back({o, 0, u});
      auto st = std::make_unique<OpState>();
      st->t = t;
      st->tp_index = local_ % t;
      st->d = per_stage_ / t;
      st->replicate = plan.choices[static_cast<std::size_t>(o)].replicate;
      if (t > 1 && !costmodel::tp_allowed(op, t))
        throw UsageError(fmt::format("operator {} cannot run at TP degree {}", op.name, t));
      st->layout = make_layout(op, t, st->d);
      const OperatorLayout& L = st->layout;
      st->weights = alloc(L.padded_elems, "hybrid weights");
      st->grad = alloc(L.padded_elems, "hybrid gradient");
      st->scratch = alloc(L.padded_elems, "hybrid gradient scratch");
      if (!st->replicate) {
        st->shard = alloc(L.shard_elems, "hybrid weight shard");
        st->grad_shard = alloc(L.shard_elems, "hybrid gradient shard");
      }
      st->adam = alloc(2 * st->update_elems(), "hybrid Adam states");
      const std::vector<float> full = initial_slice(op, L, st->tp_index);
      const int dp_rank = local_ / t;
      s.enqueue([this, p = st.get(), full, dp_rank] {
        Stream& cs = dev_.compute_stream();
        const OperatorLayout& l = p->layout;
        dev_.upload(cs, full.data(), p->weights, full.size());
        if (!p->replicate)
          dev_.upload(cs, full.data() + dp_rank * l.shard_elems, p->shard,
                      static_cast<std::size_t>(l.shard_elems));
        dev_.fill(cs, p->adam, static_cast<std::size_t>(2 * p->update_elems()), 0.0f);
      });
      ops_[static_cast<std::size_t>(o)] = std::move(st);
    }
  }
  // A tied embedding's LM head runs at the end, at the embedding's degree.
  for (int u = first; u < end; ++u)
    for (const int o : hw_.units[static_cast<std::size_t>(u)].ops) {
      const Operator& op = w.operators[static_cast<std::size_t>(o)];
      if (op.kind == OperatorKind::kEmbedding && op.tied_gradient) passes_.push_back({o, 1, u});
    }
  loss_ = alloc(1, "hybrid loss");
  ignored_ = alloc(1, "hybrid loss (ignored)");
  s.synchronize();
}

HybridExecutor::~HybridExecutor() {
  for (auto& st : ops_) {
    if (!st) continue;
    for (float** p : {&st->weights, &st->shard, &st->grad, &st->grad_shard, &st->scratch, &st->adam})
      release(*p);
  }
  for (auto& [k, list] : saved_)
    for (Saved& sv : list)
      for (float** p : {&sv.x, &sv.internals, &sv.tokens}) release(*p);
  release(loss_);
  release(ignored_);
}

float* HybridExecutor::alloc(I floats, const char* what) {
  return floats > 0 ? dev_.allocate(static_cast<std::size_t>(floats) * sizeof(float), what) : nullptr;
}

void HybridExecutor::release(float*& p) {
  if (p != nullptr) dev_.deallocate(p);
  p = nullptr;
}

Communicator& HybridExecutor::tp(int t) const {
  return *tp_.at(t);
}
Communicator& HybridExecutor::dp(int t) const {
  return *dp_.at(t);
}

MathShape HybridExecutor::shape(int t) const {
  MathShape m;
  m.batch = I{plan_.b0} * t;
  m.seq = hw_.workload.seq;
  m.vocab = vocab_;
  m.math = opt_.gemm_math;
  return m;
}

float* HybridExecutor::samples(int k, int t, bool targets) {
  const MathShape m = shape(t);
  const I first = I{k} * plan_.b0 * per_stage_ + I{local_ / t} * t * plan_.b0;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(m.rows()));
  for (I i = 0; i < m.batch; ++i)
    for (I p = 0; p < m.seq; ++p)
      ids[static_cast<std::size_t>(i * m.seq + p)] = token_of(first + i, p + (targets ? 1 : 0), m.vocab);
  float* buf = alloc(m.rows(), targets ? "hybrid targets" : "hybrid tokens");
  dev_.upload(dev_.compute_stream(), reinterpret_cast<const float*>(ids.data()), buf, ids.size());
  return buf;
}

float* HybridExecutor::relayout(float* x, int t_from, int t_to, I width, const char* what, int k) {
  if (t_from == t_to) return x;
  Stream& s = dev_.compute_stream();
  const I part = I{plan_.b0} * hw_.workload.seq * width;  // this rank's own samples
  float* y = alloc(part * t_to, "hybrid re-layout");
  float* own = y + (local_ % t_to) * part;
  dev_.copy(s, x + (local_ % t_from) * part, own, static_cast<std::size_t>(part));
  if (t_to > 1)
    tp(t_to).all_gather(
        s, own, y, static_cast<std::size_t>(part),
        fmt::format("re-layout {} of micro-batch {} from TP {} to {}", what, k, t_from, t_to));
  release(x);
  return y;
}

HybridExecutor::PassView HybridExecutor::view(const Pass& p) const {
  const Operator& op = hw_.workload.operators[static_cast<std::size_t>(p.op)];
  OpState& st = *ops_[static_cast<std::size_t>(p.op)];
  return {op, st, shape(st.t), width_in(op, p.site), is_head(op, p.site), is_lookup(op, p.site)};
}

// What forward and backward pass to the arithmetic alike: the slice, its weights and what the
// forward saved (its elementwise kernels pass over the input's `input_floats`).
SliceArgs HybridExecutor::slice_args(const Pass& p, const OpState& st, const Saved& sv,
                                     I input_floats) const {
  SliceArgs a;
  a.op = &hw_.workload.operators[static_cast<std::size_t>(p.op)];
  a.layout = &st.layout;
  a.slice = st.tp_index;
  a.site = p.site;
  a.weights = st.weights;
  a.x = sv.x;
  a.internals = sv.internals;
  a.tokens = reinterpret_cast<const std::int32_t*>(sv.tokens);
  a.touch = sv.x;
  a.touch_floats = sv.x != nullptr ? input_floats : 0;
  return a;
}

void HybridExecutor::forward(int k) {
  const costmodel::Workload& w = hw_.workload;
  Stream& s = dev_.compute_stream();
  const I tokens_total = I{plan_.global_batch(world_)} * w.seq;
  std::vector<Saved>& saved = saved_[k];
  saved.assign(passes_.size(), Saved{});
  float* cur = nullptr;
  int cur_t = 1;
  if (stage_ > 0) {
    const Operator& op = w.operators[static_cast<std::size_t>(passes_.front().op)];
    const I n = shape(1).rows() * width_in(op, 0);
    cur = alloc(n, "hybrid received activation");
    comm_.recv(s, cur, static_cast<std::size_t>(n), comm_.rank() - per_stage_, 2 * k,
               fmt::format("receiving micro-batch {}'s activation", k));
  }
  for (std::size_t pi = 0; pi < passes_.size(); ++pi) {
    const Pass& p = passes_[pi];
    const auto [op, st, m, win, head, lookup] = view(p);
    const I rows = m.rows();
    Saved& sv = saved[pi];
    if (!lookup) {
      cur = relayout(cur, cur_t, st.t, win, op.name.c_str(), k);
      sv.x = cur;
    } else {
      sv.tokens = samples(k, st.t, false);
    }
    cur_t = st.t;
    const I internal = head || op.kind != OperatorKind::kEmbedding ? internal_floats(op, st.t, m) : 0;
    sv.internals = alloc(internal, "hybrid internals");
    float* y = nullptr;
    if (head) {
      dev_.fill(s, sv.internals, static_cast<std::size_t>(rows * m.vocab), 0.0f);
    } else {
      y = alloc(rows * op.hidden, "hybrid activation");
      if (residual(op) && st.tp_index == 0)
        dev_.copy(s, sv.x, y, static_cast<std::size_t>(rows * op.hidden));
      else
        dev_.fill(s, y, static_cast<std::size_t>(rows * op.hidden), 0.0f);
    }
    SliceArgs a = slice_args(p, st, sv, rows * win);
    a.y = y;
    forward_slice(dev_, s, m, a);
    const std::string what = fmt::format("TP all-reduce of {} (micro-batch {})", op.name, k);
    if (head) {
      if (st.t > 1) tp(st.t).all_reduce(s, sv.internals, static_cast<std::size_t>(rows * m.vocab), what);
      float* targets = samples(k, st.t, true);
      dev_.mse_onehot(s, sv.internals, rows, m.vocab, reinterpret_cast<const std::int32_t*>(targets),
                      1.0f / static_cast<float>(tokens_total), st.tp_index == 0 ? loss_ : ignored_);
      release(targets);
      cur = nullptr;
    } else {
      if (st.t > 1) tp(st.t).all_reduce(s, y, static_cast<std::size_t>(rows * op.hidden), what);
      cur = y;
    }
  }
  if (cur != nullptr) {  // not the last stage: hand the t = 1 layout on
    const Operator& op = w.operators[static_cast<std::size_t>(passes_.back().op)];
    cur = relayout(cur, cur_t, 1, op.hidden, "the stage's output", k);
    comm_.send(s, cur, static_cast<std::size_t>(shape(1).rows() * op.hidden), comm_.rank() + per_stage_,
               2 * k, fmt::format("sending micro-batch {}'s activation", k));
    release(cur);
  }
}

void HybridExecutor::backward(int k) {
  const costmodel::Workload& w = hw_.workload;
  Stream& s = dev_.compute_stream();
  std::vector<Saved>& saved = saved_.at(k);
  float* dy = nullptr;
  int dy_t = 1;
  if (stage_ + 1 < plan_.pp) {
    const Operator& op = w.operators[static_cast<std::size_t>(passes_.back().op)];
    const I n = shape(1).rows() * op.hidden;
    dy = alloc(n, "hybrid received gradient");
    comm_.recv(s, dy, static_cast<std::size_t>(n), comm_.rank() + per_stage_, 2 * k + 1,
               fmt::format("receiving micro-batch {}'s gradient", k));
  }
  for (std::size_t pi = passes_.size(); pi-- > 0;) {
    const Pass& p = passes_[pi];
    const auto [op, st, m, win, head, lookup] = view(p);
    const I rows = m.rows();
    Saved& sv = saved[pi];
    if (!head) dy = relayout(dy, dy_t, st.t, op.hidden, op.name.c_str(), k);
    float* dx = nullptr;
    if (!lookup) {
      dx = alloc(rows * win, "hybrid input gradient");
      if (residual(op) && st.tp_index == 0)
        dev_.copy(s, dy, dx, static_cast<std::size_t>(rows * win));
      else
        dev_.fill(s, dx, static_cast<std::size_t>(rows * win), 0.0f);
    }
    float* workspace = alloc(workspace_floats(op, st.t, m), "hybrid workspace");
    const OperatorLayout& L = st.layout;
    dev_.fill(s, st.scratch, static_cast<std::size_t>(L.padded_elems), 0.0f);
    SliceArgs a = slice_args(p, st, sv, rows * win);
    a.grads = st.scratch;
    a.dy = dy;
    a.dx = dx;
    a.workspace = workspace;
    backward_slice(dev_, s, m, a);
    // The step's gradient accumulates every micro-batch's (add_folded with one sample: g += scratch).
    dev_.add_folded(s, st.scratch, static_cast<std::size_t>(L.padded_elems), 0, st.grad,
                    static_cast<std::size_t>(L.padded_elems), 1);
    if (dx != nullptr && st.t > 1)
      tp(st.t).all_reduce(s, dx, static_cast<std::size_t>(rows * win),
                          fmt::format("TP all-reduce of {}'s input gradient (micro-batch {})", op.name, k));
    release(workspace);
    for (float** q : {&sv.x, &sv.internals, &sv.tokens}) release(*q);
    if (!head) release(dy);
    dy = dx;
    dy_t = st.t;
  }
  saved_.erase(k);
  if (dy != nullptr) {  // not the first stage: hand the gradient back in the t = 1 layout
    const Operator& op = w.operators[static_cast<std::size_t>(passes_.front().op)];
    const I win = width_in(op, 0);
    dy = relayout(dy, dy_t, 1, win, "the stage's input gradient", k);
    comm_.send(s, dy, static_cast<std::size_t>(shape(1).rows() * win), comm_.rank() - per_stage_, 2 * k + 1,
               fmt::format("sending micro-batch {}'s gradient", k));
    release(dy);
  }
}

void HybridExecutor::gather_weights() {
  Stream& s = dev_.compute_stream();
  for (std::size_t o = 0; o < ops_.size(); ++o) {
    OpState* st = ops_[o].get();
    if (st == nullptr) continue;
    dev_.fill(s, st->grad, static_cast<std::size_t>(st->layout.padded_elems), 0.0f);
    if (!st->replicate)
      dp(st->t).all_gather(s, st->shard, st->weights, static_cast<std::size_t>(st->layout.shard_elems),
                           fmt::format("all-gather of {}'s weights", hw_.workload.operators[o].name));
  }
}

void HybridExecutor::reduce_and_update() {
  Stream& s = dev_.compute_stream();
  AdamParams ap = opt_.adam;
  ap.step = steps_;
  for (std::size_t o = 0; o < ops_.size(); ++o) {
    OpState* st = ops_[o].get();
    if (st == nullptr) continue;
    const OperatorLayout& L = st->layout;
    const std::string& name = hw_.workload.operators[o].name;
    const I n = st->update_elems();
    if (st->replicate) {
      dp(st->t).all_reduce(s, st->grad, static_cast<std::size_t>(n),
                           fmt::format("all-reduce of {}'s gradient", name));
      dev_.adam(s, st->weights, st->grad, st->adam, st->adam + n, static_cast<std::size_t>(n), ap);
    } else {
      dp(st->t).reduce_scatter(s, st->grad, st->grad_shard, static_cast<std::size_t>(L.shard_elems),
                               fmt::format("reduce-scatter of {}'s gradient", name));
      dev_.adam(s, st->shard, st->grad_shard, st->adam, st->adam + n, static_cast<std::size_t>(n), ap);
    }
  }
}

HybridStepStats HybridExecutor::step() {
  ++steps_;
  Stream& cs = dev_.compute_stream();
  cs.enqueue([this] {
    dev_.fill(dev_.compute_stream(), loss_, 1, 0.0f);
    dev_.fill(dev_.compute_stream(), ignored_, 1, 0.0f);
  });
  cs.synchronize();
  comm_.barrier("the start of a hybrid step");
  const double t0 = dev_.now_s();
  cs.enqueue([this] {
    gather_weights();
    for (const auto& [is_backward, k] :
         sim::stage_program(plan_.schedule, plan_.pp, stage_, plan_.micro_batches))
      is_backward ? backward(k) : forward(k);
    reduce_and_update();
    comm_.flush_sends(dev_.compute_stream(), "the end of a hybrid step");
  });
  cs.synchronize();
  HybridStepStats stats;
  stats.seconds = dev_.now_s() - t0;
  float loss = 0;
  cs.enqueue([this, &loss] { dev_.download(dev_.compute_stream(), loss_, &loss, 1); });
  cs.synchronize();
  stats.loss = comm_.sum_over_ranks(static_cast<double>(loss));
  return stats;
}

std::vector<float> HybridExecutor::logical_weights(int u) {
  return logical(u, false);
}
std::vector<float> HybridExecutor::logical_gradients(int u) {
  return logical(u, true);
}

std::vector<float> HybridExecutor::logical(int u, bool gradient) {
  const Operator& op = hw_.workload.operators.at(static_cast<std::size_t>(u));
  const I P = op.parameters();
  std::vector<float> logical(static_cast<std::size_t>(P), 0.0f);
  Stream& s = dev_.compute_stream();
  float* sum = alloc(P, "hybrid logical copy");
  OpState* st = ops_[static_cast<std::size_t>(u)].get();
  s.enqueue([&] {
    if (st != nullptr) {
      const OperatorLayout& L = st->layout;
      float* full = alloc(L.padded_elems, "hybrid logical slice");
      if (st->replicate)
        dev_.copy(s, gradient ? st->grad : st->weights, full, static_cast<std::size_t>(L.padded_elems));
      else
        dp(st->t).all_gather(s, gradient ? st->grad_shard : st->shard, full,
                             static_cast<std::size_t>(L.shard_elems), "collecting weights for a check");
      std::vector<float> host(static_cast<std::size_t>(L.padded_elems));
      dev_.download(s, full, host.data(), host.size());
      release(full);
      if (local_ / st->t == 0) slice_to_logical(op, L, st->tp_index, host.data(), logical);
    }
    dev_.upload(s, logical.data(), sum, logical.size());
    comm_.all_reduce(s, sum, logical.size(), "collecting weights for a check");
    dev_.download(s, sum, logical.data(), logical.size());
  });
  s.synchronize();
  release(sum);
  return logical;
}

}  // namespace osdp::validate
