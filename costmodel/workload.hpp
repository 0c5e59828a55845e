// The workload IR (DESIGN.md section 2): the model lowered to operators, the units that can be
// sharded. Each operator knows its parameters and weight shapes, its forward and backward kernels
// (GEMM shapes and elementwise bytes, per sample), the activations it saves per sample, and what a
// checkpointed operator keeps. The cost model, the simulator and the executor all read this IR.
//
// Lowering of a GPT layer (hidden h, heads a, ffn f, sequence s, activation bytes e, masks 1 byte;
// the paper's models: LayerNorm, learned positions, biases, GELU MLP, attention that materializes
// its scores, dropout):
//   attention = LN1 + QKV [h x 3h] + scores + softmax + dropout + AV + proj [h x h] (+ biases)
//               parameters 4h^2 + 6h; saves e(6sh + 2as^2) + (as^2 + sh) bytes per sample
//   mlp       = LN2 + fc1 [h x f] + GeLU + fc2 [f x h] (+ biases)
//               parameters 2hf + f + 3h; saves e(2sh + 2sf) + sh bytes per sample
//   With f = 4h and e = 2 a layer saves s h (34 + 5 a s / h) bytes: Korthikanti et al. 2022.
// The other block kinds (model.hpp) lower alike, with query heads a, key/value heads g, head size d
// (q = a d, k = g d wide), norm parameters c h (c = 2 for LayerNorm with bias, 1 for RMSNorm):
//   attention  norm + Q, K, V [h x (q + 2k)] (one GEMM when fused_qkv, else three) (+ Q/K head norms)
//              (+ rotary on Q and K) + attention + output proj [q x h]
//              parameters c h + h (q + 2k) + q h (+ q + 2k QKV bias, + h proj bias, + 2d qk norms)
//     materialized: the GPT kernels with a heads of size d; saves e(2sh + s(q + 2k) + sq + (1 or 2)as^2)
//                   (+ masks)
//     fused (FlashAttention / SDPA): Q K^T and P V as GEMMs of density rho (causal: (s + 1) / 2s, a
//                   sliding window w: its share of the s x s scores), one pass over Q, K, V, O; saves
//                   e(2sh + s(q + 2k) + sq) + 4as (the log-sum-exp per row, fp32); its backward
//                   recomputes the scores: 5 GEMMs of density rho (S, dV, dP, dQ, dK)
//   mlp, gated (SwiGLU, GeGLU): norm + gate and up [h x 2f] (two GEMMs) + act(gate) * up + down [f x h]
//              parameters c h + 3 h f (+ 2f + h biases); saves e(2sh + 3sf) (+ mask)
//   head with fp32_loss (transformers' loss): the logits (e s V, returned to the caller) and the fp32
//              log-probabilities (4 s V) are saved; its backward holds (4 + e) s V
// Norm statistics (a few bytes per row) are not counted.
// Splitting (n slices) cuts an operator so that each slice runs on its own: an attention slice holds
// whole heads (its columns of QKV, its rows of the projection), an MLP slice its columns of fc1 and
// rows of fc2, a head or projection slice its rows of the weight; slices' outputs add up in place.
// A tied embedding is one operator (token and position tables, final LN, LM head GEMM on the token
// table); untied models have a separate head operator.
//
// Units: the operators are grouped into the units a plan gives one tensor-parallel degree and one
// pipeline stage: a transformer layer (its attention and MLP), the embedding, a projection between
// stages of different hidden size, the LM head. A model lowered for a pipeline of pp > 1 stages has
// its tied embedding untied (the token table in the first stage, its copy as the LM head of the last:
// `tied_copy`, whose gradient the two stages all-reduce once per step).
//
// Tensor parallelism (Megatron-LM's column/row split) cuts an operator the way an operator split
// does: an attention slice holds whole heads (its columns of QKV, its rows of the projection), an MLP
// slice its columns of fc1 and rows of fc2, the LM head its columns (vocabulary-parallel). The TP slice
// of an operator runs the split's slice kernels; its elementwise kernels over heads, ffn columns or the
// vocabulary (Kernel::tp_sliced) run 1/t of their bytes; layer norms, residuals and hidden-state
// dropout run whole on each rank, or 1/t of them with sequence parallelism (SP). Parameters:
// column-split weights and their biases, row-split weights divided by t; row-split biases and layer
// norms whole. Saved activations per sample: the replicated part R stays whole (without SP), the rest
// is divided by t; with SP all of it:
//   attention, MLP: R = (2e + mask) s h  (the layer norm's input, the first GEMM's input, the
//                   residual dropout's mask: Korthikanti et al. 2022, 10 s h of the 34 s h at e = 2)
//   head:           R = e s h;  embedding: R = everything.  Checkpointed input e s h: whole without SP.
// Its collectives (plan_cost.hpp prices them, the schedule runs them) are all-reduces of the activations
// b s h e: attention and MLP one in forward (after the row-split GEMM) and one in backward (before the
// column-split GEMM's input gradient leaves), the embedding one in forward, the LM head one in backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/choice.hpp"
#include "costmodel/model.hpp"

