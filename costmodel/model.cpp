#include "costmodel/model.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "costmodel/bounds.hpp"
#include "costmodel/hf_config.hpp"
#include "costmodel/json_reader.hpp"

namespace osdp::costmodel {

PrecisionBytes precision_bytes(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return {4, 4, 4, 4, 4, 8, 4};
    case Precision::kMixed:
      return {2, 2, 2, 2, 2, 12, 2};
    case Precision::kBf16:
      return {2, 2, 4, 4, 4, 8, 2};
    case Precision::kBf16ReduceBf16:
      return {2, 2, 2, 4, 4, 8, 2};
  }
  return {4, 4, 4, 4, 4, 8, 4};
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kMixed:
      return "mixed";
    case Precision::kBf16:
      return "bf16";
    case Precision::kBf16ReduceBf16:
      return "bf16-reduce-bf16";
  }
  return "?";
}

const char* param_dtype(Precision p) {
  return p == Precision::kFp32 ? "float32" : "bfloat16";
}

const char* reduce_dtype(Precision p) {
  return precision_bytes(p).reduce == 4 ? "float32" : "bfloat16";
}

nlohmann::json precision_json(Precision p) {
  const PrecisionBytes b = precision_bytes(p);
  return {{"precision", to_string(p)},
          {"param_dtype", param_dtype(p)},
          {"reduce_dtype", reduce_dtype(p)},
          {"master_weights", p == Precision::kFp32 ? "float32 (the parameters)" : "float32"},
          {"adam_moments", "float32"},
          {"bytes_per_parameter",
           {{"at_rest", b.at_rest()},
            {"shard_weight", b.shard_weight},
            {"shard_gradient", b.shard_gradient},
            {"optimizer", b.optimizer},
            {"gathered_weight", b.weight},
            {"gradient_in_flight", b.gradient},
            {"reduce", b.reduce}}},
          {"bytes_per_activation", b.activation}};
}

const char* to_string(MlpKind k) {
  switch (k) {
    case MlpKind::kGelu:
      return "gelu";
    case MlpKind::kRelu:
      return "relu";
    case MlpKind::kSwiglu:
      return "swiglu";
    case MlpKind::kGeglu:
      return "geglu";
  }
  return "?";
}

const char* to_string(NormKind k) {
  return k == NormKind::kLayerNorm ? "layernorm" : "rmsnorm";
}

const char* to_string(PositionKind k) {
  return k == PositionKind::kLearned ? "learned" : "rotary";
}

const char* to_string(AttentionKind k) {
  return k == AttentionKind::kMaterialized ? "materialized" : "fused";
}

const std::vector<std::string>& model_families() {
  static const std::vector<std::string> families{"gpt", "llama", "mistral", "qwen2", "qwen3"};
  return families;
}

void apply_family_defaults(ModelSpec& m, const std::string& family) {
  m.family = family;
  if (family == "gpt") return;  // the struct's defaults
  m.mlp = MlpKind::kSwiglu;
  m.norm = NormKind::kRmsNorm;
  m.norm_bias = false;
  m.positions = PositionKind::kRotary;
  m.attention = AttentionKind::kFused;
  m.qkv_bias = m.proj_bias = m.mlp_bias = false;
  m.fused_qkv = false;
  m.fp32_loss = true;
  m.dropout = false;
  m.tied_embeddings = false;
  if (family == "qwen2") m.qkv_bias = true;
  if (family == "qwen3") m.qk_norm = true;
}

int ModelSpec::total_layers() const {
  int n = 0;
  for (const auto& s : stages) n += s.layers;
  return n;
}

namespace {

using bounds::kMaxDim;

StageSpec read_stage(JsonReader& r) {
  StageSpec s;
  s.layers = static_cast<int>(r.integer("layers", 1, kMaxLayers));
  s.hidden = static_cast<int>(r.integer("hidden", 1, kMaxDim));
  s.heads = static_cast<int>(r.integer("heads", 1, kMaxDim));
  s.kv_heads = static_cast<int>(r.integer_or("kv_heads", 1, s.heads, s.heads));
  if (s.heads % s.kv_heads != 0)
    r.fail("kv_heads",
           fmt::format("{} query heads cannot be grouped over {} key/value heads", s.heads, s.kv_heads));
  if (r.has("head_dim")) {
    s.head_dim = static_cast<int>(r.integer("head_dim", 1, kMaxDim));
  } else {
    if (s.hidden % s.heads != 0)
      r.fail("heads", fmt::format("hidden size {} is not divisible by {} heads (give \"head_dim\")", s.hidden,
                                  s.heads));
    s.head_dim = s.hidden / s.heads;
  }
  if (static_cast<std::int64_t>(s.heads) * s.head_dim > 4 * kMaxDim)
    r.fail("head_dim", fmt::format("{} heads of {} are wider than osdp plans", s.heads, s.head_dim));
  s.ffn = static_cast<int>(r.integer_or("ffn", 1, 4 * kMaxDim, 4LL * s.hidden));
  return s;
}

template <typename E>
E read_kind(JsonReader& r, std::string_view key, std::initializer_list<E> kinds, E fallback) {
  std::vector<std::string> names;
  for (const E k : kinds) names.emplace_back(to_string(k));
  const std::string got = r.choice_or(key, names, to_string(fallback));
  for (const E k : kinds)
    if (got == to_string(k)) return k;
  return fallback;
}

}  // namespace

