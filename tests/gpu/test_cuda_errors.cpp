// CUDA runtime and cuBLAS error codes as osdp errors (validate/cuda_errors.hpp): the kind of each
// code, the messages (rank, call, what it was for, the library's name and text of the code) and the
// exception types the checks throw. No GPU needed: the runtime names its codes without a driver.
#include <chrono>
#include <string>

#include <catch2/catch.hpp>

#include "costmodel/error.hpp"
#include "validate/cuda/cuda_device.hpp"
#include "validate/cuda/cuda_errors.hpp"
#include "validate/executor/backend.hpp"

namespace {

using namespace osdp::validate;
using Catch::Matchers::Contains;

}  // namespace

TEST_CASE("CUDA runtime errors are classified by what the caller can do about them", "[gpu][errors]") {
  CHECK(classify(cudaErrorMemoryAllocation) == FailureKind::kOutOfMemory);
  for (const cudaError_t e :
       {cudaErrorNoDevice, cudaErrorInvalidDevice, cudaErrorInsufficientDriver, cudaErrorStubLibrary,
        cudaErrorCallRequiresNewerDriver, cudaErrorSystemDriverMismatch, cudaErrorDevicesUnavailable,
        cudaErrorNoKernelImageForDevice}) {
    INFO(cudaGetErrorName(e));
    CHECK(classify(e) == FailureKind::kUsage);
  }
  for (const cudaError_t e : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorInvalidValue,
                              cudaErrorECCUncorrectable, cudaErrorHardwareStackError, cudaErrorLaunchTimeout,
                              cudaErrorInvalidConfiguration, cudaErrorNotReady}) {
    INFO(cudaGetErrorName(e));
    CHECK(classify(e) == FailureKind::kBackend);
  }
}

TEST_CASE("cuBLAS statuses are classified by what the caller can do about them", "[gpu][errors]") {
  CHECK(classify(CUBLAS_STATUS_ALLOC_FAILED) == FailureKind::kOutOfMemory);
  for (const cublasStatus_t s :
       {CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_ARCH_MISMATCH}) {
    INFO(cublasGetStatusName(s));
    CHECK(classify(s) == FailureKind::kUsage);
  }
  for (const cublasStatus_t s : {CUBLAS_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_INTERNAL_ERROR,
                                 CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_MAPPING_ERROR}) {
    INFO(cublasGetStatusName(s));
    CHECK(classify(s) == FailureKind::kBackend);
  }
}

TEST_CASE("a CUDA failure message names the rank, the call, what it was for and the error", "[gpu][errors]") {
  CHECK(
      cuda_failure_message(cudaErrorIllegalAddress, "cudaMemcpyAsync", "download of layer3.mlp weights", 0) ==
      "rank 0: cudaMemcpyAsync (download of layer3.mlp weights) failed: cudaErrorIllegalAddress: an illegal "
      "memory access was encountered");
  CHECK(cuda_failure_message(cudaErrorMemoryAllocation, "cudaMalloc", "", 3) ==
        "rank 3: cudaMalloc failed: cudaErrorMemoryAllocation: out of memory");
  const std::string m = cuda_failure_message(cudaErrorNoDevice, "cudaSetDevice", "the compute stream", 12);
  CHECK_THAT(m, Contains("rank 12: ") && Contains("cudaSetDevice") && Contains("(the compute stream)") &&
                    Contains("cudaErrorNoDevice"));
}

