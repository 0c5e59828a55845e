// DeepSeek-V3 (model_type deepseek_v3): multi-head latent attention (ModelSpec::mla) and its experts
// with a shared one after dense first layers. Every expected number is derived here from the sizes,
// independently of the lowering (workload_blocks.cpp).
//
// transformers' DeepseekV3ForCausalLM (heads a, ranks q_r and kv_r, head parts d_n, d_r, d_v,
// d_q = d_n + d_r, no attention bias): per layer
//   attention = h (input norm) + h q_r + q_r (q_a_proj, q_a_layernorm) + q_r a d_q (q_b_proj)
//               + h (kv_r + d_r) + kv_r (kv_a_proj_with_mqa, kv_a_layernorm) + kv_r a (d_n + d_v)
//               (kv_b_proj) + a d_v h (o_proj)
//   dense MLP = h (norm) + 3 h f;  MoE MLP = h + E h (router) + 3 E h f_e + 3 h (n_s f_e)
//   total     = K dense layers + (L - K) MoE layers + V h (embed_tokens) + h (norm) + V h (lm_head)
// DeepSeek-V3 (h 7168, a 128, q_r 1536, kv_r 512, d_n 128, d_r 64, d_v 128, f 18432, E 256, f_e 2048,
// n_s 1, K 3, L 61, V 129280): 671,026,404,352, DeepSeek's "671B" main model (the multi-token
// prediction layer is not built by transformers; tests/python/test_hf_parameters.py holds this to
// transformers on the meta device).
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/model.hpp"
#include "costmodel/workload.hpp"

namespace {

using namespace osdp::costmodel;
using I = std::int64_t;
using nlohmann::json;

struct Sizes {
  I h, a, qr, kr, dn, dr, dv, f, E, fe, ns, K, L, V;
  I attention() const {
    const I q = qr > 0 ? h * qr + qr + qr * a * (dn + dr) : h * a * (dn + dr);
    return h + q + h * (kr + dr) + kr + kr * a * (dn + dv) + a * dv * h;
  }
  I dense() const { return h + 3 * h * f; }
  I moe() const { return h + E * h + 3 * E * h * fe + 3 * h * ns * fe; }
  I total() const { return L * attention() + K * dense() + (L - K) * moe() + 2 * V * h + h; }
};

json small_config(I q_rank) {
  json c = {{"model_type", "deepseek_v3"},
            {"hidden_size", 64},
            {"num_hidden_layers", 3},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 4},
            {"intermediate_size", 96},
            {"moe_intermediate_size", 16},
            {"n_routed_experts", 4},
            {"num_experts_per_tok", 2},
            {"n_shared_experts", 2},
            {"first_k_dense_replace", 1},
            {"kv_lora_rank", 8},
            {"qk_nope_head_dim", 8},
            {"qk_rope_head_dim", 4},
            {"v_head_dim", 12},
            {"vocab_size", 100},
            {"max_position_embeddings", 64}};
  c["q_lora_rank"] = q_rank > 0 ? json(q_rank) : json(nullptr);
  return c;
}

const Operator& find(const Workload& w, const std::string& name) {
  for (const auto& op : w.operators)
    if (op.name == name) return op;
  FAIL("no operator " << name);
  return w.operators.front();
}

}  // namespace

TEST_CASE("hf config: DeepSeek-V3 counts its latent attention and experts", "[json][moe][mla]") {
  const ModelSpec v3 = load_model("deepseek-v3");
  const Sizes s{7168, 128, 1536, 512, 128, 64, 128, 18432, 256, 2048, 1, 3, 61, 129280};
  CHECK(lower(v3).parameters() == s.total());
  CHECK(lower(v3).parameters() == 671026404352LL);
  CHECK(v3.mla.enabled());
  CHECK(v3.moe.dense_layers == 3);
  CHECK(v3.moe.shared_ffn == 2048);
  for (const I q_rank : {I{16}, I{0}}) {  // q_lora_rank null: one q_proj
    const ModelSpec m = read_model(small_config(q_rank), "ds.json");
    const Sizes x{64, 4, q_rank, 8, 8, 4, 12, 96, 4, 16, 2, 1, 3, 100};
    const Workload w = lower(m);
    CHECK(w.parameters() == x.total());
    CHECK(find(w, "layer0.attention").parameters() == x.attention());
    CHECK(find(w, "layer0.mlp").parameters() == x.dense());
    CHECK(find(w, "layer2.mlp").parameters() == x.moe());
    // The JSON form keeps the latent attention.
    CHECK(to_json(read_model(to_json(m), "plan.json", "/model")) == to_json(m));
  }
}