bool MoeSpec::moe_layer(int layer) const {
  if (!enabled() || layer < dense_layers || (layer + 1) % std::max(step, 1) != 0) return false;
  return std::find(dense_list.begin(), dense_list.end(), layer) == dense_list.end();
}

namespace {
// The "moe" block of a model file (every field but experts, top_k and expert_ffn optional).
MoeSpec read_moe(JsonReader& r, int layers) {
  MoeSpec e;
  e.experts = static_cast<int>(r.integer("experts", 1, 1 << 16));
  e.top_k = static_cast<int>(r.integer("top_k", 1, e.experts));
  e.expert_ffn = static_cast<int>(r.integer("expert_ffn", 1, 4 * kMaxDim));
  e.shared_ffn = static_cast<int>(r.integer_or("shared_ffn", 0, 4 * kMaxDim, 0));
  e.dense_layers = static_cast<int>(r.integer_or("dense_layers", 0, layers, 0));
  e.step = static_cast<int>(r.integer_or("step", 1, std::max(layers, 1), 1));
  if (const nlohmann::json* list = r.raw("dense_list")) {
    if (!list->is_array()) r.fail("dense_list", "expected an array of layer indices");
    for (const auto& v : *list) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= layers)
        r.fail("dense_list", fmt::format("expected layer indices in [0, {}], got {}", layers - 1, v.dump()));
      e.dense_list.push_back(v.get<int>());
    }
  }
  return e;
}
// The "mla" block of a model file (q_rank optional: 0, one q_proj).
MlaSpec read_mla(JsonReader& r) {
  MlaSpec a;
  a.q_rank = static_cast<int>(r.integer_or("q_rank", 0, kMaxDim, 0));
  a.kv_rank = static_cast<int>(r.integer("kv_rank", 1, kMaxDim));
  a.nope_dim = static_cast<int>(r.integer("nope_dim", 1, kMaxDim));
  a.rope_dim = static_cast<int>(r.integer("rope_dim", 1, kMaxDim));
  a.v_dim = static_cast<int>(r.integer("v_dim", 1, kMaxDim));
  return a;
}
}  // namespace

ModelSpec read_model(const nlohmann::json& doc, const std::string& file, const std::string& pointer) {
  if (pointer.empty() && is_hf_config(doc)) return read_hf_config(doc, file);
  JsonReader r(doc, file, pointer);
  r.expect_kind(FileKind::kModel);
  r.expect_schema_version(1);
  ModelSpec m;
  m.name = r.name("name");
  m.description = r.string_or("description", "");
  apply_family_defaults(m, r.choice_or("family", model_families(), "gpt"));
  m.seq = static_cast<int>(r.integer("seq", 1, kMaxDim));
  m.vocab = static_cast<int>(r.integer("vocab", 1, 64 * kMaxDim));
  m.tied_embeddings = r.boolean_or("tied_embeddings", m.tied_embeddings);
  m.precision = read_kind(r, "precision",
                          {Precision::kFp32, Precision::kMixed, Precision::kBf16, Precision::kBf16ReduceBf16},
                          m.family == "gpt" ? Precision::kFp32 : Precision::kBf16);
  m.dropout = r.boolean_or("dropout", m.dropout);
  m.mlp = read_kind(r, "mlp", {MlpKind::kGelu, MlpKind::kRelu, MlpKind::kSwiglu, MlpKind::kGeglu}, m.mlp);
  m.norm = read_kind(r, "norm", {NormKind::kLayerNorm, NormKind::kRmsNorm}, m.norm);
  m.norm_bias = m.norm == NormKind::kLayerNorm && r.boolean_or("norm_bias", m.norm == NormKind::kLayerNorm);
  m.positions = read_kind(r, "positions", {PositionKind::kLearned, PositionKind::kRotary}, m.positions);
  if (m.positions == PositionKind::kLearned && r.has("max_positions")) {
    m.max_positions = static_cast<int>(r.integer("max_positions", 1, kMaxDim));
    if (m.max_positions < m.seq)
      r.fail("max_positions",
             fmt::format("a position table of {} rows cannot hold a sequence of {}", m.max_positions, m.seq));
  }
  m.attention = read_kind(r, "attention", {AttentionKind::kMaterialized, AttentionKind::kFused}, m.attention);
  m.causal = r.boolean_or("causal", m.causal);
  m.sliding_window = static_cast<int>(r.integer_or("sliding_window", 0, kMaxDim, 0));
  const bool bias = r.boolean_or("bias", m.qkv_bias && m.proj_bias && m.mlp_bias);
  if (r.has("bias")) m.qkv_bias = m.proj_bias = m.mlp_bias = bias;
  m.qkv_bias = r.boolean_or("qkv_bias", m.qkv_bias);
  m.proj_bias = r.boolean_or("proj_bias", m.proj_bias);
  m.mlp_bias = r.boolean_or("mlp_bias", m.mlp_bias);
  m.qk_norm = r.boolean_or("qk_norm", m.qk_norm);
  m.fused_qkv = r.boolean_or("fused_qkv", m.fused_qkv);
  m.fp32_loss = r.boolean_or("fp32_loss", m.fp32_loss);
  if (r.has("hf_model_type")) m.hf_model_type = r.choice("hf_model_type", hf_model_types());
  const bool uniform = r.has("layers") || r.has("hidden") || r.has("heads") || r.has("ffn") ||
                       r.has("kv_heads") || r.has("head_dim");
  if (r.has("stages")) {
    if (uniform)
      r.fail("stages",
             "give either \"stages\" or \"layers\"/\"hidden\"/\"heads\"/\"kv_heads\"/\"head_dim\"/\"ffn\", "
             "not both");
    std::int64_t total = 0;
    for (auto& s : r.objects("stages")) {
      m.stages.push_back(read_stage(s));
      s.finish();
      total += m.stages.back().layers;
      if (total > kMaxLayers)
        r.fail("stages", fmt::format("more than {} layers in all (reached at stage {}), more than osdp plans",
                                     kMaxLayers, m.stages.size() - 1));
    }
  } else {
    if (!uniform)
      r.fail("layers", "required key is missing (expected \"layers\", \"hidden\", \"heads\" or \"stages\")");
    m.stages.push_back(read_stage(r));
  }
  if (auto moe = r.object_if("moe")) {
    m.moe = read_moe(*moe, m.total_layers());
    moe->finish();
  }
  if (auto mla = r.object_if("mla")) {
    m.mla = read_mla(*mla);
    mla->finish();
    if (m.positions != PositionKind::kRotary || m.attention != AttentionKind::kFused)
      r.fail("mla",
             "multi-head latent attention carries its positions in a rotary part and runs fused: it needs "
             "\"positions\": \"rotary\" and \"attention\": \"fused\"");
  }
  if (m.tied_embeddings && m.first_hidden() != m.last_hidden())
    r.fail("tied_embeddings",
           fmt::format("the token table ({} wide) cannot be tied to an LM head on hidden size {}; "
                       "set \"tied_embeddings\": false",
                       m.first_hidden(), m.last_hidden()));
  r.finish();
  return m;
}

