// CUDA runtime and cuBLAS error codes to osdp errors; availability and versions (see cuda_errors.hpp).
#include "validate/cuda/cuda_errors.hpp"

#include <thread>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/executor/backend.hpp"

namespace osdp::validate {

namespace {

std::string compose(std::string_view call, std::string_view what, int rank, std::string_view name,
                    std::string_view text) {
  if (what.empty()) return fmt::format("rank {}: {} failed: {}: {}", rank, call, name, text);
  return fmt::format("rank {}: {} ({}) failed: {}: {}", rank, call, what, name, text);
}

}  // namespace

FailureKind classify(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation:
      return FailureKind::kOutOfMemory;
    case cudaErrorNoDevice:                    // no GPU (or none visible)
    case cudaErrorInvalidDevice:               // a device index past the GPUs there are
    case cudaErrorInsufficientDriver:          // no driver, or one older than the runtime
    case cudaErrorCallRequiresNewerDriver:     // the same, for one call
    case cudaErrorStubLibrary:                 // the toolkit's stub libcuda instead of a driver
    case cudaErrorSystemDriverMismatch:        // kernel module and user-space driver disagree
    case cudaErrorCompatNotSupportedOnDevice:  // forward compatibility not available on this GPU
    case cudaErrorDevicesUnavailable:          // GPUs in exclusive or prohibited compute mode
    case cudaErrorNoKernelImageForDevice:      // built for other architectures (CMAKE_CUDA_ARCHITECTURES)
    case cudaErrorUnsupportedPtxVersion:       // PTX newer than the driver can compile
      return FailureKind::kUsage;
    default:
      return FailureKind::kBackend;
  }
}

FailureKind classify(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return FailureKind::kOutOfMemory;
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:  // a feature (bf16 tensor cores, say) this GPU lacks
      return FailureKind::kUsage;
    default:
      return FailureKind::kBackend;
  }
}

std::string cuda_failure_message(cudaError_t e, std::string_view call, std::string_view what, int rank) {
  return compose(call, what, rank, cudaGetErrorName(e), cudaGetErrorString(e));
}

std::string cublas_failure_message(cublasStatus_t s, std::string_view call, std::string_view what, int rank) {
  return compose(call, what, rank, cublasGetStatusName(s), cublasGetStatusString(s));
}

void throw_failure(FailureKind kind, const std::string& message) {
  switch (kind) {
    case FailureKind::kOutOfMemory:
      throw OutOfMemory(message);
    case FailureKind::kUsage:
      throw UsageError(message);
    case FailureKind::kBackend:
      break;
  }
  throw BackendFailure(message);
}

void check_cuda(cudaError_t e, std::string_view call, std::string_view what, int rank) {
  if (e == cudaSuccess) return;
  throw_failure(classify(e), cuda_failure_message(e, call, what, rank));
}

void check_cublas(cublasStatus_t s, std::string_view call, std::string_view what, int rank) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw_failure(classify(s), cublas_failure_message(s, call, what, rank));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void poll_pause(double waited_s) {
  if (waited_s < 1e-3) return std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::microseconds(waited_s < 0.1 ? 20 : 1000));
}

// ---- versions and availability ------------------------------------------------------------------

std::string cuda_unavailable_reason() {
  try {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess) return count > 0 ? std::string() : std::string("no CUDA device");
    (void)cudaGetLastError();
    const std::string call =
        fmt::format("cudaGetDeviceCount: {}: {}", cudaGetErrorName(e), cudaGetErrorString(e));
    if (e == cudaErrorNoDevice) return fmt::format("no CUDA device ({})", call);
    const CudaVersions v = cuda_versions();
    if (v.driver == 0 || e == cudaErrorStubLibrary) return fmt::format("no CUDA driver ({})", call);
    if (e == cudaErrorInsufficientDriver) {
      return fmt::format("the CUDA driver (CUDA {}) is older than the runtime (CUDA {}) ({})",
                         format_cuda_version(v.driver), format_cuda_version(v.runtime), call);
    }
    return fmt::format("CUDA cannot be used ({})", call);
  } catch (...) {
    return "CUDA cannot be used (an exception while asking the runtime)";
  }
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

CudaVersions cuda_versions() {
  CudaVersions v;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  (void)cudaGetLastError();
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    v.cublas = major * 10000 + minor * 100 + patch;
  }
  return v;
}

std::string format_cuda_version(int v) {
  if (v <= 0) return "none";
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

std::string format_cublas_version(int v) {
  if (v <= 0) return "none";
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

}  // namespace osdp::validate
