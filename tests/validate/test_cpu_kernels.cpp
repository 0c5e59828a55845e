// The cpu device's kernels against naive loops written here from the contracts in
// validate/backend.hpp (double accumulation in the references; tolerances say how far float
// rounding may move a result: a length-k dot product of values in [-1, 1] is off by at most about
// k * 2^-24 * k, far under 1e-4 for the sizes here).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "validate/cpu/cpu_device.hpp"

namespace {

using namespace osdp::validate;

const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_vector(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// C = alpha op(A) op(B) + beta C, one matrix, straight from the definition (beta = 0 ignores C).
void reference_gemm(const Gemm& g, const float* a, const float* b, float* c) {
  for (std::int64_t i = 0; i < g.m; ++i) {
    for (std::int64_t j = 0; j < g.n; ++j) {
      double sum = 0.0;
      for (std::int64_t p = 0; p < g.k; ++p) {
        const float av = g.ta == Transpose::kNo ? a[i * g.lda + p] : a[p * g.lda + i];
        const float bv = g.tb == Transpose::kNo ? b[p * g.ldb + j] : b[j * g.ldb + p];
        sum += static_cast<double>(av) * bv;
      }
      float& out = c[i * g.ldc + j];
      const double prior = g.beta == 0.0f ? 0.0 : static_cast<double>(g.beta) * out;
      out = static_cast<float>(static_cast<double>(g.alpha) * sum + prior);
    }
  }
}

void check_gemm(Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                float beta, std::int64_t batch) {
  CpuDevice dev;
  Gemm g;
  g.ta = ta;
  g.tb = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.beta = beta;
  g.batch = batch;
  // Leading dimensions padded past the row length, strides past the matrix: the padding must stay.
  g.lda = (ta == Transpose::kNo ? k : m) + 3;
  g.ldb = (tb == Transpose::kNo ? n : k) + 2;
  g.ldc = n + 5;
  g.stride_a = (ta == Transpose::kNo ? m : k) * g.lda + 7;
  g.stride_b = (tb == Transpose::kNo ? k : n) * g.ldb + 1;
  g.stride_c = m * g.ldc + 4;
  const auto a = random_vector(static_cast<std::size_t>(g.stride_a * batch), 11);
  const auto b = random_vector(static_cast<std::size_t>(g.stride_b * batch), 12);
  auto c = random_vector(static_cast<std::size_t>(g.stride_c * batch), 13);
  if (beta == 0.0f) {  // garbage that must not leak into the result
    for (std::int64_t t = 0; t < batch; ++t) {
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j)
          c[static_cast<std::size_t>(t * g.stride_c + i * g.ldc + j)] = kNaN;
      }
    }
  }
  auto expected = c;
  for (std::int64_t t = 0; t < batch; ++t) {
    reference_gemm(g, a.data() + t * g.stride_a, b.data() + t * g.stride_b, expected.data() + t * g.stride_c);
  }
  g.a = a.data();
  g.b = b.data();
  g.c = c.data();
  dev.gemm(dev.compute_stream(), g);
  for (std::size_t i = 0; i < c.size(); ++i) {
    INFO("element " << i << " of C (padding included)");
    REQUIRE(!std::isnan(c[i]));
    REQUIRE(c[i] == Approx(expected[i]).margin(1e-4));
  }
}

}  // namespace

TEST_CASE("gemm matches the definition for every transpose, alpha, beta and batch", "[device]") {
  const Transpose kinds[] = {Transpose::kNo, Transpose::kYes};
  struct Shape {
    std::int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {64, 31, 5}};
  const float alphas[] = {1.0f, -0.5f};
  const float betas[] = {0.0f, 1.0f, 0.25f};
  for (const auto ta : kinds) {
    for (const auto tb : kinds) {
      for (const auto& s : shapes) {
        for (const float alpha : alphas) {
          for (const float beta : betas) {
            for (const std::int64_t batch : {1, 3}) {
              INFO("ta " << (ta == Transpose::kYes) << " tb " << (tb == Transpose::kYes) << " m " << s.m
                         << " n " << s.n << " k " << s.k << " alpha " << alpha << " beta " << beta
                         << " batch " << batch);
              check_gemm(ta, tb, s.m, s.n, s.k, alpha, beta, batch);
            }
          }
        }
      }
    }
  }
}

