// The block kinds beyond the paper's GPT (model.hpp, workload.hpp): grouped-query attention, head_dim,
// gated MLPs, RMSNorm, rotary positions, biases, qk_norm, fused attention, the fp32 loss, the
// precision policies, and Hugging Face configs as model files. Every expected number is derived
// here from the sizes (closed forms, or a brute-force count), independently of workload.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/error.hpp"
#include "costmodel/hf_config.hpp"
#include "costmodel/model.hpp"
#include "costmodel/workload.hpp"

namespace {

using namespace osdp::costmodel;
using I = std::int64_t;
using nlohmann::json;

constexpr double kRel = 1e-12;

ModelSpec family_model(const std::string& family, int layers, int hidden, int heads, int kv_heads,
                       int head_dim, int ffn, int seq, int vocab, bool tied) {
  ModelSpec m;
  apply_family_defaults(m, family);
  m.name = "test-" + family;
  StageSpec st;
  st.layers = layers;
  st.hidden = hidden;
  st.heads = heads;
  st.kv_heads = kv_heads;
  st.head_dim = head_dim;
  st.ffn = ffn;
  m.stages = {st};
  m.seq = seq;
  m.vocab = vocab;
  m.tied_embeddings = tied;
  m.precision = Precision::kBf16;
  return m;
}

const Operator& find(const Workload& w, const std::string& name) {
  for (const auto& op : w.operators)
    if (op.name == name) return op;
  FAIL("no operator " << name);
  return w.operators.front();
}

double flops_of(const std::vector<Kernel>& ks, const std::string& infix) {
  double f = 0;
  for (const auto& k : ks)
    if (k.name.find(infix) != std::string::npos) f += k.flops(1);
  return f;
}

}  // namespace

TEST_CASE("families: parameters of llama, qwen2 and qwen3 blocks in closed form", "[workload]") {
  // h 96, a 6 query heads of d 32 (q = 192 != h), g 2 key/value heads (k = 64), f 160, V 1000, L 3.
  const I L = 3, h = 96, a = 6, g = 2, d = 32, f = 160, V = 1000, q = a * d, k = g * d;
  for (const std::string family : {"llama", "mistral", "qwen2", "qwen3"}) {
    for (const bool tied : {false, true}) {
      const ModelSpec m = family_model(family, L, h, a, g, d, f, 64, V, tied);
      const Workload w = lower(m);
      // attention: RMSNorm h + Q, K, V h (q + 2k) + o_proj q h (+ QKV bias q + 2k) (+ q/k norms 2d)
      const I attention =
          h + h * (q + 2 * k) + q * h + (family == "qwen2" ? q + 2 * k : 0) + (family == "qwen3" ? 2 * d : 0);
      const I mlp = h + 3 * h * f;  // RMSNorm + gate, up, down
      CHECK(find(w, "layer0.attention").parameters() == attention);
      CHECK(find(w, "layer2.mlp").parameters() == mlp);
      // embedding V h (no position table: rotary); final norm h; LM head h V unless tied.
      CHECK(find(w, "embedding").parameters() == V * h + (tied ? h : 0));
      if (!tied) CHECK(find(w, "head").parameters() == h + h * V);
      CHECK(w.parameters() == V * h + L * (attention + mlp) + h + (tied ? 0 : h * V));
    }
  }
}

TEST_CASE("families: the gpt defaults are the paper's blocks (LayerNorm, learned positions, biases)",
          "[workload]") {
  ModelSpec m = family_model("gpt", 2, 64, 4, 4, 16, 256, 32, 500, true);
  m.max_positions = 48;  // a table longer than the sequence (GPT-2's n_positions)
  const Workload w = lower(m);
  const I h = 64, f = 256;
  CHECK(find(w, "layer0.attention").parameters() == 2 * h + 3 * h * h + 3 * h + h * h + h);
  CHECK(find(w, "layer0.mlp").parameters() == 2 * h + 2 * h * f + f + h);
  CHECK(find(w, "embedding").parameters() == 500 * h + 48 * h + 2 * h);
}

