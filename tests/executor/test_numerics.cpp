// The executor's arithmetic against central finite differences, operator by operator: with
// loss = sum(output * r) for a random r, the backward's weight and input gradients must match
// (loss(theta + eps) - loss(theta - eps)) / 2 eps. The operators are polynomial in their inputs
// (ReLU aside, piecewise linear), so the differences are accurate to float rounding; the gated MLP's
// silu(X G) * (X U) is smooth, its central difference off by eps^2/6 of a third derivative of order 1
// (1.7e-5 at eps = 1e-2), under the tolerance.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "costmodel/error.hpp"
#include "executor_fixtures.hpp"
#include "validate/cpu/cpu_device.hpp"
#include "validate/executor/numerics.hpp"

using namespace osdp;
using namespace osdp::validate;
using costmodel::OperatorKind;

namespace {

struct Harness {
  const costmodel::Operator& op;
  int site, n;
  MathShape m;
  CpuDevice dev{CpuDeviceOptions{0, false, 0}};
  OperatorLayout layout;
  std::vector<std::vector<float>> weights, grads;
  std::vector<float> x, r, internals, workspace;
  std::vector<std::int32_t> tokens;
  std::int64_t in = 0, out = 0;
  MoeRoute route;  // an MoE operator's (EP 1)

  Harness(const costmodel::Operator& o, int site_, int slices, MathShape shape = {2, 8, 40})
      : op(o), site(site_), n(slices), m(shape), layout(make_layout(o, 1, slices, 1, ExpertPlace{})) {
    if (op.experts > 0) route = moe_route(op, ExpertPlace{}, {0}, m.batch, m.seq, 0);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    for (int j = 0; j < n; ++j) {
      weights.push_back(initial_slice(op, layout, j));
      grads.emplace_back(weights.back().size(), 0.0f);
    }
    in = width_in(op, site) * m.rows();
    out = width_out(op, site, m) * m.rows();
    x.resize(static_cast<std::size_t>(std::max<std::int64_t>(in, 1)));
    for (float& v : x) v = uni(rng);
    r.resize(static_cast<std::size_t>(out));
    for (float& v : r) v = uni(rng);
    internals.resize(static_cast<std::size_t>(std::max<std::int64_t>(internal_floats(op, n, m), 1)));
    workspace.resize(static_cast<std::size_t>(std::max<std::int64_t>(workspace_floats(op, n, m), 1)));
    for (std::int64_t i = 0; i < m.rows(); ++i) tokens.push_back(token_of(i / m.seq, i % m.seq, m.vocab));
  }
  bool head() const {
    return op.kind == OperatorKind::kHead || (op.kind == OperatorKind::kEmbedding && site == 1);
  }
  bool residual() const { return op.kind == OperatorKind::kAttention || op.kind == OperatorKind::kMlp; }

  SliceArgs args(int j, float* y) {
    SliceArgs a;
    a.op = &op;
    a.layout = &layout;
    a.slice = j;
    a.site = site;
    a.weights = weights[static_cast<std::size_t>(j)].data();
    a.grads = grads[static_cast<std::size_t>(j)].data();
    a.x = x.data();
    a.internals = internals.data();
    a.y = y;
    a.workspace = workspace.data();
    a.tokens = tokens.data();
    if (op.experts > 0) {
      a.route = &route;
      a.send_rows = route.send_rows.data();
      a.gate_at = route.gate_at.data();
    }
    return a;
  }

  double loss() {
    std::vector<float> y(static_cast<std::size_t>(out), 0.0f);
    if (residual()) std::copy(x.begin(), x.end(), y.begin());
    std::fill(internals.begin(), internals.end(), 0.0f);
    for (int j = 0; j < n; ++j) forward_slice(dev, dev.compute_stream(), m, args(j, y.data()));
    const std::vector<float>& o = head() ? internals : y;
    double l = 0;
    for (std::size_t i = 0; i < r.size(); ++i) l += static_cast<double>(o[i]) * r[i];
    return l;
  }