namespace {
// bf16 keeps 8 significant bits: x = f 2^e with f in [0.5, 1), f rounded to a multiple of 2^-8,
// halves to even (nearbyint's default rounding).
float bf16_reference(float x) {
  int e = 0;
  const double f = std::frexp(static_cast<double>(x), &e);
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(f, 8)), e - 8));
}
}  // namespace

TEST_CASE("gemm in bf16 rounds the operands to bf16 and sums in fp32", "[device]") {
  CHECK(bf16_reference(1.0f + 1.0f / 256) == 1.0f);  // a tie: to even
  CHECK(bf16_reference(1.0f + 3.0f / 256) == 1.0f + 4.0f / 256);
  const std::int64_t m = 9, n = 7, k = 40;
  for (const auto ta : {Transpose::kNo, Transpose::kYes}) {
    for (const auto tb : {Transpose::kNo, Transpose::kYes}) {
      CpuDevice dev;
      auto a = random_vector(static_cast<std::size_t>(m * k), 21);
      auto b = random_vector(static_cast<std::size_t>(k * n), 22);
      std::vector<float> c(static_cast<std::size_t>(m * n), kNaN), c32(c.size(), kNaN), expected(c.size());
      Gemm g;
      g.ta = ta;
      g.tb = tb;
      g.m = m;
      g.n = n;
      g.k = k;
      g.lda = ta == Transpose::kNo ? k : m;
      g.ldb = tb == Transpose::kNo ? n : k;
      g.ldc = n;
      g.a = a.data();
      g.b = b.data();
      g.c = c32.data();
      dev.gemm(dev.compute_stream(), g);
      g.math = GemmMath::kBf16;
      g.c = c.data();
      dev.gemm(dev.compute_stream(), g);
      for (auto& x : a) x = bf16_reference(x);
      for (auto& x : b) x = bf16_reference(x);
      reference_gemm(g, a.data(), b.data(), expected.data());
      double largest_change = 0;
      for (std::size_t i = 0; i < c.size(); ++i) {
        REQUIRE(c[i] == Approx(expected[i]).margin(1e-4));
        largest_change = std::max(largest_change, std::abs(static_cast<double>(c[i]) - c32[i]));
      }
      // Random values need all of fp32's bits: rounding them to 8 moves a 40-term sum visibly.
      CHECK(largest_change > 1e-3);
    }
  }
}

TEST_CASE("gemm with k = 0 or alpha = 0 reads neither A nor B", "[device]") {
  CpuDevice dev;
  const std::vector<float> a(6, kNaN), b(6, kNaN);
  std::vector<float> c = {1, 2, 3, 4};
  Gemm g;
  g.m = 2;
  g.n = 2;
  g.k = 3;
  g.a = a.data();
  g.lda = 3;
  g.b = b.data();
  g.ldb = 2;
  g.c = c.data();
  g.ldc = 2;
  g.alpha = 0.0f;
  g.beta = 2.0f;
  dev.gemm(dev.compute_stream(), g);
  CHECK(c == std::vector<float>{2, 4, 6, 8});
  g.k = 0;
  g.alpha = 1.0f;
  g.beta = 0.0f;
  c.assign(4, kNaN);
  dev.gemm(dev.compute_stream(), g);
  CHECK(c == std::vector<float>{0, 0, 0, 0});
}

TEST_CASE("elementwise kernels: fill, copy, relu, relu_backward, touch", "[device]") {
  CpuDevice dev;
  auto& s = dev.compute_stream();
  const std::size_t n = 1001;
  const auto x = random_vector(n, 1);
  const auto y0 = random_vector(n, 2);
  std::vector<float> y(n);

  dev.fill(s, y.data(), n, 2.5f);
  for (const float v : y) REQUIRE(v == 2.5f);

  dev.copy(s, x.data(), y.data(), n);
  CHECK(y == x);

  dev.relu(s, x.data(), y.data(), n);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == (x[i] > 0.0f ? x[i] : 0.0f));

  std::vector<float> dx(n, kNaN);
  dev.relu_backward(s, x.data(), y0.data(), dx.data(), n);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(dx[i] == (x[i] > 0.0f ? y0[i] : 0.0f));

  y = y0;
  dev.touch(s, y.data(), n);
  CHECK(y == y0);

  std::vector<float> host(n);
  y.assign(n, 0.0f);
  dev.upload(s, x.data(), y.data(), n);
  dev.download(s, y.data(), host.data(), n);
  CHECK(host == x);
}

