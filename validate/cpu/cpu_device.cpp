// The CPU device: a caching, tracking allocator and the kernels with Eigen (streams: cpu_stream.cpp)
// (row-major maps with strides, one thread). GEMM is C = alpha op(A) op(B) + beta C with BLAS's
// convention that beta = 0 ignores C (NaN included) and alpha = 0 (or k = 0) ignores A and B.
#include "validate/cpu/cpu_device.hpp"

// GCC 12 reports false maybe-uninitialized warnings inside its own AVX-512 intrinsics when Eigen is
// built with -march=native (GCC bug 105593, fixed in GCC 13). Clang has no such warning.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <new>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "costmodel/units.hpp"

namespace osdp::validate {

using Clock = std::chrono::steady_clock;

// ---- CpuDevice: memory and streams -----------------------------------------------------------

CpuDevice::CpuDevice(CpuDeviceOptions options)
    : options_(options),
      context_(std::make_shared<detail::CpuContext>(options.rank)),
      // 64-byte aligned blocks (a cache line, an AVX-512 vector); null when the host has no memory left.
      allocator_([](std::size_t bytes) { return ::operator new (bytes, std::align_val_t{64}, std::nothrow); },
                 [](void* p) { ::operator delete (p, std::align_val_t{64}); }, options.capacity_bytes,
                 fmt::format("rank {}", options.rank)) {
  Eigen::setNbThreads(1);
  compute_ = std::make_unique<CpuStream>("compute stream", context_);
  if (options_.comm_thread) comm_ = std::make_unique<CpuStream>("comm stream", context_);
}

CpuDevice::~CpuDevice() {
  if (comm_) comm_->shutdown();
  compute_->shutdown();
}

std::string CpuDevice::name() const {
  return fmt::format("cpu (Eigen {}.{}.{}, 1 thread per stream, {})", EIGEN_WORLD_VERSION,
                     EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION,
                     comm_ ? "compute and comm streams" : "one stream");
}

std::size_t parse_cache_size(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::size_t value = 0, digits = 0;
  for (; digits < text.size() && text[digits] >= '0' && text[digits] <= '9'; ++digits) {
    if (value > (std::size_t{1} << 40)) return 0;  // no cache is a terabyte
    value = value * 10 + static_cast<std::size_t>(text[digits] - '0');
  }
  if (digits == 0) return 0;
  const std::string_view unit = text.substr(digits);
  if (unit.empty()) return value;
  if (unit == "K") return value << 10;
  if (unit == "M") return value << 20;
  if (unit == "G") return value << 30;
  return 0;
}

std::size_t CpuDevice::cache_bytes() const {
  std::size_t largest = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", i);
    std::ifstream type(dir + "type"), size(dir + "size");
    std::string t, z;
    if (!(type >> t) || !(size >> z)) continue;
    if (t == "Instruction") continue;
    largest = std::max(largest, parse_cache_size(z));
  }
  return largest;
}

void CpuDevice::set_timeout(double seconds) {
  assert(seconds > 0.0);
  context_->timeout_s = seconds;
}

double CpuDevice::timeout() const {
  return context_->timeout_s.load();
}

float* CpuDevice::allocate(std::size_t bytes, std::string_view what) {
  return static_cast<float*>(allocator_.allocate(bytes, what));
}

void CpuDevice::deallocate(float* p) {
  // The streams are threads that run the kernels as they go: when a task frees a buffer, its use
  // is over (no fence).
  allocator_.deallocate(p);
}

MemoryStats CpuDevice::memory() const {
  const AllocatorStats a = allocator_.stats();
  return MemoryStats{a.current_bytes, a.peak_bytes, a.live, 0, 0};
}

namespace {
class CpuGate final : public StreamGate {
 public:
  explicit CpuGate(Stream& s) {
    s.enqueue([f = flag_] {
      while (!f->load(std::memory_order_acquire)) std::this_thread::yield();
    });
  }
  ~CpuGate() override { open(); }
  CpuGate(const CpuGate&) = delete;
  CpuGate& operator=(const CpuGate&) = delete;
  void open() override { flag_->store(true, std::memory_order_release); }

 private:
  std::shared_ptr<std::atomic<bool>> flag_ = std::make_shared<std::atomic<bool>>(false);
};
}  // namespace

std::unique_ptr<StreamGate> CpuDevice::hold(Stream& s) {
  return std::make_unique<CpuGate>(s);
}

void CpuDevice::reset_peak() {
  allocator_.reset_peak();
}