// FLOPs of one sample (seq s, causal: the fused kernels compute a share rho = (s + 1) / 2s):
//   forward  = 2 s (h q_r + q_r a d_q + h (kv_r + d_r) + kv_r a (d_n + d_v) + a d_v h)
//              + 2 a s^2 rho (d_q + d_v)                      (Q K^T over d_q, P V over d_v)
//   backward = 2 x the projections + 2 a s^2 rho (3 d_q + 2 d_v)  (S, dP over d_q, d_v; dV, dQ, dK)
// Tensor parallelism t = 2: q_a, kv_a and the norms whole on each rank, q_b, kv_b and o_proj halved.
TEST_CASE("latent attention: FLOPs and its tensor-parallel slice", "[mla]") {
  const ModelSpec m = read_model(small_config(16), "ds.json");
  const double s = m.seq, h = 64, a = 4, qr = 16, kr = 8, dn = 8, dr = 4, dv = 12, dq = dn + dr;
  const double rho = (s + 1) / (2 * s);
  const double proj = 2 * s * (h * qr + qr * a * dq + h * (kr + dr) + kr * a * (dn + dv) + a * dv * h);
  const Workload w = lower(m);
  const Operator& att = find(w, "layer1.attention");
  CHECK(att.latent);
  CHECK(att.forward_flops(1) == Approx(proj + 2 * a * s * s * rho * (dq + dv)).epsilon(1e-12));
  CHECK(att.backward_flops(1) == Approx(2 * proj + 2 * a * s * s * rho * (3 * dq + 2 * dv)).epsilon(1e-12));
  CHECK(att.split_units == 4);  // cut by whole heads
  CHECK(tp_allowed(att, 4));
  CHECK_FALSE(tp_allowed(att, 8));
  const I whole = 64 + (64 * 16 + 16) + (64 * 12 + 8);   // ln1, q_a + norm, kv_a + norm
  const I cut = 16 * 4 * 12 + 8 * 4 * 20 + 4 * 12 * 64;  // q_b, kv_b, o_proj
  CHECK(att.parameters() == whole + cut);
  CHECK(tp_slice(att, 2, false, w).parameters() == whole + cut / 2);
  // The sliced FLOPs: the low-rank GEMMs whole, the rest halved.
  const double low = 2 * s * (h * qr + h * (kr + dr));
  CHECK(tp_slice(att, 2, false, w).forward_flops(1) ==
        Approx(low + (proj - low) / 2 + a * s * s * rho * (dq + dv)).epsilon(1e-12));
}

TEST_CASE("model files: an mla block, and its errors", "[json][mla]") {
  json doc = {
      {"schema_version", 1}, {"name", "mla-file"},
      {"family", "llama"},   {"seq", 32},
      {"vocab", 100},        {"layers", 2},
      {"hidden", 64},        {"heads", 4},
      {"ffn", 96},           {"mla", {{"kv_rank", 8}, {"nope_dim", 8}, {"rope_dim", 4}, {"v_dim", 12}}}};
  const ModelSpec m = read_model(doc, "mla-file.json");
  CHECK(m.mla.q_rank == 0);
  const Sizes x{64, 4, 0, 8, 8, 4, 12, 96, 0, 0, 0, 2, 2, 100};
  CHECK(lower(m).parameters() == x.total());
  CHECK(to_json(read_model(to_json(m), "plan.json", "/model")) == to_json(m));
  const auto pointer = [&](const json& d) {
    try {
      read_model(d, "mla-file.json");
    } catch (const osdp::InputError& e) {
      return e.pointer();
    }
    return std::string("no error");
  };
  json bad = doc;
  bad["mla"].erase("kv_rank");
  CHECK(pointer(bad) == "/mla/kv_rank");
  bad = doc;
  bad["attention"] = "materialized";
  CHECK(pointer(bad) == "/mla");
}