  std::vector<float> backward() {  // returns dx; fills grads
    loss();
    std::vector<float> dx(x.size(), 0.0f);
    if (residual()) dx = r;
    if (head()) std::copy(r.begin(), r.end(), internals.begin());
    for (auto& g : grads) std::fill(g.begin(), g.end(), 0.0f);
    for (int j = 0; j < n; ++j) {
      SliceArgs a = args(j, nullptr);
      a.dy = r.data();
      a.dx = dx.data();
      backward_slice(dev, dev.compute_stream(), m, a);
    }
    return dx;
  }
};

// fc1 [h x 2f] over fc2 [f x h]: a gate and an up.
bool gated_mlp(const costmodel::Operator& op) {
  std::vector<const costmodel::Weight*> mats;
  for (const auto& w : op.weights)
    if (w.rows > 1) mats.push_back(&w);
  return mats.size() == 2 && mats[0]->cols == 2 * mats[1]->rows;
}

void check(Harness& hs) {
  const std::vector<float> dx = hs.backward();
  const auto grads = hs.grads;
  std::mt19937 rng(11);
  auto central = [&](float& v, float eps) {
    const float keep = v;
    v = keep + eps;
    const double up = hs.loss();
    v = keep - eps;
    const double down = hs.loss();
    v = keep;
    return (up - down) / (2.0 * static_cast<double>(eps));
  };
  // A step that moves a ReLU input across zero measures neither side's slope. The (ungated) MLP is
  // linear in any one of its inputs between kinks, so its one-sided differences agree exactly unless
  // the step crosses one: such elements (10-30% of those drawn, at this step) are not compared.
  int skipped = 0;
  const bool kinks = hs.op.kind == OperatorKind::kMlp && !gated_mlp(hs.op);
  auto fd = [&](float& v) {
    const float eps = 1e-2f;
    if (!kinks) return central(v, eps);
    const double mid = hs.loss();
    const float keep = v;
    v = keep + eps;
    const double up = (hs.loss() - mid) / eps;
    v = keep - eps;
    const double down = (mid - hs.loss()) / eps;
    v = keep;
    if (std::fabs(up - down) <= 1e-3 * (1.0 + std::fabs(up))) return 0.5 * (up + down);
    ++skipped;
    return std::nan("");
  };
  for (int j = 0; j < hs.n; ++j) {
    auto& wv = hs.weights[static_cast<std::size_t>(j)];
    const std::int64_t used = hs.layout.slice[static_cast<std::size_t>(j)].vector_offset +
                              hs.layout.slice[static_cast<std::size_t>(j)].vector_len;
    std::uniform_int_distribution<std::int64_t> pick(0, used - 1);
    for (int trial = 0; trial < 25; ++trial) {
      const auto i = static_cast<std::size_t>(pick(rng));
      CAPTURE(hs.op.name, hs.site, hs.n, j, i);
      const double want = fd(wv[i]);
      if (!std::isnan(want))
        CHECK(grads[static_cast<std::size_t>(j)][i] == Approx(want).epsilon(2e-2).margin(2e-3));
    }
  }
  if (hs.in > 0 && hs.op.kind != OperatorKind::kEmbedding) {
    std::uniform_int_distribution<std::size_t> pick(0, hs.x.size() - 1);
    for (int trial = 0; trial < 25; ++trial) {
      const auto i = pick(rng);
      CAPTURE(hs.op.name, hs.site, hs.n, i);
      const double want = fd(hs.x[i]);
      if (!std::isnan(want)) CHECK(dx[i] == Approx(want).epsilon(2e-2).margin(2e-3));
    }
  }
  CHECK(skipped <= (25 + 25 * hs.n) / 2);  // most elements are compared
}

// Every operator of layer 0, the embedding (both sites when tied), projections and the head, whole and
// at every split up to 4.
void check_model(const costmodel::ModelSpec& model) {
  const auto w = costmodel::lower(model);
  const MathShape shape{2, model.seq, model.vocab};
  for (const auto& op : w.operators) {
    if (op.layer > 0) continue;
    for (const int n : op.splits(op.experts > 0 ? 1 : 4)) {  // the executor runs an MoE MLP unsplit
      if (op.kind == OperatorKind::kEmbedding) {
        Harness lookup(op, 0, n, shape);
        check(lookup);
        if (op.tied_gradient) {
          Harness headsite(op, 1, n, shape);
          check(headsite);
        }
      } else {
        Harness hs(op, 0, n, shape);
        check(hs);
      }
    }
  }
}

// The llama-family models of the tests: GQA with a head size that is not hidden / heads, a gated MLP,
// RMSNorm, no biases, rotary positions; qwen2's QKV biases, qwen3's Q/K head norms; fused attention at
// sequence 16 (K^T V saved) and materialized at 8 (the scores), and a tied one.
std::vector<costmodel::ModelSpec> llama_family_models() {
  std::vector<costmodel::ModelSpec> out;
  for (const char* family : {"llama", "qwen2", "qwen3"}) out.push_back(testing::llama_model(family, 1));
  costmodel::ModelSpec materialized = testing::llama_model("llama", 1, 8);
  materialized.name = "tiny-llama-materialized";
  materialized.attention = costmodel::AttentionKind::kMaterialized;
  out.push_back(materialized);
  costmodel::ModelSpec tied = testing::llama_model("qwen3", 1);
  tied.name = "tiny-qwen3-tied";
  tied.tied_embeddings = true;
  out.push_back(tied);
  return out;
}

// A llama-family model whose MLPs are MoE layers: 4 experts of f_e 16, top 2 (and a shared MLP of
// f_s 16 where asked), at sequence 16.
costmodel::ModelSpec moe_model(int shared) {
  costmodel::ModelSpec m = testing::llama_model("qwen3", 1);
  m.name = shared > 0 ? "tiny-moe-shared" : "tiny-moe";
  m.moe.experts = 4;
  m.moe.top_k = 2;
  m.moe.expert_ffn = 16;
  m.moe.shared_ffn = shared;
  return m;
}

const costmodel::Operator& first_moe(const costmodel::Workload& w) {
  for (const auto& op : w.operators)
    if (op.experts > 0) return op;
  FAIL("no MoE operator");
  return w.operators.front();
}

}  // namespace

