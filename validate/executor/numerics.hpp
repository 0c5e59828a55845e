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
// (s = s_all / c rows per sample); attention runs ring attention's loop over its CP group
// (SliceArgs::context_group, its ranks in chunk order): at step j it holds the Q K V block of chunk
// k - j, computes its own queries' part against that chunk's keys (the scores [s x s_all] where they
// are saved, else K^T V summed over the chunks, then c Q (sum K^T V)), and passes the block on to rank
// k + 1 by a point-to-point send while receiving the next from rank k - 1 (two blocks in flight). The
// backward passes each block with the partial gradient of its K and V, to which every rank adds its
// queries' contributions, c times so that it comes home; dQ stays on the rank. c in the scale is
// 1 / (s_all sqrt(d)), the folded vector parameters land at the chunk's positions, and the elementwise
// passes spend the chunk's share of the IR's bytes. Equal to the unsharded step up to fp32 summation
// order.
// moe        an MoE layer's MLP (Operator::experts E > 0, top k): Z = X W_r (the router, [h x E]);
//              token t of global sample g at whole-sequence position p goes to the k experts
//              (g + p k + i) mod E, i < k (a fixed function, so that the sharded and the unsharded step
//              route alike; balanced: each sample's s k choices over the E experts), its gate the
//              router's logit there, z = Z[t, expert] (no softmax: the IR's routing kernels are spent
//              as memory passes); expert x computes H = silu(X_x G_x) * (X_x U_x), O_x = H D_x on its
//              tokens X_x (gate_up [h x E 2 f_e]: expert x's gate then up columns at x 2 f_e; down
//              [E f_e x h]: its rows at x f_e); Y = X + sum over choices z O_expert(t) + the shared
//              gated MLP of every token where the model has one. Expert parallelism at degree e
//              (MoeRoute): the rank holds the experts q E / e .. (q + 1) E / e - 1 of its place q in the
//              EP group, sends each token choice to the rank of its expert (the dispatch: an
//              all-to-all-v over SliceArgs::expert_group), runs its experts on the tokens of every
//              EP rank and sends the outputs back (the combine); the backward the same for the
//              gradients, reversed. The layout of an MoE operator (make_layout with ep) puts what every
//              EP rank holds first (the router, a shared MLP, the vector chunk) and its experts' blocks
//              after, so the shared part is a prefix of its states (executor.hpp: the EP group
//              all-reduces its gradient). Executed unsplit (n = 1) and at TP 1.
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

// Where an MoE operator's experts are (numerics.hpp's moe): e ranks of an EP group, this rank the
// index-th; e = 1 for every other operator.
struct ExpertPlace {
  int ep = 1, index = 0;
};

// Throws UsageError when the executor cannot cut `op` n ways (n must divide what splits() requires, and
// an attention's weights must make whole heads: the opening comment).
OperatorLayout make_layout(const costmodel::Operator& op, int slices, int world);
// The same at TP degree `tp` (n slices within each TP slice; the opening comment). Throws UsageError
// when the operator cannot run at that degree (its heads or widths, a vocabulary not divisible by t, an
// LM head's vector parameters longer than the vocabulary).
OperatorLayout make_layout(const costmodel::Operator& op, int tp, int slices, int world);
// An MoE operator's layout at EP place `place` (TP 1, one slice: UsageError otherwise); other operators
// as make_layout(op, tp, slices, world).
OperatorLayout make_layout(const costmodel::Operator& op, int tp, int slices, int world, ExpertPlace place);
// Elements at the start of a slice's flat buffer that every EP rank holds alike: an MoE operator's
// router, shared MLP and vector chunk (all of it for other operators).
std::int64_t shared_prefix(const costmodel::Operator& op, const OperatorLayout& l, int j);

// Deterministic initial values (the same in every layout and on every rank).
float initial_value(const costmodel::Operator& op, int weight, std::int64_t r, std::int64_t c);
std::vector<float> initial_slice(const costmodel::Operator& op, const OperatorLayout& l, int j);
// Writes a slice's flat values into `logical` (all weights in IR order, row-major; P elements).
// `experts_only`: only the blocks of the routed experts (an EP rank other than the first).
void slice_to_logical(const costmodel::Operator& op, const OperatorLayout& l, int j, const float* flat,
                      std::vector<float>& logical, bool experts_only = false);

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

// An MoE operator's routing of one rank's tokens for one micro-batch (numerics.hpp's moe), on the host:
// its K = R k token choices in the order it sends them (by expert: the EP ranks' in turn), and what the
// EP ranks send each other. e = 1: the rank sends to itself.
struct MoeRoute {
  int ep = 1, index = 0, local_experts = 0;  // the EP group and this rank's place; experts per rank
  std::int64_t rows = 0, slots = 0;          // the rank's tokens R and their choices K = R k
  std::vector<std::int32_t> send_rows;       // per choice, in send order: its token's row
  std::vector<std::int32_t> gate_at;         // per choice: its router logit, row R E + expert
  std::vector<std::size_t> send_counts;      // choices to each EP rank
  std::vector<std::size_t> recv_counts;      // choices from each EP rank (for this rank's experts)
  std::vector<std::int64_t> expert_rows;     // [peer * local_experts + x]: of them, local expert x's
  std::int64_t received() const;
};

// The routing of the rank at `place` whose EP group's ranks hold `samples` samples each, rank q's first
// being global sample first_samples[q], of `seq` tokens from whole-sequence position position0.
MoeRoute moe_route(const costmodel::Operator& op, ExpertPlace place,
                   const std::vector<std::int64_t>& first_samples, std::int64_t samples, std::int64_t seq,
                   std::int64_t position0);
// The most token choices an expert rank can receive (the buffers' rows): b ceil(s k / E) E, the IR's
// routed slots.
std::int64_t moe_received_max(const costmodel::Operator& op, const MathShape& m);

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
  // group (its ranks in chunk order), and the ring's scratch (attention_exchange_floats): two blocks in
  // flight (a chunk's Q K V and, in backward, its K/V gradient), and without saved scores every
  // sample's K^T V and d(K^T V).
  Communicator* context_group = nullptr;
  float* gathered = nullptr;
  // An MoE operator: its routing (host counts; device copies of its send_rows and gate_at) and, at
  // EP degree e > 1, the EP group's communicator and two scratch buffers of moe_exchange_floats (what
  // one all-to-all sends and receives).
  const MoeRoute* route = nullptr;
  const std::int32_t* send_rows = nullptr;
  const std::int32_t* gate_at = nullptr;
  Communicator* expert_group = nullptr;
  float* send = nullptr;
  float* recv = nullptr;
};

// Floats of each of the two EP scratch buffers of SliceArgs for an MoE operator at EP degree e > 1 (0
// otherwise).
std::int64_t moe_exchange_floats(const costmodel::Operator& op, int ep, const MathShape& m);

// Floats of the ring's scratch (SliceArgs::gathered) for one slice of attention operator `op` cut n
// ways (0 for other operators or without context parallelism).
std::int64_t attention_exchange_floats(const costmodel::Operator& op, int n, const MathShape& m);

void forward_slice(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a);
void backward_slice(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a);

}  // namespace osdp::validate
