// Closed-form oracle tests of the workload IR (costmodel::lower). Every expected number is derived
// in a comment from the model's sizes, independently of workload.cpp:
//   parameters of a GPT layer, of GPT-2 XL; forward + backward flops per token (6 x matmul
//   parameters + the attention score and value products); saved activations (Korthikanti et al.
//   2022); where the head and projection operators go; which split counts an operator allows.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/model.hpp"
#include "costmodel/workload.hpp"

namespace {

using namespace osdp::costmodel;

constexpr double kRel = 1e-12;  // relative tolerance for sums of exact integers held in doubles

StageSpec stage(int layers, int hidden, int heads, int ffn = 0) {
  StageSpec st;
  st.layers = layers;
  st.hidden = hidden;
  st.heads = heads;
  st.ffn = ffn > 0 ? ffn : 4 * hidden;
  return st;
}

ModelSpec gpt(std::vector<StageSpec> stages, int seq, int vocab, bool tied = true,
              Precision precision = Precision::kFp32, bool dropout = true) {
  ModelSpec m;
  m.name = "test-gpt";
  m.stages = std::move(stages);
  m.seq = seq;
  m.vocab = vocab;
  m.tied_embeddings = tied;
  m.precision = precision;
  m.dropout = dropout;
  return m;
}

const Operator& find_op(const Workload& w, OperatorKind kind, int layer = -1) {
  for (const auto& op : w.operators)
    if (op.kind == kind && op.layer == layer) return op;
  FAIL("no operator of kind " << to_string(kind) << " at layer " << layer);
  return w.operators.front();  // not reached
}

int count_kind(const Workload& w, OperatorKind kind) {
  int n = 0;
  for (const auto& op : w.operators) n += op.kind == kind ? 1 : 0;
  return n;
}

double d(std::int64_t v) {
  return static_cast<double>(v);
}

}  // namespace

// One GPT layer, hidden h, ffn f:
//   attention: LN1 (gain + bias) 2h, QKV weight 3h^2 + bias 3h, output projection h^2 + bias h
//              => 4h^2 + 6h
//   mlp:       LN2 2h, fc1 hf + bias f, fc2 fh + bias h        => 2hf + f + 3h
//   with f = 4h the layer has 4h^2 + 6h + 8h^2 + 4h + 3h = 12h^2 + 13h.
TEST_CASE("a GPT layer has 12h^2 + 13h parameters when ffn = 4h", "[workload]") {
  for (const std::int64_t h : {64, 768, 1024, 1600, 4096, 12288}) {
    CAPTURE(h);
    const int heads = h == 1600 ? 25 : 16;
    const Workload w = lower(gpt({stage(2, static_cast<int>(h), heads)}, 128, 1000));
    for (int layer = 0; layer < 2; ++layer) {
      const Operator& att = find_op(w, OperatorKind::kAttention, layer);
      const Operator& mlp = find_op(w, OperatorKind::kMlp, layer);
      CHECK(att.parameters() == 4 * h * h + 6 * h);
      CHECK(mlp.parameters() == 8 * h * h + 7 * h);
      CHECK(att.parameters() + mlp.parameters() == 12 * h * h + 13 * h);
    }
  }
}

TEST_CASE("a GPT layer with a custom ffn has 4h^2 + 6h + 2hf + f + 3h parameters", "[workload]") {
  // OPT-30B-shaped: h = 7168, f = 28672 (= 4h, given explicitly) and a non-4h ffn.
  for (const auto& [h, f] : std::vector<std::pair<std::int64_t, std::int64_t>>{{7168, 28672}, {512, 1376}}) {
    CAPTURE(h, f);
    const Workload w = lower(gpt({stage(1, static_cast<int>(h), 8, static_cast<int>(f))}, 64, 1000));
    CHECK(find_op(w, OperatorKind::kAttention, 0).parameters() == 4 * h * h + 6 * h);
    CHECK(find_op(w, OperatorKind::kMlp, 0).parameters() == 2 * h * f + f + 3 * h);
  }
}