TEST_CASE("an MoE layer's backward matches finite differences, with and without a shared MLP", "[numerics]") {
  for (const int shared : {0, 16}) {
    CAPTURE(shared);
    check_model(moe_model(shared));
  }
}

// The routing (numerics.hpp's moe): token t of sample g at position p to experts (g + p k + i) mod E.
// With E = 4 dividing s k = 32, every sample sends s k / E = 8 choices to each expert, so an EP rank of
// e receives b s k / E rows for each of its E / e experts from each of the e ranks; what one sends
// another receives; and at EP 1 the rank receives its own choices in send order.
TEST_CASE("MoE routes: balanced choices, what each EP rank sends another receives", "[numerics][moe]") {
  const costmodel::Workload w = costmodel::lower(moe_model(0));
  const costmodel::Operator& op = first_moe(w);
  REQUIRE(op.experts == 4);
  REQUIRE(op.top_k == 2);
  const std::int64_t b = 3, s = 16, k = 2, E = 4;
  for (const int ep : {1, 2, 4}) {
    CAPTURE(ep);
    std::vector<std::int64_t> firsts;
    for (int q = 0; q < ep; ++q) firsts.push_back(100 + q * b);
    std::vector<MoeRoute> r;
    for (int q = 0; q < ep; ++q) r.push_back(moe_route(op, ExpertPlace{ep, q}, firsts, b, s, 0));
    for (int q = 0; q < ep; ++q) {
      const MoeRoute& x = r[static_cast<std::size_t>(q)];
      CHECK(x.slots == b * s * k);
      CHECK(x.local_experts == E / ep);
      CHECK(x.received() == b * s * k);
      for (int p = 0; p < ep; ++p) {
        CHECK(x.send_counts[static_cast<std::size_t>(p)] ==
              r[static_cast<std::size_t>(p)].recv_counts[static_cast<std::size_t>(q)]);
        CHECK(x.send_counts[static_cast<std::size_t>(p)] == static_cast<std::size_t>(b * s * k / ep));
        for (int e = 0; e < x.local_experts; ++e)
          CHECK(x.expert_rows[static_cast<std::size_t>(p * x.local_experts + e)] == b * s * k / E);
      }
      // Each choice in send order: its row's expert, from the formula, non-decreasing; its gate at that
      // expert's logit of its row; every (row, expert) pair once.
      std::vector<int> seen(static_cast<std::size_t>(b * s * E), 0);
      std::int64_t last = -1;
      for (std::size_t i = 0; i < x.send_rows.size(); ++i) {
        const std::int64_t row = x.send_rows[i], e = x.gate_at[i] - row * E;
        REQUIRE(e >= 0);
        REQUIRE(e < E);
        CHECK(e >= last);
        last = e;
        const std::int64_t g = firsts[static_cast<std::size_t>(q)] + row / s, pos = row % s;
        CHECK((e - (g + pos * k) % E + E) % E < k);  // one of the k experts (g + p k + i) mod E
        ++seen[static_cast<std::size_t>(x.gate_at[i])];
      }
      for (std::size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] <= 1);
    }
  }
  CHECK(moe_received_max(op, MathShape{3, 16, 128}) == 3 * 8 * 4);  // b ceil(s k / E) E
}