nlohmann::json to_json(const ModelSpec& m) {
  nlohmann::json j;
  j["schema_version"] = 1;
  j["name"] = m.name;
  if (!m.description.empty()) j["description"] = m.description;
  j["family"] = m.family;
  j["seq"] = m.seq;
  j["vocab"] = m.vocab;
  j["tied_embeddings"] = m.tied_embeddings;
  j["precision"] = to_string(m.precision);
  j["dropout"] = m.dropout;
  j["mlp"] = to_string(m.mlp);
  j["norm"] = to_string(m.norm);
  if (m.norm == NormKind::kLayerNorm) j["norm_bias"] = m.norm_bias;
  j["positions"] = to_string(m.positions);
  if (m.positions == PositionKind::kLearned && m.max_positions > 0) j["max_positions"] = m.max_positions;
  j["attention"] = to_string(m.attention);
  j["causal"] = m.causal;
  if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
  j["qkv_bias"] = m.qkv_bias;
  j["proj_bias"] = m.proj_bias;
  j["mlp_bias"] = m.mlp_bias;
  j["qk_norm"] = m.qk_norm;
  j["fused_qkv"] = m.fused_qkv;
  j["fp32_loss"] = m.fp32_loss;
  if (!m.hf_model_type.empty()) j["hf_model_type"] = m.hf_model_type;
  if (m.moe.enabled()) {
    nlohmann::json e{{"experts", m.moe.experts}, {"top_k", m.moe.top_k}, {"expert_ffn", m.moe.expert_ffn}};
    if (m.moe.shared_ffn > 0) e["shared_ffn"] = m.moe.shared_ffn;
    if (m.moe.dense_layers > 0) e["dense_layers"] = m.moe.dense_layers;
    if (m.moe.step > 1) e["step"] = m.moe.step;
    if (!m.moe.dense_list.empty()) e["dense_list"] = m.moe.dense_list;
    j["moe"] = e;
  }
  if (m.mla.enabled()) {
    nlohmann::json a{{"kv_rank", m.mla.kv_rank},
                     {"nope_dim", m.mla.nope_dim},
                     {"rope_dim", m.mla.rope_dim},
                     {"v_dim", m.mla.v_dim}};
    if (m.mla.q_rank > 0) a["q_rank"] = m.mla.q_rank;
    j["mla"] = a;
  }
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : m.stages)
    stages.push_back({{"layers", s.layers},
                      {"hidden", s.hidden},
                      {"heads", s.heads},
                      {"kv_heads", s.kv_heads > 0 ? s.kv_heads : s.heads},
                      {"head_dim", s.head_dim > 0 ? s.head_dim : s.hidden / s.heads},
                      {"ffn", s.ffn}});
  j["stages"] = stages;
  return j;
}

}  // namespace osdp::costmodel
