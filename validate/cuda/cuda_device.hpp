// The CUDA device of the `nccl` backend: device memory behind the caching allocator (freed blocks
// fenced by CUDA events on the stream that last used them), cuBLAS GEMMs and the kernels of
// cuda_kernels.cu launched asynchronously on CUDA streams, CUDA events (pooled) for ordering and
// timing, and host waits that poll with a timeout and a watchdog (the NCCL communicator, whose
// errors are asynchronous).
//
// Stream semantics (validate/backend.hpp): enqueue(work) runs `work` at once on the calling thread,
// with this stream as the thread's current stream; its kernels run later, in order, on the GPU. An
// exception thrown by `work` propagates to the caller of enqueue.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "validate/cuda/cuda_errors.hpp"  // cuda_unavailable_reason, cuda_versions
#include "validate/executor/backend.hpp"
#include "validate/executor/caching_allocator.hpp"

namespace osdp::validate {

// Something the device polls while the host waits on a stream or an event: the NCCL communicator,
// whose errors are asynchronous.
class CudaWatchdog {
 public:
  virtual ~CudaWatchdog() = default;
  // Throws BackendFailure (after aborting what must be aborted) when an asynchronous error is pending.
  virtual void check() = 0;
  // Called once when a wait has passed the device timeout: aborts and throws BackendFailure naming
  // the rank and the operation in flight. `waiting_for` says what the host waited for.
  [[noreturn]] virtual void timed_out(double waited_s, const std::string& waiting_for) = 0;
};

struct CudaDeviceOptions {
  int device = 0;                  // CUDA device index
  std::size_t capacity_bytes = 0;  // 0: no cap of osdp's own (the GPU's memory is the cap)
  bool comm_stream = true;         // false: comm_stream() is the compute stream
  int rank = 0;                    // names this rank in error messages
  double timeout_s = 60;           // every host wait on a stream or event
};

namespace detail {
struct CudaContext;  // what the device, its streams and events share (events may outlive the device)
}

// An event recorded on a stream (a pooled cudaEvent_t with timing; back to the pool when released).
class CudaEvent final : public Event {
 public:
  CudaEvent(std::shared_ptr<detail::CudaContext> context, cudaEvent_t event, const std::string& stream_name,
            std::uint64_t sequence);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // Polls until the event completes (watchdog checked, the device's timeout).
  void synchronize() override { wait(); }
  // Waits for both events, then cudaEventElapsedTime.
  double seconds_since(const Event& start) const override;
  // True when the work before the event is done; throws when it failed.
  bool query() const;
  cudaEvent_t handle() const { return event_; }
  // "the work on the compute stream before its event 12"
  std::string label() const;

 private:
  void wait() const;

  const std::shared_ptr<detail::CudaContext> context_;
  const cudaEvent_t event_;
  const std::string stream_name_;
  const std::uint64_t sequence_;
};

// A CUDA stream (non-blocking with respect to the legacy default stream) of a CudaDevice.
class CudaStream final : public Stream {
 public:
  // index: 0 compute, 1 comm.
  CudaStream(std::string name, int index, std::shared_ptr<detail::CudaContext> context);
  ~CudaStream() override;  // destroys the handles; the device drains the stream first
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  // Runs `work` now, with this stream current on the calling thread (and the device current).
  void enqueue(std::function<void()> work) override;
  void wait(const EventPtr& event) override;  // cudaStreamWaitEvent
  EventPtr record() override;
  // Polls cudaStreamQuery until the stream is idle: the watchdog checked every round, the device's
  // timeout (then the watchdog's timed_out, or BackendFailure "rank R: the compute stream did not
  // finish within T s").
  void synchronize() override;

  cudaStream_t handle() const { return stream_; }
  int index() const { return index_; }
  const std::string& name() const { return name_; }
  // This stream's cuBLAS handle (created on first use, bound to the stream).
  cublasHandle_t cublas();
  // The stream whose work runs on this thread (inside enqueue), or null.
  static CudaStream* current();
  // Waits for the stream without throwing and without the watchdog; false when it did not finish
  // within `timeout_s` or failed.
  bool drain(double timeout_s) noexcept;

 private:
  const std::string name_;
  const int index_;
  const std::shared_ptr<detail::CudaContext> context_;
  cudaStream_t stream_ = nullptr;
  std::once_flag cublas_once_;
  cublasHandle_t cublas_ = nullptr;
  std::atomic<std::uint64_t> events_{0};  // events recorded (their labels)
};

class CudaDevice final : public Device {
 public:
  // Throws UsageError when there is no such device (or no driver), the error of check_cuda otherwise.
  explicit CudaDevice(CudaDeviceOptions options = {});
  ~CudaDevice() override;  // drains the streams (the timeout, quietly), frees everything; never throws
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  // "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB, CUDA runtime 13.0, driver 13.0, cuBLAS 13.1.0)"
  std::string name() const override { return name_; }
  std::size_t cache_bytes() const override { return l2_bytes_; }  // cudaDeviceProp::l2CacheSize
  // Polled on every host wait; nullptr: none. It must outlive the waits (not the device).
  void set_watchdog(CudaWatchdog* watchdog);
  void set_timeout(double seconds);  // every host wait on a stream or event
  double timeout() const;
  int device_index() const { return options_.device; }
  const CudaDeviceOptions& options() const { return options_; }

