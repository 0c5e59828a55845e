// The CUDA device's elementwise kernels: grid-stride loops over the elements, the CPU device's
// arithmetic in the CPU's order where the order is fixed (add_folded and sum_folded add in increasing
// t and i; adam rounds each operation as the CPU does, with no fused multiply-add), atomics where
// several threads add to one element (scatter_add_columns, the loss of mse_onehot); gated and
// gated_backward (expf) agree with the CPU to a few ulps.
#include "validate/cuda/cuda_kernels.hpp"

#include <algorithm>

#include <cuda_bf16.h>

namespace osdp::validate::cuda_kernels {

namespace {

constexpr unsigned kThreads = 256;            // threads per block
constexpr std::size_t kMaxBlocks = 1u << 16;  // grid-stride loops cover the rest
constexpr unsigned kLossBlocks = 512;         // mse_onehot: atomic additions to the loss

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::min<std::size_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ std::size_t grid_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

__global__ void fill_kernel(float* y, std::size_t n, float value) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = value;
}

__global__ void relu_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_backward_kernel(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

// sigma(x) = 1 / (1 + exp(-x)). expf and contracted multiply-adds (here and on the CPU) make the gated
// kernels agree with the CPU's to a few ulps, not to the bit.
__device__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Each thread reads element i's inputs before it writes its outputs (in place is allowed).
__global__ void gated_kernel(const float* g, const float* u, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    y[i] = gi * sigmoid(gi) * u[i];
  }
}

__global__ void gated_backward_kernel(const float* g, const float* u, const float* dy, float* dg, float* du,
                                      std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i], ui = u[i], dyi = dy[i], sigma = sigmoid(gi);
    dg[i] = dyi * ui * (sigma * (1.0f + gi * (1.0f - sigma)));
    du[i] = dyi * (gi * sigma);
  }
}

__global__ void touch_kernel(float* y, std::size_t n, float one) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = y[i] * one;
}

// One thread per (sample i, t0 < min(len, period)): the element p = (offset + t0) % period of row i
// receives v[t0], v[t0 + period], ... in that order.
__global__ void add_folded_kernel(const float* v, std::size_t len, std::size_t offset, float* out,
                                  std::size_t period, std::size_t samples, std::size_t width) {
  const std::size_t total = samples * width;
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride()) {
    const std::size_t i = idx / width, t0 = idx % width;
    float* dst = out + i * period + (offset % period + t0) % period;
    float acc = *dst;
    for (std::size_t t = t0; t < len; t += period) acc += v[t];
    *dst = acc;
  }
}

// One thread per t: dv[t] += dout[0][p] + dout[1][p] + ... (in that order), p = (offset + t) % period.
__global__ void sum_folded_kernel(const float* dout, std::size_t period, std::size_t samples,
                                  std::size_t offset, float* dv, std::size_t len) {
  for (std::size_t t = first_index(); t < len; t += grid_stride()) {
    const std::size_t p = (offset % period + t % period) % period;
    float acc = dv[t];
    for (std::size_t i = 0; i < samples; ++i) acc += dout[i * period + p];
    dv[t] = acc;
  }
}

__global__ void gather_columns_kernel(const float* table, std::int64_t vocab, std::int64_t c0,
                                      std::int64_t cols, const std::int32_t* tokens, std::int64_t n_rows,
                                      float* y, std::int64_t ldy) {
  const auto total = static_cast<std::size_t>(n_rows * cols);
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride()) {
    const auto r = static_cast<std::int64_t>(idx) / cols, c = static_cast<std::int64_t>(idx) % cols;
    const std::int32_t token = tokens[r];
    if (token >= 0 && token < vocab) y[r * ldy + c] += table[(c0 + c) * vocab + token];
  }
}