// An MoE operator's layout at EP place q of e: the shared prefix (router, norm) alike at every place,
// the experts' blocks the q-th E / e of them, so the places together hold each element once.
TEST_CASE("MoE layouts: the shared prefix alike, the experts once over the EP places", "[numerics][moe]") {
  const costmodel::Workload w = costmodel::lower(moe_model(16));
  const costmodel::Operator& op = first_moe(w);
  const std::int64_t P = op.parameters(), Pe = op.expert_parameters();
  REQUIRE(Pe > 0);
  for (const int ep : {1, 2, 4}) {
    CAPTURE(ep);
    std::vector<float> sum(static_cast<std::size_t>(P), 0.0f);
    std::vector<int> hits(static_cast<std::size_t>(P), 0);
    for (int q = 0; q < ep; ++q) {
      const OperatorLayout l = make_layout(op, 1, 1, 2, ExpertPlace{ep, q});
      CHECK(l.slice_elems == P - Pe + Pe / ep);
      CHECK(shared_prefix(op, l, 0) == P - Pe);
      CHECK(l.padded_elems % 2 == 0);
      const std::vector<float> flat = initial_slice(op, l, 0);
      std::vector<float> logical;
      slice_to_logical(op, l, 0, flat.data(), logical, q != 0);
      for (std::size_t i = 0; i < logical.size(); ++i)
        if (logical[i] != 0.0f) ++hits[i];
    }
    int once = 0;
    for (const int h : hits) once += h == 1 ? 1 : 0;
    CHECK(once == P);  // initial values are never exactly zero here
  }
  CHECK_THROWS_AS(make_layout(op, 2, 1, 1, ExpertPlace{}), UsageError);
  CHECK_THROWS_AS(make_layout(op, 1, 2, 1, ExpertPlace{}), UsageError);
  CHECK_THROWS_AS(make_layout(op, 1, 1, 1, ExpertPlace{3, 0}), UsageError);
}

TEST_CASE("every operator's backward matches finite differences, whole and split", "[numerics]") {
  for (const bool tied : {true, false}) check_model(testing::tiny_model(tied, tied ? 1 : 2));
}

TEST_CASE("llama-family operators' backward matches finite differences, whole and split", "[numerics]") {
  for (const auto& model : llama_family_models()) {
    CAPTURE(model.name);
    check_model(model);
  }
}

