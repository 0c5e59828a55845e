#include "costmodel/hf_config.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "costmodel/bounds.hpp"
#include "costmodel/error.hpp"

namespace osdp::costmodel {
namespace {

using bounds::kMaxDim;

class HfReader {
 public:
  HfReader(const nlohmann::json& doc, std::string file) : doc_(doc), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    throw InputError(file_, "/" + key, msg);
  }
  bool has(const std::string& key) const { return doc_.contains(key) && !doc_.at(key).is_null(); }
  bool has_null(const std::string& key) const { return doc_.contains(key) && doc_.at(key).is_null(); }
  std::int64_t integer(const std::string& key, std::int64_t min, std::int64_t max) const {
    if (!has(key)) fail(key, "required key of a Hugging Face config is missing");
    const auto& v = doc_.at(key);
    if (!v.is_number_integer()) fail(key, fmt::format("expected an integer, got {}", v.dump()));
    const std::int64_t x = v.get<std::int64_t>();
    if (x < min || x > max) fail(key, fmt::format("expected an integer in [{}, {}], got {}", min, max, x));
    return x;
  }
  std::int64_t integer_or(const std::string& key, std::int64_t min, std::int64_t max,
                          std::int64_t fallback) const {
    return has(key) ? integer(key, min, max) : fallback;
  }
  bool boolean_or(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& v = doc_.at(key);
    if (!v.is_boolean()) fail(key, fmt::format("expected true or false, got {}", v.dump()));
    return v.get<bool>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const auto& v = doc_.at(key);
    if (!v.is_string()) fail(key, fmt::format("expected a string, got {}", v.dump()));
    return v.get<std::string>();
  }
  double number_or(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const auto& v = doc_.at(key);
    if (!v.is_number()) fail(key, fmt::format("expected a number, got {}", v.dump()));
    return v.get<double>();
  }

 private:
  const nlohmann::json& doc_;
  std::string file_;
};

std::string model_name(const std::string& file, const std::string& model_type) {
  namespace fs = std::filesystem;
  const fs::path p(file);
  std::string stem = p.stem().string();
  if (stem == "config") {
    const std::string dir = p.has_parent_path() ? fs::absolute(p).parent_path().filename().string() : "";
    stem = dir.empty() ? model_type : dir;
  }
  std::string out;
  for (const char c : stem)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '-';
  return out.empty() ? model_type : out;
}

Precision precision_of(const HfReader& r) {
  const std::string dtype = r.string_or("torch_dtype", r.string_or("dtype", "bfloat16"));
  if (dtype == "float32") return Precision::kFp32;
  return Precision::kBf16;  // bfloat16, float16: FSDP2's bf16 policy
}

// DeepSeek-V3's latent attention and experts (DeepseekV3Config's defaults where a key is absent):
// n_routed_experts of moe_intermediate_size, num_experts_per_tok, n_shared_experts of the same width as
// one shared MLP, the first first_k_dense_replace layers dense (intermediate_size). The router's
// grouping (n_group, topk_group) and scaling change no shape and are not read.
void read_deepseek_v3(const HfReader& r, ModelSpec& m, int layers) {
  m.moe.experts = static_cast<int>(r.integer_or("n_routed_experts", 1, 1 << 16, 256));
  m.moe.top_k = static_cast<int>(r.integer_or("num_experts_per_tok", 1, m.moe.experts, 8));
  m.moe.expert_ffn = static_cast<int>(r.integer_or("moe_intermediate_size", 1, 4 * kMaxDim, 2048));
  m.moe.shared_ffn = static_cast<int>(r.integer_or("n_shared_experts", 0, 64, 1)) * m.moe.expert_ffn;
  m.moe.dense_layers = static_cast<int>(r.integer_or("first_k_dense_replace", 0, layers, 3));
  m.mla.q_rank = static_cast<int>(r.integer_or("q_lora_rank", 1, kMaxDim, 1536));
  if (r.has_null("q_lora_rank")) m.mla.q_rank = 0;  // one q_proj
  m.mla.kv_rank = static_cast<int>(r.integer_or("kv_lora_rank", 1, kMaxDim, 512));
  m.mla.nope_dim = static_cast<int>(r.integer_or("qk_nope_head_dim", 1, kMaxDim, 128));
  m.mla.rope_dim = static_cast<int>(r.integer_or("qk_rope_head_dim", 1, kMaxDim, 64));
  m.mla.v_dim = static_cast<int>(r.integer_or("v_head_dim", 1, kMaxDim, 128));
}

}  // namespace