// GPT-2 XL (L = 48, h = 1600, s = 1024, V = 50257, tied):
//   token table V h = 80,411,200; position table s h = 1,638,400; final LN 2h = 3,200
//   layers L (12h^2 + 13h) = 48 x (30,720,000 + 20,800) = 1,475,558,400
//   total = 80,411,200 + 1,638,400 + 3,200 + 1,475,558,400 = 1,557,611,200.
TEST_CASE("GPT-2 1.5B lowers to 1,557,611,200 parameters", "[workload]") {
  const ModelSpec spec = load_model("gpt2-1.5b");
  const Workload w = lower(spec);
  CHECK(w.parameters() == 1'557'611'200);
  // One embedding operator (tied: it also holds the final LN and the LM head), 48 x (attention, mlp).
  CHECK(w.operators.size() == 97u);  // 1 + 2 x 48
  CHECK(count_kind(w, OperatorKind::kEmbedding) == 1);
  CHECK(count_kind(w, OperatorKind::kAttention) == 48);
  CHECK(count_kind(w, OperatorKind::kMlp) == 48);
  CHECK(count_kind(w, OperatorKind::kHead) == 0);
  CHECK(count_kind(w, OperatorKind::kProjection) == 0);
  CHECK(w.operators.front().kind == OperatorKind::kEmbedding);
  CHECK(w.operators.front().parameters() == 80'411'200 + 1'638'400 + 3'200);
  // Forward execution order: layer l's attention then its mlp.
  for (int l = 0; l < 48; ++l) {
    CHECK(w.operators[static_cast<std::size_t>(1 + 2 * l)].kind == OperatorKind::kAttention);
    CHECK(w.operators[static_cast<std::size_t>(1 + 2 * l)].layer == l);
    CHECK(w.operators[static_cast<std::size_t>(2 + 2 * l)].kind == OperatorKind::kMlp);
    CHECK(w.operators[static_cast<std::size_t>(2 + 2 * l)].layer == l);
  }
}

// Flops. A weight GEMM Y[s x out] = X[s x in] W[in x out] costs 2 in out flops per token forward and
// twice that backward (dX = dY W^T and dW = X^T dY): 6 flops per matmul parameter per token.
// Matmul parameters: per layer QKV 3h^2, proj h^2, fc1 4h^2, fc2 4h^2 = 12h^2; plus the LM head on
// the tied token table, V h. The position table, the biases and the layer norms take no GEMM.
// Attention per layer, per token: QK^T is a [s x d] x [d x s] product per head, 2 s d a = 2 s h flops
// per token; AV the same; backward twice forward => 3 x 4 s h = 12 s h per token per layer.
//   flops/token = 6 (12 L h^2 + V h) + 12 L s h
// GPT-2 XL: 12 L h^2 = 1,474,560,000; V h = 80,411,200; matmul params M = 1,554,971,200;
//   6 M = 9,329,827,200; 12 L s h = 12 x 48 x 1024 x 1600 = 943,718,400;
//   flops/token = 10,273,545,600.
// Relation to 6 x total parameters: the non-matmul parameters are the biases (9h per layer: 3h + h +
// 4h + h), the layer norms (4h per layer + 2h final) and the position table (s h):
//   P - M = 13 L h + 2h + s h = 998,400 + 3,200 + 1,638,400 = 2,640,000, so
//   flops/token = 6 P - 6 (P - M) + 12 L s h = 6 P - 15,840,000 + 943,718,400 = 6 P + 927,878,400.
TEST_CASE("GPT-2 1.5B forward+backward flops per token = 6 x matmul params + 12 L s h", "[workload]") {
  const Workload w = lower(load_model("gpt2-1.5b"));
  const double L = 48, h = 1600, s = 1024, V = 50257;
  double per_sample = 0;
  for (const auto& op : w.operators) per_sample += op.forward_flops(1) + op.backward_flops(1);
  const double per_token = per_sample / s;

  const double matmul_params = 12 * L * h * h + V * h;
  const double attention_term = 12 * L * s * h;
  CHECK(matmul_params == 1'554'971'200.0);
  CHECK(per_token == Approx(6 * matmul_params + attention_term).epsilon(kRel));
  CHECK(per_token == Approx(10'273'545'600.0).epsilon(kRel));

  const double total = d(w.parameters());
  const double non_matmul = 13 * L * h + 2 * h + s * h;
  CHECK(total - matmul_params == non_matmul);
  CHECK(non_matmul == 2'640'000.0);
  CHECK(per_token == Approx(6 * total - 6 * non_matmul + attention_term).epsilon(kRel));
  CHECK(per_token - 6 * total == Approx(927'878'400.0).epsilon(1e-9));
}

// Every GEMM of the forward pass has two backward GEMMs of the same size (weight GEMMs: dX and dW;
// QK^T: dQ and dK; AV: dA and dV); elementwise kernels have no flops. So backward = 2 x forward for
// every operator, and flops scale linearly with the micro-batch.
TEST_CASE("backward flops are twice forward and flops are linear in the batch", "[workload]") {
  for (const auto& spec : {load_model("gpt2-1.5b"), gpt({stage(2, 64, 4)}, 32, 100, false),
                           gpt({stage(1, 64, 4), stage(1, 128, 8)}, 32, 100, false)}) {
    const Workload w = lower(spec);
    for (const auto& op : w.operators) {
      CAPTURE(spec.name, op.name);
      CHECK(op.backward_flops(1) == Approx(2 * op.forward_flops(1)).epsilon(kRel));
      for (int b : {2, 3, 8}) {
        CHECK(op.forward_flops(b) == Approx(b * op.forward_flops(1)).epsilon(kRel));
        CHECK(op.backward_flops(b) == Approx(b * op.backward_flops(1)).epsilon(kRel));
      }
    }
  }
}

// A small model, per token per layer: 2 x 12h^2 (weights) + 4 s h (QK^T, AV) forward.
// h = 64, s = 32, a = 4: 2 x 49,152 + 4 x 2,048 = 106,496 forward flops per token per layer;
// the untied LM head 2 h V = 2 x 64 x 100 = 12,800 per token.
TEST_CASE("forward flops of a small untied model per operator", "[workload]") {
  const double h = 64, s = 32, V = 100;
  const Workload w = lower(gpt({stage(2, 64, 4)}, 32, 100, false));
  for (int l = 0; l < 2; ++l) {
    const double att = find_op(w, OperatorKind::kAttention, l).forward_flops(1) / s;
    const double mlp = find_op(w, OperatorKind::kMlp, l).forward_flops(1) / s;
    CHECK(att == Approx(2 * 4 * h * h + 4 * s * h).epsilon(kRel));  // QKV + proj + QK^T + AV
    CHECK(mlp == Approx(2 * 8 * h * h).epsilon(kRel));              // fc1 + fc2
    CHECK(att + mlp == Approx(106'496.0).epsilon(kRel));
  }
  CHECK(find_op(w, OperatorKind::kHead).forward_flops(1) / s == Approx(2 * h * V).epsilon(kRel));
  CHECK(find_op(w, OperatorKind::kEmbedding).forward_flops(1) == 0.0);  // a lookup, no GEMM
}

// Saved activations per sample (Korthikanti et al. 2022, "Reducing activation recomputation"),
// e bytes per activation element, 1 byte per dropout-mask element, f = 4h:
//   attention block: LN1 input sh, QKV input sh, Q and K 2sh, softmax output a s^2, dropout output
//                    a s^2 (+ mask a s^2 bytes), V sh, proj input sh (+ residual dropout mask sh bytes)
//                    => e (6sh + 2as^2) + (as^2 + sh)
//   mlp block:       LN2 input sh, fc1 input sh, GeLU input 4sh, fc2 input 4sh (+ mask sh bytes)
//                    => 10 e sh + sh
//   layer:           e (16 sh + 2 a s^2) + 2 sh + a s^2
//   e = 2 (mixed):   34 sh + 5 a s^2 = s h (34 + 5 a s / h)
//   e = 4 (fp32):    66 sh + 9 a s^2 = s h (66 + 9 a s / h)
// Without dropout there is neither the dropout output nor the masks: e (16 sh + a s^2)
//   e = 2: 32 sh + 2 a s^2.
// GPT-2 XL, mixed: s h (34 + 5 x 25 x 1024 / 1600) = 1,638,400 x 114 = 186,777,600 bytes.
TEST_CASE("a layer saves s h (34 + 5 a s / h) bytes per sample with mixed precision", "[workload]") {
  struct Case {
    int h, a, s;
  };
  for (const Case c : {Case{1600, 25, 1024}, Case{1024, 16, 1024}, Case{768, 12, 512}, Case{4096, 32, 2048},
                       Case{100, 5, 48}}) {
    CAPTURE(c.h, c.a, c.s);
    const double s = c.s, h = c.h, a = c.a;
    for (const Precision p : {Precision::kMixed, Precision::kFp32}) {
      for (const bool dropout : {true, false}) {
        CAPTURE(to_string(p), dropout);
        const Workload w = lower(gpt({stage(2, c.h, c.a)}, c.s, 1000, true, p, dropout));
        const double e = p == Precision::kMixed ? 2 : 4;
        CHECK(w.bytes.activation == static_cast<int>(e));
        for (int l = 0; l < 2; ++l) {
          const Operator& att = find_op(w, OperatorKind::kAttention, l);
          const Operator& mlp = find_op(w, OperatorKind::kMlp, l);
          const double layer = att.saved_bytes_per_sample + mlp.saved_bytes_per_sample;
          if (dropout) {
            CHECK(att.saved_bytes_per_sample ==
                  Approx(e * (6 * s * h + 2 * a * s * s) + a * s * s + s * h).epsilon(kRel));
            CHECK(mlp.saved_bytes_per_sample == Approx(10 * e * s * h + s * h).epsilon(kRel));
            if (p == Precision::kMixed) {
              CHECK(layer == Approx(s * h * (34 + 5 * a * s / h)).epsilon(kRel));
            } else {
              CHECK(layer == Approx(s * h * (66 + 9 * a * s / h)).epsilon(kRel));
            }
          } else {
            CHECK(layer == Approx(e * (16 * s * h + a * s * s)).epsilon(kRel));
            if (p == Precision::kMixed) CHECK(layer == Approx(32 * s * h + 2 * a * s * s).epsilon(kRel));
          }
          // A checkpointed block keeps only its input, one s x h activation.
          CHECK(att.input_bytes_per_sample == Approx(e * s * h).epsilon(kRel));
          CHECK(mlp.input_bytes_per_sample == Approx(e * s * h).epsilon(kRel));
          CHECK(att.checkpointable);
          CHECK(mlp.checkpointable);
        }
      }
    }
  }
  // The worked number for GPT-2 XL in mixed precision.
  ModelSpec xl = load_model("gpt2-1.5b");
  xl.precision = Precision::kMixed;
  const Workload w = lower(xl);
  CHECK(find_op(w, OperatorKind::kAttention, 7).saved_bytes_per_sample +
            find_op(w, OperatorKind::kMlp, 7).saved_bytes_per_sample ==
        Approx(186'777'600.0).epsilon(kRel));
}

TEST_CASE("mixed precision lowers with 2/2/12/2 bytes and fp32 with 4/4/8/4", "[workload]") {
  ModelSpec spec = gpt({stage(1, 64, 4)}, 16, 100);
  const Workload fp32 = lower(spec);
  CHECK(fp32.bytes.weight == 4);
  CHECK(fp32.bytes.gradient == 4);
  CHECK(fp32.bytes.optimizer == 8);
  CHECK(fp32.bytes.activation == 4);
  spec.precision = Precision::kMixed;
  const Workload mixed = lower(spec);
  CHECK(mixed.bytes.weight == 2);
  CHECK(mixed.bytes.gradient == 2);
  CHECK(mixed.bytes.optimizer == 12);
  CHECK(mixed.bytes.activation == 2);
  // Precision changes bytes, never the parameter count.
  CHECK(mixed.parameters() == fp32.parameters());
}

// Untied: the LM head is its own operator at the end, with its own [h x V] weight (no bias, as in
// GPT-2) next to the final LN. So the untied model has exactly V h more parameters than the tied one.
//   h = 64, L = 2, s = 32, V = 100: tied = V h + s h + 2h + 2 (12h^2 + 13h) = 6,400 + 2,048 + 128 +
//   2 x 49,984 = 108,544; untied = 108,544 + 6,400 = 114,944.
TEST_CASE("an untied model has a separate head operator with its own V x h weight", "[workload]") {
  const double h = 64, s = 32, V = 100;
  const Workload tied = lower(gpt({stage(2, 64, 4)}, 32, 100, true));
  const Workload untied = lower(gpt({stage(2, 64, 4)}, 32, 100, false));
  CHECK(tied.parameters() == 108'544);
  CHECK(untied.parameters() == 114'944);
  CHECK(d(untied.parameters() - tied.parameters()) == V * h);

  CHECK(count_kind(tied, OperatorKind::kHead) == 0);
  CHECK(count_kind(untied, OperatorKind::kHead) == 1);
  CHECK(untied.operators.size() == tied.operators.size() + 1);
  const Operator& head = untied.operators.back();
  CHECK(head.kind == OperatorKind::kHead);
  CHECK(head.layer == -1);
  CHECK(head.hidden == 64);
  // Embedding (token + position tables) and head (final LN + LM head) share the rest.
  const Operator& emb = untied.operators.front();
  CHECK(d(emb.parameters() + head.parameters()) == V * h + s * h + 2 * h + V * h);
  CHECK(!emb.tied_gradient);
  CHECK(tied.operators.front().tied_gradient);
  // The head's GEMM: 2 h V flops per token forward.
  CHECK(head.forward_flops(1) == Approx(2 * s * h * V).epsilon(kRel));
}

// Stages of different hidden sizes are joined by a projection Linear [h_in x h_out] + bias h_out,
// placed after the last layer of the earlier stage; consecutive stages of equal hidden need none.
// Stages (2 x h64), (1 x h64), (2 x h128): one projection of 64 x 128 + 128 = 8,320 parameters.
TEST_CASE("stages of different hidden sizes get a projection operator between them", "[workload]") {
  const Workload w = lower(gpt({stage(2, 64, 4), stage(1, 64, 4), stage(2, 128, 8)}, 32, 100, false));
  std::vector<OperatorKind> kinds;
  for (const auto& op : w.operators) kinds.push_back(op.kind);
  using K = OperatorKind;
  const std::vector<K> expected{K::kEmbedding, K::kAttention, K::kMlp,        K::kAttention, K::kMlp,
                                K::kAttention, K::kMlp,       K::kProjection, K::kAttention, K::kMlp,
                                K::kAttention, K::kMlp,       K::kHead};
  CHECK(kinds == expected);
  const Operator& proj = w.operators[7];
  CHECK(proj.parameters() == 64 * 128 + 128);
  CHECK(proj.hidden == 128);
  CHECK(proj.layer == -1);
  // Forward flops of the projection: 2 h_in h_out per token.
  CHECK(proj.forward_flops(1) == Approx(2.0 * 32 * 64 * 128).epsilon(kRel));
  // Layer indices continue across stages; hidden sizes follow the stages.
  CHECK(w.operators[5].layer == 2);
  CHECK(w.operators[5].hidden == 64);
  CHECK(w.operators[8].layer == 3);
  CHECK(w.operators[8].hidden == 128);
  CHECK(w.operators[12].hidden == 128);
  // Total: V h0 + s h0 (embedding) + 3 layers at 64 + projection + 2 layers at 128 + 2 h1 + h1 V (head).
  const std::int64_t V = 100, s = 32, h0 = 64, h1 = 128;
  CHECK(w.parameters() == V * h0 + s * h0 + 3 * (12 * h0 * h0 + 13 * h0) + h0 * h1 + h1 +
                              2 * (12 * h1 * h1 + 13 * h1) + 2 * h1 + h1 * V);

  // The catalog's inconsistent & consecutive model: 1024 -> 2048 -> 4096, two projections.
  const Workload ic = lower(load_model("ic-4x1024-2048-4096"));
  CHECK(count_kind(ic, OperatorKind::kProjection) == 2);
  CHECK(count_kind(ic, OperatorKind::kAttention) == 12);
  std::vector<std::int64_t> projection_params;
  for (const auto& op : ic.operators)
    if (op.kind == OperatorKind::kProjection) projection_params.push_back(op.parameters());
  CHECK(projection_params == std::vector<std::int64_t>{1024 * 2048 + 2048, 2048 * 4096 + 4096});
}

// A tied LM head multiplies by the token table: logits[s x V] = X[s x h] W[h x V] with W the table
// itself, so the head GEMM's contraction size must equal the table's rows (its hidden size). With
// stages of different hidden sizes (the catalog's I&C models, tied by default) the final hidden is
// not the table's hidden, and tying is impossible; the lowering should not produce a head GEMM
// whose shape disagrees with the weight it is priced against.
TEST_CASE("a tied LM head GEMM has the token table's shape", "[workload]") {
  for (const auto& spec : {load_model("gpt2-1.5b"), load_model("ic-4x1024-2048-4096")}) {
    CAPTURE(spec.name);
    const Workload w = lower(spec);
    const Operator& emb = w.operators.front();
    if (!emb.tied_gradient) continue;  // untied: nothing to check here
    const Weight* table = nullptr;
    for (const auto& wt : emb.weights)
      if (wt.splittable) table = &wt;
    REQUIRE(table != nullptr);
    bool found = false;
    for (const auto& k : emb.forward) {
      if (k.kind != KernelKind::kGemm) continue;
      found = true;
      CHECK(k.k == table->rows);  // contraction over the table's hidden size
      CHECK(k.n == table->cols);  // one logit per vocabulary entry
    }
    CHECK(found);
  }
}

// splits(split_max): 1, then every power of two <= split_max dividing the rows of every splittable
// weight (the GEMM input dimension K that splitting cuts; biases and norms are not split).
//   h = 64, f = 96: attention rows {64 (QKV), 64 (proj)} -> 1..64; mlp rows {64 (fc1), 96 (fc2)}:
//   96 = 32 x 3, so 1..32.
//   GPT-2 XL h = 1600 = 64 x 25: attention and mlp (fc2 rows 6400 = 256 x 25) -> 1..64; the tied
//   embedding splits its table (rows h) for the LM head -> 1..64.
//   An untied embedding has no GEMM to cut: {1}.
TEST_CASE("splits are the powers of two dividing every split dimension (and an attention's heads)",
          "[workload]") {
  using V = std::vector<int>;
  // h = 64 with 4 heads, f = 96: attention slices hold whole heads (n | 4); the MLP cuts fc1's 96
  // columns and fc2's 96 rows (n | 32 among powers of two).
  const Workload w = lower(gpt({stage(1, 64, 4, 96)}, 32, 100, false));
  const Operator& att = find_op(w, OperatorKind::kAttention, 0);
  const Operator& mlp = find_op(w, OperatorKind::kMlp, 0);
  CHECK(att.splits(128) == V{1, 2, 4});
  CHECK(att.splits(3) == V{1, 2});
  CHECK(att.splits(1) == V{1});
  CHECK(mlp.splits(128) == V{1, 2, 4, 8, 16, 32});
  CHECK(mlp.splits(8) == V{1, 2, 4, 8});
  CHECK(find_op(w, OperatorKind::kEmbedding).splits(64) == V{1});
  CHECK(find_op(w, OperatorKind::kHead).splits(256) == V{1, 2, 4, 8, 16, 32, 64});

  // GPT-2 1.5B has 25 heads: its attention cannot be cut; f = 6400 = 256 x 25 for the MLP.
  const Workload xl = lower(load_model("gpt2-1.5b"));
  CHECK(find_op(xl, OperatorKind::kAttention, 0).splits(1024) == V{1});
  CHECK(find_op(xl, OperatorKind::kMlp, 47).splits(1024) == V{1, 2, 4, 8, 16, 32, 64, 128, 256});
  CHECK(find_op(xl, OperatorKind::kEmbedding).splits(1024) == V{1, 2, 4, 8, 16, 32, 64});

  // h = 24 with 3 heads and f = 4h = 96: the attention does not cut, the MLP 32 ways (f = 32 x 3).
  const Workload odd = lower(gpt({stage(1, 24, 3)}, 8, 10, false));
  CHECK(find_op(odd, OperatorKind::kAttention, 0).splits(64) == V{1});
  CHECK(find_op(odd, OperatorKind::kMlp, 0).splits(64) == V{1, 2, 4, 8, 16, 32});
  // The projection's rows are its input hidden size: 64 -> 128 cuts up to 64 ways.
  const Workload ic = lower(gpt({stage(1, 64, 4), stage(1, 128, 8)}, 8, 10, false));
  CHECK(find_op(ic, OperatorKind::kProjection).splits(1024) == V{1, 2, 4, 8, 16, 32, 64});
}

// Layers of one stage have identical weights and kernels, so they share a shape id; attention and
// mlp, or layers of different stages, do not.
TEST_CASE("operators of the same shape share a shape id", "[workload]") {
  const Workload w = lower(gpt({stage(3, 64, 4), stage(2, 128, 8)}, 32, 100, false));
  const Operator& a0 = find_op(w, OperatorKind::kAttention, 0);
  const Operator& m0 = find_op(w, OperatorKind::kMlp, 0);
  for (int l = 1; l < 3; ++l) {
    CHECK(find_op(w, OperatorKind::kAttention, l).shape_id == a0.shape_id);
    CHECK(find_op(w, OperatorKind::kMlp, l).shape_id == m0.shape_id);
  }
  CHECK(a0.shape_id != m0.shape_id);
  CHECK(find_op(w, OperatorKind::kAttention, 3).shape_id != a0.shape_id);
  CHECK(find_op(w, OperatorKind::kAttention, 4).shape_id == find_op(w, OperatorKind::kAttention, 3).shape_id);
}

namespace {

bool same_kernels(const std::vector<Kernel>& a, const std::vector<Kernel>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Kernel &x = a[i], &y = b[i];
    if (x.kind != y.kind || x.m != y.m || x.n != y.n || x.k != y.k || x.count != y.count ||
        x.batch_dim != y.batch_dim || x.split_dim != y.split_dim || x.bytes_per_sample != y.bytes_per_sample)
      return false;
  }
  return true;
}

bool same_weights(const std::vector<Weight>& a, const std::vector<Weight>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].rows != b[i].rows || a[i].cols != b[i].cols || a[i].splittable != b[i].splittable) return false;
  return true;
}

}  // namespace

// The header's promise: "operators with the same shape_id have identical weights and kernels" (the
// search prices one operator per shape id and copies its costs to the others). Two stages of the
// same hidden size but different head counts have attention operators with identical weights but
// different kernels (a heads of s x s scores) and different saved activations (a s^2 terms):
//   h = 64, s = 32: 4 heads save e(6sh + 2 x 4 s^2) + ..., 8 heads e(6sh + 2 x 8 s^2) + ...
// so they must not share a shape id.
TEST_CASE("operators sharing a shape id have identical weights, kernels and activations", "[workload]") {
  for (const auto& spec : {load_model("gpt2-1.5b"), load_model("ic-4x1024-2048-4096"),
                           gpt({stage(2, 64, 4), stage(2, 64, 8)}, 32, 100, false),
                           gpt({stage(1, 64, 4, 256), stage(1, 64, 4, 128)}, 32, 100, false)}) {
    const Workload w = lower(spec);
    for (std::size_t i = 0; i < w.operators.size(); ++i) {
      for (std::size_t j = i + 1; j < w.operators.size(); ++j) {
        const Operator &a = w.operators[i], &b = w.operators[j];
        if (a.shape_id != b.shape_id) continue;
        CAPTURE(spec.name, a.name, b.name);
        CHECK(a.kind == b.kind);
        CHECK(same_weights(a.weights, b.weights));
        CHECK(same_kernels(a.forward, b.forward));
        CHECK(same_kernels(a.backward, b.backward));
        CHECK(a.saved_bytes_per_sample == b.saved_bytes_per_sample);
        CHECK(a.input_bytes_per_sample == b.input_bytes_per_sample);
        CHECK(a.workspace_bytes_per_sample == b.workspace_bytes_per_sample);
        CHECK(a.checkpointable == b.checkpointable);
        CHECK(a.tied_gradient == b.tied_gradient);
      }
    }
  }
}