TEST_CASE("a slice holds ceil(P/n) elements at most and the slices cover every parameter once",
          "[numerics]") {
  std::vector<costmodel::Operator> ops = costmodel::lower(testing::tiny_model(false, 2)).operators;
  for (const auto& model : llama_family_models())
    for (const auto& op : costmodel::lower(model).operators) ops.push_back(op);
  for (const auto& op : ops)
    for (const int n : op.splits(8)) {
      CAPTURE(op.name, n);
      const OperatorLayout l = make_layout(op, n, 3);
      CHECK(l.padded_elems % 3 == 0);
      CHECK(l.padded_elems >= l.slice_elems);
      std::vector<float> logical(static_cast<std::size_t>(op.parameters()), -7.0f);
      for (int j = 0; j < n; ++j) {
        const auto flat = initial_slice(op, l, j);
        slice_to_logical(op, l, j, flat.data(), logical);
      }
      // Every logical element was written with its own initial value.
      std::int64_t base = 0;
      for (int wi = 0; wi < static_cast<int>(op.weights.size()); ++wi) {
        const auto& wt = op.weights[static_cast<std::size_t>(wi)];
        for (std::int64_t r = 0; r < wt.rows; r += std::max<std::int64_t>(1, wt.rows / 3))
          for (std::int64_t c = 0; c < wt.cols; c += std::max<std::int64_t>(1, wt.cols / 5))
            REQUIRE(logical[static_cast<std::size_t>(base + r * wt.cols + c)] == initial_value(op, wi, r, c));
        base += wt.elements();
      }
      CHECK(std::count(logical.begin(), logical.end(), -7.0f) == 0);
    }
}

TEST_CASE("a slice of a million elements or more, filled on several threads, holds each element's own value",
          "[numerics]") {
  // Hidden 512: an MLP of 2 x 512 x 2048 weights, whole (2.1 M) and in 2 slices (1.05 M each): both at
  // or over the 2^20 elements from which initial_slice spreads rows over the cores.
  for (const auto& op : costmodel::lower(testing::tiny_model(false, 1, 512)).operators) {
    if (op.kind != OperatorKind::kMlp) continue;
    for (const int n : {1, 2}) {
      CAPTURE(op.name, n);
      const OperatorLayout l = make_layout(op, n, 1);
      REQUIRE(l.slice_elems >= (1 << 20));
      std::vector<float> logical(static_cast<std::size_t>(op.parameters()), -7.0f);
      for (int j = 0; j < n; ++j) {
        const auto flat = initial_slice(op, l, j);
        slice_to_logical(op, l, j, flat.data(), logical);
      }
      std::int64_t base = 0, wrong = 0;
      for (int wi = 0; wi < static_cast<int>(op.weights.size()); ++wi) {
        const auto& wt = op.weights[static_cast<std::size_t>(wi)];
        for (std::int64_t r = 0; r < wt.rows; ++r)
          for (std::int64_t c = 0; c < wt.cols; ++c)
            wrong += logical[static_cast<std::size_t>(base + r * wt.cols + c)] != initial_value(op, wi, r, c);
        base += wt.elements();
      }
      CHECK(wrong == 0);
    }
    return;
  }
  FAIL("the model has no MLP");
}