const std::vector<std::string>& hf_model_types() {
  static const std::vector<std::string> types{"gpt2",  "llama",   "mistral",   "qwen2",
                                              "qwen3", "mixtral", "qwen3_moe", "deepseek_v3"};
  return types;
}

bool is_hf_config(const nlohmann::json& doc) {
  return doc.is_object() && doc.contains("model_type") && !doc.contains("schema_version");
}

ModelSpec read_hf_config(const nlohmann::json& doc, const std::string& file) {
  const HfReader r(doc, file);
  const std::string type = r.string_or("model_type", "");
  bool known = false;
  std::string list;
  for (const auto& t : hf_model_types()) {
    known = known || t == type;
    list += (list.empty() ? "" : ", ") + t;
  }
  if (!known)
    r.fail(
        "model_type",
        fmt::format("osdp reads Hugging Face configs whose \"model_type\" is one of {}; this one is \"{}\"",
                    list, type));
  ModelSpec m;
  m.name = model_name(file, type);
  m.hf_model_type = type;
  StageSpec st;
  if (type == "gpt2") {
    apply_family_defaults(m, "gpt");
    st.layers = static_cast<int>(r.integer("n_layer", 1, kMaxLayers));
    st.hidden = static_cast<int>(r.integer("n_embd", 1, kMaxDim));
    st.heads = static_cast<int>(r.integer("n_head", 1, kMaxDim));
    if (st.hidden % st.heads != 0)
      r.fail("n_head", fmt::format("hidden size {} is not divisible by {} heads", st.hidden, st.heads));
    st.kv_heads = st.heads;
    st.head_dim = st.hidden / st.heads;
    st.ffn = static_cast<int>(r.integer_or("n_inner", 1, 4 * kMaxDim, 4LL * st.hidden));
    m.vocab = static_cast<int>(r.integer("vocab_size", 1, 64 * kMaxDim));
    m.max_positions = static_cast<int>(r.integer_or("n_positions", 1, kMaxDim, 1024));
    m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
    // transformers runs GPT-2 through SDPA: a fused kernel; its dropouts as configured.
    m.attention = AttentionKind::kFused;
    m.dropout = r.number_or("resid_pdrop", 0.1) > 0 || r.number_or("embd_pdrop", 0.1) > 0;
    m.fp32_loss = true;
    m.precision = Precision::kFp32;
    if (r.has("torch_dtype") || r.has("dtype")) m.precision = precision_of(r);
    m.description = fmt::format("Hugging Face {} config: {} layers, hidden {}, {} heads", type, st.layers,
                                st.hidden, st.heads);
  } else {
    // Mixtral is Mistral's block with its MLP made of experts; Qwen3-MoE is Qwen3's; DeepSeek-V3 is
    // Llama's norms, rotary positions and SwiGLU with latent attention and experts.
    apply_family_defaults(m, type == "mixtral"       ? "mistral"
                             : type == "qwen3_moe"   ? "qwen3"
                             : type == "deepseek_v3" ? "llama"
                                                     : type);
    st.layers = static_cast<int>(r.integer("num_hidden_layers", 1, kMaxLayers));
    st.hidden = static_cast<int>(r.integer("hidden_size", 1, kMaxDim));
    st.heads = static_cast<int>(r.integer("num_attention_heads", 1, kMaxDim));
    st.kv_heads = static_cast<int>(r.integer_or("num_key_value_heads", 1, st.heads, st.heads));
    if (st.heads % st.kv_heads != 0)
      r.fail("num_key_value_heads",
             fmt::format("{} query heads cannot be grouped over {} key/value heads", st.heads, st.kv_heads));
    if (r.has("head_dim")) {
      st.head_dim = static_cast<int>(r.integer("head_dim", 1, kMaxDim));
    } else {
      if (st.hidden % st.heads != 0)
        r.fail("num_attention_heads",
               fmt::format("hidden size {} is not divisible by {} heads and no \"head_dim\" is given",
                           st.hidden, st.heads));
      st.head_dim = st.hidden / st.heads;
    }
    st.ffn = static_cast<int>(r.integer("intermediate_size", 1, 4 * kMaxDim));
    m.vocab = static_cast<int>(r.integer("vocab_size", 1, 64 * kMaxDim));
    m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
    const std::string act = r.string_or("hidden_act", "silu");
    if (act == "silu" || act == "swish")
      m.mlp = MlpKind::kSwiglu;
    else if (act.rfind("gelu", 0) == 0)
      m.mlp = MlpKind::kGeglu;
    else
      r.fail("hidden_act", fmt::format("expected \"silu\" or a \"gelu\" variant, got \"{}\"", act));
    if (type == "llama" || type == "deepseek_v3") {
      m.qkv_bias = m.proj_bias = r.boolean_or("attention_bias", false);
      if (type == "llama") m.mlp_bias = r.boolean_or("mlp_bias", false);
    } else if (type == "qwen3" || type == "qwen3_moe") {
      m.qkv_bias = m.proj_bias = r.boolean_or("attention_bias", false);
    }
    if (type == "mixtral") {  // every layer's MLP: num_local_experts experts of intermediate_size
      m.moe.experts = static_cast<int>(r.integer("num_local_experts", 1, 1 << 16));
      m.moe.top_k = static_cast<int>(r.integer_or("num_experts_per_tok", 1, m.moe.experts, 2));
      m.moe.expert_ffn = st.ffn;
    } else if (type == "qwen3_moe") {
      m.moe.experts = static_cast<int>(r.integer_or("num_experts", 0, 1 << 16, 128));
      m.moe.top_k = static_cast<int>(r.integer_or("num_experts_per_tok", 1, std::max(m.moe.experts, 1), 8));
      m.moe.expert_ffn = static_cast<int>(r.integer_or("moe_intermediate_size", 1, 4 * kMaxDim, 768));
      m.moe.step = static_cast<int>(r.integer_or("decoder_sparse_step", 1, kMaxLayers, 1));
      if (r.has("mlp_only_layers")) {
        const auto& only = doc.at("mlp_only_layers");
        if (!only.is_array()) r.fail("mlp_only_layers", "expected an array of layer indices");
        for (const auto& v : only) {
          if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= st.layers)
            r.fail("mlp_only_layers",
                   fmt::format("expected layer indices in [0, {}], got {}", st.layers - 1, v.dump()));
          m.moe.dense_list.push_back(v.get<int>());
        }
      }
    }
    if (type == "deepseek_v3") read_deepseek_v3(r, m, st.layers);
    // Mistral's sliding window; Qwen2's only when use_sliding_window (then on every layer, as osdp
    // prices it: transformers applies it from max_window_layers on).
    if (type == "mistral" || type == "mixtral" ||
        ((type == "qwen2" || type == "qwen3" || type == "qwen3_moe") &&
         r.boolean_or("use_sliding_window", false)))
      m.sliding_window = static_cast<int>(r.integer_or("sliding_window", 1, kMaxDim, 0));
    m.precision = precision_of(r);
    const std::string heads =
        m.mla.enabled() ? fmt::format("{} heads of latent attention (kv rank {})", st.heads, m.mla.kv_rank)
                        : fmt::format("{} heads ({} key/value)", st.heads, st.kv_heads);
    m.description =
        m.moe.enabled()
            ? fmt::format("Hugging Face {} config: {} layers, hidden {}, {}, {} experts of {} ({} per token)",
                          type, st.layers, st.hidden, heads, m.moe.experts, m.moe.expert_ffn, m.moe.top_k)
            : fmt::format("Hugging Face {} config: {} layers, hidden {}, {}, ffn {}", type, st.layers,
                          st.hidden, heads, st.ffn);
  }
  const int max_pos = static_cast<int>(r.integer_or("max_position_embeddings", 1, kMaxDim,
                                                    m.max_positions > 0 ? m.max_positions : kHfDefaultSeq));
  m.seq = std::min(kHfDefaultSeq, type == "gpt2" ? m.max_positions : max_pos);
  m.stages.push_back(st);
  return m;
}

void set_sequence_length(ModelSpec& model, int seq, const std::string& what) {
  if (seq < 1 || seq > (1 << 20))
    throw UsageError(fmt::format("{}: a sequence of {} tokens (expected 1 to {})", what, seq, 1 << 20));
  if (model.positions == PositionKind::kLearned && model.max_positions > 0 && seq > model.max_positions)
    throw UsageError(
        fmt::format("{}: model \"{}\" has a learned position table of {} rows, shorter than {} tokens", what,
                    model.name, model.max_positions, seq));
  model.seq = seq;
}

}  // namespace osdp::costmodel