TEST_CASE("a cuBLAS failure message names the rank, the call, what it was for and the status",
          "[gpu][errors]") {
  const std::string m = cublas_failure_message(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmStridedBatchedEx",
                                               "gemm 64x32x16, batch 1", 1);
  CHECK_THAT(m, Contains("rank 1: cublasGemmStridedBatchedEx (gemm 64x32x16, batch 1) failed: "
                         "CUBLAS_STATUS_INVALID_VALUE: "));
  CHECK(cublas_failure_message(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate", "", 0) ==
        "rank 0: cublasCreate failed: CUBLAS_STATUS_ALLOC_FAILED: the resource allocation failed");
}

TEST_CASE("check_cuda is a no-op on success and throws the error of the code's kind", "[gpu][errors]") {
  CHECK_NOTHROW(check_cuda(cudaSuccess, "cudaMalloc", "x", 0));
  CHECK_THROWS_AS(check_cuda(cudaErrorMemoryAllocation, "cudaMalloc", "activations", 0), OutOfMemory);
  CHECK_THROWS_AS(check_cuda(cudaErrorInvalidDevice, "cudaSetDevice", "", 0), osdp::UsageError);
  CHECK_THROWS_AS(check_cuda(cudaErrorInsufficientDriver, "cudaGetDeviceCount", "", 0), osdp::UsageError);
  CHECK_THROWS_AS(check_cuda(cudaErrorIllegalAddress, "cudaStreamQuery", "the compute stream", 0),
                  BackendFailure);
  CHECK_THROWS_AS(check_cuda(cudaErrorLaunchFailure, "the fill kernel", "", 0), BackendFailure);
  CHECK_THROWS_WITH(
      check_cuda(cudaErrorIllegalAddress, "cudaMemcpyAsync", "download", 2),
      "rank 2: cudaMemcpyAsync (download) failed: cudaErrorIllegalAddress: an illegal memory access "
      "was encountered");
  // The kinds do not overlap: an out-of-memory error is not a BackendFailure.
  try {
    check_cuda(cudaErrorMemoryAllocation, "cudaMalloc", "activations", 5);
    FAIL("no exception");
  } catch (const BackendFailure&) {
    FAIL("BackendFailure");
  } catch (const OutOfMemory& e) {
    CHECK_THAT(e.what(), Contains("rank 5: cudaMalloc (activations) failed: cudaErrorMemoryAllocation"));
  }
}

TEST_CASE("check_cublas is a no-op on success and throws the error of the status's kind", "[gpu][errors]") {
  CHECK_NOTHROW(check_cublas(CUBLAS_STATUS_SUCCESS, "cublasCreate", "", 0));
  CHECK_THROWS_AS(check_cublas(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate", "", 0), OutOfMemory);
  CHECK_THROWS_AS(check_cublas(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmStridedBatchedEx", "", 0),
                  osdp::UsageError);
  CHECK_THROWS_AS(check_cublas(CUBLAS_STATUS_NOT_SUPPORTED, "cublasGemmStridedBatchedEx", "", 0),
                  osdp::UsageError);
  CHECK_THROWS_AS(check_cublas(CUBLAS_STATUS_EXECUTION_FAILED, "cublasGemmStridedBatchedEx", "", 0),
                  BackendFailure);
  CHECK_THROWS_WITH(
      check_cublas(CUBLAS_STATUS_INTERNAL_ERROR, "cublasGemmStridedBatchedEx", "gemm", 4),
      Contains("rank 4: cublasGemmStridedBatchedEx (gemm) failed: CUBLAS_STATUS_INTERNAL_ERROR: "));
}

TEST_CASE("throw_failure throws the exception of each kind", "[gpu][errors]") {
  CHECK_THROWS_AS(throw_failure(FailureKind::kOutOfMemory, "m"), OutOfMemory);
  CHECK_THROWS_AS(throw_failure(FailureKind::kUsage, "m"), osdp::UsageError);
  CHECK_THROWS_AS(throw_failure(FailureKind::kBackend, "m"), BackendFailure);
  CHECK_THROWS_WITH(throw_failure(FailureKind::kBackend, "rank 0: it broke"), "rank 0: it broke");
}

TEST_CASE("CUDA versions print as the toolkit writes them", "[gpu][errors]") {
  CHECK(format_cuda_version(13000) == "13.0");
  CHECK(format_cuda_version(12040) == "12.4");
  CHECK(format_cuda_version(11080) == "11.8");
  CHECK(format_cuda_version(0) == "none");
  CHECK(format_cublas_version(130100) == "13.1.0");
  CHECK(format_cublas_version(120902) == "12.9.2");
}

TEST_CASE("availability and versions can be asked without a GPU or a driver", "[gpu][errors]") {
  const CudaVersions v = cuda_versions();
  CHECK(v.runtime >= 11000);  // the runtime linked in answers even without a driver
  CHECK(v.cublas >= 110000);
  CHECK(v.driver >= 0);
  const std::string why = cuda_unavailable_reason();
  if (why.empty()) {
    CHECK(cuda_device_count() > 0);
    CHECK(v.driver > 0);
  } else {
    CHECK(cuda_device_count() == 0);
    CHECK_THAT(why, Contains("CUDA"));
    // Without a device the constructor says why, as a usage error (the machine cannot run it).
    CHECK_THROWS_AS(CudaDevice(CudaDeviceOptions{}), osdp::UsageError);
  }
  // A device index past the devices there are is a usage error, with or without a GPU.
  CudaDeviceOptions options;
  options.device = 1000;
  options.rank = 7;
  CHECK_THROWS_AS(CudaDevice(options), osdp::UsageError);
  if (why.empty())
    CHECK_THROWS_WITH(CudaDevice(options), Contains("rank 7: CUDA device 1000 does not exist"));
}

TEST_CASE("host polls yield for the first millisecond, then sleep briefly", "[gpu][errors]") {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) poll_pause(0.0);  // yields: no sleep at all
  CHECK(seconds_since(t0) < 0.5);
  const auto t1 = std::chrono::steady_clock::now();
  poll_pause(0.05);  // 20 us
  poll_pause(1.0);   // 1 ms
  const double slept = seconds_since(t1);
  CHECK(slept >= 1e-3);
  CHECK(slept < 0.5);
  CHECK(seconds_since(t1) >= slept);
}