// gated: y = silu(g) u, silu(x) = x sigma(x), sigma(x) = 1 / (1 + e^-x). Closed form at a few points:
// silu(0) = 0; silu(1) = 1 / (1 + 1/e) = 0.7310585786; silu(-1) = -1 / (1 + e) = -0.2689414214; in the
// tails silu(x) -> x (x -> +inf) and -> -0 (x -> -inf: e^90 overflows a float, sigma rounds to 0, no NaN).
// gated_backward: dg = dy u silu'(g), silu'(x) = sigma(x) (1 + x (1 - sigma(x))), silu'(0) = 1/2 exactly;
// du = dy silu(g). Checked against the closed form (in double) and against central differences of the
// device's own forward with step h = 1e-3 max(1, |x|): truncation h^2/6 times a third derivative
// (|silu'''| < 1/2), under 1e-7; float rounding of y (2^-24 |y|) over 2h, under 3e-5 of |y| / max(1, |x|).
TEST_CASE("gated is silu(g) u and gated_backward its gradient, in place too", "[device]") {
  CpuDevice dev;
  auto& s = dev.compute_stream();
  const std::vector<float> g{-90.0f, -6.0f, -1.0f, -0.25f, 0.0f, 0.5f, 1.0f, 3.0f, 90.0f};
  const std::vector<float> u{0.5f, -2.0f, 1.5f, 3.0f, -1.0f, 2.0f, -0.75f, 1.25f, -0.5f};
  const std::vector<float> dy{1.0f, 0.5f, -1.0f, 2.0f, 0.75f, -1.5f, 1.0f, -0.25f, 3.0f};
  const std::size_t n = g.size();
  const auto sigma = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };

  std::vector<float> y(n, kNaN);
  dev.gated(s, g.data(), u.data(), y.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i, g[i]);
    REQUIRE(std::isfinite(y[i]));
    CHECK(y[i] == Approx(g[i] * sigma(g[i]) * u[i]).epsilon(1e-6).margin(1e-30));
  }
  CHECK(y[4] == 0.0f);
  CHECK(y[6] == Approx(0.7310585786 * -0.75).epsilon(1e-6));
  CHECK(y[2] == Approx(-0.2689414214 * 1.5).epsilon(1e-6));
  CHECK(y[8] == -45.0f);  // silu(90) = 90: sigma(90) rounds to 1
  CHECK(y[0] == 0.0f);

  std::vector<float> dg(n, kNaN), du(n, kNaN);
  dev.gated_backward(s, g.data(), u.data(), dy.data(), dg.data(), du.data(), n);
  CHECK(dg[4] == dy[4] * u[4] * 0.5f);
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i, g[i]);
    const double sg = sigma(g[i]);
    CHECK(dg[i] == Approx(dy[i] * u[i] * sg * (1.0 + g[i] * (1.0 - sg))).epsilon(1e-5).margin(1e-30));
    CHECK(du[i] == Approx(dy[i] * g[i] * sg).epsilon(1e-6).margin(1e-30));
    // Central differences of y_i in g_i and in u_i, times dy_i.
    const auto central = [&](bool in_g) {
      std::vector<float> gp{g[i]}, up{u[i]}, gm{g[i]}, um{u[i]};
      float& plus = in_g ? gp[0] : up[0];
      float& minus = in_g ? gm[0] : um[0];
      const float x = plus, step = 1e-3f * std::max(1.0f, std::fabs(x));
      plus = x + step;
      minus = x - step;
      std::vector<float> yp(1), ym(1);
      dev.gated(s, gp.data(), up.data(), yp.data(), 1);
      dev.gated(s, gm.data(), um.data(), ym.data(), 1);
      return dy[i] * (static_cast<double>(yp[0]) - ym[0]) / (static_cast<double>(plus) - minus);
    };
    CHECK(dg[i] == Approx(central(true)).epsilon(1e-3).margin(1e-4));
    CHECK(du[i] == Approx(central(false)).epsilon(1e-3).margin(1e-4));
  }

  // In place: y over g, y over u; dg over g and du over u (as the executor's MLP backward), dg over dy.
  std::vector<float> inplace = g;
  dev.gated(s, inplace.data(), u.data(), inplace.data(), n);
  CHECK(inplace == y);
  inplace = u;
  dev.gated(s, g.data(), inplace.data(), inplace.data(), n);
  CHECK(inplace == y);
  std::vector<float> g2 = g, u2 = u;
  dev.gated_backward(s, g2.data(), u2.data(), dy.data(), g2.data(), u2.data(), n);
  CHECK(g2 == dg);
  CHECK(u2 == du);
  std::vector<float> dy2 = dy, du2(n, kNaN);
  dev.gated_backward(s, g.data(), u.data(), dy2.data(), dy2.data(), du2.data(), n);
  CHECK(dy2 == dg);
  CHECK(du2 == du);
}