double CpuDevice::now_s() const {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// ---- kernels ---------------------------------------------------------------------------------

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using MatrixMap = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// The nearest bf16 (ties to even), as fp32: the upper 16 bits of the rounded bit pattern. NaN stays NaN.
float round_to_bf16(float x) {
  if (std::isnan(x)) return x;
  std::uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  bits &= 0xFFFF0000u;
  float r = 0;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

// Read from memory the compiler knows nothing about, so touch() cannot be elided.
volatile float g_touch_factor = 1.0f;

// Calls f(t, p, run) for the runs of t < len whose positions p = (offset + t) % period do not wrap.
template <class F>
void for_each_run(std::size_t len, std::size_t offset, std::size_t period, F f) {
  assert(period > 0);
  for (std::size_t t = 0, p = offset % period; t < len; p = 0) {
    const std::size_t run = std::min(len - t, period - p);
    f(t, p, run);
    t += run;
  }
}

Eigen::Index idx(std::size_t n) {
  return static_cast<Eigen::Index>(n);
}

template <class A, class B>
void gemm_into(MatrixMap& c, const A& a, const B& b, float alpha, float beta) {
  if (beta == 0.0f) {
    c.noalias() = alpha * a * b;
  } else {
    if (beta != 1.0f) c *= beta;
    c.noalias() += alpha * a * b;
  }
}

}  // namespace

void CpuDevice::gemm(Stream& /*s*/, const Gemm& g) {
  assert(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0);
  const bool ta = g.ta == Transpose::kYes, tb = g.tb == Transpose::kYes;
  // Stored shapes: A is m x k (k x m transposed), B is k x n (n x k transposed), C is m x n.
  const std::int64_t a_rows = ta ? g.k : g.m, a_cols = ta ? g.m : g.k;
  const std::int64_t b_rows = tb ? g.n : g.k, b_cols = tb ? g.k : g.n;
  assert(g.lda >= a_cols && g.ldb >= b_cols && g.ldc >= g.n);
  for (std::int64_t i = 0; i < g.batch; ++i) {
    MatrixMap c(g.c + i * g.stride_c, g.m, g.n, Eigen::OuterStride<>(g.ldc));
    if (g.alpha == 0.0f || g.k == 0) {  // A and B are not read
      if (g.beta == 0.0f) c.setZero();
      if (g.beta != 0.0f && g.beta != 1.0f) c *= g.beta;
      continue;
    }
    const ConstMatrixMap a(g.a + i * g.stride_a, a_rows, a_cols, Eigen::OuterStride<>(g.lda));
    const ConstMatrixMap b(g.b + i * g.stride_b, b_rows, b_cols, Eigen::OuterStride<>(g.ldb));
    if (g.math == GemmMath::kBf16) {  // operands rounded to bf16, products summed in fp32
      const RowMajor ar = a.unaryExpr(&round_to_bf16), br = b.unaryExpr(&round_to_bf16);
      if (!ta && !tb) gemm_into(c, ar, br, g.alpha, g.beta);
      if (!ta && tb) gemm_into(c, ar, br.transpose(), g.alpha, g.beta);
      if (ta && !tb) gemm_into(c, ar.transpose(), br, g.alpha, g.beta);
      if (ta && tb) gemm_into(c, ar.transpose(), br.transpose(), g.alpha, g.beta);
      continue;
    }
    if (!ta && !tb) gemm_into(c, a, b, g.alpha, g.beta);
    if (!ta && tb) gemm_into(c, a, b.transpose(), g.alpha, g.beta);
    if (ta && !tb) gemm_into(c, a.transpose(), b, g.alpha, g.beta);
    if (ta && tb) gemm_into(c, a.transpose(), b.transpose(), g.alpha, g.beta);
  }
}

void CpuDevice::fill(Stream& /*s*/, float* y, std::size_t n, float value) {
  std::fill_n(y, n, value);
}

void CpuDevice::copy(Stream& /*s*/, const float* x, float* y, std::size_t n) {
  if (n != 0) std::memmove(y, x, n * sizeof(float));
}

void CpuDevice::relu(Stream& /*s*/, const float* x, float* y, std::size_t n) {
  ArrayMap(y, idx(n)) = ConstArrayMap(x, idx(n)).max(0.0f);
}

void CpuDevice::relu_backward(Stream& /*s*/, const float* x, const float* dy, float* dx, std::size_t n) {
  ArrayMap(dx, idx(n)) = (ConstArrayMap(x, idx(n)) > 0.0f).select(ConstArrayMap(dy, idx(n)), 0.0f);
}

// One element at a time, every input read before an output is written (in place is allowed).
void CpuDevice::gated(Stream& /*s*/, const float* g, const float* u, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i], sigma = 1.0f / (1.0f + std::exp(-gi));
    y[i] = gi * sigma * u[i];
  }
}

void CpuDevice::gated_backward(Stream& /*s*/, const float* g, const float* u, const float* dy, float* dg,
                               float* du, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i], ui = u[i], dyi = dy[i], sigma = 1.0f / (1.0f + std::exp(-gi));
    dg[i] = dyi * ui * (sigma * (1.0f + gi * (1.0f - sigma)));
    du[i] = dyi * (gi * sigma);
  }
}

void CpuDevice::touch(Stream& /*s*/, float* y, std::size_t n) {
  const float factor = g_touch_factor;  // 1, but the compiler cannot know
  for (std::size_t i = 0; i < n; ++i) y[i] *= factor;
}

void CpuDevice::add_folded(Stream& /*s*/, const float* v, std::size_t len, std::size_t offset, float* out,
                           std::size_t period, std::size_t samples) {
  for (std::size_t i = 0; i < samples; ++i) {
    float* row = out + i * period;
    for_each_run(len, offset, period, [&](std::size_t t, std::size_t p, std::size_t run) {
      for (std::size_t j = 0; j < run; ++j) row[p + j] += v[t + j];
    });
  }
}

