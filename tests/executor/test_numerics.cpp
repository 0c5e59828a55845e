// The executor's arithmetic against central finite differences, operator by operator: with
// loss = sum(output * r) for a random r, the backward's weight and input gradients must match
// (loss(theta + eps) - loss(theta - eps)) / 2 eps. The operators are polynomial in their inputs
// (ReLU aside, piecewise linear), so the differences are accurate to float rounding.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

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
  MathShape m{2, 8, 40};
  CpuDevice dev{CpuDeviceOptions{0, false, 0}};
  OperatorLayout layout;
  std::vector<std::vector<float>> weights, grads;
  std::vector<float> x, r, internals, workspace;
  std::vector<std::int32_t> tokens;
  std::int64_t in = 0, out = 0;

  Harness(const costmodel::Operator& o, int site_, int slices)
      : op(o), site(site_), n(slices), layout(make_layout(o, slices, 1)) {
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
  // A step that moves a ReLU input across zero measures neither side's slope. The MLP is linear in
  // any one of its inputs between kinks, so its one-sided differences agree exactly unless the step
  // crosses one: such elements (10-30% of those drawn, at this step) are not compared.
  int skipped = 0;
  auto fd = [&](float& v) {
    const float eps = 1e-2f;
    if (hs.op.kind != OperatorKind::kMlp) return central(v, eps);
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

}  // namespace

TEST_CASE("every operator's backward matches finite differences, whole and split", "[numerics]") {
  for (const bool tied : {true, false}) {
    const auto w = costmodel::lower(testing::tiny_model(tied, tied ? 1 : 2));
    for (const auto& op : w.operators) {
      if (op.layer > 0) continue;
      for (const int n : op.splits(4)) {
        if (op.kind == OperatorKind::kEmbedding) {
          Harness lookup(op, 0, n);
          check(lookup);
          if (tied) {
            Harness headsite(op, 1, n);
            check(headsite);
          }
        } else {
          Harness hs(op, 0, n);
          check(hs);
        }
      }
    }
  }
}

TEST_CASE("a slice holds ceil(P/n) elements at most and the slices cover every parameter once",
          "[numerics]") {
  const auto w = costmodel::lower(testing::tiny_model(false, 2));
  for (const auto& op : w.operators)
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