TEST_CASE("add_folded and sum_folded wrap around the period", "[device]") {
  CpuDevice dev;
  auto& s = dev.compute_stream();
  struct Case {
    std::size_t len, offset, period, samples;
  };
  // Within one period, wrapping once, and longer than the period (positions hit twice).
  for (const Case c : {Case{5, 0, 8, 3}, Case{6, 5, 8, 2}, Case{19, 3, 7, 4}, Case{8, 16, 8, 1}}) {
    INFO("len " << c.len << " offset " << c.offset << " period " << c.period << " samples " << c.samples);
    const auto v = random_vector(c.len, 3);
    const auto out0 = random_vector(c.period * c.samples, 4);
    auto out = out0, expected = out0;
    for (std::size_t i = 0; i < c.samples; ++i) {
      for (std::size_t t = 0; t < c.len; ++t) expected[i * c.period + (c.offset + t) % c.period] += v[t];
    }
    dev.add_folded(s, v.data(), c.len, c.offset, out.data(), c.period, c.samples);
    for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == Approx(expected[i]).margin(1e-6));

    const auto dv0 = random_vector(c.len, 5);
    auto dv = dv0;
    std::vector<double> dv_expected(dv0.begin(), dv0.end());
    for (std::size_t t = 0; t < c.len; ++t) {
      for (std::size_t i = 0; i < c.samples; ++i)
        dv_expected[t] += out0[i * c.period + (c.offset + t) % c.period];
    }
    dev.sum_folded(s, out0.data(), c.period, c.samples, c.offset, dv.data(), c.len);
    for (std::size_t t = 0; t < c.len; ++t) REQUIRE(dv[t] == Approx(dv_expected[t]).margin(1e-5));
  }
}

TEST_CASE("gather_columns and scatter_add_columns index the table by token", "[device]") {
  CpuDevice dev;
  auto& s = dev.compute_stream();
  const std::int64_t vocab = 11, table_rows = 9, c0 = 2, cols = 5, n_rows = 6, ldy = 7;
  const auto table = random_vector(static_cast<std::size_t>(table_rows * vocab), 6);
  const std::vector<std::int32_t> tokens = {3, 0, 10, 3, 7, 3};  // 3 repeats: scatter must add
  // y[r][c] += table[c0 + c][tokens[r]] for c < cols; the padding up to ldy stays.
  const auto y0 = random_vector(static_cast<std::size_t>(n_rows * ldy), 14);
  auto y = y0;
  dev.gather_columns(s, table.data(), vocab, c0, cols, tokens.data(), n_rows, y.data(), ldy);
  for (std::int64_t r = 0; r < n_rows; ++r) {
    for (std::int64_t c = 0; c < ldy; ++c) {
      const auto i = static_cast<std::size_t>(r * ldy + c);
      const float added = c < cols ? table[static_cast<std::size_t>((c0 + c) * vocab + tokens[r])] : 0.0f;
      REQUIRE(y[i] == y0[i] + added);
    }
  }

  const auto dy = random_vector(static_cast<std::size_t>(n_rows * ldy), 7);
  const auto dtable0 = random_vector(table.size(), 8);
  auto dtable = dtable0;
  std::vector<double> expected(dtable0.begin(), dtable0.end());
  for (std::int64_t r = 0; r < n_rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      expected[static_cast<std::size_t>((c0 + c) * vocab + tokens[r])] +=
          dy[static_cast<std::size_t>(r * ldy + c)];
    }
  }
  dev.scatter_add_columns(s, dy.data(), ldy, tokens.data(), n_rows, c0, cols, dtable.data(), vocab);
  for (std::size_t i = 0; i < dtable.size(); ++i) REQUIRE(dtable[i] == Approx(expected[i]).margin(1e-6));
}

