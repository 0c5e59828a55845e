// The workload IR (DESIGN.md section 2): the model lowered to operators, the units that can be
// sharded. Each operator knows its parameters and weight shapes, its forward and backward kernels
// (GEMM shapes and elementwise bytes, per sample), the activations it saves per sample, and what a
// checkpointed operator keeps. The cost model, the simulator and the executor all read this IR.
//
// Lowering of a GPT layer (hidden h, heads a, ffn f, sequence s, activation bytes e, masks 1 byte):
//   attention = LN1 + QKV [h x 3h] + scores + softmax + dropout + AV + proj [h x h] (+ biases)
//               parameters 4h^2 + 6h; saves e(6sh + 2as^2) + (as^2 + sh) bytes per sample
//   mlp       = LN2 + fc1 [h x f] + GeLU + fc2 [f x h] (+ biases)
//               parameters 2hf + f + 3h; saves e(2sh + 2sf) + sh bytes per sample
//   With f = 4h and e = 2 a layer saves s h (34 + 5 a s / h) bytes: Korthikanti et al. 2022.
// Splitting (n slices) cuts an operator so that each slice runs on its own: an attention slice holds
// whole heads (its columns of QKV, its rows of the projection), an MLP slice its columns of fc1 and
// rows of fc2, a head or projection slice its rows of the weight; slices' outputs add up in place.
// A tied embedding is one operator (token and position tables, final LN, LM head GEMM on the token
// table); untied models have a separate head operator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  // parallelism splits them (costmodel/hybrid.hpp).
  bool tp_sliced = false;

  double flops(int batch) const;  // 2 m n k count for the batch
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
  bool checkpointable = false;
  bool tied_gradient = false;  // its full gradient lives from the LM head's backward to the end
  int shape_id = 0;            // operators with the same shape_id have identical weights and kernels
  std::int64_t split_units =
      0;  // when > 0, split counts must divide it (an attention slice holds whole heads)

  std::int64_t parameters() const;
  // Allowed split counts: 1, and powers of two <= split_max that divide every splittable weight's
  // split dimension (and split_units).
  std::vector<int> splits(int split_max) const;
  double forward_flops(int batch) const;
  double backward_flops(int batch) const;
};

struct Workload {
  std::string model_name;
  Precision precision = Precision::kFp32;
  PrecisionBytes bytes{};
  int seq = 0;
  std::vector<Operator> operators;  // in forward execution order

  std::int64_t parameters() const;
};

Workload lower(const ModelSpec& model);

}  // namespace osdp::costmodel