TEST_CASE(
    "a GQA slice holds its query heads' and its key/value heads' columns; a gated one its gate and up "
    "columns",
    "[numerics]") {
  // llama_model: h = 48, a = 4 query heads over g = 2 key/value heads of d = 16, f = 64. QKV is
  // [48 x (64 + 2 x 32)]: Q columns 0..63, K 64..95, V 96..127. Two slices: slice 1 holds key/value head
  // 1 (K 80..95, V 112..127) and the query heads of its group, 2 and 3 (Q 32..63); the projection
  // [64 x 48] is cut by rows, slice 1 its rows 32..63. The gated fc1 [48 x 128] (gate 0..63, up
  // 64..127) cut 4 ways: slice 2 holds gate 32..47 and up 96..111; fc2 [64 x 48] its rows 32..47.
  const auto w = costmodel::lower(testing::llama_model("llama", 1));
  const costmodel::Operator& attention = w.operators[1];
  const costmodel::Operator& mlp = w.operators[2];
  REQUIRE(attention.kind == OperatorKind::kAttention);
  REQUIRE(mlp.kind == OperatorKind::kMlp);
  const auto ranges = [](const Block& b) {
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    for (const auto& c : b.columns) out.emplace_back(c.start, c.count);
    return out;
  };
  using R = std::vector<std::pair<std::int64_t, std::int64_t>>;
  const OperatorLayout la = make_layout(attention, 2, 1);
  CHECK(ranges(la.slice[1].blocks[0]) == R{{32, 32}, {80, 16}, {112, 16}});
  CHECK(la.slice[1].blocks[1].row0 == 32);
  CHECK(la.slice[1].blocks[1].rows == 32);
  CHECK(ranges(la.slice[0].blocks[0]) == R{{0, 32}, {64, 16}, {96, 16}});
  const OperatorLayout lm = make_layout(mlp, 4, 1);
  CHECK(ranges(lm.slice[2].blocks[0]) == R{{32, 16}, {96, 16}});
  CHECK(lm.slice[2].blocks[1].row0 == 32);
  CHECK(lm.slice[2].blocks[1].rows == 16);
  // A GPT's QKV [16 x 48] (4 heads of 4) in 4 slices as before: slice 3 holds columns 12..15 of Q, K, V.
  const auto g = costmodel::lower(testing::tiny_model(false));
  CHECK(ranges(make_layout(g.operators[1], 4, 1).slice[3].blocks[0]) == R{{12, 4}, {28, 4}, {44, 4}});
  // Two key/value heads do not go 4 ways; weights that make no whole heads are refused, not guessed.
  CHECK_THROWS_AS(make_layout(attention, 4, 1), UsageError);
  costmodel::Operator odd = attention;
  odd.split_units = 3;  // 32 key/value columns are not 3 heads
  CHECK_THROWS_AS(make_layout(odd, 1, 1), UsageError);
}

TEST_CASE("attention saves the scores where the IR does, K^T V where it keeps none", "[numerics]") {
  // Internals of one slice (n = 1) for b = 2 samples: QKV R (q + 2k), the core, O R q (R = b s).
  //   llama at s = 16 (fused: the IR saves e(2sh + s(q + 2k) + sq) + 4as = 18,688 B a sample, less than
  //     the 19,456 B of input, QKV, O and the 4 x 16 x 16 scores): core = b g d^2 = 2 x 2 x 256
  //     -> 32 x 128 + 1,024 + 32 x 64 = 7,168 floats;
  //   llama materialized at s = 8 (the IR saves the a s^2 scores): core = b a s^2 = 2 x 4 x 64
  //     -> 16 x 128 + 512 + 16 x 64 = 3,584;
  //   the GPT (h 16, 4 heads of 4, s 8): 16 x 48 + 2 x 4 x 64 + 16 x 16 = 1,536, as before.
  const auto fused = costmodel::lower(testing::llama_model("llama", 1, 16));
  CHECK(internal_floats(fused.operators[1], 1, MathShape{2, 16, 128}) == 7168);
  costmodel::ModelSpec mat = testing::llama_model("llama", 1, 8);
  mat.attention = costmodel::AttentionKind::kMaterialized;
  CHECK(internal_floats(costmodel::lower(mat).operators[1], 1, MathShape{2, 8, 128}) == 3584);
  const auto gpt = costmodel::lower(testing::tiny_model(false));
  CHECK(internal_floats(gpt.operators[1], 1, MathShape{2, 8, 40}) == 1536);
  // Two slices hold half of each (whole key/value heads and their groups).
  CHECK(internal_floats(fused.operators[1], 2, MathShape{2, 16, 128}) == 7168);
  // The gated MLP keeps X G, X U and their product: 3 R f = 3 x 32 x 64; the IR saves e(2sh + 3sf) a
  // sample (norm input and output, gate, up, product), of which the executor's input is sh.
  CHECK(internal_floats(fused.operators[2], 1, MathShape{2, 16, 128}) == 6144);
  CHECK(static_cast<double>(input_floats(fused.operators[2], MathShape{1, 16, 128}) +
                            internal_floats(fused.operators[2], 1, MathShape{1, 16, 128})) *
            sizeof(float) <=
        fused.operators[2].saved_bytes_per_sample);
  // The GPT's (ungated) MLP: the pre-activation and H, 2 R f (h 16, f 64, s 8).
  CHECK(internal_floats(gpt.operators[2], 1, MathShape{2, 8, 40}) == 2 * 16 * 64);
}
