// What the CUDA runtime and cuBLAS say, as osdp sees it: which kind of failure an error code is (the
// device ran out of memory, the machine or the request cannot work, or the backend failed), the
// message that names the rank, the call and what it was for, and the checks that throw it; whether a
// GPU can be used at all, and the versions. All of it works without a GPU or a driver
// (cudaGetErrorName, cublasGetStatusName and the version queries need neither); the device that
// needs one is cuda_device.hpp. And the pacing of the host's polls (stream, event and NCCL waits).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace osdp::validate {

// OutOfMemory, UsageError or BackendFailure.
enum class FailureKind { kOutOfMemory, kUsage, kBackend };

// cudaErrorMemoryAllocation: out of memory. No device, no (or too old a) driver, an invalid device,
// no kernel image for the GPU's architecture: usage (the machine or the build cannot run it).
// Everything else (illegal address, launch failure, ECC error, ...): the backend failed.
FailureKind classify(cudaError_t e);
// CUBLAS_STATUS_ALLOC_FAILED: out of memory. INVALID_VALUE, NOT_SUPPORTED, ARCH_MISMATCH: usage.
// Everything else: the backend failed.
FailureKind classify(cublasStatus_t s);

// "rank 0: cudaMemcpyAsync (download of layer3.mlp weights) failed: cudaErrorIllegalAddress: an
// illegal memory access was encountered"; without `what`, "rank 0: cudaMalloc failed: ...".
std::string cuda_failure_message(cudaError_t e, std::string_view call, std::string_view what, int rank);
// "rank 1: cublasGemmStridedBatchedEx (gemm 64x32x16) failed: CUBLAS_STATUS_INVALID_VALUE: an invalid
// numeric value was used as an argument"
std::string cublas_failure_message(cublasStatus_t s, std::string_view call, std::string_view what, int rank);

// Throws OutOfMemory, UsageError or BackendFailure (by kind) carrying `message`.
[[noreturn]] void throw_failure(FailureKind kind, const std::string& message);

// No-op on success; else throws the error of the code's kind with the message above.
void check_cuda(cudaError_t e, std::string_view call, std::string_view what, int rank);
void check_cublas(cublasStatus_t s, std::string_view call, std::string_view what, int rank);

// "" when a CUDA device can be used; else why not ("no CUDA driver (cudaGetDeviceCount:
// cudaErrorInsufficientDriver: ...)", "no CUDA device"). Never throws; works without a driver.
std::string cuda_unavailable_reason();
// The CUDA devices visible; 0 when there is none or no driver.
int cuda_device_count();

// Host polling (the waits of the CUDA device and the NCCL communicator): seconds since `start`, and
// the pause between two polls: a yield for the first millisecond (short waits end within
// microseconds), then sleeps of 20 us, of 1 ms once the wait has passed 0.1 s.
double seconds_since(std::chrono::steady_clock::time_point start);
void poll_pause(double waited_s);

struct CudaVersions {
  int runtime = 0;  // 13000 for 13.0
  int driver = 0;   // the CUDA version the driver supports; 0: no driver
  int cublas = 0;   // major * 10000 + minor * 100 + patch
};
CudaVersions cuda_versions();  // never throws
// A runtime or driver version as "13.0" (13000) or "12.4" (12040).
std::string format_cuda_version(int v);
// A cuBLAS version as "13.1.0" (130100).
std::string format_cublas_version(int v);

}  // namespace osdp::validate