__global__ void scatter_add_columns_kernel(const float* dy, std::int64_t ldy, const std::int32_t* tokens,
                                           std::int64_t n_rows, std::int64_t c0, std::int64_t cols,
                                           float* dtable, std::int64_t vocab) {
  const auto total = static_cast<std::size_t>(n_rows * cols);
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride()) {
    const auto r = static_cast<std::int64_t>(idx) / cols, c = static_cast<std::int64_t>(idx) % cols;
    const std::int32_t token = tokens[r];
    if (token >= 0 && token < vocab) atomicAdd(dtable + (c0 + c) * vocab + token, dy[r * ldy + c]);
  }
}

__global__ void gather_rows_kernel(const float* x, std::int64_t ldx, const std::int32_t* index,
                                   std::int64_t n, std::int64_t width, const float* w, float* y,
                                   std::int64_t ldy) {
  const auto total = static_cast<std::size_t>(n * width);
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride()) {
    const auto i = static_cast<std::int64_t>(idx) / width, c = static_cast<std::int64_t>(idx) % width;
    y[i * ldy + c] = (w != nullptr ? w[i] : 1.0f) * x[index[i] * ldx + c];
  }
}

__global__ void scatter_add_rows_kernel(const float* x, std::int64_t ldx, const std::int32_t* index,
                                        std::int64_t n, std::int64_t width, const float* w, float* y,
                                        std::int64_t ldy) {
  const auto total = static_cast<std::size_t>(n * width);
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride()) {
    const auto i = static_cast<std::int64_t>(idx) / width, c = static_cast<std::int64_t>(idx) % width;
    atomicAdd(y + index[i] * ldy + c, (w != nullptr ? w[i] : 1.0f) * x[i * ldx + c]);
  }
}

// One block per row i: its threads' partial sums added in shared memory.
__global__ void row_dots_kernel(const float* a, std::int64_t lda, const std::int32_t* index, const float* b,
                                std::int64_t ldb, std::int64_t n, std::int64_t width, float* out) {
  __shared__ float partial[kThreads];
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    float sum = 0.0f;
    for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x)
      sum += a[index[i] * lda + c] * b[i * ldb + c];
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[i] = partial[0];
    __syncthreads();
  }
}

// Blocks take rows in turn; each thread sums the squares of its elements in double, the block adds
// its threads' sums (a tree in shared memory) and thread 0 adds the block's share to the loss.
__global__ void mse_onehot_kernel(float* logits, std::int64_t rows, std::int64_t vocab,
                                  const std::int32_t* targets, float scale, float* loss_out) {
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = logits + r * vocab;
    const std::int32_t target = targets[r];
    for (std::int64_t col = threadIdx.x; col < vocab; col += blockDim.x) {
      const float d = col == target ? row[col] - 1.0f : row[col];
      sum += static_cast<double>(d) * static_cast<double>(d);
      row[col] = d * scale;
    }
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    atomicAdd(loss_out, static_cast<float>(partial[0] * static_cast<double>(scale) / 2.0));
}

// Every operation rounded on its own (no contraction into FMA), in the CPU's order.
__global__ void adam_kernel(float* w, const float* g, float* m, float* v, std::size_t n, float beta1,
                            float beta2, float eps, float step_size, float inv_sqrt_bias2) {
  const float one_minus_beta1 = 1.0f - beta1, one_minus_beta2 = 1.0f - beta2;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(one_minus_beta1, gi));
    const float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(one_minus_beta2, __fmul_rn(gi, gi)));
    const float denominator = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), inv_sqrt_bias2), eps);
    m[i] = mi;
    v[i] = vi;
    w[i] = __fsub_rn(w[i], __fdiv_rn(__fmul_rn(step_size, mi), denominator));
  }
}

__global__ void scale_matrices_kernel(float* c, std::int64_t m, std::int64_t n, std::int64_t ldc,
                                      std::int64_t batch, std::int64_t stride_c, float beta) {
  const auto per_matrix = static_cast<std::size_t>(m * n);
  const std::size_t total = per_matrix * static_cast<std::size_t>(batch);
  for (std::size_t idx = first_index(); idx < total; idx += grid_stride()) {
    const auto b = static_cast<std::int64_t>(idx / per_matrix);
    const auto within = static_cast<std::int64_t>(idx % per_matrix);
    float& x = c[b * stride_c + (within / n) * ldc + within % n];
    x = beta == 0.0f ? 0.0f : beta * x;
  }
}