TEST_CASE("families: GQA, SwiGLU and fused causal attention FLOPs", "[workload]") {
  const I h = 96, a = 6, g = 2, d = 32, f = 160, s = 64, q = a * d, k = g * d;
  const ModelSpec m = family_model("llama", 1, h, a, g, d, f, static_cast<int>(s), 1000, false);
  const Workload w = lower(m);
  const Operator& att = find(w, "layer0.attention");
  // Q, K, V and o_proj, three GEMMs and one: 2 s h (q + 2k) + 2 s q h forward.
  double projections = 0;
  for (const auto& kern : att.forward)
    for (const char* part : {".q", ".k", ".v", ".proj"})
      if (kern.name == att.name + part) projections += kern.flops(1);
  CHECK(projections == Approx(2.0 * s * h * (q + 2 * k) + 2.0 * s * q * h).epsilon(kRel));
  // Causal: s (s + 1) / 2 of the s^2 scores; Q K^T and P V: 2 a d each per score computed.
  const double scores = s * (s + 1) / 2.0;
  CHECK(flops_of(att.forward, ".flash.") == Approx(2 * 2.0 * a * d * scores).epsilon(kRel));
  // Its backward: the recomputed S, dV, dP, dQ, dK.
  CHECK(flops_of(att.backward, ".flash.") == Approx(5 * 2.0 * a * d * scores).epsilon(kRel));
  const Operator& mlp = find(w, "layer0.mlp");
  CHECK(mlp.forward_flops(1) == Approx(3 * 2.0 * s * h * f).epsilon(kRel));
  CHECK(mlp.backward_flops(1) == Approx(6 * 2.0 * s * h * f).epsilon(kRel));
  // A slice holds whole key/value heads: splits divide g = 2 (and f for the MLP).
  CHECK(att.splits(8) == std::vector<int>{1, 2});
}

TEST_CASE("families: a sliding window computes its share of the scores (brute-force count)", "[workload]") {
  const int s = 50;
  for (const int window : {1, 7, 49, 50, 64}) {
    ModelSpec m = family_model("mistral", 1, 64, 4, 4, 16, 128, s, 100, false);
    m.sliding_window = window;
    const Workload w = lower(m);
    double pairs = 0;  // key j visible to query i: j <= i and i - j < window
    for (int i = 0; i < s; ++i)
      for (int j = 0; j <= i; ++j) pairs += (i - j < window) ? 1 : 0;
    const Operator& att = find(w, "layer0.attention");
    CHECK(flops_of(att.forward, ".flash.") == Approx(2 * 2.0 * 4 * 16 * pairs).epsilon(kRel));
  }
}

TEST_CASE("families: saved activations of fused attention, SwiGLU and the fp32 loss", "[workload]") {
  const I h = 96, a = 6, g = 2, d = 32, f = 160, s = 64, V = 1000, q = a * d, k = g * d;
  const double e = 2;  // bf16
  const Workload w =
      lower(family_model("llama", 1, h, a, g, d, f, static_cast<int>(s), static_cast<int>(V), false));
  // Attention: norm input and output (2 s h), Q, K, V (s (q + 2k)), O (s q), the fp32 LSE (4 a s).
  CHECK(find(w, "layer0.attention").saved_bytes_per_sample ==
        Approx(e * (2 * s * h + s * (q + 2 * k) + s * q) + 4.0 * a * s).epsilon(kRel));
  // MLP: norm input and output (2 s h), gate, up and their product (3 s f).
  CHECK(find(w, "layer0.mlp").saved_bytes_per_sample == Approx(e * (2 * s * h + 3 * s * f)).epsilon(kRel));
  // Head: norm input and output, the bf16 logits and the fp32 log-probabilities.
  CHECK(find(w, "head").saved_bytes_per_sample == Approx(2 * e * s * h + (e + 4) * s * V).epsilon(kRel));
  // The figure: at V = 128,256 the fp32 log-probabilities of one 8k sequence are 3.9 GiB.
  ModelSpec big = load_model("llama3.1-8b");
  set_sequence_length(big, 8192, "test");
  const Workload wb = lower(big);
  const double logp = 4.0 * 8192 * 128256;
  CHECK(find(wb, "head").saved_bytes_per_sample ==
        Approx(2 * e * 8192 * 4096 + e * 8192 * 128256 + logp).epsilon(kRel));
  CHECK(logp / (1 << 30) == Approx(3.914).epsilon(1e-3));
}

