// The executor's arithmetic: real forward and backward GEMMs of the workload IR's shapes on real
// data, so that a sharded step can be checked against the unsharded one.
//
// What an operator computes (R = b s rows, fp32, slices j = 0..n-1 each a partial sum):
//   attention  Y = X + sum_j (c Q_j K_j^T) V_j W_proj,j   [Q K V]_j = X W_qkv,j  (heads of slice j;
//              c = 1 / (s sqrt(d)); no softmax: the IR's softmax, norms, dropout and residual are
//              elementwise kernels that the executor spends as memory passes of the IR's bytes)
//   mlp        Y = X + sum_j relu(X W_1,j) W_2,j
//   projection Y = sum_j X_j W_j                          (X_j: the slice's rows of the input)
//   head       L = sum_j X_j W_j, loss = sum (L - onehot(next token))^2 / (2 tokens), tokens
//              counted over every rank (so the reduce-scattered gradients are the global ones)
//   embedding  Y[:, cols of slice j] = wte_j[:, token]   (a tied table is also the head's W)
// Vector parameters (biases, norm gains, the position table) are added to the operator's output,
// folded: element t of their concatenation goes to output element t mod (s x width) of every
// sample. Every parameter so gets a real gradient, and the function does not depend on n.
//
// Layout of a slice's flat buffer (ceil(P/n) elements, as the schedule gathers): the slice's block
// of each matrix weight (row-major), then its chunk of the vector parameters; padded with zeros to
// a multiple of the world size so every rank holds an equal shard.
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
};

struct OperatorLayout {
  int slices = 1;
  std::int64_t slice_elems = 0;   // ceil(P / n)
  std::int64_t padded_elems = 0;  // rounded up to a multiple of the world size
  std::int64_t shard_elems = 0;   // padded_elems / world
  std::vector<SliceLayout> slice;
  std::vector<int> vector_weights;
  std::int64_t vector_total = 0;
};

// Throws UsageError when the executor cannot cut `op` n ways (n must divide what splits() requires).
OperatorLayout make_layout(const costmodel::Operator& op, int slices, int world);

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
  std::int64_t rows() const { return batch * seq; }
};

// Floats of activation storage the arithmetic needs, to check against the IR's bytes.
std::int64_t input_floats(const costmodel::Operator& op, const MathShape& m);
std::int64_t internal_floats(const costmodel::Operator& op, int slices, const MathShape& m);  // all slices
std::int64_t workspace_floats(const costmodel::Operator& op, int slices, const MathShape& m);
std::int64_t width_in(const costmodel::Operator& op, int site);
std::int64_t width_out(const costmodel::Operator& op, int site, const MathShape& m);

struct SliceArgs {
  const costmodel::Operator* op = nullptr;
  const OperatorLayout* layout = nullptr;
  int slice = 0, site = 0;
  const float* weights = nullptr;  // the slice's flat buffer
  float* grads = nullptr;          // backward: the slice's flat gradient (matrix blocks overwritten,
                                   // the vector chunk accumulated: zero it first)
  float* x = nullptr;              // the operator's input (saved)
  float* internals = nullptr;      // all slices' internals (attention: QKV, S, O; mlp: H, A; head: L)
  float* y = nullptr;              // forward: output, accumulated
  const float* dy = nullptr;       // backward: output gradient
  float* dx = nullptr;             // backward: input gradient (accumulated or its columns written)
  float* workspace = nullptr;      // backward scratch
  float* touch = nullptr;          // where elementwise kernels spend their bytes
  std::int64_t touch_floats = 0;
  const std::int32_t* tokens = nullptr;
};

void forward_slice(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a);
void backward_slice(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a);

}  // namespace osdp::validate
