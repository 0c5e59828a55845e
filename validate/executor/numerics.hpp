// The executor's arithmetic: real forward and backward GEMMs of the workload IR's shapes on real
// data, so that a sharded step can be checked against the unsharded one.
//
// What an operator computes (R = b s rows, fp32, slices j = 0..n-1 each a partial sum):
//   attention  Y = X + sum_j sum_{i in heads of j} c Q_i K_g(i)^T V_g(i) W_proj,i   [Q K V]_j = X W_qkv,j
//              a query heads, g key/value heads, head size d (derived from the weights: the projection
//              [a d x h], QKV [h x (a d + 2 g d)], split_units g); query head i reads key/value head
//              g(i) = i / (a/g) (grouped-query attention; a = g: multi-head). Slice j holds g/n key/value
//              heads and the a/n query heads of their groups: its Q, its K and its V columns (3 ranges).
//              c = 1 / (s sqrt(d)); no softmax, so the product is associative: evaluated as (c Q K^T) V
//              where the IR saves the s x s scores (materialized attention), else as c Q (K^T V), the
//              d x d products K^T V in their place (fused attention saves no scores). The IR's softmax,
//              norms (qk_norm too), rotary, dropout and residual are elementwise kernels that the
//              executor spends as memory passes of the IR's bytes
//   mlp        Y = X + sum_j relu(X W_1,j) W_2,j   (ReLU for the IR's GELU too)
//              gated (SwiGLU, GeGLU: W_1 = [G U], gate then up columns, [h x 2f]):
//              Y = X + sum_j (silu(X G_j) * (X U_j)) W_2,j, silu(x) = x / (1 + exp(-x)), * elementwise
//              (SiLU for GeGLU's GELU too: the IR does not tell them apart, and the function is a
//              test's); slice j holds its f/n gate and its f/n up columns (2 ranges) and keeps X G_j,
//              X U_j and their product, as the IR saves gate, up and product. Sharded equals unsharded
//              up to fp32 summation order
//   projection Y = sum_j X_j W_j                          (X_j: the slice's rows of the input)
//   head       L = sum_j X_j W_j, loss = sum (L - onehot(next token))^2 / (2 tokens), tokens
//              counted over every rank (so the reduce-scattered gradients are the global ones)
//   embedding  Y[:, cols of slice j] = wte_j[:, token]   (a tied table is also the head's W)
// Context parallelism (MathShape::context = c > 1): a rank holds chunk k of each sample's sequence
// (s = s_all / c rows per sample); attention gathers the slice's Q K V of every chunk over the CP group
// (SliceArgs::context_group) and computes its own queries against every key: the scores [s x s_all]
// where they are saved, else c Q (sum over chunks of K^T V), that sum not kept (the backward sums it
// again from its own gather); the backward puts this rank's part of every chunk's dK and dV, and its
// own dQ, in SliceArgs::partials and reduce-scatters them over the group. c in the scale is
// 1 / (s_all sqrt(d)), the folded vector parameters land at the chunk's positions, and the elementwise
// passes spend the chunk's share of the IR's bytes. Equal to the unsharded step up to fp32 summation
// order.
// Vector parameters (whatever the operator's weights hold of them: biases, norm gains (LayerNorm h
// and 2h, RMSNorm h), Q/K head norms [d], the position table of learned positions) are added to the
// operator's output, folded: element t of their concatenation goes to output element t mod
// (s x width) of every sample. Every parameter so gets a real gradient, and the function does not
// depend on n.
//
// Layout of a slice's flat buffer (ceil(P/n) elements, as the schedule gathers): the slice's block
// of each matrix weight (row-major), then its chunk of the vector parameters; padded with zeros to
// a multiple of the world size so every rank holds an equal shard.
//
// Tensor parallelism at degree t (costmodel/workload.hpp) cuts the operator into t n slices: TP rank i
// runs slices i n .. i n + n - 1, the split's n slices of its TP slice. Attention and the MLP are cut
// along heads and ffn columns as a split of t n cuts them; the embedding's table and the LM head's
// weight (both [h x V]) along the vocabulary by t (Megatron's vocabulary-parallel embedding and head:
// TP rank i holds columns i V/t .. (i+1) V/t - 1) and along h by n. The vector parameters are cut into
// t n chunks in order, except the LM head's, whose element k goes to logit column k (V >= their
// length): TP rank i holds those of its columns. A vocabulary-parallel lookup adds only the tokens of
// its columns (the TP all-reduce sums the ranks'), and a vocabulary-parallel head computes the logits
// and the loss of its columns (the ranks' losses add up); its input gradient is all-reduced.
#pragma once

#include <cstdint>
#include <vector>

#include "costmodel/workload.hpp"
#include "validate/executor/backend.hpp"

namespace osdp::validate {

struct ColumnRange {
  std::int64_t start = 0, count = 0;
};

struct Block {
  int weight = -1;
  std::int64_t offset = 0;  // first element in the slice buffer
  std::int64_t row0 = 0, rows = 0;
  std::vector<ColumnRange> columns;
  std::int64_t cols() const;
};

struct SliceLayout {
  std::vector<Block> blocks;  // one per matrix weight, in IR order
  std::int64_t vector_offset = 0, vector_start = 0, vector_len = 0;
  // The embedding's and the LM head's vocabulary columns this slice holds (vocabulary-parallel):
  // vocab0 .. vocab0 + vocab_count - 1; vocab_count 0: all of them.
  std::int64_t vocab0 = 0, vocab_count = 0;
};

struct OperatorLayout {
  int tp = 1;                     // TP degree: slices is tp n, TP rank i's are i n .. i n + n - 1
  int slices = 1;                 // all of them
  std::int64_t slice_elems = 0;   // ceil(P / n)
  std::int64_t padded_elems = 0;  // rounded up to a multiple of the world size
  std::int64_t shard_elems = 0;   // padded_elems / world
  std::vector<SliceLayout> slice;
  std::vector<int> vector_weights;
  std::int64_t vector_total = 0;