namespace osdp::costmodel {

enum class OperatorKind { kEmbedding, kAttention, kMlp, kProjection, kHead };
const char* to_string(OperatorKind k);

enum class KernelKind { kGemm, kElementwise };
// Which GEMM dimension grows with the micro-batch size, and which one operator splitting cuts.
enum class Dim { kNone, kM, kN, kK, kCount };

// C[m x n] = A[m x k] B[k x n], `count` independent GEMMs; all sizes for one sample.
// Elementwise kernels move `bytes_per_sample` bytes per sample.
struct Kernel {
  KernelKind kind = KernelKind::kGemm;
  std::string name;
  std::int64_t m = 0, n = 0, k = 0, count = 1;
  Dim batch_dim = Dim::kNone;  // multiplied by the micro-batch size
  Dim split_dim = Dim::kNone;  // divided by the split count n (kernels a slice runs a share of)
  double bytes_per_sample = 0.0;
  int site = 0;  // 0: at the operator's place; 1: at the LM head's place (a tied embedding's head)
  // An elementwise kernel over per-head, per-ffn-column or per-vocabulary-entry data, which tensor
  // parallelism divides among its ranks (softmax, attention dropout, GeLU, cross entropy); the others
  // (layer norms, residuals, dropout of the hidden state) run whole on each rank unless sequence
  // parallelism splits them (the opening comment).
  bool tp_sliced = false;
  // The share of the m x n output a kernel computes: below 1 for a fused attention kernel that skips
  // the blocks a causal mask or a sliding window leaves out (its FLOPs and time scale by it).
  double density = 1.0;
  bool expert = false;  // an MoE layer's routed experts' kernel (expert parallelism moves its tokens)
  // Attention's core over the keys (scores, softmax, P V; a fused kernel and its backward): under ring
  // attention (context parallelism) it runs in c blocks, one per chunk of keys, each while the next
  // chunk's K/V block is passed around the CP ring (plan_cost.hpp).
  bool ring_block = false;

  double flops(int batch) const;  // 2 m n k count density for the batch
  // The kernel for one slice of an n-way split (m, n or k along split_dim divided by n).
  Kernel slice(int splits) const;
  // m, n, k and count for the given batch.
  std::int64_t dim(Dim d, int batch) const;
};

struct Weight {
  std::string name;
  std::int64_t rows = 0;  // the GEMM input dimension K (what splitting cuts); 1 for vectors
  std::int64_t cols = 0;
  bool splittable = false;
  bool split_columns = false;  // splitting cuts the columns instead (the first GEMM of a pair)
  bool expert = false;         // the routed experts' (E along the split dimension)
  std::int64_t elements() const { return rows * cols; }
};

struct Operator {
  std::string name;
  OperatorKind kind = OperatorKind::kAttention;
  int layer = -1;  // transformer layer index, -1 for embedding, projection and head
  int hidden = 0;
  std::vector<Weight> weights;
  std::vector<Kernel> forward;
  std::vector<Kernel> backward;
  double saved_bytes_per_sample = 0;      // activations kept for backward without checkpointing
  double input_bytes_per_sample = 0;      // what a checkpointed operator keeps (its input)
  double workspace_bytes_per_sample = 0;  // transient buffers of its backward
  // Selective checkpointing (torchtitan's "selective op"): what the operator keeps (its input, the
  // GEMM outputs, the attention output and log-sum-exp, masks) and the forward kernels it runs again
  // before its backward (the norms, rotary, Q/K norms, the MLP's activation). 0 and none: the
  // operator has no selective form (embedding, head, projection, materialized attention).
  double selective_bytes_per_sample = 0;
  std::vector<Kernel> selective_recompute;
  // What every TP rank keeps of saved_bytes_per_sample without sequence parallelism, when the
  // lowering states it (< 0: the rule of the opening comment by operator kind).
  double tp_replicated_bytes_per_sample = -1;
  bool checkpointable = false;
  bool selectable() const { return checkpointable && selective_bytes_per_sample > 0; }
  // What `choice` makes it keep for its backward, per sample (saved, input or selective bytes), and
  // which recompute it runs (an operator that cannot be checkpointed runs none).
  Recompute recompute(const Choice& choice) const;
  double kept_bytes_per_sample(const Choice& choice) const;
  bool tied_gradient = false;  // its full gradient lives from the LM head's backward to the end
  int experts = 0;             // an MoE layer's MLP: its routed experts (ModelSpec::moe); 0 otherwise
  int top_k = 0;               // an MoE layer's MLP: the experts each token goes to
  bool latent = false;         // a multi-head latent attention (ModelSpec::mla)
  // An MoE layer's MLP: the bytes of the tokens it sends to its experts per sample (s k h e: each of
  // s tokens to k experts), what one dispatch or combine all-to-all moves under expert parallelism.
  double dispatch_bytes_per_sample = 0;
  // An attention operator: the bytes of its keys and values as the attention kernel takes them (what
  // ring attention passes around the context-parallel ring), and of its queries (the output is as
  // large), per sample.
  double kv_bytes_per_sample = 0, q_bytes_per_sample = 0;
  int shape_id = 0;  // operators with the same shape_id have identical weights and kernels
  std::int64_t split_units =
      0;  // when > 0, split counts must divide it (an attention slice holds whole heads)

