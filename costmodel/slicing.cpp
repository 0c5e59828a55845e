// How an operator is cut: an operator split's slices (Kernel::slice, Operator::splits) and a tensor-
// parallel slice (tp_slice, tp_allowed, tp_traffic; workload.hpp's opening comment has the rules).
#include <algorithm>
#include <cmath>

#include "costmodel/workload.hpp"

namespace osdp::costmodel {
namespace {

// Activations per sample every TP rank keeps whole without sequence parallelism (opening comment).
double replicated_saved(const Operator& op, int seq, const PrecisionBytes& bytes, bool dropout) {
  if (op.tp_replicated_bytes_per_sample >= 0) return op.tp_replicated_bytes_per_sample;
  const double sh = static_cast<double>(seq) * op.hidden;
  const double e = bytes.activation, mask = dropout ? 1.0 : 0.0;
  switch (op.kind) {
    case OperatorKind::kAttention:
    case OperatorKind::kMlp:
      return (2 * e + mask) * sh;
    case OperatorKind::kHead:
      return e * sh;
    case OperatorKind::kEmbedding: {
      bool head = false;
      for (const Kernel& k : op.forward) head = head || k.site == 1;
      return mask * sh + (head ? e * sh : 0.0);
    }
    case OperatorKind::kProjection:
      return op.saved_bytes_per_sample;
  }
  return op.saved_bytes_per_sample;
}

bool vocabulary_weight(const Operator& op, const Weight& w) {
  return (op.kind == OperatorKind::kEmbedding || op.kind == OperatorKind::kHead) && w.splittable;
}

}  // namespace

Kernel Kernel::slice(int splits) const {
  Kernel s = *this;
  switch (split_dim) {
    case Dim::kM:
      s.m /= splits;
      break;
    case Dim::kN:
      s.n /= splits;
      break;
    case Dim::kK:
      s.k /= splits;
      break;
    case Dim::kCount:
      s.count /= splits;
      break;
    default:
      break;
  }
  return s;
}

std::vector<int> Operator::splits(int split_max) const {
  std::vector<int> out{1};
  bool any = false;
  for (const auto& w : weights) any = any || w.splittable;
  if (!any) return out;
  for (int n = 2; n <= split_max; n *= 2) {
    bool ok = true;
    for (const auto& w : weights)
      if (w.splittable && (w.split_columns ? w.cols : w.rows) % n != 0) ok = false;
    if (split_units > 0 && split_units % n != 0) ok = false;
    if (ok) out.push_back(n);
  }
  return out;
}

bool tp_allowed(const Operator& op, int t) {
  if (t == 1) return true;
  if (op.kind == OperatorKind::kProjection) return false;
  bool any = false;
  for (const auto& w : op.weights) any = any || w.splittable;
  if (!any) return false;
  if (op.kind == OperatorKind::kEmbedding || op.kind == OperatorKind::kHead)
    return true;  // padded vocabulary
  const auto s = op.splits(t);
  return std::find(s.begin(), s.end(), t) != s.end();
}

Operator tp_slice(const Operator& op, int t, bool sp, const Workload& workload) {
  if (t == 1) return op;
  Operator s = op;
  const double td = t;
  std::string column_weight;  // the last column-split weight: its bias is split too
  for (auto& w : s.weights) {
    if (w.splittable && (w.split_columns || vocabulary_weight(op, w))) {
      w.cols = static_cast<std::int64_t>(std::ceil(static_cast<double>(w.cols) / td));
      column_weight = w.split_columns ? w.name : "";
    } else if (w.splittable) {
      w.rows /= t;
      column_weight.clear();
    } else if (!column_weight.empty() && w.name == column_weight + ".bias") {
      w.cols /= t;
    }
  }
  for (auto* list : {&s.forward, &s.backward, &s.selective_recompute}) {
    for (auto& k : *list) {
      if (k.kind == KernelKind::kGemm) {
        if (k.split_dim != Dim::kNone) k = k.slice(t);
      } else if (k.tp_sliced || sp) {
        k.bytes_per_sample /= td;
      }
    }
  }
  // Saved activations: the replicated part stays whole (without SP), the rest is divided.
  const double replicated =
      sp ? 0.0
         : std::min(op.saved_bytes_per_sample,
                    replicated_saved(op, workload.seq, workload.bytes, workload.dropout));
  s.saved_bytes_per_sample = replicated + (op.saved_bytes_per_sample - replicated) / td;
  if (sp) s.input_bytes_per_sample = op.input_bytes_per_sample / td;
  // Selective keeps the replicated part less the norm's output (e s h, whole on each rank without SP).
  if (op.selective_bytes_per_sample > 0) {
    const double rep_sel =
        std::max(0.0, replicated - workload.bytes.activation * static_cast<double>(workload.seq) * op.hidden);
    s.selective_bytes_per_sample = rep_sel + (op.selective_bytes_per_sample - rep_sel) / td;
  }
  s.workspace_bytes_per_sample = op.workspace_bytes_per_sample / td;
  if (op.split_units > 0) s.split_units = op.split_units / t;
  s.dispatch_bytes_per_sample = op.dispatch_bytes_per_sample / td;  // tokens for its experts only
  s.kv_bytes_per_sample = op.kv_bytes_per_sample / td;              // its heads only
  s.q_bytes_per_sample = op.q_bytes_per_sample / td;
  return s;
}

bool ep_allowed(const Operator& sliced, int e, int group_ranks) {
  if (e == 1) return true;
  if (sliced.experts == 0 || e < 1 || (e & (e - 1)) != 0 || group_ranks % e != 0) return false;
  return sliced.split_units > 0 && sliced.split_units % e == 0;
}

bool cp_allowed(const Operator& sliced, int c, bool all_to_all) {
  if (c == 1 || !all_to_all || sliced.kind != OperatorKind::kAttention) return true;
  return sliced.split_units > 0 && sliced.split_units % c == 0;
}

Operator cp_slice(const Operator& sliced, int c, bool all_to_all) {
  if (c == 1) return sliced;
  Operator s = sliced;
  const double cd = c;
  const auto cut = [&](std::int64_t x) { return std::max<std::int64_t>(1, (x + c - 1) / c); };
  for (auto* list : {&s.forward, &s.backward, &s.selective_recompute})
    for (auto& k : *list) {
      if (k.kind == KernelKind::kElementwise) {
        k.bytes_per_sample /= cd;
      } else if (k.batch_dim == Dim::kM || k.batch_dim == Dim::kCount) {
        k.m = cut(k.m);
      } else if (k.batch_dim == Dim::kN) {
        k.n = cut(k.n);
      } else if (k.batch_dim == Dim::kK) {
        k.k = cut(k.k);
      }
    }
  s.saved_bytes_per_sample /= cd;
  s.input_bytes_per_sample /= cd;
  s.workspace_bytes_per_sample /= cd;
  s.selective_bytes_per_sample /= cd;
  if (s.tp_replicated_bytes_per_sample > 0) s.tp_replicated_bytes_per_sample /= cd;
  s.dispatch_bytes_per_sample /= cd;
  s.kv_bytes_per_sample /= cd;
  s.q_bytes_per_sample /= cd;
  // The blocks in flight: ring attention's two K/V blocks; the all-to-all's send and receive buffers.
  s.workspace_bytes_per_sample +=
      all_to_all ? 2 * (s.q_bytes_per_sample + s.kv_bytes_per_sample) : 2 * s.kv_bytes_per_sample;
  return s;
}

Operator ep_slice(const Operator& sliced, int e, double imbalance) {
  if (e == 1) return sliced;
  Operator s = sliced;
  for (auto& w : s.weights)
    if (w.expert) (w.split_columns ? w.cols : w.rows) /= e;
  const auto more = [&](std::int64_t x) {
    return static_cast<std::int64_t>(std::ceil(static_cast<double>(x) * e * imbalance - 1e-9));
  };
  for (auto* list : {&s.forward, &s.backward, &s.selective_recompute})
    for (auto& k : *list) {
      if (!k.expert) continue;
      if (k.kind == KernelKind::kElementwise) {
        k.bytes_per_sample *= imbalance;
        continue;
      }
      k.count /= e;
      if (k.batch_dim == Dim::kM) k.m = more(k.m);
      if (k.batch_dim == Dim::kN) k.n = more(k.n);
      if (k.batch_dim == Dim::kK) k.k = more(k.k);
    }
  s.split_units = sliced.split_units / e;
  s.dispatch_bytes_per_sample = sliced.dispatch_bytes_per_sample * imbalance;
  return s;
}

TpTraffic tp_traffic(const Operator& op, int seq) {
  const double sh = static_cast<double>(seq) * op.hidden;
  switch (op.kind) {
    case OperatorKind::kAttention:
    case OperatorKind::kMlp:
      return {sh, sh};
    case OperatorKind::kEmbedding: {
      bool head = false;
      for (const Kernel& k : op.forward) head = head || k.site == 1;
      return {sh, head ? sh : 0.0};
    }
    case OperatorKind::kHead:
      return {0.0, sh};
    case OperatorKind::kProjection:
      return {};
  }
  return {};
}

}  // namespace osdp::costmodel