TEST_CASE("mse_onehot adds the loss and leaves the scaled gradient", "[device]") {
  CpuDevice dev;
  const std::int64_t rows = 4, vocab = 13;
  const float scale = 0.25f;
  const auto logits0 = random_vector(static_cast<std::size_t>(rows * vocab), 9);
  const std::vector<std::int32_t> targets = {0, 12, 5, 5};
  auto logits = logits0;
  double loss = 0.0;
  std::vector<double> grad(logits0.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t v = 0; v < vocab; ++v) {
      const auto i = static_cast<std::size_t>(r * vocab + v);
      const double d = logits0[i] - (v == targets[static_cast<std::size_t>(r)] ? 1.0 : 0.0);
      loss += d * d * scale / 2.0;
      grad[i] = d * scale;
    }
  }
  float loss_out = 1.5f;  // accumulates
  dev.mse_onehot(dev.compute_stream(), logits.data(), rows, vocab, targets.data(), scale, &loss_out);
  CHECK(loss_out == Approx(1.5 + loss).epsilon(1e-5));
  for (std::size_t i = 0; i < logits.size(); ++i) REQUIRE(logits[i] == Approx(grad[i]).margin(1e-6));
}

TEST_CASE("adam is Adam with bias correction at p.step", "[device]") {
  CpuDevice dev;
  const std::size_t n = 37;
  auto w = random_vector(n, 10);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> rw(w.begin(), w.end()), rm(n, 0.0), rv(n, 0.0);
  AdamParams p;
  p.lr = 0.01f;
  for (int step = 1; step <= 3; ++step) {
    p.step = step;
    const auto g = random_vector(n, 100 + static_cast<std::uint32_t>(step));
    for (std::size_t i = 0; i < n; ++i) {
      const double b1 = p.beta1, b2 = p.beta2;
      rm[i] = b1 * rm[i] + (1 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1 - b2) * g[i] * g[i];
      const double mhat = rm[i] / (1 - std::pow(b1, step)), vhat = rv[i] / (1 - std::pow(b2, step));
      rw[i] -= p.lr * mhat / (std::sqrt(vhat) + p.eps);
    }
    dev.adam(dev.compute_stream(), w.data(), g.data(), m.data(), v.data(), n, p);
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(m[i] == Approx(rm[i]).margin(1e-6));
      REQUIRE(v[i] == Approx(rv[i]).margin(1e-7));
      REQUIRE(w[i] == Approx(rw[i]).margin(1e-5));
    }
  }
}

TEST_CASE("cache sizes read as sysfs writes them", "[device]") {
  CHECK(parse_cache_size("48K\n") == 48u * 1024);
  CHECK(parse_cache_size("491520K") == 491520u * 1024);  // a 480 MiB L3
  CHECK(parse_cache_size("32M") == 32u * 1024 * 1024);
  CHECK(parse_cache_size("1G") == 1024u * 1024 * 1024);
  CHECK(parse_cache_size("4096") == 4096u);
  CHECK(parse_cache_size("") == 0u);
  CHECK(parse_cache_size("K") == 0u);
  CHECK(parse_cache_size("12Q") == 0u);
  CHECK(parse_cache_size("99999999999999999999999K") == 0u);  // overflow is "unknown", not a wrap
}

TEST_CASE("the cpu device's cache is the largest data cache sysfs lists, at least its L1", "[device]") {
  CpuDevice d;
  std::ifstream l1("/sys/devices/system/cpu/cpu0/cache/index0/size");
  std::string text;
  if (!(l1 >> text)) {
    CHECK(d.cache_bytes() == 0u);  // no sysfs: unknown
    return;
  }
  CHECK(d.cache_bytes() >= parse_cache_size(text));
  CHECK(d.cache_bytes() > 0u);
}
