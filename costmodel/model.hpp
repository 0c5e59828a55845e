// Model descriptions: a decoder-style transformer given by its sizes and its block kinds. A model is
// one or more stages of identical layers (one stage for ordinary models; several of different hidden
// sizes for the "inconsistent & consecutive" family, joined by a projection between stages).
//
// The family sets the defaults of the block kinds, each of which a file may override:
//   gpt                   LayerNorm, learned positions, biases everywhere, a two-matrix GELU MLP,
//                         attention that materializes its S x S scores, dropout, tied embeddings
//   llama, mistral        RMSNorm, rotary positions, no biases, a gated SwiGLU MLP, fused attention
//                         (FlashAttention / SDPA: no scores saved), no dropout, untied embeddings
//   qwen2                 as llama, with biases on the Q, K and V projections
//   qwen3                 as llama, with an RMSNorm over each head of Q and K (qk_norm)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace osdp::costmodel {

// How the states are stored (DESIGN.md section 3):
//   fp32       everything fp32
//   mixed      Megatron/DeepSpeed style: bf16 parameters and gradients (sharded and gathered alike),
//              the fp32 master copy beside Adam's moments; gradients reduced in bf16
//   bf16       FSDP2's MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): the sharded
//              parameter is the fp32 master, gathered in bf16 for compute; gradients computed in bf16,
//              reduced in fp32 and kept sharded in fp32; Adam's moments fp32
//   bf16-reduce-bf16   the same with reduce_dtype=bfloat16 (the sharded gradient is still fp32)
enum class Precision { kFp32, kMixed, kBf16, kBf16ReduceBf16 };

// Bytes per element of each state. At rest (per parameter, on the rank that holds its shard):
// shard_weight + shard_gradient + optimizer = 16 in every precision. In flight: a gathered parameter
// `weight`, an unsharded gradient `gradient`, and `reduce` per element on the wire (and in the
// reduction's buffer when it differs from `gradient`).
//   precision        weight gradient reduce shard_weight shard_gradient optimizer activation
//   fp32                4       4       4        4            4            8         4
//   mixed               2       2       2        2            2           12         2
//   bf16                2       2       4        4            4            8         2
//   bf16-reduce-bf16    2       2       2        4            4            8         2
struct PrecisionBytes {
  int weight;          // w: a gathered parameter (all-gathered in this dtype)
  int gradient;        // g: an unsharded gradient element
  int reduce;          // r: a gradient element in its reduction
  int shard_weight;    // the parameter's shard at rest
  int shard_gradient;  // the gradient's shard at rest
  int optimizer;       // o: optimizer state (and a separate master copy) per parameter
  int activation;      // e: an activation element
  int at_rest() const { return shard_weight + shard_gradient + optimizer; }
  // An unsharded gradient in flight, with its cast to the reduction's dtype when that differs.
  int gradient_in_flight() const { return gradient + (reduce != gradient ? reduce : 0); }
};
PrecisionBytes precision_bytes(Precision p);
const char* to_string(Precision p);
// The dtype names FSDP2's MixedPrecisionPolicy takes ("float32", "bfloat16"): of the parameters in
// compute, and of the gradient reduction.
const char* param_dtype(Precision p);
const char* reduce_dtype(Precision p);
nlohmann::json precision_json(Precision p);  // the dtypes and the bytes of PrecisionBytes

enum class MlpKind { kGelu, kRelu, kSwiglu, kGeglu };
enum class NormKind { kLayerNorm, kRmsNorm };
enum class PositionKind { kLearned, kRotary };
enum class AttentionKind { kMaterialized, kFused };
const char* to_string(MlpKind k);
const char* to_string(NormKind k);
const char* to_string(PositionKind k);
const char* to_string(AttentionKind k);
inline bool gated(MlpKind k) {
  return k == MlpKind::kSwiglu || k == MlpKind::kGeglu;
}

struct StageSpec {
  int layers = 0;
  int hidden = 0;
  int heads = 0;     // query heads
  int ffn = 0;       // MLP inner size, the intermediate_size (4 x hidden unless given)
  int kv_heads = 0;  // key/value heads (= heads: MHA; fewer: GQA; 1: MQA); 0 in code: = heads
  int head_dim = 0;  // hidden / heads unless given; 0 in code: hidden / heads
  int q_width() const { return heads * head_dim; }
  int kv_width() const { return kv_heads * head_dim; }
};

