// The CUDA device (validate/cuda_device.hpp) on a real GPU: every kernel against the CPU device on the
// same random inputs, GEMM in fp32 (cuBLAS's fp32 sums in another order) and in bf16, events (order,
// timing against the spin kernel's known duration), waits across streams, and the timeout and
// watchdog of host waits. Memory (the caching allocator on the GPU, out of memory, buffers past 2^31
// elements): test_cuda_memory.cpp. Without a GPU gpu_main.cpp skips the whole file (exit 77).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "validate/cpu/cpu_device.hpp"
#include "validate/cuda/cuda_device.hpp"

namespace {

using namespace osdp::validate;
using Catch::Matchers::Contains;

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// n values uniform in [lo, hi) (integers: in [lo, hi]).
template <class T>
std::vector<T> random_values(std::size_t n, std::uint32_t seed, T lo, T hi) {
  std::mt19937 rng(seed);
  std::conditional_t<std::is_integral_v<T>, std::uniform_int_distribution<T>,
                     std::uniform_real_distribution<T>>
      dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  return random_values(n, seed, lo, hi);
}

// A device buffer of n floats (or tokens), freed when it goes.
class Buffer {
 public:
  Buffer(CudaDevice& dev, std::size_t n, const char* what = "test buffer")
      : dev_(dev), n_(n), p_(dev.allocate(n * sizeof(float), what)) {}
  Buffer(CudaDevice& dev, const std::vector<float>& host) : Buffer(dev, host.size()) {
    dev.upload(dev.compute_stream(), host.data(), p_, n_);
  }
  Buffer(CudaDevice& dev, const std::vector<std::int32_t>& tokens) : Buffer(dev, tokens.size()) {
    // The bytes as they are (4 per token), on the stream the kernels use.
    dev.upload(dev.compute_stream(), reinterpret_cast<const float*>(tokens.data()), p_, n_);
  }
  ~Buffer() { dev_.deallocate(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* get() const { return p_; }
  const std::int32_t* tokens() const { return reinterpret_cast<const std::int32_t*>(p_); }
  std::vector<float> download() const {
    std::vector<float> host(n_);
    dev_.download(dev_.compute_stream(), p_, host.data(), n_);
    return host;
  }

 private:
  CudaDevice& dev_;
  std::size_t n_;
  float* p_;
};

// Every element within rel (relative) or abs (absolute); exactly equal with both 0.
void require_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double rel, double abs) {
  REQUIRE(gpu.size() == cpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    INFO("element " << i << ": " << gpu[i] << " on the GPU, " << cpu[i] << " on the CPU");
    REQUIRE(gpu[i] == Approx(cpu[i]).epsilon(rel).margin(abs));
  }
}

void require_equal(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  require_close(gpu, cpu, 0.0, 0.0);
}

// A GEMM with padded leading dimensions and strides (the padding must stay as it was).
struct GemmCase {
  Gemm g;
  std::vector<float> a, b, c;
};

GemmCase make_gemm(Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                   float beta, std::int64_t batch, std::uint32_t seed) {
  GemmCase x;
  x.g = Gemm{.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta, .batch = batch};
  Gemm& g = x.g;
  g.lda = (ta == Transpose::kNo ? k : m) + 3;
  g.ldb = (tb == Transpose::kNo ? n : k) + 2;
  g.ldc = n + 5;
  g.stride_a = (ta == Transpose::kNo ? m : k) * g.lda + 7;
  g.stride_b = (tb == Transpose::kNo ? k : n) * g.ldb + 1;
  g.stride_c = m * g.ldc + 4;
  x.a = random_vector(static_cast<std::size_t>(g.stride_a * batch), seed);
  x.b = random_vector(static_cast<std::size_t>(g.stride_b * batch), seed + 1);
  x.c = random_vector(static_cast<std::size_t>(g.stride_c * batch), seed + 2);
  // beta = 0: garbage in C that must not leak into the result.
  for (std::int64_t t = 0; beta == 0.0f && t < batch; ++t)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        x.c[static_cast<std::size_t>(t * g.stride_c + i * g.ldc + j)] = kNaN;
  return x;
}

// The GEMM `g` on the operands at a, b, c, on `dev`'s compute stream.
void run_gemm(Device& dev, Gemm g, GemmMath math, const float* a, const float* b, float* c) {
  g.math = math;
  g.a = a;
  g.b = b;
  g.c = c;
  dev.gemm(dev.compute_stream(), g);
}

std::vector<float> cpu_gemm(const GemmCase& x, GemmMath math) {
  CpuDevice cpu(CpuDeviceOptions{0, false, 0});
  std::vector<float> c = x.c;
  run_gemm(cpu, x.g, math, x.a.data(), x.b.data(), c.data());
  return c;
}

std::vector<float> gpu_gemm(CudaDevice& dev, const GemmCase& x, GemmMath math) {
  Buffer a(dev, x.a), b(dev, x.b), c(dev, x.c);
  run_gemm(dev, x.g, math, a.get(), b.get(), c.get());
  return c.download();
}

}  // namespace

TEST_CASE("fp32 gemm matches the CPU for every transpose, alpha, beta and batch", "[gpu][device][gemm]") {
  const auto ta = GENERATE(Transpose::kNo, Transpose::kYes);
  const auto tb = GENERATE(Transpose::kNo, Transpose::kYes);
  const auto mnk = GENERATE(
      values<std::vector<std::int64_t>>({{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {64, 31, 5}, {128, 96, 257}}));
  const float alpha = GENERATE(1.0f, -0.5f);
  const float beta = GENERATE(0.0f, 1.0f, 0.25f);
  const std::int64_t batch = GENERATE(1, 3);
  INFO("ta " << (ta == Transpose::kYes) << " tb " << (tb == Transpose::kYes) << " m " << mnk[0] << " n "
             << mnk[1] << " k " << mnk[2] << " alpha " << alpha << " beta " << beta << " batch " << batch);
  CudaDevice dev;
  const GemmCase x = make_gemm(ta, tb, mnk[0], mnk[1], mnk[2], alpha, beta, batch, 100);
  // A dot product of up to 257 terms in [-1, 1] (partial sums up to ~5, an ulp of 4.8e-7 there) summed
  // in another order: typically a few 1e-6 apart, 1e-5 in the tails over 10^5 elements, so 1e-4 (any
  // mapping error of lda, strides or transposes is off by 0.1 or more).
  require_close(gpu_gemm(dev, x, GemmMath::kFp32), cpu_gemm(x, GemmMath::kFp32), 1e-5, 1e-4);
}

TEST_CASE("gemm with k = 0 or alpha = 0 scales C by beta and reads neither A nor B", "[gpu][device][gemm]") {
  CudaDevice dev;
  for (const float beta : {0.0f, 1.0f, 0.5f}) {
    GemmCase x = make_gemm(Transpose::kNo, Transpose::kYes, 6, 4, 3, 1.0f, beta, 2, 7);
    std::fill(x.a.begin(), x.a.end(), kNaN);  // never read
    std::fill(x.b.begin(), x.b.end(), kNaN);
    INFO("beta " << beta << ": k = 0, then alpha = 0");
    x.g.k = 0;
    require_equal(gpu_gemm(dev, x, GemmMath::kFp32), cpu_gemm(x, GemmMath::kFp32));
    x.g.k = 3;
    x.g.alpha = 0.0f;
    require_equal(gpu_gemm(dev, x, GemmMath::kFp32), cpu_gemm(x, GemmMath::kFp32));
  }
}

TEST_CASE("bf16 gemm rounds the operands to bf16 and sums in fp32", "[gpu][device][gemm]") {
  const auto ta = GENERATE(Transpose::kNo, Transpose::kYes);
  const auto tb = GENERATE(Transpose::kNo, Transpose::kYes);
  CudaDevice dev;
  INFO("ta " << (ta == Transpose::kYes) << " tb " << (tb == Transpose::kYes));
  // Uniform values in [-1, 1] carry 24 significant bits: bf16 keeps 8.
  const GemmCase x = make_gemm(ta, tb, 128, 96, 256, 1.0f, 0.0f, 2, 40);
  const std::vector<float> fp32 = gpu_gemm(dev, x, GemmMath::kFp32);
  const std::vector<float> bf16 = gpu_gemm(dev, x, GemmMath::kBf16);
  const std::vector<float> cpu_fp32 = cpu_gemm(x, GemmMath::kFp32);
  const std::vector<float> cpu_bf16 = cpu_gemm(x, GemmMath::kBf16);
  // Each operand is off by at most 2^-9 relative, each product by about 2^-8: |error| <= 2^-7 sum |a||b|
  // <= 2^-7 k for entries in [-1, 1].
  const double bound = 256.0 / 128.0;
  double max_fp32_error = 0, max_bf16_vs_fp32 = 0, sum_vs_cpu_bf16 = 0, sum_vs_cpu_fp32 = 0;
  for (std::size_t i = 0; i < bf16.size(); ++i) {
    max_fp32_error = std::max(max_fp32_error, static_cast<double>(std::abs(fp32[i] - cpu_fp32[i])));
    max_bf16_vs_fp32 = std::max(max_bf16_vs_fp32, static_cast<double>(std::abs(bf16[i] - fp32[i])));
    REQUIRE(std::abs(bf16[i] - cpu_fp32[i]) <= bound);
    sum_vs_cpu_bf16 += std::abs(bf16[i] - cpu_bf16[i]);
    sum_vs_cpu_fp32 += std::abs(bf16[i] - cpu_fp32[i]);
  }
  CHECK(max_fp32_error < 1e-4);
  // Measurably different from fp32: typical errors are sqrt(k) 2^-9 / 3, about 1e-2.
  CHECK(max_bf16_vs_fp32 > 1e-3);
  CHECK(max_bf16_vs_fp32 > 100 * max_fp32_error);
  // And the rounding is the CPU's emulation (nearest even): much closer to it than to fp32.
  CHECK(sum_vs_cpu_bf16 < 0.1 * sum_vs_cpu_fp32);
}

TEST_CASE("elementwise kernels match the CPU device", "[gpu][device][kernels]") {
  CudaDevice dev;
  CpuDevice cpu(CpuDeviceOptions{0, false, 0});
  Stream &s = dev.compute_stream(), &cs = cpu.compute_stream();
  const std::size_t n = 100003;  // past one block, not a multiple of anything
  auto x = random_vector(n, 1), dy = random_vector(n, 2);
  x[5] = 0.0f;  // the kink: relu' is 0 there
  Buffer gx(dev, x), gdy(dev, dy), gy(dev, random_vector(n, 3));
  std::vector<float> y(n);

  SECTION("fill") {
    dev.fill(s, gy.get(), n, 0.75f);
    cpu.fill(cs, y.data(), n, 0.75f);
    require_equal(gy.download(), y);
  }
  SECTION("copy") {
    dev.copy(s, gx.get(), gy.get(), n);
    cpu.copy(cs, x.data(), y.data(), n);
    require_equal(gy.download(), y);
  }
  SECTION("relu and relu_backward") {
    dev.relu(s, gx.get(), gy.get(), n);
    cpu.relu(cs, x.data(), y.data(), n);
    require_equal(gy.download(), y);
    dev.relu_backward(s, gx.get(), gdy.get(), gy.get(), n);
    cpu.relu_backward(cs, x.data(), dy.data(), y.data(), n);
    require_equal(gy.download(), y);
  }
  SECTION("gated and gated_backward, in place too") {
    // expf and fused multiply-adds: a few ulps from the CPU (relative 1e-6: 8 ulps).
    const auto u = random_vector(n, 4, -2.0f, 2.0f), g = random_vector(n, 5, -8.0f, 8.0f);
    Buffer gg(dev, g), gu(dev, u), gdg(dev, n), gdu(dev, n);
    dev.gated(s, gg.get(), gu.get(), gy.get(), n);
    cpu.gated(cs, g.data(), u.data(), y.data(), n);
    require_close(gy.download(), y, 1e-6, 1e-7);
    std::vector<float> dg(n), du(n);
    dev.gated_backward(s, gg.get(), gu.get(), gdy.get(), gdg.get(), gdu.get(), n);
    cpu.gated_backward(cs, g.data(), u.data(), dy.data(), dg.data(), du.data(), n);
    require_close(gdg.download(), dg, 1e-6, 1e-7);
    require_close(gdu.download(), du, 1e-6, 1e-7);
    const auto want_dg = gdg.download(), want_du = gdu.download();
    dev.gated_backward(s, gg.get(), gu.get(), gdy.get(), gg.get(), gu.get(), n);  // dg over g, du over u
    require_equal(gg.download(), want_dg);
    require_equal(gu.download(), want_du);
  }
  SECTION("touch leaves the values as they were") {
    dev.touch(s, gx.get(), n);
    require_equal(gx.download(), x);
  }
  SECTION("adam, three steps") {
    auto w = random_vector(n, 4), m = random_vector(n, 5, 0.0f, 0.1f), v = random_vector(n, 6, 0.0f, 0.01f);
    Buffer gw(dev, w), gm(dev, m), gv(dev, v);
    for (int step = 1; step <= 3; ++step) {
      const auto g = random_vector(n, 10 + static_cast<std::uint32_t>(step));
      Buffer gg(dev, g);
      AdamParams p;
      p.lr = 1e-2f;
      p.step = step;
      dev.adam(s, gw.get(), gg.get(), gm.get(), gv.get(), n, p);
      cpu.adam(cs, w.data(), g.data(), m.data(), v.data(), n, p);
    }
    require_close(gm.download(), m, 1e-6, 1e-9);
    require_close(gv.download(), v, 1e-6, 1e-12);
    require_close(gw.download(), w, 1e-6, 1e-7);
  }
}

TEST_CASE("folded additions match the CPU, wrapping and folding more than once", "[gpu][device][kernels]") {
  CudaDevice dev;
  CpuDevice cpu(CpuDeviceOptions{0, false, 0});
  // {len, offset, period, samples}: offset + len wraps; len > period folds several v[t] onto one element.
  const std::array<std::size_t, 4> cases[] = {
      {5, 3, 7, 2}, {20, 5, 7, 3}, {64, 0, 64, 4}, {1000, 123, 256, 5}, {300, 9000, 4096, 3}};
  std::uint32_t seed = 50;
  for (const auto& [len, offset, period, samples] : cases) {
    INFO("len " << len << " offset " << offset << " period " << period << " samples " << samples);
    const auto v = random_vector(len, ++seed);
    auto out = random_vector(period * samples, ++seed);
    Buffer gv(dev, v), gout(dev, out);
    dev.add_folded(dev.compute_stream(), gv.get(), len, offset, gout.get(), period, samples);
    cpu.add_folded(cpu.compute_stream(), v.data(), len, offset, out.data(), period, samples);
    require_equal(gout.download(), out);  // the same additions in the same order
    auto dv = random_vector(len, ++seed);
    Buffer gdv(dev, dv);
    dev.sum_folded(dev.compute_stream(), gout.get(), period, samples, offset, gdv.get(), len);
    cpu.sum_folded(cpu.compute_stream(), out.data(), period, samples, offset, dv.data(), len);
    require_equal(gdv.download(), dv);
  }
}

TEST_CASE("embedding gathers and scatters match the CPU with repeated tokens", "[gpu][device][kernels]") {
  CudaDevice dev;
  CpuDevice cpu(CpuDeviceOptions{0, false, 0});
  Stream &s = dev.compute_stream(), &cs = cpu.compute_stream();
  const std::int32_t vocab = 50;
  const std::int64_t rows = 40, c0 = 7, cols = 24, n_rows = 300, ldy = cols + 3;
  const auto tokens = random_values<std::int32_t>(static_cast<std::size_t>(n_rows), 9, 0, vocab - 1);
  const Buffer gtokens(dev, tokens);
  auto table = random_vector(static_cast<std::size_t>(rows * vocab), 20);
  auto y = random_vector(static_cast<std::size_t>(n_rows * ldy), 21);
  Buffer gtable(dev, table), gy(dev, y);
  dev.gather_columns(s, gtable.get(), vocab, c0, cols, gtokens.tokens(), n_rows, gy.get(), ldy);
  cpu.gather_columns(cs, table.data(), vocab, c0, cols, tokens.data(), n_rows, y.data(), ldy);
  require_equal(gy.download(), y);

  // 300 tokens over 50 values: each table entry gathers about 6 additions, in an order atomics choose.
  dev.scatter_add_columns(s, gy.get(), ldy, gtokens.tokens(), n_rows, c0, cols, gtable.get(), vocab);
  cpu.scatter_add_columns(cs, y.data(), ldy, tokens.data(), n_rows, c0, cols, table.data(), vocab);
  require_close(gtable.download(), table, 1e-5, 1e-5);
}

// An MoE layer's dispatch and combine (numerics.hpp's moe): rows gathered by index with and without
// weights, scattered back with repeats (atomics: the order of the sums varies), and row dot products.
TEST_CASE("MoE row kernels match the CPU with repeated rows", "[gpu][device][kernels]") {
  CudaDevice dev;
  CpuDevice cpu(CpuDeviceOptions{0, false, 0});
  Stream &s = dev.compute_stream(), &cs = cpu.compute_stream();
  const std::int64_t rows = 30, width = 40, ldx = width + 2, n = 200, ldy = width + 5;
  const auto index = random_values<std::int32_t>(static_cast<std::size_t>(n), 31, 0, rows - 1);
  const Buffer gindex(dev, index);
  auto x = random_vector(static_cast<std::size_t>(rows * ldx), 32);
  auto w = random_vector(static_cast<std::size_t>(n), 33);
  auto y = random_vector(static_cast<std::size_t>(n * ldy), 34);
  Buffer gx(dev, x), gw(dev, w), gy(dev, y);
  for (const bool weighted : {false, true}) {
    dev.gather_rows(s, gx.get(), ldx, gindex.tokens(), n, width, weighted ? gw.get() : nullptr, gy.get(),
                    ldy);
    cpu.gather_rows(cs, x.data(), ldx, index.data(), n, width, weighted ? w.data() : nullptr, y.data(), ldy);
    require_equal(gy.download(), y);
  }
  dev.scatter_add_rows(s, gy.get(), ldy, gindex.tokens(), n, width, gw.get(), gx.get(), ldx);
  cpu.scatter_add_rows(cs, y.data(), ldy, index.data(), n, width, w.data(), x.data(), ldx);
  require_close(gx.download(), x, 1e-5, 1e-5);
  auto out = random_vector(static_cast<std::size_t>(n), 35);
  Buffer gout(dev, out);
  dev.row_dots(s, gx.get(), ldx, gindex.tokens(), gy.get(), ldy, n, width, gout.get());
  cpu.row_dots(cs, x.data(), ldx, index.data(), y.data(), ldy, n, width, out.data());
  require_close(gout.download(), out, 1e-5, 1e-5);
}

TEST_CASE("mse_onehot matches the CPU's loss and gradient", "[gpu][device][kernels]") {
  CudaDevice dev;
  CpuDevice cpu(CpuDeviceOptions{0, false, 0});
  for (const std::int64_t rows : {1, 37, 700}) {  // 700 rows: more rows than blocks
    const std::int32_t vocab = 1000;
    INFO("rows " << rows);
    const auto targets = random_values<std::int32_t>(static_cast<std::size_t>(rows), 3, 0, vocab - 1);
    const Buffer gtargets(dev, targets);
    auto logits = random_vector(static_cast<std::size_t>(rows * vocab), 30);
    std::vector<float> loss{0.5f};  // the kernel adds to it
    Buffer glogits(dev, logits), gloss(dev, loss);
    const float scale = 1.0f / static_cast<float>(rows);
    dev.mse_onehot(dev.compute_stream(), glogits.get(), rows, vocab, gtargets.tokens(), scale, gloss.get());
    cpu.mse_onehot(cpu.compute_stream(), logits.data(), rows, vocab, targets.data(), scale, loss.data());
    require_close(glogits.download(), logits, 1e-6, 0.0);
    CHECK(gloss.download()[0] == Approx(loss[0]).epsilon(1e-5));
  }
}

TEST_CASE("events complete in stream order and time the GPU's work", "[gpu][device][streams]") {
  CudaDevice dev;
  CudaStream& s = dev.compute_stream();
  const EventPtr start = s.record();
  dev.spin(s, 0.3);
  const EventPtr after_spin = s.record();
  const EventPtr end = s.record();
  CHECK_FALSE(dynamic_cast<CudaEvent&>(*after_spin).query());  // the spin has just begun
  end->synchronize();
  CHECK(dynamic_cast<CudaEvent&>(*after_spin).query());  // recorded before `end` on the same stream
  const double spun = after_spin->seconds_since(*start);
  CHECK(spun >= 0.29);
  CHECK(spun < 2.0);
  CHECK(end->seconds_since(*after_spin) >= 0.0);

  // A chain of GEMMs takes a measurable time.
  const std::int64_t n = 1024;
  Buffer a(dev, random_vector(static_cast<std::size_t>(n * n), 1)), c(dev, static_cast<std::size_t>(n * n));
  const Gemm g{
      .m = n, .n = n, .k = n, .a = a.get(), .lda = n, .b = a.get(), .ldb = n, .c = c.get(), .ldc = n};
  const EventPtr chain_start = s.record();
  for (int i = 0; i < 20; ++i) dev.gemm(s, g);
  const double chain = s.record()->seconds_since(*chain_start);
  CHECK(chain > 0.0);
  CHECK(chain < 10.0);
}

TEST_CASE("a stream waits for an event of the other stream; enqueue sets the current stream",
          "[gpu][device][streams]") {
  CudaDevice dev;
  CudaStream& compute = dev.compute_stream();
  CudaStream& comm = dev.comm_stream();
  CHECK(compute.index() == 0);
  CHECK(comm.index() == 1);
  const std::size_t n = 1 << 20;
  Buffer x(dev, n), y(dev, n);
  // x is 0, then 1 after a spin: without the wait the copy would read zeros.
  compute.enqueue([&] {
    dev.fill(compute, x.get(), n, 0.0f);
    dev.spin(compute, 0.3);
    dev.fill(compute, x.get(), n, 1.0f);
  });
  const EventPtr filled = compute.record();
  comm.wait(filled);
  comm.enqueue([&] {
    CHECK(CudaStream::current() == &comm);
    dev.copy(comm, x.get(), y.get(), n);
  });
  CHECK(CudaStream::current() == nullptr);
  std::vector<float> host(n);
  dev.download(comm, y.get(), host.data(), n);
  CHECK(std::all_of(host.begin(), host.end(), [](float v) { return v == 1.0f; }));
  // An exception thrown by the work reaches the caller of enqueue; the current stream is restored.
  CHECK_THROWS_WITH(compute.enqueue([] { throw osdp::Error("boom"); }), "boom");
  CHECK(CudaStream::current() == nullptr);
  compute.enqueue([&] {
    comm.enqueue([&] { CHECK(CudaStream::current() == &comm); });
    CHECK(CudaStream::current() == &compute);
  });
}

TEST_CASE("a host wait past the timeout fails naming the rank and the stream", "[gpu][device][timeout]") {
  CudaDeviceOptions options;
  options.rank = 3;
  CudaDevice dev(options);
  CudaStream& s = dev.compute_stream();
  dev.set_timeout(0.2);
  CHECK(dev.timeout() == 0.2);
  dev.spin(s, 3.0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(s.synchronize(), Contains("rank 3: the compute stream did not finish within 0.2 s"));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(waited >= 0.2);
  CHECK(waited < 1.0);
  CHECK_THROWS_WITH(s.record()->synchronize(),
                    Contains("rank 3: the work on the compute stream before its event"));

  // A watchdog is polled on every round and told when the wait times out. This one counts its checks
  // and fails when told to.
  class FakeWatchdog final : public CudaWatchdog {
   public:
    int checks = 0;
    bool fail_check = false;
    double waited = 0;
    std::string what;
    void check() override {
      ++checks;
      if (fail_check) throw BackendFailure("rank 0: NCCL reported an asynchronous error");
    }
    [[noreturn]] void timed_out(double waited_s, const std::string& waiting_for) override {
      waited = waited_s;
      what = waiting_for;
      throw BackendFailure("rank 0: all-gather of layer1 slice 0 did not complete (" + waiting_for + ")");
    }
  };
  FakeWatchdog watchdog;
  dev.set_watchdog(&watchdog);
  CHECK_THROWS_WITH(s.synchronize(), Contains("all-gather of layer1 slice 0"));
  CHECK(watchdog.checks > 0);
  CHECK(watchdog.what == "the compute stream");
  CHECK(watchdog.waited >= 0.2);
  watchdog.fail_check = true;  // an asynchronous error: reported at the first poll, before the timeout
  CHECK_THROWS_WITH(s.record()->synchronize(), Contains("asynchronous error"));
  dev.set_watchdog(nullptr);
  dev.set_timeout(30);
  s.synchronize();  // the spin ends
}

TEST_CASE("a kernel on another device's stream or a wait for another backend's event is a usage error",
          "[gpu][device][streams]") {
  CudaDevice dev, other;
  CpuDevice cpu(CpuDeviceOptions{0, false, 0});
  Buffer x(dev, 16);
  // Checked in release builds too: the kernel would run on the wrong device or stream.
  CHECK_THROWS_AS(dev.fill(other.compute_stream(), x.get(), 16, 1.0f), osdp::UsageError);
  CHECK_THROWS_AS(dev.fill(cpu.compute_stream(), x.get(), 16, 1.0f), osdp::UsageError);
  CHECK_THROWS_AS(dev.compute_stream().wait(cpu.compute_stream().record()), osdp::UsageError);
  dev.fill(dev.compute_stream(), x.get(), 16, 1.0f);
  CHECK(x.download() == std::vector<float>(16, 1.0f));
}
