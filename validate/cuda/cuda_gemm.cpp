// CudaDevice::gemm: cuBLAS's strided batched GEMM, in fp32 or on bf16 tensor cores (the operands
// rounded to bf16 by a kernel into stream-ordered scratch first).
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/cuda/cuda_device.hpp"
#include "validate/cuda/cuda_errors.hpp"
#include "validate/cuda/cuda_kernels.hpp"

namespace osdp::validate {

void CudaDevice::gemm(Stream& s, const Gemm& g) {
  assert(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0);
  CudaStream& cs = own(s);
  const cudaStream_t stream = cs.handle();
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  if (g.alpha == 0.0f || g.k == 0) {  // C = beta C; A and B are not read
    check(cuda_kernels::scale_matrices(stream, g.c, g.m, g.n, g.ldc, g.batch, g.stride_c, g.beta),
          "the gemm's scaling kernel");
    return;
  }
  const auto what = [&] { return fmt::format("gemm {}x{}x{}, batch {}", g.m, g.n, g.k, g.batch); };
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  for (const std::int64_t x : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch}) {
    if (x > kIntMax)
      throw UsageError(fmt::format("rank {}: {}: a dimension past cuBLAS's int", options_.rank, what()));
  }
  const auto op = [](Transpose t) { return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; };
  const auto narrow = [](std::int64_t x) { return static_cast<int>(x); };
  // C^T (n x m) = op(B)^T (n x k) op(A)^T (k x m), everything column-major; A and B of `type`, C fp32.
  const auto multiply = [&](const void* a, const void* b, cudaDataType type) {
    return cublasGemmStridedBatchedEx(cs.cublas(), op(g.tb), op(g.ta), narrow(g.n), narrow(g.m), narrow(g.k),
                                      &g.alpha, b, type, narrow(g.ldb), g.stride_b, a, type, narrow(g.lda),
                                      g.stride_a, &g.beta, g.c, CUDA_R_32F, narrow(g.ldc), g.stride_c,
                                      narrow(g.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  if (g.math == GemmMath::kFp32) {
    const cublasStatus_t status = multiply(g.a, g.b, CUDA_R_32F);
    if (status != CUBLAS_STATUS_SUCCESS)
      check_cublas(status, "cublasGemmStridedBatchedEx", what(), options_.rank);
    return;
  }
  // bf16: the operands rounded to bf16 (nearest even, as the CPU device) into stream-ordered scratch,
  // then bf16 tensor cores with fp32 sums. CUBLAS_COMPUTE_32F_FAST_16BF on the fp32 operands only
  // allows the down-conversion: cuBLAS 13 on an H100 chose kernels about 100 times more exact than
  // bf16. The scratch covers each operand's span (rows of `ld`, `stride` apart) and keeps the layout.
  const auto span = [&](Transpose t, std::int64_t rows_n, std::int64_t cols_n, std::int64_t ld,
                        std::int64_t stride) {
    const std::int64_t rows = t == Transpose::kNo ? rows_n : cols_n,
                       cols = t == Transpose::kNo ? cols_n : rows_n;
    return static_cast<std::size_t>((g.batch - 1) * stride + (rows - 1) * ld + cols);
  };
  const std::size_t na = span(g.ta, g.m, g.k, g.lda, g.stride_a),
                    nb = span(g.tb, g.k, g.n, g.ldb, g.stride_b);
  const std::size_t nb_offset = (na + 127) / 128 * 128;  // 256-byte aligned
  void* scratch = nullptr;
  check(cudaMallocAsync(&scratch, (nb_offset + nb) * sizeof(std::uint16_t), stream), "cudaMallocAsync",
        fmt::format("the bf16 operands of {}", what()));
  auto* a16 = static_cast<std::uint16_t*>(scratch);
  std::uint16_t* b16 = a16 + nb_offset;
  check(cuda_kernels::to_bf16(stream, g.a, a16, na), "the bf16 rounding kernel");
  check(cuda_kernels::to_bf16(stream, g.b, b16, nb), "the bf16 rounding kernel");
  const cublasStatus_t status = multiply(a16, b16, CUDA_R_16BF);
  check(cudaFreeAsync(scratch, stream), "cudaFreeAsync", "the bf16 operands");
  if (status != CUBLAS_STATUS_SUCCESS)
    check_cublas(status, "cublasGemmStridedBatchedEx", what(), options_.rank);
}

}  // namespace osdp::validate
