// The CUDA device's elementwise kernels (cuda_kernels.cu, the only file nvcc builds): the same
// arithmetic as the CPU device's kernels (validate/cpu_device.cpp, contracts in validate/backend.hpp),
// launched asynchronously on `stream`. Each returns cudaGetLastError() after its launch (cudaSuccess
// when there was nothing to do); the caller turns a failure into an osdp error (cuda_errors.hpp).
// Plain C++17 and the CUDA runtime's types only, so that nvcc and the host compiler both read it.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace osdp::validate::cuda_kernels {

// y[i] = value.
cudaError_t fill(cudaStream_t stream, float* y, std::size_t n, float value);
// y[i] = x[i] > 0 ? x[i] : 0.
cudaError_t relu(cudaStream_t stream, const float* x, float* y, std::size_t n);
// dx[i] = x[i] > 0 ? dy[i] : 0.
cudaError_t relu_backward(cudaStream_t stream, const float* x, const float* dy, float* dx, std::size_t n);
// y[i] = silu(g[i]) u[i], silu(x) = x / (1 + exp(-x)) (expf: the CPU's to a few ulps). y may be
// g or u.
cudaError_t gated(cudaStream_t stream, const float* g, const float* u, float* y, std::size_t n);
// dg[i] = dy[i] u[i] silu'(g[i]), du[i] = dy[i] silu(g[i]); dg and du may each be one of g, u, dy.
cudaError_t gated_backward(cudaStream_t stream, const float* g, const float* u, const float* dy, float* dg,
                           float* du, std::size_t n);
// y[i] = y[i] * one: reads and writes every element; `one` is 1 (an argument, so that the pass
// cannot be compiled away).
cudaError_t touch(cudaStream_t stream, float* y, std::size_t n, float one);
// out[i][(offset + t) % period] += v[t] for i < samples, t < len, adding the v[t] that fold onto one
// element in increasing t (the CPU's order: the same float results).
cudaError_t add_folded(cudaStream_t stream, const float* v, std::size_t len, std::size_t offset, float* out,
                       std::size_t period, std::size_t samples);
// dv[t] += sum over i (in increasing i, as the CPU) of dout[i][(offset + t) % period].
cudaError_t sum_folded(cudaStream_t stream, const float* dout, std::size_t period, std::size_t samples,
                       std::size_t offset, float* dv, std::size_t len);
// y[r][c] += table[c0 + c][tokens[r]] for r < n_rows, c < cols (table rows are `vocab` long).
cudaError_t gather_columns(cudaStream_t stream, const float* table, std::int64_t vocab, std::int64_t c0,
                           std::int64_t cols, const std::int32_t* tokens, std::int64_t n_rows, float* y,
                           std::int64_t ldy);
// y[i][c] = w[i] x[index[i]][c] (w null: 1); its gradient y[index[i]][c] += w[i] x[i][c] (atomicAdd);
// out[i] = a[index[i]] . b[i] (numerics' MoE dispatch and combine; backend.hpp).
cudaError_t gather_rows(cudaStream_t stream, const float* x, std::int64_t ldx, const std::int32_t* index,
                        std::int64_t n, std::int64_t width, const float* w, float* y, std::int64_t ldy);
cudaError_t scatter_add_rows(cudaStream_t stream, const float* x, std::int64_t ldx, const std::int32_t* index,
                             std::int64_t n, std::int64_t width, const float* w, float* y, std::int64_t ldy);
cudaError_t row_dots(cudaStream_t stream, const float* a, std::int64_t lda, const std::int32_t* index,
                     const float* b, std::int64_t ldb, std::int64_t n, std::int64_t width, float* out);
// dtable[c0 + c][tokens[r]] += dy[r][c] (atomicAdd: tokens repeat, so the order of the sums varies).
cudaError_t scatter_add_columns(cudaStream_t stream, const float* dy, std::int64_t ldy,
                                const std::int32_t* tokens, std::int64_t n_rows, std::int64_t c0,
                                std::int64_t cols, float* dtable, std::int64_t vocab);
// d = logits - onehot(targets[r]); loss_out[0] += sum d^2 * scale / 2 (each block's partial sum,
// accumulated in double, added with atomicAdd); logits = d * scale.
cudaError_t mse_onehot(cudaStream_t stream, float* logits, std::int64_t rows, std::int64_t vocab,
                       const std::int32_t* targets, float scale, float* loss_out);
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= step_size m / (sqrt(v) inv_sqrt_bias2 + eps), with
// step_size = lr / (1 - b1^t) and inv_sqrt_bias2 = 1 / sqrt(1 - b2^t) computed by the caller.
cudaError_t adam(cudaStream_t stream, float* w, const float* g, float* m, float* v, std::size_t n,
                 float beta1, float beta2, float eps, float step_size, float inv_sqrt_bias2);
// C = beta C (beta = 0: C = 0, whatever C held) for `batch` m x n row-major matrices (leading
// dimension ldc, stride_c apart): a GEMM whose alpha or k is 0.
cudaError_t scale_matrices(cudaStream_t stream, float* c, std::int64_t m, std::int64_t n, std::int64_t ldc,
                           std::int64_t batch, std::int64_t stride_c, float beta);
// y[i] = x[i] rounded to bf16, nearest even (the CPU device's GemmMath::kBf16 rounding), as raw bits:
// the operands of a bf16 GEMM.
cudaError_t to_bf16(cudaStream_t stream, const float* x, std::uint16_t* y, std::size_t n);
// One thread that keeps the stream busy for `seconds` (the GPU's global timer): tests and delays.
cudaError_t spin(cudaStream_t stream, double seconds);
// One thread that keeps the stream busy until the host sets *flag (mapped host memory, as seen from
// the device) to non-zero, or `max_seconds` have passed (a gate never opened cannot hang the GPU).
cudaError_t wait_for_flag(cudaStream_t stream, const volatile int* flag, double max_seconds);

}  // namespace osdp::validate::cuda_kernels