void CpuDevice::sum_folded(Stream& /*s*/, const float* dout, std::size_t period, std::size_t samples,
                           std::size_t offset, float* dv, std::size_t len) {
  for (std::size_t i = 0; i < samples; ++i) {
    const float* row = dout + i * period;
    for_each_run(len, offset, period, [&](std::size_t t, std::size_t p, std::size_t run) {
      for (std::size_t j = 0; j < run; ++j) dv[t + j] += row[p + j];
    });
  }
}

void CpuDevice::gather_columns(Stream& /*s*/, const float* table, std::int64_t vocab, std::int64_t c0,
                               std::int64_t cols, const std::int32_t* tokens, std::int64_t n_rows, float* y,
                               std::int64_t ldy) {
  assert(ldy >= cols);
  // Table row by table row (each `vocab` floats apart): one row stays in cache while every token
  // reads it, instead of `cols` rows touched per token.
  for (std::int64_t c = 0; c < cols; ++c) {
    const float* row = table + (c0 + c) * vocab;
    for (std::int64_t r = 0; r < n_rows; ++r)
      if (tokens[r] >= 0 && tokens[r] < vocab) y[r * ldy + c] += row[tokens[r]];
  }
}

void CpuDevice::scatter_add_columns(Stream& /*s*/, const float* dy, std::int64_t ldy,
                                    const std::int32_t* tokens, std::int64_t n_rows, std::int64_t c0,
                                    std::int64_t cols, float* dtable, std::int64_t vocab) {
  assert(ldy >= cols);
  for (std::int64_t c = 0; c < cols; ++c) {  // row by row of the table, as gather_columns
    float* row = dtable + (c0 + c) * vocab;
    for (std::int64_t r = 0; r < n_rows; ++r)
      if (tokens[r] >= 0 && tokens[r] < vocab) row[tokens[r]] += dy[r * ldy + c];
  }
}

void CpuDevice::gather_rows(Stream& /*s*/, const float* x, std::int64_t ldx, const std::int32_t* index,
                            std::int64_t n, std::int64_t width, const float* w, float* y, std::int64_t ldy) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float* from = x + index[i] * ldx;
    float* to = y + i * ldy;
    const float f = w != nullptr ? w[i] : 1.0f;
    for (std::int64_t c = 0; c < width; ++c) to[c] = f * from[c];
  }
}

void CpuDevice::scatter_add_rows(Stream& /*s*/, const float* x, std::int64_t ldx, const std::int32_t* index,
                                 std::int64_t n, std::int64_t width, const float* w, float* y,
                                 std::int64_t ldy) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float* from = x + i * ldx;
    float* to = y + index[i] * ldy;
    const float f = w != nullptr ? w[i] : 1.0f;
    for (std::int64_t c = 0; c < width; ++c) to[c] += f * from[c];
  }
}

void CpuDevice::row_dots(Stream& /*s*/, const float* a, std::int64_t lda, const std::int32_t* index,
                         const float* b, std::int64_t ldb, std::int64_t n, std::int64_t width, float* out) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float* x = a + index[i] * lda;
    const float* y = b + i * ldb;
    float sum = 0.0f;
    for (std::int64_t c = 0; c < width; ++c) sum += x[c] * y[c];
    out[i] = sum;
  }
}

void CpuDevice::mse_onehot(Stream& /*s*/, float* logits, std::int64_t rows, std::int64_t vocab,
                           const std::int32_t* targets, float scale, float* loss_out) {
  double loss = 0.0;  // rows summed in double; each row's sum of squares by Eigen in float
  for (std::int64_t r = 0; r < rows; ++r) {
    ArrayMap row(logits + r * vocab, vocab);
    if (targets[r] >= 0 && targets[r] < vocab) row(targets[r]) -= 1.0f;
    loss += static_cast<double>(row.matrix().squaredNorm());
    row *= scale;
  }
  loss_out[0] += static_cast<float>(loss * static_cast<double>(scale) / 2.0);
}

void CpuDevice::adam(Stream& /*s*/, float* w, const float* g, float* m, float* v, std::size_t n,
                     const AdamParams& p) {
  // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
  assert(p.step >= 1);
  const float step_size = p.step_size(), inv_sqrt_bias2 = p.inv_sqrt_bias2();
  ArrayMap ww(w, idx(n)), mm(m, idx(n)), vv(v, idx(n));
  const ConstArrayMap gg(g, idx(n));
  mm = p.beta1 * mm + (1.0f - p.beta1) * gg;
  vv = p.beta2 * vv + (1.0f - p.beta2) * gg.square();
  ww -= step_size * mm / (vv.sqrt() * inv_sqrt_bias2 + p.eps);
}

void CpuDevice::download(Stream& /*s*/, const float* x, float* host, std::size_t n) {
  std::copy_n(x, n, host);
}

void CpuDevice::upload(Stream& /*s*/, const float* host, float* x, std::size_t n) {
  std::copy_n(host, n, x);
}

}  // namespace osdp::validate
