#include "costmodel/workload.hpp"

#include <cassert>
#include <map>

#include <fmt/format.h>

#include "costmodel/error.hpp"

namespace osdp::costmodel {
namespace {

using I = std::int64_t;

Kernel gemm(std::string name, I m, I n, I k, Dim batch_dim, Dim split_dim = Dim::kNone, I count = 1) {
  Kernel g;
  g.kind = KernelKind::kGemm;
  g.name = std::move(name);
  g.m = m;
  g.n = n;
  g.k = k;
  g.count = count;
  g.batch_dim = batch_dim;
  g.split_dim = split_dim;
  return g;
}

Kernel elementwise(std::string name, double bytes_per_sample, bool tp_sliced = false) {
  Kernel e;
  e.kind = KernelKind::kElementwise;
  e.name = std::move(name);
  e.bytes_per_sample = bytes_per_sample;
  e.tp_sliced = tp_sliced;
  return e;
}

// A weight GEMM Y[s x out] = X[s x in] W[in x out] adds three kernels: forward, grad-input
// dX = dY W^T and grad-weight dW = X^T dY. Split along the rows of W (the paper's cut: Y = sum_j
// X_j W_j, slices accumulate into Y in place) the forward splits k, dX n and dW m; split along the
// columns of W (the first GEMM of a two-GEMM operator, whose output columns are the rows the second
// GEMM is cut by, so each slice runs its whole operator on its own) the forward splits n, dX k
// (slices accumulate into dX) and dW n.
void add_linear(Operator& op, const std::string& name, I s, I in, I out, bool split_columns = false) {
  op.weights.push_back({name, in, out, true, split_columns});
  op.weights.push_back({name + ".bias", 1, out, false});
  if (split_columns) {
    op.forward.push_back(gemm(name, s, out, in, Dim::kM, Dim::kN));
    op.backward.push_back(gemm(name + ".dX", s, in, out, Dim::kM, Dim::kK));
    op.backward.push_back(gemm(name + ".dW", in, out, s, Dim::kK, Dim::kN));
  } else {
    op.forward.push_back(gemm(name, s, out, in, Dim::kM, Dim::kK));
    op.backward.push_back(gemm(name + ".dX", s, in, out, Dim::kM, Dim::kN));
    op.backward.push_back(gemm(name + ".dW", in, out, s, Dim::kK, Dim::kM));
  }
}

void add_layer_norm(Operator& op, const std::string& name, I h, double s, double e) {
  op.weights.push_back({name, 1, 2 * h, false});
  op.forward.push_back(elementwise(name, 2 * s * h * e));
}

Operator attention(int layer, const StageSpec& st, I s, double e, double mask) {
  const I h = st.hidden, a = st.heads, d = h / a;
  const double sd = static_cast<double>(s), hd = static_cast<double>(h), ad = static_cast<double>(a);
  Operator op;
  op.name = fmt::format("layer{}.attention", layer);
  op.kind = OperatorKind::kAttention;
  op.layer = layer;
  op.hidden = st.hidden;
  op.checkpointable = true;
  add_layer_norm(op, op.name + ".ln1", h, sd, e);
  op.split_units = a;  // a slice holds whole heads
  add_linear(op, op.name + ".qkv", s, h, 3 * h, true);
  op.forward.push_back(gemm(op.name + ".scores", s, s, d, Dim::kCount, Dim::kCount, a));
  op.forward.push_back(elementwise(op.name + ".softmax", 2 * ad * sd * sd * e, true));
  if (mask > 0)
    op.forward.push_back(elementwise(op.name + ".attn_dropout", ad * sd * sd * (2 * e + mask), true));
  op.forward.push_back(gemm(op.name + ".av", s, d, s, Dim::kCount, Dim::kCount, a));
  // The projection comes after attention in the forward pass.
  Operator proj_part;
  add_linear(proj_part, op.name + ".proj", s, h, h);
  for (auto& w : proj_part.weights) op.weights.push_back(w);
  op.forward.push_back(proj_part.forward.front());
  op.forward.push_back(elementwise(op.name + ".residual", sd * hd * (3 * e + mask)));
  // Backward, in reverse order of the forward.
  op.backward.clear();
  op.backward.push_back(elementwise(op.name + ".residual.bwd", 2 * sd * hd * e));
  op.backward.push_back(proj_part.backward[0]);
  op.backward.push_back(proj_part.backward[1]);
  op.backward.push_back(gemm(op.name + ".av.dA", s, s, d, Dim::kCount, Dim::kCount, a));
  op.backward.push_back(gemm(op.name + ".av.dV", s, d, s, Dim::kCount, Dim::kCount, a));
  op.backward.push_back(elementwise(op.name + ".softmax.bwd", 3 * ad * sd * sd * e, true));
  op.backward.push_back(gemm(op.name + ".scores.dQ", s, d, s, Dim::kCount, Dim::kCount, a));
  op.backward.push_back(gemm(op.name + ".scores.dK", s, d, s, Dim::kCount, Dim::kCount, a));
  op.backward.push_back(gemm(op.name + ".qkv.dX", s, h, 3 * h, Dim::kM, Dim::kN));
  op.backward.push_back(gemm(op.name + ".qkv.dW", h, 3 * h, s, Dim::kK, Dim::kM));
  op.backward.push_back(elementwise(op.name + ".ln1.bwd", 4 * sd * hd * e));
  // Saved: LN1 input, QKV input, Q, K, V, proj input (6sh elements); softmax output (as^2);
  // with dropout also its output (as^2) and the two masks (as^2 + sh bytes).
  op.saved_bytes_per_sample =
      e * (6 * sd * hd + (mask > 0 ? 2 : 1) * ad * sd * sd) + mask * (ad * sd * sd + sd * hd);
  op.input_bytes_per_sample = e * sd * hd;
  op.workspace_bytes_per_sample = e * (ad * sd * sd + 3 * sd * hd);
  return op;
}

Operator mlp(int layer, const StageSpec& st, I s, double e, double mask) {
  const I h = st.hidden, f = st.ffn;
  const double sd = static_cast<double>(s), hd = static_cast<double>(h), fd = static_cast<double>(f);
  Operator op;
  op.name = fmt::format("layer{}.mlp", layer);
  op.kind = OperatorKind::kMlp;
  op.layer = layer;
  op.hidden = st.hidden;
  op.checkpointable = true;
  add_layer_norm(op, op.name + ".ln2", h, sd, e);
  Operator fc2_part;
  add_linear(op, op.name + ".fc1", s, h, f, true);
  op.forward.push_back(elementwise(op.name + ".gelu", 2 * sd * fd * e, true));
  add_linear(fc2_part, op.name + ".fc2", s, f, h);
  for (auto& w : fc2_part.weights) op.weights.push_back(w);
  op.forward.push_back(fc2_part.forward.front());
  op.forward.push_back(elementwise(op.name + ".residual", sd * hd * (3 * e + mask)));
  std::vector<Kernel> fc1_bwd = op.backward;  // fc1.dX, fc1.dW
  op.backward.clear();
  op.backward.push_back(elementwise(op.name + ".residual.bwd", 2 * sd * hd * e));
  op.backward.push_back(fc2_part.backward[0]);
  op.backward.push_back(fc2_part.backward[1]);
  op.backward.push_back(elementwise(op.name + ".gelu.bwd", 3 * sd * fd * e, true));
  op.backward.push_back(fc1_bwd[0]);
  op.backward.push_back(fc1_bwd[1]);
  op.backward.push_back(elementwise(op.name + ".ln2.bwd", 4 * sd * hd * e));
  // Saved: LN2 input, fc1 input (2sh); GeLU input and fc2 input (2sf); dropout mask (sh bytes).
  op.saved_bytes_per_sample = e * (2 * sd * hd + 2 * sd * fd) + mask * sd * hd;
  op.input_bytes_per_sample = e * sd * hd;
  op.workspace_bytes_per_sample = e * 2 * sd * fd;
  return op;
}

// LM head on a [h x V] weight (the token table when tied): final LN, logits GEMM, cross entropy.
void add_head(Operator& op, const std::string& prefix, I s, I h, I vocab, double e, bool own_weight) {
  const double sd = static_cast<double>(s), hd = static_cast<double>(h), vd = static_cast<double>(vocab);
  op.weights.push_back({prefix + "ln_f", 1, 2 * h, false});
  op.forward.push_back(elementwise(prefix + "ln_f", 2 * sd * hd * e));
  if (own_weight) op.weights.push_back({prefix + "lm_head", h, vocab, true});
  op.forward.push_back(gemm(prefix + "logits", s, vocab, h, Dim::kM, Dim::kK));
  op.forward.push_back(elementwise(prefix + "cross_entropy", 3 * sd * vd * e, true));
  op.backward.push_back(elementwise(prefix + "cross_entropy.bwd", 2 * sd * vd * e, true));
  op.backward.push_back(gemm(prefix + "logits.dX", s, h, vocab, Dim::kM, Dim::kN));
  op.backward.push_back(gemm(prefix + "logits.dW", h, vocab, s, Dim::kK, Dim::kM));
  op.backward.push_back(elementwise(prefix + "ln_f.bwd", 4 * sd * hd * e));
  // Saved: LN input and the softmax probabilities; the backward holds the logits' gradient.
  op.saved_bytes_per_sample += e * (sd * hd + sd * vd);
  op.workspace_bytes_per_sample = std::max(op.workspace_bytes_per_sample, e * sd * vd);
}

Operator embedding(const ModelSpec& m, double e, double mask) {
  const I s = m.seq, h = m.first_hidden(), v = m.vocab;
  const double sd = static_cast<double>(s), hd = static_cast<double>(h);
  Operator op;
  op.name = "embedding";
  op.kind = OperatorKind::kEmbedding;
  op.hidden = m.first_hidden();
  // The token table is stored [h x V] so that the tied LM head splits along h like any GEMM input.
  op.weights.push_back({"wte", h, v, m.tied_embeddings});
  op.weights.push_back({"wpe", 1, s * h, false});
  op.forward.push_back(elementwise("embedding.lookup", sd * hd * 3 * e));
  if (mask > 0) op.forward.push_back(elementwise("embedding.dropout", sd * hd * (2 * e + mask)));
  op.saved_bytes_per_sample = mask * sd * hd;
  if (m.tied_embeddings) {
    op.tied_gradient = true;
    const std::size_t fwd = op.forward.size(), bwd = op.backward.size();
    add_head(op, "head.", s, m.last_hidden(), v, e, false);
    for (std::size_t i = fwd; i < op.forward.size(); ++i) op.forward[i].site = 1;
    for (std::size_t i = bwd; i < op.backward.size(); ++i) op.backward[i].site = 1;
  }
  op.backward.push_back(elementwise("embedding.lookup.bwd", 2 * sd * hd * e));
  return op;
}

Operator projection(int stage, I s, I from, I to, double e) {
  Operator op;
  op.name = fmt::format("stage{}.projection", stage);
  op.kind = OperatorKind::kProjection;
  op.hidden = static_cast<int>(to);
  add_linear(op, op.name, s, from, to);
  op.saved_bytes_per_sample = e * static_cast<double>(s * from);
  op.workspace_bytes_per_sample = e * static_cast<double>(s * to);
  return op;
}

}  // namespace

const char* to_string(OperatorKind k) {
  switch (k) {
    case OperatorKind::kEmbedding:
      return "embedding";
    case OperatorKind::kAttention:
      return "attention";
    case OperatorKind::kMlp:
      return "mlp";
    case OperatorKind::kProjection:
      return "projection";
    case OperatorKind::kHead:
      return "head";
  }
  return "?";
}

std::int64_t Kernel::dim(Dim d, int batch) const {
  const std::int64_t b = batch_dim == d ? batch : 1;
  switch (d) {
    case Dim::kM:
      return m * b;
    case Dim::kN:
      return n * b;
    case Dim::kK:
      return k * b;
    case Dim::kCount:
      return count * b;
    case Dim::kNone:
      return 1;
  }
  return 1;
}

double Kernel::flops(int batch) const {
  if (kind != KernelKind::kGemm) return 0.0;
  return 2.0 * static_cast<double>(dim(Dim::kM, batch)) * static_cast<double>(dim(Dim::kN, batch)) *
         static_cast<double>(dim(Dim::kK, batch)) * static_cast<double>(dim(Dim::kCount, batch));
}

std::int64_t Operator::parameters() const {
  std::int64_t p = 0;
  for (const auto& w : weights) p += w.elements();
  return p;
}

double Operator::forward_flops(int batch) const {
  double f = 0;
  for (const auto& k : forward) f += k.flops(batch);
  return f;
}

double Operator::backward_flops(int batch) const {
  double f = 0;
  for (const auto& k : backward) f += k.flops(batch);
  return f;
}

std::int64_t Workload::parameters() const {
  std::int64_t p = 0;
  for (const auto& op : operators) p += op.parameters();
  return p;
}

std::vector<int> Workload::unit_of_operators() const {
  std::vector<int> out(operators.size(), -1);
  for (std::size_t u = 0; u < units.size(); ++u)
    for (const int o : units[u].ops) out[static_cast<std::size_t>(o)] = static_cast<int>(u);
  return out;
}

Workload lower(const ModelSpec& model, int pp) {
  if (pp < 1) throw UsageError(fmt::format("model \"{}\": a pipeline of {} stages", model.name, pp));
  ModelSpec m = model;
  const bool tied_copy = pp > 1 && m.tied_embeddings;
  if (tied_copy) m.tied_embeddings = false;
  if (m.stages.empty()) throw UsageError(fmt::format("model \"{}\" has no layers", m.name));
  if (m.tied_embeddings && m.first_hidden() != m.last_hidden())
    throw UsageError(
        fmt::format("model \"{}\": a token table {} wide cannot be tied to an LM head on hidden size {}",
                    m.name, m.first_hidden(), m.last_hidden()));
  Workload w;
  w.model_name = m.name;
  w.precision = m.precision;
  w.bytes = precision_bytes(m.precision);
  w.seq = m.seq;
  w.dropout = m.dropout;
  w.pp = pp;
  w.tied_copy = tied_copy;
  const double e = w.bytes.activation;
  const double mask = m.dropout ? 1.0 : 0.0;
  w.operators.push_back(embedding(m, e, mask));
  int layer = 0;
  for (std::size_t si = 0; si < m.stages.size(); ++si) {
    const StageSpec& st = m.stages[si];
    if (si > 0 && m.stages[si - 1].hidden != st.hidden)
      w.operators.push_back(projection(static_cast<int>(si), m.seq, m.stages[si - 1].hidden, st.hidden, e));
    for (int l = 0; l < st.layers; ++l, ++layer) {
      w.operators.push_back(attention(layer, st, m.seq, e, mask));
      w.operators.push_back(mlp(layer, st, m.seq, e, mask));
    }
  }
  if (!m.tied_embeddings) {
    Operator head;
    head.name = "head";
    head.kind = OperatorKind::kHead;
    head.hidden = m.last_hidden();
    add_head(head, "head.", m.seq, m.last_hidden(), m.vocab, e, true);
    w.operators.push_back(head);
  }
  // Operators with the same weights, kernels and activation sizes (every layer of a stage) share a
  // shape id; the key lists everything the cost model reads.
  std::map<std::vector<double>, int> ids;
  for (auto& op : w.operators) {
    std::vector<double> key{static_cast<double>(op.kind),  op.saved_bytes_per_sample,
                            op.input_bytes_per_sample,     op.workspace_bytes_per_sample,
                            op.checkpointable ? 1.0 : 0.0, op.tied_gradient ? 1.0 : 0.0};
    for (const auto& wt : op.weights)
      key.insert(key.end(), {static_cast<double>(wt.rows), static_cast<double>(wt.cols),
                             wt.splittable ? 1.0 : 0.0, wt.split_columns ? 1.0 : 0.0});
    for (const auto* list : {&op.forward, &op.backward}) {
      key.push_back(-1.0);  // separates the lists
      for (const auto& k : *list)
        key.insert(key.end(),
                   {static_cast<double>(k.kind), static_cast<double>(k.m), static_cast<double>(k.n),
                    static_cast<double>(k.k), static_cast<double>(k.count), static_cast<double>(k.batch_dim),
                    static_cast<double>(k.split_dim), k.bytes_per_sample});
    }
    op.shape_id = ids.emplace(std::move(key), static_cast<int>(ids.size())).first->second;
  }
  // Units: a layer's attention and MLP together, every other operator on its own.
  for (int i = 0; i < static_cast<int>(w.operators.size()); ++i) {
    const Operator& op = w.operators[static_cast<std::size_t>(i)];
    const bool layer_op = op.kind == OperatorKind::kAttention || op.kind == OperatorKind::kMlp;
    if (layer_op && !w.units.empty() && w.units.back().layer &&
        w.operators[static_cast<std::size_t>(w.units.back().ops.front())].layer == op.layer) {
      w.units.back().ops.push_back(i);
      continue;
    }
    Unit u;
    u.name = layer_op ? fmt::format("layer{}", op.layer) : op.name;
    u.ops = {i};
    u.hidden = op.hidden;
    u.layer = layer_op;
    w.units.push_back(std::move(u));
  }
  return w;
}

}  // namespace osdp::costmodel
