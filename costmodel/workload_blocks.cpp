// The lowering of the blocks beyond the dense transformer layer (workload.hpp has the formulas): an
// MoE layer's MLP (ModelSpec::moe) and multi-head latent attention (ModelSpec::mla).
#include <algorithm>

#include "costmodel/lowering.hpp"

namespace osdp::costmodel::lowering {

// An MoE layer's MLP (ModelSpec::moe), in the balanced case: the norm; the router's GEMM [s x h] x
// [h x E] and its softmax and top-k (fp32); the tokens dispatched to their k experts (a gather of s k
// rows); each expert's gated MLP on its t = ceil(s k / E) tokens, as GEMMs batched over the E experts
// (count E: a split cuts the experts, each slice holding E / n of them); the k outputs weighted and
// summed back (combine); a shared gated MLP on every token where shared_ffn > 0; the residual.
// Weights: the norm, the router [h x E], the experts' gate and up [h x E 2 f_e] (column-split) and
// down [E f_e x h] (row-split), the shared MLP's. No selective form; checkpointing keeps the input.
Operator moe_mlp(int layer, const StageSpec& st, const ModelSpec& m, I s, double e, double mask) {
  const MoeSpec& x = m.moe;
  const I h = st.hidden, E = x.experts, k = x.top_k, fe = x.expert_ffn, fs = x.shared_ffn;
  const I t = (s * k + E - 1) / E;  // tokens per expert, balanced
  const double sd = static_cast<double>(s), hd = static_cast<double>(h), kd = static_cast<double>(k);
  const double fed = static_cast<double>(fe), fsd = static_cast<double>(fs), Ed = static_cast<double>(E);
  const double routed = static_cast<double>(t * E);  // token slots the experts run (s k, rounded up)
  Operator op = layer_operator(layer, OperatorKind::kMlp, "mlp", st.hidden);
  op.experts = static_cast<int>(E);
  op.top_k = static_cast<int>(k);
  op.split_units = E;
  add_norm(op, op.name + ".ln2", h, sd, e, m);
  op.weights.push_back({op.name + ".router", h, E, false});
  op.weights.push_back({op.name + ".experts.gate_up", h, E * 2 * fe, true, true, true});
  op.weights.push_back({op.name + ".experts.down", E * fe, h, true, false, true});
  op.dispatch_bytes_per_sample = e * sd * kd * hd;
  const std::string n = op.name;
  // Forward.
  op.forward.push_back(gemm(n + ".router", s, E, h, Dim::kM));
  op.forward.push_back(elementwise(n + ".route", 3 * 4 * sd * Ed));  // fp32 softmax, top-k
  op.forward.push_back(elementwise(n + ".dispatch", 2 * sd * kd * hd * e));
  op.forward.push_back(gemm(n + ".experts.gate", t, fe, h, Dim::kM, Dim::kCount, E));
  op.forward.push_back(gemm(n + ".experts.up", t, fe, h, Dim::kM, Dim::kCount, E));
  op.forward.push_back(elementwise(n + ".experts.act", 5 * routed * fed * e, true));
  op.forward.push_back(gemm(n + ".experts.down", t, h, fe, Dim::kM, Dim::kCount, E));
  op.forward.push_back(elementwise(n + ".combine", (2 * kd + 1) * sd * hd * e));
  std::vector<Kernel> shared_bwd;
  if (fs > 0) {
    op.weights.push_back({n + ".shared.gate_up", h, 2 * fs, false});
    op.weights.push_back({n + ".shared.down", fs, h, false});
    op.forward.push_back(gemm(n + ".shared.gate", s, fs, h, Dim::kM));
    op.forward.push_back(gemm(n + ".shared.up", s, fs, h, Dim::kM));
    op.forward.push_back(elementwise(n + ".shared.act", 5 * sd * fsd * e));
    op.forward.push_back(gemm(n + ".shared.down", s, h, fs, Dim::kM));
    shared_bwd = {
        gemm(n + ".shared.down.dX", s, fs, h, Dim::kM),       gemm(n + ".shared.down.dW", fs, h, s, Dim::kK),
        elementwise(n + ".shared.act.bwd", 8 * sd * fsd * e), gemm(n + ".shared.up.dX", s, h, fs, Dim::kM),
        gemm(n + ".shared.up.dW", h, fs, s, Dim::kK),         gemm(n + ".shared.gate.dX", s, h, fs, Dim::kM),
        gemm(n + ".shared.gate.dW", h, fs, s, Dim::kK)};
  }
  op.forward.push_back(elementwise(n + ".residual", sd * hd * (3 * e + mask)));
  // Backward, in reverse.
  op.backward.push_back(elementwise(n + ".residual.bwd", 2 * sd * hd * e));
  for (const auto& kb : shared_bwd) op.backward.push_back(kb);
  op.backward.push_back(elementwise(n + ".combine.bwd", (3 * kd + 1) * sd * hd * e));
  op.backward.push_back(gemm(n + ".experts.down.dX", t, fe, h, Dim::kM, Dim::kCount, E));
  op.backward.push_back(gemm(n + ".experts.down.dW", fe, h, t, Dim::kK, Dim::kCount, E));
  op.backward.push_back(elementwise(n + ".experts.act.bwd", 8 * routed * fed * e, true));
  for (const char* part : {".experts.up", ".experts.gate"}) {
    op.backward.push_back(gemm(n + part + ".dX", t, h, fe, Dim::kM, Dim::kCount, E));
    op.backward.push_back(gemm(n + part + ".dW", h, fe, t, Dim::kK, Dim::kCount, E));
  }
  op.backward.push_back(elementwise(n + ".dispatch.bwd", 3 * sd * kd * hd * e));
  op.backward.push_back(elementwise(n + ".route.bwd", 4 * 4 * sd * Ed));
  op.backward.push_back(gemm(n + ".router.dX", s, h, E, Dim::kM));
  op.backward.push_back(gemm(n + ".router.dW", h, E, s, Dim::kK));
  op.backward.push_back(elementwise(n + ".ln2.bwd", 4 * sd * hd * e));
  for (auto* list : {&op.forward, &op.backward})
    for (Kernel& kn : *list) kn.expert = kn.name.rfind(n + ".experts.", 0) == 0;
  // Saved: the norm's input and output (2 s h); the router's probabilities (fp32 s E); the dispatched
  // tokens (s k h), the experts' gate, up and their product (3 s k f_e), their outputs (s k h); the
  // shared MLP's gate, up and product (3 s f_s); the mask.
  op.saved_bytes_per_sample =
      e * (2 * sd * hd + 2 * routed * hd + 3 * routed * fed + 3 * sd * fsd) + 4 * sd * Ed + mask * sd * hd;
  op.input_bytes_per_sample = e * sd * hd;
  op.workspace_bytes_per_sample = e * (3 * routed * fed + routed * hd + 3 * sd * fsd);
  return op;
}

// Multi-head latent attention (ModelSpec::mla; heads a, ranks q_r and kv_r, head parts d_n, d_r, d_v,
// d_q = d_n + d_r), as transformers' DeepseekV3Attention computes it through SDPA: the norm; Q from
// q_a [h x q_r], its norm and q_b [q_r x a d_q] (or q_proj [h x a d_q] when q_r is 0); the latent
// kv_a [h x (kv_r + d_r)], its norm over kv_r and kv_b [kv_r x a (d_n + d_v)]; rotary on the d_r parts;
// the keys expanded to a heads of d_q (the shared rotary key copied into each); a fused attention with
// Q K^T over d_q and P V over d_v; the output projection [a d_v x h]. q_a and kv_a are whole on every
// slice and TP rank (their GEMMs are not cut); q_b, kv_b (columns) and the output projection (rows)
// are cut by heads. Biases (attention_bias) on q_a, kv_a (qkv_bias) and the output (proj_bias).
Operator latent_attention(int layer, const StageSpec& st, const ModelSpec& m, I s, double e, double mask) {
  const MlaSpec& x = m.mla;
  const I h = st.hidden, a = st.heads, qr = x.q_rank, kr = x.kv_rank, dr = x.rope_dim, dv = x.v_dim;
  const I dq = x.qk_dim(), kvb = x.nope_dim + dv;
  const double sd = static_cast<double>(s), hd = static_cast<double>(h), ad = static_cast<double>(a);
  const double qrd = static_cast<double>(qr), krd = static_cast<double>(kr), drd = static_cast<double>(dr);
  const double dqd = static_cast<double>(dq), dvd = static_cast<double>(dv);
  Operator op = layer_operator(layer, OperatorKind::kAttention, "attention", st.hidden);
  op.latent = true;
  op.split_units = a;
  const std::string n = op.name;
  add_norm(op, n + ".ln1", h, sd, e, m);
  // A projection's weights and forward GEMM; returns its backward (dX, dW). Cut by heads: its columns
  // (Cut::kColumns) or its rows (Cut::kRows); Cut::kWhole: on every slice whole.
  enum class Cut { kWhole, kColumns, kRows };
  auto project = [&](const std::string& name, I in, I out, Cut cut, bool bias) {
    Operator part;
    if (cut != Cut::kWhole) {
      add_linear(part, name, s, in, out, cut == Cut::kColumns, bias);
    } else {
      part.weights.push_back({name, in, out, false});
      if (bias) part.weights.push_back({name + ".bias", 1, out, false});
      part.forward.push_back(gemm(name, s, out, in, Dim::kM));
      part.backward = {gemm(name + ".dX", s, in, out, Dim::kM), gemm(name + ".dW", in, out, s, Dim::kK)};
    }
    for (auto& w : part.weights) op.weights.push_back(w);
    op.forward.push_back(part.forward.front());
    return part.backward;
  };
  std::vector<std::vector<Kernel>> back;  // the projections' and norms' backward, in forward order
  if (qr > 0) {
    back.push_back(project(n + ".q_a", h, qr, Cut::kWhole, m.qkv_bias));
    add_norm(op, n + ".q_a_norm", qr, sd, e, m);
    back.push_back({elementwise(n + ".q_a_norm.bwd", 4 * sd * qrd * e)});
    back.push_back(project(n + ".q_b", qr, a * dq, Cut::kColumns, false));
  } else {
    back.push_back(project(n + ".q", h, a * dq, Cut::kColumns, false));
  }
  back.push_back(project(n + ".kv_a", h, kr + dr, Cut::kWhole, m.qkv_bias));
  add_norm(op, n + ".kv_norm", kr, sd, e, m);
  back.push_back({elementwise(n + ".kv_norm.bwd", 4 * sd * krd * e)});
  back.push_back(project(n + ".kv_b", kr, a * kvb, Cut::kColumns, false));
  const std::size_t first_rebuilt = op.forward.size();
  op.forward.push_back(elementwise(n + ".rotary", 2 * sd * (ad + 1) * drd * e, true));
  op.forward.push_back(elementwise(n + ".kv_expand", 2 * sd * ad * dqd * e, true));
  // Fused attention: one pass reads Q, K (a d_q), V (a d_v), writes O (a d_v) and the log-sum-exp.
  const double rho = attention_density(m, s);
  auto flash = [&](const std::string& name, I mm, I nn, I kk) {
    Kernel k = gemm(n + name, mm, nn, kk, Dim::kCount, Dim::kCount, a);
    k.density = rho;
    k.ring_block = true;
    return k;
  };
  auto core = [](Kernel k) {
    k.ring_block = true;
    return k;
  };
  op.forward.push_back(
      core(elementwise(n + ".flash", e * sd * ad * (2 * dqd + 2 * dvd) + 4 * ad * sd, true)));
  op.forward.push_back(flash(".flash.qk", s, s, dq));
  op.forward.push_back(flash(".flash.pv", s, dv, s));
  const std::vector<Kernel> out_bwd = project(n + ".proj", a * dv, h, Cut::kRows, m.proj_bias);
  op.forward.push_back(elementwise(n + ".residual", sd * hd * (3 * e + mask)));
  // Backward, in reverse order of the forward.
  op.backward.push_back(elementwise(n + ".residual.bwd", 2 * sd * hd * e));
  for (const auto& k : out_bwd) op.backward.push_back(k);
  op.backward.push_back(
      core(elementwise(n + ".flash.bwd", e * sd * ad * (4 * dqd + 5 * dvd) + 8 * ad * sd, true)));
  op.backward.push_back(flash(".flash.bwd.qk", s, s, dq));
  op.backward.push_back(flash(".flash.bwd.dV", s, dv, s));
  op.backward.push_back(flash(".flash.bwd.dP", s, s, dv));
  op.backward.push_back(flash(".flash.bwd.dQ", s, dq, s));
  op.backward.push_back(flash(".flash.bwd.dK", s, dq, s));
  op.backward.push_back(elementwise(n + ".kv_expand.bwd", 2 * sd * ad * dqd * e, true));
  op.backward.push_back(elementwise(n + ".rotary.bwd", 2 * sd * (ad + 1) * drd * e, true));
  for (auto it = back.rbegin(); it != back.rend(); ++it)
    for (const auto& k : *it) op.backward.push_back(k);
  op.backward.push_back(elementwise(n + ".ln1.bwd", 4 * sd * hd * e));
  // Saved: the norm's input and output (2 s h); q_a's output and its norm's (2 s q_r); kv_a's output
  // (s (kv_r + d_r)) and its norm's (s kv_r); Q and K (2 s a d_q), V (s a d_v), the output
  // projection's input (s a d_v); the log-sum-exp (fp32); the mask. TP ranks each keep the parts
  // before the cut projections whole.
  const double low_rank = 2 * sd * qrd + sd * (krd + drd) + sd * krd;
  op.saved_bytes_per_sample =
      e * (2 * sd * hd + low_rank + sd * ad * (2 * dqd + 2 * dvd)) + 4 * ad * sd + mask * sd * hd;
  op.tp_replicated_bytes_per_sample = e * (2 * sd * hd + low_rank) + mask * sd * hd;
  op.input_bytes_per_sample = e * sd * hd;
  op.workspace_bytes_per_sample = e * sd * ad * (2 * dqd + dvd) + 4 * ad * sd;
  op.kv_bytes_per_sample = e * sd * ad * (dqd + dvd);  // K and V as the attention takes them, per head
  op.q_bytes_per_sample = e * sd * ad * dqd;
  // Selective: the norm's input, q_a's and kv_a's outputs, q_b's and kv_b's, the attention's output and
  // log-sum-exp, the mask; the norms, rotary and the key expansion run again.
  op.selective_bytes_per_sample =
      e * (sd * hd + sd * qrd + sd * (krd + drd) + sd * ad * (dqd + static_cast<double>(kvb) + dvd)) +
      4 * ad * sd + mask * sd * hd;
  for (std::size_t i = 0; i < op.forward.size(); ++i) {
    const std::string& k = op.forward[i].name;
    if (k == n + ".ln1" || k == n + ".q_a_norm" || k == n + ".kv_norm" ||
        (i >= first_rebuilt && i < first_rebuilt + 2))
      op.selective_recompute.push_back(op.forward[i]);
  }
  return op;
}

}  // namespace osdp::costmodel::lowering