// A mixture of experts in place of the dense MLP (experts 0: a dense model). Layer i's MLP is an MoE
// layer unless i < dense_layers (DeepSeek's first_k_dense_replace), i is in dense_list (Qwen's
// mlp_only_layers) or (i + 1) % step != 0 (Qwen's decoder_sparse_step); a dense layer's MLP is the
// stage's ffn. An MoE layer: a router [hidden x experts], `experts` gated experts of expert_ffn, top_k
// of them per token (balanced: s top_k / experts tokens each), and, where shared_ffn > 0, a shared
// gated MLP of that width every token passes.
struct MoeSpec {
  int experts = 0;
  int top_k = 0;
  int expert_ffn = 0;
  int shared_ffn = 0;
  int dense_layers = 0;
  int step = 1;
  std::vector<int> dense_list;
  bool enabled() const { return experts > 0; }
  bool moe_layer(int layer) const;
};

// Multi-head latent attention (DeepSeek-V2/V3) in place of the Q, K, V projections (kv_rank 0: none).
// Queries: h -> q_rank (a norm) -> heads x (nope_dim + rope_dim), or h -> heads x (nope_dim + rope_dim)
// directly when q_rank is 0; keys and values: h -> kv_rank + rope_dim (a norm on the kv_rank part) ->
// heads x (nope_dim + v_dim), the rope_dim part one key shared by every head; output heads x v_dim -> h.
// The low-rank projections are whole on every tensor-parallel rank; the others are cut by heads.
struct MlaSpec {
  int q_rank = 0;   // q_lora_rank; 0: one q_proj
  int kv_rank = 0;  // kv_lora_rank
  int nope_dim = 0;
  int rope_dim = 0;
  int v_dim = 0;
  bool enabled() const { return kv_rank > 0; }
  int qk_dim() const { return nope_dim + rope_dim; }
};

struct ModelSpec {
  std::string name;
  std::string description;
  std::string family = "gpt";
  std::vector<StageSpec> stages;
  int seq = 0;
  int vocab = 0;
  bool tied_embeddings = true;
  Precision precision = Precision::kFp32;
  bool dropout = true;  // dropout masks are saved activations (1 byte per element)
  MlpKind mlp = MlpKind::kGelu;
  NormKind norm = NormKind::kLayerNorm;
  bool norm_bias = true;  // LayerNorm's bias (RMSNorm has none)
  PositionKind positions = PositionKind::kLearned;
  int max_positions = 0;  // rows of a learned position table; 0: as many as the sequence
  AttentionKind attention = AttentionKind::kMaterialized;
  bool causal = true;
  int sliding_window = 0;  // > 0: each token attends to at most this many (itself included)
  bool qkv_bias = true, proj_bias = true, mlp_bias = true;
  bool qk_norm = false;    // an RMSNorm over each head of Q and of K (Qwen3)
  bool fused_qkv = true;   // one QKV GEMM (GPT-2's c_attn) rather than three (q/k/v_proj)
  bool fp32_loss = false;  // logits upcast to fp32 for the loss, as transformers computes it
  MoeSpec moe;             // experts 0: dense
  MlaSpec mla;             // kv_rank 0: the attention of the stages' heads, kv_heads and head_dim
  // The transformers model_type it was read from (a Hugging Face config; model files and plans keep
  // it as "hf_model_type"), "" for a model of osdp's own files.
  std::string hf_model_type;

  int total_layers() const;
  int position_rows() const { return max_positions > 0 ? max_positions : seq; }
  int first_hidden() const { return stages.front().hidden; }
  int last_hidden() const { return stages.back().hidden; }
};

// The defaults a family gives (the opening comment); `family` one of model_families().
void apply_family_defaults(ModelSpec& m, const std::string& family);
const std::vector<std::string>& model_families();

// Reads a model description (schema_version 1). `file` names the source in errors.
// The most layers a model may have, in all its stages together (the per-stage limit too): the
// search and the simulator hold a few records per operator, and past this a model file of a few
// kilobytes could ask for gigabytes (22,000 stages of 100,000 layers once grew 600 MB/s).
inline constexpr int kMaxLayers = 100000;

ModelSpec read_model(const nlohmann::json& doc, const std::string& file, const std::string& pointer = "");
nlohmann::json to_json(const ModelSpec& model);

}  // namespace osdp::costmodel
