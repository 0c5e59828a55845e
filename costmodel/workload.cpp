// How a model lowers into the workload IR (workload.hpp has the formulas): each block's operators,
// kernels, weights and activation sizes, shape ids and units. The IR's accessors are workload_ir.cpp.
#include "costmodel/workload.hpp"

#include <algorithm>
#include <cassert>
#include <map>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/lowering.hpp"

namespace osdp::costmodel {
namespace lowering {

Kernel gemm(std::string name, I m, I n, I k, Dim batch_dim, Dim split_dim, I count) {
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

Kernel elementwise(std::string name, double bytes_per_sample, bool tp_sliced) {
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
void add_gemms(Operator& op, const std::string& name, I s, I in, I out, bool split_columns) {
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

void add_linear(Operator& op, const std::string& name, I s, I in, I out, bool split_columns, bool bias) {
  op.weights.push_back({name, in, out, true, split_columns});
  if (bias) op.weights.push_back({name + ".bias", 1, out, false});
  add_gemms(op, name, s, in, out, split_columns);
}

// One column-split weight [in x sum(outs)] run as one GEMM per part (q/k/v_proj, gate/up_proj), in
// forward order; their backward kernels in the order the parts' gradients arrive (reverse).
void add_column_parts(Operator& op, const std::string& weight, const std::vector<std::string>& parts,
                      const std::vector<I>& outs, I s, I in, bool bias, std::vector<Kernel>& backward) {
  I total = 0;
  for (const I o : outs) total += o;
  op.weights.push_back({weight, in, total, true, true});
  if (bias) op.weights.push_back({weight + ".bias", 1, total, false});
  Operator tmp;
  for (std::size_t i = 0; i < parts.size(); ++i) add_gemms(tmp, parts[i], s, in, outs[i], true);
  for (const auto& k : tmp.forward) op.forward.push_back(k);
  for (std::size_t i = parts.size(); i-- > 0;) {
    backward.push_back(tmp.backward[2 * i]);
    backward.push_back(tmp.backward[2 * i + 1]);
  }
}

int norm_width(const ModelSpec& m) {
  return m.norm == NormKind::kLayerNorm && m.norm_bias ? 2 : 1;
}

void add_norm(Operator& op, const std::string& name, I h, double s, double e, const ModelSpec& m) {
  op.weights.push_back({name, 1, norm_width(m) * h, false});
  op.forward.push_back(elementwise(name, 2 * s * h * e));
}

// A layer's operator (attention, MLP): named layer{i}.{part}, checkpointable.
Operator layer_operator(int layer, OperatorKind kind, const char* part, int hidden) {
  Operator op;
  op.name = fmt::format("layer{}.{}", layer, part);
  op.kind = kind;
  op.layer = layer;
  op.hidden = hidden;
  op.checkpointable = true;
  return op;
}

// The share of the s x s scores a fused kernel computes: all of them, the causal triangle with its
// diagonal, or a sliding window of w keys (itself included).
double attention_density(const ModelSpec& m, I s) {
  if (!m.causal) return 1.0;
  const double sd = static_cast<double>(s);
  const double w = m.sliding_window > 0 ? std::min<double>(m.sliding_window, sd) : sd;
  return (w * (w + 1) / 2 + (sd - w) * w) / (sd * sd);
}

}  // namespace lowering

namespace {

using namespace lowering;

Operator attention(int layer, const StageSpec& st, const ModelSpec& m, I s, double e, double mask) {
  const I h = st.hidden, a = st.heads, g = st.kv_heads, d = st.head_dim;
  const I q = a * d, kw = g * d, width = q + 2 * kw;
  const double sd = static_cast<double>(s), hd = static_cast<double>(h), ad = static_cast<double>(a);
  const double qd = static_cast<double>(q), kd = static_cast<double>(kw), wd = static_cast<double>(width);
  Operator op = layer_operator(layer, OperatorKind::kAttention, "attention", st.hidden);
  add_norm(op, op.name + ".ln1", h, sd, e, m);
  op.split_units = g;           // a slice holds whole key/value heads and their groups of query heads
  std::vector<Kernel> qkv_bwd;  // dX and dW of the Q, K, V GEMMs
  if (m.fused_qkv) {
    add_linear(op, op.name + ".qkv", s, h, width, true, m.qkv_bias);
    qkv_bwd = op.backward;
    op.backward.clear();
  } else {
    add_column_parts(op, op.name + ".qkv", {op.name + ".q", op.name + ".k", op.name + ".v"}, {q, kw, kw}, s,
                     h, m.qkv_bias, qkv_bwd);
  }
  if (m.qk_norm) {
    op.weights.push_back({op.name + ".q_norm", 1, d, false});
    op.weights.push_back({op.name + ".k_norm", 1, d, false});
    op.forward.push_back(elementwise(op.name + ".qk_norm", 2 * sd * (qd + kd) * e, true));
    op.selective_recompute.push_back(op.forward.back());
  }
  const bool rotary = m.positions == PositionKind::kRotary;
  if (rotary) {
    op.forward.push_back(elementwise(op.name + ".rotary", 2 * sd * (qd + kd) * e, true));
    op.selective_recompute.push_back(op.forward.back());
  }
  std::vector<Kernel> core_bwd;
  const std::size_t core_first = op.forward.size();
  double saved = e * (2 * sd * hd + sd * wd + sd * qd) + (m.qk_norm ? e * sd * (qd + kd) : 0.0);
  if (m.attention == AttentionKind::kMaterialized) {
    op.forward.push_back(gemm(op.name + ".scores", s, s, d, Dim::kCount, Dim::kCount, a));
    op.forward.push_back(elementwise(op.name + ".softmax", 2 * ad * sd * sd * e, true));
    if (mask > 0)
      op.forward.push_back(elementwise(op.name + ".attn_dropout", ad * sd * sd * (2 * e + mask), true));
    op.forward.push_back(gemm(op.name + ".av", s, d, s, Dim::kCount, Dim::kCount, a));
    core_bwd.push_back(gemm(op.name + ".av.dA", s, s, d, Dim::kCount, Dim::kCount, a));
    core_bwd.push_back(gemm(op.name + ".av.dV", s, d, s, Dim::kCount, Dim::kCount, a));
    core_bwd.push_back(elementwise(op.name + ".softmax.bwd", 3 * ad * sd * sd * e, true));
    core_bwd.push_back(gemm(op.name + ".scores.dQ", s, d, s, Dim::kCount, Dim::kCount, a));
    core_bwd.push_back(gemm(op.name + ".scores.dK", s, d, s, Dim::kCount, Dim::kCount, a));
    // Saved: the softmax output (as^2); with dropout also its output (as^2) and the mask (as^2 + sh).
    saved += e * (mask > 0 ? 2 : 1) * ad * sd * sd + mask * (ad * sd * sd + sd * hd);
    op.workspace_bytes_per_sample = e * (ad * sd * sd + sd * wd);
  } else {
    const double rho = attention_density(m, s);
    auto flash = [&](const std::string& n, I mm, I nn, I kk) {
      Kernel k = gemm(op.name + n, mm, nn, kk, Dim::kCount, Dim::kCount, a);
      k.density = rho;
      return k;
    };
    // One pass reads Q, K, V and writes O and the log-sum-exp (fp32); the S x S blocks stay on chip.
    op.forward.push_back(elementwise(op.name + ".flash", e * sd * (2 * qd + 2 * kd) + 4 * ad * sd, true));
    op.forward.push_back(flash(".flash.qk", s, s, d));
    op.forward.push_back(flash(".flash.pv", s, d, s));
    // Backward: reads Q, K, V, O, dO and the log-sum-exp, writes dQ, dK, dV, recomputing S.
    core_bwd.push_back(elementwise(op.name + ".flash.bwd", e * sd * (5 * qd + 4 * kd) + 8 * ad * sd, true));
    core_bwd.push_back(flash(".flash.bwd.qk", s, s, d));
    core_bwd.push_back(flash(".flash.bwd.dV", s, d, s));
    core_bwd.push_back(flash(".flash.bwd.dP", s, s, d));
    core_bwd.push_back(flash(".flash.bwd.dQ", s, d, s));
    core_bwd.push_back(flash(".flash.bwd.dK", s, d, s));
    saved += 4 * ad * sd + mask * sd * hd;
    op.workspace_bytes_per_sample = e * sd * wd + 4 * ad * sd;
    // Selective: the norm's input, Q, K, V as their GEMMs wrote them, the attention's output and
    // log-sum-exp, the mask; the norm, Q/K norms and rotary run again (not the norm's output, nor
    // the Q/K norms' outputs, are kept).
    op.selective_bytes_per_sample = e * (sd * hd + sd * wd + sd * qd) + 4 * ad * sd + mask * sd * hd;
    op.selective_recompute.insert(op.selective_recompute.begin(), op.forward.front());
  }
  // The core: every kernel from the scores (or the fused pass) on, before the projection.
  for (std::size_t i = core_first; i < op.forward.size(); ++i) op.forward[i].ring_block = true;
  for (auto& k : core_bwd) k.ring_block = true;
  // The projection comes after attention in the forward pass.
  Operator proj_part;
  add_linear(proj_part, op.name + ".proj", s, q, h, false, m.proj_bias);
  for (auto& w : proj_part.weights) op.weights.push_back(w);
  op.forward.push_back(proj_part.forward.front());
  op.forward.push_back(elementwise(op.name + ".residual", sd * hd * (3 * e + mask)));
  // Backward, in reverse order of the forward.
  op.backward.push_back(elementwise(op.name + ".residual.bwd", 2 * sd * hd * e));
  op.backward.push_back(proj_part.backward[0]);
  op.backward.push_back(proj_part.backward[1]);
  for (const auto& k : core_bwd) op.backward.push_back(k);
  if (rotary) op.backward.push_back(elementwise(op.name + ".rotary.bwd", 2 * sd * (qd + kd) * e, true));
  if (m.qk_norm) op.backward.push_back(elementwise(op.name + ".qk_norm.bwd", 4 * sd * (qd + kd) * e, true));
  for (const auto& k : qkv_bwd) op.backward.push_back(k);
  op.backward.push_back(elementwise(op.name + ".ln1.bwd", 4 * sd * hd * e));
  // Saved: the norm's input and output (2sh), Q, K, V (s(q + 2k)), the projection's input (sq); the
  // Q/K norms' inputs; and what the attention kind keeps (above).
  op.saved_bytes_per_sample = saved;
  op.kv_bytes_per_sample = e * sd * 2 * kd;
  op.q_bytes_per_sample = e * sd * qd;
  op.input_bytes_per_sample = e * sd * hd;
  return op;
}

Operator mlp(int layer, const StageSpec& st, const ModelSpec& m, I s, double e, double mask) {
  const I h = st.hidden, f = st.ffn;
  const double sd = static_cast<double>(s), hd = static_cast<double>(h), fd = static_cast<double>(f);
  Operator op = layer_operator(layer, OperatorKind::kMlp, "mlp", st.hidden);
  add_norm(op, op.name + ".ln2", h, sd, e, m);
  std::vector<Kernel> fc1_bwd;
  const bool gate = gated(m.mlp);
  const std::string act = to_string(m.mlp);
  if (gate) {
    op.split_units = f;  // a slice holds its columns of the gate and of the up projection
    add_column_parts(op, op.name + ".fc1", {op.name + ".gate", op.name + ".up"}, {f, f}, s, h, m.mlp_bias,
                     fc1_bwd);
    // act(gate) then its product with up, as eager PyTorch runs them: 5 passes of s f forward, 8 back.
    op.forward.push_back(elementwise(op.name + "." + act, 5 * sd * fd * e, true));
  } else {
    add_linear(op, op.name + ".fc1", s, h, f, true, m.mlp_bias);
    fc1_bwd = op.backward;
    op.backward.clear();
    op.forward.push_back(elementwise(op.name + "." + act, 2 * sd * fd * e, true));
  }
  Operator fc2_part;
  add_linear(fc2_part, op.name + ".fc2", s, f, h, false, m.mlp_bias);
  for (auto& w : fc2_part.weights) op.weights.push_back(w);
  op.forward.push_back(fc2_part.forward.front());
  op.forward.push_back(elementwise(op.name + ".residual", sd * hd * (3 * e + mask)));
  op.backward.push_back(elementwise(op.name + ".residual.bwd", 2 * sd * hd * e));
  op.backward.push_back(fc2_part.backward[0]);
  op.backward.push_back(fc2_part.backward[1]);
  op.backward.push_back(elementwise(op.name + "." + act + ".bwd", (gate ? 8 : 3) * sd * fd * e, true));
  for (const auto& k : fc1_bwd) op.backward.push_back(k);
  op.backward.push_back(elementwise(op.name + ".ln2.bwd", 4 * sd * hd * e));
  // Saved: the norm's input and output (2sh); the activation's input(s) and fc2's input (2sf, gated
  // 3sf: gate, up and their product); the dropout mask (sh bytes).
  op.saved_bytes_per_sample = e * (2 * sd * hd + (gate ? 3 : 2) * sd * fd) + mask * sd * hd;
  op.input_bytes_per_sample = e * sd * hd;
  op.workspace_bytes_per_sample = e * (gate ? 3 : 2) * sd * fd;
  // Selective: the norm's input, the first GEMMs' outputs (gate and up, or fc1's), the mask; the norm
  // and the activation run again.
  op.selective_bytes_per_sample = e * (sd * hd + (gate ? 2 : 1) * sd * fd) + mask * sd * hd;
  op.selective_recompute = {op.forward.front()};
  for (const Kernel& k : op.forward)
    if (k.name == op.name + "." + act) op.selective_recompute.push_back(k);
  return op;
}

// LM head on a [h x V] weight (the token table when tied): final norm, logits GEMM, cross entropy.
void add_head(Operator& op, const std::string& prefix, I s, I h, I vocab, double e, bool own_weight,
              const ModelSpec& m) {
  const double sd = static_cast<double>(s), hd = static_cast<double>(h), vd = static_cast<double>(vocab);
  add_norm(op, prefix + "ln_f", h, sd, e, m);
  if (own_weight) op.weights.push_back({prefix + "lm_head", h, vocab, true});
  op.forward.push_back(gemm(prefix + "logits", s, vocab, h, Dim::kM, Dim::kK));
  if (m.fp32_loss) {
    // transformers: logits in e (returned), upcast to fp32, log-softmax (saved), NLL.
    op.forward.push_back(elementwise(prefix + "cross_entropy", (e + 12) * sd * vd, true));
    op.backward.push_back(elementwise(prefix + "cross_entropy.bwd", (12 + e) * sd * vd, true));
  } else {
    op.forward.push_back(elementwise(prefix + "cross_entropy", 3 * sd * vd * e, true));
    op.backward.push_back(elementwise(prefix + "cross_entropy.bwd", 2 * sd * vd * e, true));
  }
  op.backward.push_back(gemm(prefix + "logits.dX", s, h, vocab, Dim::kM, Dim::kN));
  op.backward.push_back(gemm(prefix + "logits.dW", h, vocab, s, Dim::kK, Dim::kM));
  op.backward.push_back(elementwise(prefix + "ln_f.bwd", 4 * sd * hd * e));
  if (m.fp32_loss) {
    // Saved: the norm's input and output, the logits and the fp32 log-probabilities; the backward
    // holds the fp32 gradient of the logits and its cast.
    op.saved_bytes_per_sample += 2 * e * sd * hd + (e + 4) * sd * vd;
    op.tp_replicated_bytes_per_sample = 2 * e * sd * hd;
    op.workspace_bytes_per_sample = std::max(op.workspace_bytes_per_sample, (4 + e) * sd * vd);
  } else {
    // Saved: LN input and the softmax probabilities; the backward holds the logits' gradient.
    op.saved_bytes_per_sample += e * (sd * hd + sd * vd);
    op.workspace_bytes_per_sample = std::max(op.workspace_bytes_per_sample, e * sd * vd);
  }
}

Operator embedding(const ModelSpec& m, double e, double mask) {
  const I s = m.seq, h = m.first_hidden(), v = m.vocab;
  const double sd = static_cast<double>(s), hd = static_cast<double>(h);
  const bool learned = m.positions == PositionKind::kLearned;
  Operator op;
  op.name = "embedding";
  op.kind = OperatorKind::kEmbedding;
  op.hidden = m.first_hidden();
  // The token table is stored [h x V] so that the tied LM head splits along h like any GEMM input.
  op.weights.push_back({"wte", h, v, m.tied_embeddings});
  if (learned) op.weights.push_back({"wpe", 1, static_cast<I>(m.position_rows()) * h, false});
  op.forward.push_back(elementwise("embedding.lookup", sd * hd * (learned ? 3 : 2) * e));
  if (mask > 0) op.forward.push_back(elementwise("embedding.dropout", sd * hd * (2 * e + mask)));
  op.saved_bytes_per_sample = mask * sd * hd;
  if (m.tied_embeddings) {
    op.tied_gradient = true;
    const std::size_t fwd = op.forward.size(), bwd = op.backward.size();
    add_head(op, "head.", s, m.last_hidden(), v, e, false, m);
    for (std::size_t i = fwd; i < op.forward.size(); ++i) op.forward[i].site = 1;
    for (std::size_t i = bwd; i < op.backward.size(); ++i) op.backward[i].site = 1;
    if (op.tp_replicated_bytes_per_sample >= 0) op.tp_replicated_bytes_per_sample += mask * sd * hd;
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

Workload lower(const ModelSpec& model, int pp) {
  if (pp < 1) throw UsageError(fmt::format("model \"{}\": a pipeline of {} stages", model.name, pp));
  ModelSpec m = model;
  const bool tied_copy = pp > 1 && m.tied_embeddings;
  if (tied_copy) m.tied_embeddings = false;
  if (m.stages.empty()) throw UsageError(fmt::format("model \"{}\" has no layers", m.name));
  for (StageSpec& st : m.stages) {  // sizes left 0 by code that builds a ModelSpec: the MHA defaults
    if (st.kv_heads == 0) st.kv_heads = st.heads;
    if (st.head_dim == 0 && st.heads > 0) st.head_dim = st.hidden / st.heads;
    if (st.heads < 1 || st.kv_heads < 1 || st.heads % st.kv_heads != 0 || st.head_dim < 1)
      throw UsageError(fmt::format("model \"{}\": {} heads over {} key/value heads of size {}", m.name,
                                   st.heads, st.kv_heads, st.head_dim));
  }
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
      w.operators.push_back(m.mla.enabled() ? latent_attention(layer, st, m, m.seq, e, mask)
                                            : attention(layer, st, m, m.seq, e, mask));
      w.operators.push_back(m.moe.moe_layer(layer) ? moe_mlp(layer, st, m, m.seq, e, mask)
                                                   : mlp(layer, st, m, m.seq, e, mask));
    }
  }
  if (!m.tied_embeddings) {
    Operator head;
    head.name = "head";
    head.kind = OperatorKind::kHead;
    head.hidden = m.last_hidden();
    add_head(head, "head.", m.seq, m.last_hidden(), m.vocab, e, true, m);
    w.operators.push_back(head);
  }
  // Operators with the same weights, kernels and activation sizes (every layer of a stage) share a
  // shape id; the key lists everything the cost model reads.
  std::map<std::vector<double>, int> ids;
  for (auto& op : w.operators) {
    std::vector<double> key{static_cast<double>(op.kind),  static_cast<double>(op.experts),
                            op.latent ? 1.0 : 0.0,         op.dispatch_bytes_per_sample,
                            op.kv_bytes_per_sample,        op.q_bytes_per_sample,
                            op.saved_bytes_per_sample,     op.tp_replicated_bytes_per_sample,
                            op.input_bytes_per_sample,     op.workspace_bytes_per_sample,
                            op.checkpointable ? 1.0 : 0.0, op.tied_gradient ? 1.0 : 0.0,
                            op.selective_bytes_per_sample};
    for (const auto& wt : op.weights)
      key.insert(key.end(), {static_cast<double>(wt.rows), static_cast<double>(wt.cols),
                             wt.splittable ? 1.0 : 0.0, wt.split_columns ? 1.0 : 0.0});
    for (const auto* list : {&op.forward, &op.backward, &op.selective_recompute}) {
      key.push_back(-1.0);  // separates the lists
      for (const auto& k : *list)
        key.insert(
            key.end(),
            {static_cast<double>(k.kind), static_cast<double>(k.m), static_cast<double>(k.n),
             static_cast<double>(k.k), static_cast<double>(k.count), static_cast<double>(k.batch_dim),
             static_cast<double>(k.split_dim), k.bytes_per_sample, k.density, k.ring_block ? 1.0 : 0.0});
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