__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = __float2bfloat16_rn(x[i]);
}

__device__ unsigned long long global_timer_ns() {
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(unsigned long long ns) {
  const unsigned long long start = global_timer_ns();
  while (global_timer_ns() - start < ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(1000);
#endif
  }
}

__global__ void wait_for_flag_kernel(const volatile int* flag, unsigned long long max_ns) {
  const unsigned long long start = global_timer_ns();
  while (*flag == 0 && global_timer_ns() - start < max_ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(200);
#endif
  }
}

}  // namespace

cudaError_t fill(cudaStream_t stream, float* y, std::size_t n, float value) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, n, value);
  return cudaGetLastError();
}

cudaError_t relu(cudaStream_t stream, const float* x, float* y, std::size_t n) {
  if (n == 0) return cudaSuccess;
  relu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t relu_backward(cudaStream_t stream, const float* x, const float* dy, float* dx, std::size_t n) {
  if (n == 0) return cudaSuccess;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t gated(cudaStream_t stream, const float* g, const float* u, float* y, std::size_t n) {
  if (n == 0) return cudaSuccess;
  gated_kernel<<<blocks_for(n), kThreads, 0, stream>>>(g, u, y, n);
  return cudaGetLastError();
}

cudaError_t gated_backward(cudaStream_t stream, const float* g, const float* u, const float* dy, float* dg,
                           float* du, std::size_t n) {
  if (n == 0) return cudaSuccess;
  gated_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(g, u, dy, dg, du, n);
  return cudaGetLastError();
}

cudaError_t touch(cudaStream_t stream, float* y, std::size_t n, float one) {
  if (n == 0) return cudaSuccess;
  touch_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, n, one);
  return cudaGetLastError();
}

cudaError_t add_folded(cudaStream_t stream, const float* v, std::size_t len, std::size_t offset, float* out,
                       std::size_t period, std::size_t samples) {
  if (len == 0 || samples == 0 || period == 0) return cudaSuccess;
  const std::size_t width = std::min(len, period);
  add_folded_kernel<<<blocks_for(samples * width), kThreads, 0, stream>>>(v, len, offset, out, period,
                                                                          samples, width);
  return cudaGetLastError();
}

cudaError_t sum_folded(cudaStream_t stream, const float* dout, std::size_t period, std::size_t samples,
                       std::size_t offset, float* dv, std::size_t len) {
  if (len == 0 || samples == 0 || period == 0) return cudaSuccess;
  sum_folded_kernel<<<blocks_for(len), kThreads, 0, stream>>>(dout, period, samples, offset, dv, len);
  return cudaGetLastError();
}

cudaError_t gather_columns(cudaStream_t stream, const float* table, std::int64_t vocab, std::int64_t c0,
                           std::int64_t cols, const std::int32_t* tokens, std::int64_t n_rows, float* y,
                           std::int64_t ldy) {
  if (n_rows <= 0 || cols <= 0) return cudaSuccess;
  gather_columns_kernel<<<blocks_for(static_cast<std::size_t>(n_rows * cols)), kThreads, 0, stream>>>(
      table, vocab, c0, cols, tokens, n_rows, y, ldy);
  return cudaGetLastError();
}

cudaError_t scatter_add_columns(cudaStream_t stream, const float* dy, std::int64_t ldy,
                                const std::int32_t* tokens, std::int64_t n_rows, std::int64_t c0,
                                std::int64_t cols, float* dtable, std::int64_t vocab) {
  if (n_rows <= 0 || cols <= 0) return cudaSuccess;
  scatter_add_columns_kernel<<<blocks_for(static_cast<std::size_t>(n_rows * cols)), kThreads, 0, stream>>>(
      dy, ldy, tokens, n_rows, c0, cols, dtable, vocab);
  return cudaGetLastError();
}

cudaError_t gather_rows(cudaStream_t stream, const float* x, std::int64_t ldx, const std::int32_t* index,
                        std::int64_t n, std::int64_t width, const float* w, float* y, std::int64_t ldy) {
  if (n <= 0 || width <= 0) return cudaSuccess;
  gather_rows_kernel<<<blocks_for(static_cast<std::size_t>(n * width)), kThreads, 0, stream>>>(
      x, ldx, index, n, width, w, y, ldy);
  return cudaGetLastError();
}

cudaError_t scatter_add_rows(cudaStream_t stream, const float* x, std::int64_t ldx, const std::int32_t* index,
                             std::int64_t n, std::int64_t width, const float* w, float* y, std::int64_t ldy) {
  if (n <= 0 || width <= 0) return cudaSuccess;
  scatter_add_rows_kernel<<<blocks_for(static_cast<std::size_t>(n * width)), kThreads, 0, stream>>>(
      x, ldx, index, n, width, w, y, ldy);
  return cudaGetLastError();
}

cudaError_t row_dots(cudaStream_t stream, const float* a, std::int64_t lda, const std::int32_t* index,
                     const float* b, std::int64_t ldb, std::int64_t n, std::int64_t width, float* out) {
  if (n <= 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(n, 65535));
  row_dots_kernel<<<grid, kThreads, 0, stream>>>(a, lda, index, b, ldb, n, width, out);
  return cudaGetLastError();
}

cudaError_t mse_onehot(cudaStream_t stream, float* logits, std::int64_t rows, std::int64_t vocab,
                       const std::int32_t* targets, float scale, float* loss_out) {
  if (rows <= 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(rows, kLossBlocks));
  mse_onehot_kernel<<<grid, kThreads, 0, stream>>>(logits, rows, vocab, targets, scale, loss_out);
  return cudaGetLastError();
}

cudaError_t adam(cudaStream_t stream, float* w, const float* g, float* m, float* v, std::size_t n,
                 float beta1, float beta2, float eps, float step_size, float inv_sqrt_bias2) {
  if (n == 0) return cudaSuccess;
  adam_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, g, m, v, n, beta1, beta2, eps, step_size,
                                                      inv_sqrt_bias2);
  return cudaGetLastError();
}

