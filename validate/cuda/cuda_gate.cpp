// CudaDevice::hold: a kernel on the stream polls a flag in pinned, mapped host memory; the host sets
// it when the gate opens. The kernel gives up after the device timeout, so a gate never opened
// cannot hang the GPU. The flag is freed only once the kernel has finished reading it.
#include <atomic>

#include <cuda_runtime_api.h>

#include "validate/cuda/cuda_device.hpp"
#include "validate/cuda/cuda_errors.hpp"
#include "validate/cuda/cuda_kernels.hpp"

namespace osdp::validate {
namespace {

class CudaGate final : public StreamGate {
 public:
  CudaGate(int device, int rank, cudaStream_t stream, double max_seconds) : device_(device), rank_(rank) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice", "a stream gate", rank_);
    check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(int), cudaHostAllocMapped),
               "cudaHostAlloc", "a stream gate's flag", rank_);
    *host_ = 0;
    int* on_device = nullptr;
    try {
      check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&on_device), host_, 0),
                 "cudaHostGetDevicePointer", "a stream gate's flag", rank_);
      check_cuda(cuda_kernels::wait_for_flag(stream, on_device, max_seconds), "the gate kernel",
                 "a stream gate", rank_);
      check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate", "a stream gate",
                 rank_);
      check_cuda(cudaEventRecord(done_, stream), "cudaEventRecord", "a stream gate", rank_);
    } catch (...) {
      open();     // a kernel already launched ends at once
      release();  // cudaFreeHost waits for the device
      throw;
    }
  }
  ~CudaGate() override {
    open();
    release();
  }
  CudaGate(const CudaGate&) = delete;
  CudaGate& operator=(const CudaGate&) = delete;

  void open() override {
    if (host_ != nullptr) std::atomic_ref<int>(*host_).store(1, std::memory_order_release);
  }

 private:
  // Never throws: waits for the kernel (it reads the flag) before the flag is freed; if the wait
  // fails the device is broken and the flag is left allocated.
  void release() noexcept {
    if (done_ != nullptr) {
      cudaSetDevice(device_);
      if (cudaEventSynchronize(done_) != cudaSuccess) {
        cudaEventDestroy(done_);
        host_ = nullptr;
        return;
      }
      cudaEventDestroy(done_);
      done_ = nullptr;
    }
    if (host_ != nullptr) cudaFreeHost(host_);
    host_ = nullptr;
  }

  int device_, rank_;
  int* host_ = nullptr;
  cudaEvent_t done_ = nullptr;
};

}  // namespace

std::unique_ptr<StreamGate> CudaDevice::hold(Stream& s) {
  CudaStream& stream = own(s);
  return std::make_unique<CudaGate>(options().device, options().rank, stream.handle(), timeout());
}

}  // namespace osdp::validate