  int local_slices() const { return slices / tp; }
};

// Throws UsageError when the executor cannot cut `op` n ways (n must divide what splits() requires, and
// an attention's weights must make whole heads: the opening comment).
OperatorLayout make_layout(const costmodel::Operator& op, int slices, int world);
// The same at TP degree `tp` (n slices within each TP slice; the opening comment). Throws UsageError
// when the operator cannot run at that degree (its heads or widths, a vocabulary not divisible by t, an
// LM head's vector parameters longer than the vocabulary).
OperatorLayout make_layout(const costmodel::Operator& op, int tp, int slices, int world);

// Deterministic initial values (the same in every layout and on every rank).
float initial_value(const costmodel::Operator& op, int weight, std::int64_t r, std::int64_t c);
std::vector<float> initial_slice(const costmodel::Operator& op, const OperatorLayout& l, int j);
// Writes a slice's flat values into `logical` (all weights in IR order, row-major; P elements).
void slice_to_logical(const costmodel::Operator& op, const OperatorLayout& l, int j, const float* flat,
                      std::vector<float>& logical);

// Token at position t of global sample g (targets are the tokens one position on).
std::int32_t token_of(std::int64_t sample, std::int64_t t, std::int64_t vocab);

struct MathShape {
  std::int64_t batch = 1, seq = 1, vocab = 1;
  GemmMath math = GemmMath::kFp32;  // how every GEMM multiplies (storage stays fp32)
  // Context parallelism: each sample's sequence is cut into `context` chunks of `seq` tokens, and this
  // rank holds chunk `chunk` (tokens chunk seq .. chunk seq + seq - 1) of each of its samples.
  std::int64_t context = 1, chunk = 0;
  std::int64_t rows() const { return batch * seq; }
  std::int64_t seq_all() const { return seq * context; }  // the whole sequence
};

// Floats of activation storage the arithmetic needs, to check against the IR's bytes: of one rank's
// slices (all n without TP).
std::int64_t input_floats(const costmodel::Operator& op, const MathShape& m);
std::int64_t internal_floats(const costmodel::Operator& op, int slices, const MathShape& m);  // all slices
std::int64_t workspace_floats(const costmodel::Operator& op, int slices, const MathShape& m);
std::int64_t internal_floats(const costmodel::Operator& op, const OperatorLayout& l, const MathShape& m);
std::int64_t workspace_floats(const costmodel::Operator& op, const OperatorLayout& l, const MathShape& m);
std::int64_t width_in(const costmodel::Operator& op, int site);
std::int64_t width_out(const costmodel::Operator& op, int site, const MathShape& m);
// The logits' width of a head slice: its vocabulary columns (all of them without TP).
std::int64_t vocab_width(const OperatorLayout& l, int slice, const MathShape& m);

struct SliceArgs {
  const costmodel::Operator* op = nullptr;
  const OperatorLayout* layout = nullptr;
  int slice = 0, site = 0;
  int internal = -1;               // the slice's place among the rank's own slices (internals); -1: `slice`
  bool accumulate = false;         // backward: the matrix blocks' gradients add to what `grads` holds
  const float* weights = nullptr;  // the slice's flat buffer
  float* grads = nullptr;          // backward: the slice's flat gradient (matrix blocks overwritten
                                   // unless `accumulate`, the vector chunk accumulated: zero it first)
  float* x = nullptr;              // the operator's input (saved)
  float* internals = nullptr;      // all slices' internals (attention: QKV, S, O; mlp: P, H or gated
                                   // G, U, H; head: L)
  float* y = nullptr;              // forward: output, accumulated
  const float* dy = nullptr;       // backward: output gradient
  float* dx = nullptr;             // backward: input gradient (accumulated or its columns written)
  float* workspace = nullptr;      // backward scratch
  float* touch = nullptr;          // where elementwise kernels spend their bytes
  std::int64_t touch_floats = 0;
  // Token ids (lookup) or targets (head) of the rows, less the slice's vocab0: ids outside its columns
  // are skipped.
  const std::int32_t* tokens = nullptr;
  // Context parallelism (MathShape::context > 1), attention only: the communicator of the rank's CP
  // group (its ranks in chunk order), and two scratch buffers of context x the slice's Q K V floats
  // (attention_exchange_floats): the group's Q K V gathered, and the backward's partial gradients of
  // every chunk's K and V before they are reduce-scattered to their chunks.
  Communicator* context_group = nullptr;
  float* gathered = nullptr;
  float* partials = nullptr;
};

// Floats of each of the two CP scratch buffers of SliceArgs for one slice of attention operator `op`
// cut n ways (0 for other operators or without context parallelism).
std::int64_t attention_exchange_floats(const costmodel::Operator& op, int n, const MathShape& m);

void forward_slice(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a);
void backward_slice(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a);

}  // namespace osdp::validate