TEST_CASE("precision: 16 bytes per parameter at rest in every policy; FSDP2's bf16 reduces in fp32",
          "[workload]") {
  for (const Precision p :
       {Precision::kFp32, Precision::kMixed, Precision::kBf16, Precision::kBf16ReduceBf16})
    CHECK(precision_bytes(p).at_rest() == 16);
  const PrecisionBytes b = precision_bytes(Precision::kBf16);
  CHECK(b.weight == 2);  // all-gathered in bf16
  CHECK(b.reduce == 4);  // reduce-scattered in fp32
  CHECK(b.shard_weight == 4);
  CHECK(b.gradient_in_flight() == 2 + 4);  // the bf16 gradient and its fp32 cast
  CHECK(precision_bytes(Precision::kBf16ReduceBf16).gradient_in_flight() == 2);
  const json j = precision_json(Precision::kBf16);
  CHECK(j["param_dtype"] == "bfloat16");
  CHECK(j["reduce_dtype"] == "float32");
  CHECK(j["bytes_per_parameter"]["at_rest"] == 16);
}

TEST_CASE("hf config: a llama config.json read as its keys say", "[json]") {
  const json cfg = {{"model_type", "llama"},        {"hidden_size", 4096},
                    {"intermediate_size", 14336},   {"num_attention_heads", 32},
                    {"num_hidden_layers", 32},      {"num_key_value_heads", 8},
                    {"vocab_size", 128256},         {"max_position_embeddings", 131072},
                    {"tie_word_embeddings", false}, {"torch_dtype", "bfloat16"},
                    {"hidden_act", "silu"}};
  const ModelSpec m = read_model(cfg, "/models/Llama-3.1-8B/config.json");
  CHECK(m.name == "Llama-3.1-8B");
  CHECK(m.family == "llama");
  CHECK(m.seq == kHfDefaultSeq);
  REQUIRE(m.stages.size() == 1);
  CHECK(m.stages[0].kv_heads == 8);
  CHECK(m.stages[0].head_dim == 128);
  CHECK(m.stages[0].ffn == 14336);
  CHECK(m.mlp == MlpKind::kSwiglu);
  CHECK(m.norm == NormKind::kRmsNorm);
  CHECK(m.attention == AttentionKind::kFused);
  CHECK(m.precision == Precision::kBf16);
  CHECK_FALSE(m.tied_embeddings);
  // 8,030,261,248: the count transformers gives on the meta device (tests/python checks it there).
  CHECK(lower(m).parameters() == 8030261248LL);
}

TEST_CASE("hf config: unsupported model types and missing keys are input errors", "[json]") {
  json cfg = {{"model_type", "falcon"}, {"hidden_size", 64}};
  try {
    read_model(cfg, "c.json");
    FAIL("no error");
  } catch (const osdp::InputError& e) {
    CHECK(e.pointer() == "/model_type");
    CHECK(std::string(e.what()).find("gpt2, llama, mistral, qwen2, qwen3, mixtral, qwen3_moe") !=
          std::string::npos);
    CHECK(std::string(e.what()).find("\"falcon\"") != std::string::npos);
  }
  cfg = {{"model_type", "qwen2"}, {"hidden_size", 64}, {"num_attention_heads", 4}, {"vocab_size", 10}};
  try {
    read_model(cfg, "c.json");
    FAIL("no error");
  } catch (const osdp::InputError& e) {
    CHECK(e.pointer() == "/num_hidden_layers");
  }
  ModelSpec gpt2 = read_model({{"model_type", "gpt2"},
                               {"n_embd", 64},
                               {"n_layer", 2},
                               {"n_head", 4},
                               {"vocab_size", 100},
                               {"n_positions", 128}},
                              "tiny-gpt2.json");
  CHECK(gpt2.seq == 128);
  CHECK_THROWS_AS(set_sequence_length(gpt2, 256, "--seq"), osdp::UsageError);
  set_sequence_length(gpt2, 64, "--seq");
  // The position table keeps its 128 rows when the sequence is shorter.
  CHECK(lower(gpt2).operators.front().parameters() == 100 * 64 + 128 * 64 + 2 * 64);
}