cudaError_t scale_matrices(cudaStream_t stream, float* c, std::int64_t m, std::int64_t n, std::int64_t ldc,
                           std::int64_t batch, std::int64_t stride_c, float beta) {
  if (m <= 0 || n <= 0 || batch <= 0 || beta == 1.0f) return cudaSuccess;
  const auto total = static_cast<std::size_t>(m * n) * static_cast<std::size_t>(batch);
  scale_matrices_kernel<<<blocks_for(total), kThreads, 0, stream>>>(c, m, n, ldc, batch, stride_c, beta);
  return cudaGetLastError();
}

cudaError_t to_bf16(cudaStream_t stream, const float* x, std::uint16_t* y, std::size_t n) {
  static_assert(sizeof(__nv_bfloat16) == sizeof(std::uint16_t));
  if (n == 0) return cudaSuccess;
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, reinterpret_cast<__nv_bfloat16*>(y), n);
  return cudaGetLastError();
}

cudaError_t wait_for_flag(cudaStream_t stream, const volatile int* flag, double max_seconds) {
  wait_for_flag_kernel<<<1, 1, 0, stream>>>(flag, static_cast<unsigned long long>(max_seconds * 1e9));
  return cudaGetLastError();
}

cudaError_t spin(cudaStream_t stream, double seconds) {
  if (!(seconds > 0.0)) return cudaSuccess;
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(seconds * 1e9));
  return cudaGetLastError();
}

}  // namespace osdp::validate::cuda_kernels