  // cudaMalloc'd blocks, cached for reuse. allocate uses the current stream (compute when none); when
  // cudaMalloc fails it waits for both streams (timeout, watchdog) before the allocator returns its
  // cache to the GPU (cudaFree waits for all the GPU's work) and retries. deallocate fences the block
  // with an event recorded on the current stream; it throws only for a pointer not allocated here
  // (destructors call it): on a failed device the block gets no event (and no other stream).
  float* allocate(std::size_t bytes, std::string_view what) override;
  void deallocate(float* p) override;
  // The allocator's counts, and the driver's free and total bytes (cudaMemGetInfo).
  MemoryStats memory() const override;
  void reset_peak() override { allocator_->reset_peak(); }
  AllocatorStats allocator_stats() const { return allocator_->stats(); }

  CudaStream& compute_stream() override { return *compute_; }
  CudaStream& comm_stream() override { return comm_ ? *comm_ : *compute_; }

  // cublasGemmStridedBatchedEx: fp32 (CUBLAS_COMPUTE_32F, no TF32) or bf16 tensor cores (the operands
  // rounded to bf16 into stream-ordered scratch, fp32 sums); row-major, mapped onto cuBLAS's
  // column-major as C^T = B^T A^T.
  void gemm(Stream& s, const Gemm& g) override;
  void fill(Stream& s, float* y, std::size_t n, float value) override;
  void copy(Stream& s, const float* x, float* y, std::size_t n) override;  // x and y must not overlap
  void relu(Stream& s, const float* x, float* y, std::size_t n) override;
  void relu_backward(Stream& s, const float* x, const float* dy, float* dx, std::size_t n) override;
  void gated(Stream& s, const float* g, const float* u, float* y, std::size_t n) override;
  void gated_backward(Stream& s, const float* g, const float* u, const float* dy, float* dg, float* du,
                      std::size_t n) override;
  void touch(Stream& s, float* y, std::size_t n) override;
  void add_folded(Stream& s, const float* v, std::size_t len, std::size_t offset, float* out,
                  std::size_t period, std::size_t samples) override;
  void sum_folded(Stream& s, const float* dout, std::size_t period, std::size_t samples, std::size_t offset,
                  float* dv, std::size_t len) override;
  void gather_columns(Stream& s, const float* table, std::int64_t vocab, std::int64_t c0, std::int64_t cols,
                      const std::int32_t* tokens, std::int64_t n_rows, float* y, std::int64_t ldy) override;
  void gather_rows(Stream& s, const float* x, std::int64_t ldx, const std::int32_t* index, std::int64_t n,
                   std::int64_t width, const float* w, float* y, std::int64_t ldy) override;
  void scatter_add_rows(Stream& s, const float* x, std::int64_t ldx, const std::int32_t* index,
                        std::int64_t n, std::int64_t width, const float* w, float* y,
                        std::int64_t ldy) override;
  void row_dots(Stream& s, const float* a, std::int64_t lda, const std::int32_t* index, const float* b,
                std::int64_t ldb, std::int64_t n, std::int64_t width, float* out) override;
  void scatter_add_columns(Stream& s, const float* dy, std::int64_t ldy, const std::int32_t* tokens,
                           std::int64_t n_rows, std::int64_t c0, std::int64_t cols, float* dtable,
                           std::int64_t vocab) override;
  void mse_onehot(Stream& s, float* logits, std::int64_t rows, std::int64_t vocab,
                  const std::int32_t* targets, float scale, float* loss_out) override;
  void adam(Stream& s, float* w, const float* g, float* m, float* v, std::size_t n,
            const AdamParams& p) override;
  // cudaMemcpyAsync on the stream, then the host waits for the stream (the host buffer may go).
  void download(Stream& s, const float* x, float* host, std::size_t n) override;
  void upload(Stream& s, const float* host, float* x, std::size_t n) override;
  double now_s() const override;

  // Keeps the stream busy for `seconds` (one spinning thread): tests of timeouts, injected delays.
  void spin(Stream& s, double seconds);
  // A kernel polls a flag in mapped host memory until the gate opens (at most the device timeout).
  std::unique_ptr<StreamGate> hold(Stream& s) override;  // cuda_gate.cpp

 private:
  CudaStream& own(Stream& s) const;  // `s` as a stream of this device (else UsageError), made current
  // The thread's current stream if it is one of this device's (the device is current then); else
  // null, with the device made current.
  CudaStream* current_stream() const;
  void use_device() const;  // cudaSetDevice on the calling thread
  void check(cudaError_t e, std::string_view call, std::string_view what = {}) const;

  const CudaDeviceOptions options_;
  std::shared_ptr<detail::CudaContext> context_;
  std::string name_;
  std::size_t l2_bytes_ = 0;
  std::unique_ptr<CudaStream> compute_;
  std::unique_ptr<CudaStream> comm_;  // null without a comm stream
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace osdp::validate