TEST_CASE("hf config: the model_type travels with the model through its JSON form", "[json]") {
  const ModelSpec gpt2 = read_model(
      {{"model_type", "gpt2"}, {"n_embd", 64}, {"n_layer", 2}, {"n_head", 4}, {"vocab_size", 100}}, "g.json");
  CHECK(gpt2.hf_model_type == "gpt2");
  const json j = to_json(gpt2);
  CHECK(j["hf_model_type"] == "gpt2");
  const ModelSpec back = read_model(j, "plan.json", "/model");
  CHECK(back.hf_model_type == "gpt2");
  CHECK(to_json(back) == j);
  // osdp's own files have none, and name only the types osdp reads.
  json own = to_json(read_model({{"schema_version", 1},
                                 {"name", "m"},
                                 {"seq", 8},
                                 {"vocab", 10},
                                 {"layers", 1},
                                 {"hidden", 8},
                                 {"heads", 2},
                                 {"ffn", 32}},
                                "m.json"));
  CHECK_FALSE(own.contains("hf_model_type"));
  own["hf_model_type"] = "falcon";
  try {
    read_model(own, "m.json");
    FAIL("no error");
  } catch (const osdp::InputError& e) {
    CHECK(e.pointer() == "/hf_model_type");
  }
}

// Mixture-of-experts configs (ModelSpec::moe), counted from transformers' modules (MixtralForCausalLM,
// Qwen3MoeForCausalLM: per layer q/k/v/o_proj, the two norms (Qwen3: q_norm and k_norm of head_dim),
// mlp.gate [E x h], mlp.experts.gate_up_proj [E x 2 f_e x h] and down_proj [E x h x f_e]; the token
// table, the final norm and an untied lm_head), h the hidden size, a/g the heads, d the head size:
//   attention = h a d + 2 h g d + a d h (+ 2 d for Qwen3's Q/K norms),  MoE MLP = E h + 3 E h f_e,
//   layer = attention + 2 h + MoE MLP;  total = L layer + 2 V h + h.
// Mixtral-8x7B (h 4096, a 32, g 8, d 128, E 8, f_e 14336, L 32, V 32000): 46,702,792,704, Mistral's
// "46.7B"; Qwen3-30B-A3B (h 2048, a 32, g 4, d 128, E 128, f_e 768, L 48, V 151936): 30,532,122,624,
// Qwen's "30.5B" (tests/python/test_hf_parameters.py holds both to transformers on the meta device).
TEST_CASE("hf config: Mixtral and Qwen3-MoE count their experts' parameters", "[json][moe]") {
  const auto total = [](std::int64_t h, std::int64_t a, std::int64_t g, std::int64_t d, std::int64_t E,
                        std::int64_t fe, std::int64_t L, std::int64_t V, bool qk_norm) {
    const std::int64_t attention = h * a * d + 2 * h * g * d + a * d * h + (qk_norm ? 2 * d : 0);
    return L * (attention + 2 * h + E * h + 3 * E * h * fe) + 2 * V * h + h;
  };
  const ModelSpec mixtral = load_model("mixtral-8x7b");
  CHECK(mixtral.moe.experts == 8);
  CHECK(mixtral.moe.top_k == 2);
  CHECK(lower(mixtral).parameters() == total(4096, 32, 8, 128, 8, 14336, 32, 32000, false));
  CHECK(lower(mixtral).parameters() == 46702792704LL);
  const ModelSpec qwen = load_model("qwen3-30b-a3b");
  CHECK(qwen.moe.experts == 128);
  CHECK(qwen.moe.top_k == 8);
  CHECK(lower(qwen).parameters() == total(2048, 32, 4, 128, 128, 768, 48, 151936, true));
  CHECK(lower(qwen).parameters() == 30532122624LL);
  // Every MLP an MoE layer of E experts, split only into whole experts.
  for (const auto& op : lower(qwen).operators)
    if (op.kind == OperatorKind::kMlp) {
      CHECK(op.experts == 128);
      CHECK(op.split_units == 128);
    }
  // The model's JSON form keeps the experts; a Qwen3-MoE layer listed in mlp_only_layers is dense.
  CHECK(to_json(read_model(to_json(qwen), "plan.json", "/model")) == to_json(qwen));
  const ModelSpec some = read_model({{"model_type", "qwen3_moe"},
                                     {"hidden_size", 64},
                                     {"num_hidden_layers", 4},
                                     {"num_attention_heads", 4},
                                     {"intermediate_size", 128},
                                     {"moe_intermediate_size", 32},
                                     {"num_experts", 4},
                                     {"num_experts_per_tok", 2},
                                     {"decoder_sparse_step", 2},
                                     {"mlp_only_layers", {3}},
                                     {"vocab_size", 100}},
                                    "q.json");
  std::vector<int> experts;
  for (const auto& op : lower(some).operators)
    if (op.kind == OperatorKind::kMlp) experts.push_back(op.experts);
  CHECK(experts == std::vector<int>{0, 4, 0, 0});  // layer 1 only: (i + 1) % 2 == 0 and not listed
  CHECK_THROWS_AS(read_model({{"model_type", "mixtral"},
                              {"hidden_size", 64},
                              {"num_hidden_layers", 1},
                              {"num_attention_heads", 4},
                              {"intermediate_size", 32},
                              {"vocab_size", 10}},
                             "m.json"),
                  osdp::InputError);  // num_local_experts is required
}