  std::int64_t parameters() const;
  // The routed experts' parameters (Weight::expert); an MoE operator's others (the norm, the router,
  // a shared MLP) are parameters() less these.
  std::int64_t expert_parameters() const;
  // Allowed split counts: 1, and powers of two <= split_max that divide every splittable weight's
  // split dimension (and split_units).
  std::vector<int> splits(int split_max) const;
  double forward_flops(int batch) const;
  double backward_flops(int batch) const;
};

// The operators a plan gives one TP degree and places in one pipeline stage.
struct Unit {
  std::string name;      // "embedding", "layer3", "stage1.projection", "head"
  std::vector<int> ops;  // indices into Workload::operators, in order
  int hidden = 0;        // width of the activation it hands on
  bool layer = false;    // a transformer layer
};

struct Workload {
  std::string model_name;
  Precision precision = Precision::kFp32;
  PrecisionBytes bytes{};
  int seq = 0;
  bool dropout = true;
  std::vector<Operator> operators;  // in forward execution order
  std::vector<Unit> units;          // in order; every operator in exactly one
  int pp = 1;              // the pipeline degree it was lowered for (every degree above 1 lowers alike)
  bool tied_copy = false;  // pp > 1 untied a tied embedding: the head is its copy

  std::int64_t parameters() const;
  // The unit of each operator.
  std::vector<int> unit_of_operators() const;
};

// The model's operators and units for a pipeline of `pp` stages (the opening comment).
Workload lower(const ModelSpec& model, int pp = 1);

// The TP slice of an operator at degree t (the opening comment), sequence-parallel or not, for the
// workload `w` it belongs to.
Operator tp_slice(const Operator& op, int t, bool sequence_parallel, const Workload& w);
// Whether an operator can run at TP degree t: 1 always; attention and MLP when t divides their heads
// and widths; embedding and head (vocabulary padded to a multiple of t) when they have a weight to
// split; projections never.
bool tp_allowed(const Operator& op, int t);

// Expert parallelism (Choice::ep) on an MoE operator's TP slice: its experts placed over e ranks of
// the data-parallel group, each rank running E / (t e) of them on the tokens of all e ranks. The
// experts' weights (Weight::expert) lose a factor e along their split dimension; each expert GEMM
// (Kernel::expert) runs count / e experts on e times the tokens (its batch dimension times e), the
// same work per rank in fatter GEMMs; with `imbalance` g >= 1 (CostOptions::expert_imbalance) the
// busiest rank receives g times its share: its expert GEMMs' tokens, elementwise bytes and dispatch
// bytes times g.
// The router, the norm and a shared MLP stay as they are. ep_allowed: e a power of two dividing the
// data-parallel group of `group_ranks` and the slice's experts (e = 1 always).
bool ep_allowed(const Operator& sliced, int e, int group_ranks);
Operator ep_slice(const Operator& sliced, int e, double imbalance);

// Context parallelism (Plan::cp = c): every rank of a CP group holds s / c tokens of each sample (the
// causal attention balanced as torchtitan lays it out: rank r the chunks r and 2c - 1 - r of 2c), so
// every per-sample figure of an operator's slice is divided by c: each GEMM's token dimension (its
// batch dimension; the attention kernels' query dimension), elementwise bytes, saved, kept, workspace
// and traffic bytes. Attention also holds the blocks in flight: ring attention two K/V blocks (the
// one it computes on and the one arriving), 2 kv / c more workspace per sample; the all-to-all
// variant its send and receive buffers, 2 (q + kv) / c. cp_allowed: the
// all-to-all variant needs the slice's key/value heads (split_units) divisible by c.
Operator cp_slice(const Operator& sliced, int c, bool all_to_all);
bool cp_allowed(const Operator& sliced, int c, bool all_to_all);
// Elements per sample of the TP all-reduce in forward and in backward of an operator.
struct TpTraffic {
  double forward_elements = 0, backward_elements = 0;
};
TpTraffic tp_traffic(const Operator& op, int seq);

}  // namespace osdp::costmodel