// A model file's "moe" block, with what no bundled config exercises: a shared expert and dense first
// layers (DeepSeek's form). llama family, h 64, 4 layers, ffn 96; 4 experts of 32, top 2, a shared
// MLP of 48, the first layer dense. Per MLP operator (the RMSNorm's h weights included):
//   dense:  h + 3 h ffn = 64 + 18,432 = 18,496
//   MoE:    h + E h (router) + 3 E h f_e + 3 h f_s = 64 + 256 + 24,576 + 9,216 = 34,112
TEST_CASE("model files: an moe block with a shared expert and dense first layers", "[json][moe]") {
  json doc = {
      {"schema_version", 1},
      {"name", "moe-file"},
      {"family", "llama"},
      {"seq", 32},
      {"vocab", 100},
      {"layers", 4},
      {"hidden", 64},
      {"heads", 4},
      {"ffn", 96},
      {"moe", {{"experts", 4}, {"top_k", 2}, {"expert_ffn", 32}, {"shared_ffn", 48}, {"dense_layers", 1}}}};
  const ModelSpec m = read_model(doc, "moe-file.json");
  std::vector<std::int64_t> mlp;
  for (const auto& op : lower(m).operators)
    if (op.kind == OperatorKind::kMlp) mlp.push_back(op.parameters());
  CHECK(mlp == std::vector<std::int64_t>{18496, 34112, 34112, 34112});
  CHECK(to_json(read_model(to_json(m), "plan.json", "/model")) == to_json(m));
  doc["moe"]["top_k"] = 5;  // more experts per token than experts
  try {
    read_model(doc, "moe-file.json");
    FAIL("no error");
  } catch (const osdp::InputError& e) {
    CHECK(e.pointer() == "/moe/top_k");
  }
  doc["moe"]["top_k"] = 2;
  doc["moe"]["dense_list"] = {4};  // past the last layer
  CHECK_THROWS_AS(read_model(doc, "moe-file.json"), osdp::InputError);
}
