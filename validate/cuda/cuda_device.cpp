// The CUDA device (see cuda_device.hpp): streams, pooled events and host waits that poll them with a
// timeout and a watchdog; cudaMalloc behind the caching allocator; cuBLAS for GEMMs; the kernels of
// cuda_kernels.cu for the rest. GEMM: a row-major m x n matrix (leading dimension ld) is the
// column-major n x m matrix of its transpose, so C = op(A) op(B) runs as C^T = op(B)^T op(A)^T on
// cuBLAS: B in A's place and A in B's, m and n swapped, the transposes and leading dimensions kept.
#include "validate/cuda/cuda_device.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/cuda/cuda_errors.hpp"
#include "validate/cuda/cuda_kernels.hpp"

namespace osdp::validate {

using Clock = std::chrono::steady_clock;

namespace detail {

struct CudaContext {
  CudaContext(int r, int d, double timeout) : rank(r), device(d), timeout_s(timeout) {}
  ~CudaContext() {
    for (cudaEvent_t e : pool) (void)cudaEventDestroy(e);
  }

  // An event with timing from the pool, or a new one (created on the device).
  cudaEvent_t take_event() {
    {
      std::lock_guard lock(pool_mutex);
      if (!pool.empty()) {
        const cudaEvent_t e = pool.back();
        pool.pop_back();
        return e;
      }
    }
    check_cuda(cudaSetDevice(device), "cudaSetDevice", "", rank);
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreateWithFlags", "", rank);
    return e;
  }

  // Back to the pool (recording it again later is safe: a stream waiting on it waits on the record
  // it was told about).
  void give_back(cudaEvent_t e) noexcept {
    try {
      std::lock_guard lock(pool_mutex);
      pool.push_back(e);
    } catch (...) {
      (void)cudaEventDestroy(e);
    }
  }

  const int rank;
  const int device;
  std::atomic<double> timeout_s;
  std::atomic<CudaWatchdog*> watchdog{nullptr};
  std::atomic<bool> closing{false};    // the device is going: fences count as complete
  std::atomic<bool> abandoned{false};  // its work may never end: leak blocks rather than block
  std::mutex pool_mutex;
  std::vector<cudaEvent_t> pool;
};

}  // namespace detail

namespace {

thread_local CudaStream* t_current = nullptr;

// Polls `query` (cudaStreamQuery or cudaEventQuery) until it returns cudaSuccess. Every round: a
// failure throws, the watchdog is checked; past the timeout the watchdog's timed_out throws, or
// BackendFailure "rank R: <label()> did not finish within T s".
template <class Query, class Label>
void poll(const detail::CudaContext& context, Query query, std::string_view call, Label label) {
  const auto start = Clock::now();
  const double timeout = context.timeout_s.load();
  for (;;) {
    const cudaError_t e = query();
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check_cuda(e, call, label(), context.rank);
    (void)cudaGetLastError();  // "not ready" is kept as the thread's last error: clear it
    CudaWatchdog* watchdog = context.watchdog.load();
    if (watchdog != nullptr) watchdog->check();
    const double waited = seconds_since(start);
    if (waited > timeout) {
      if (watchdog != nullptr) watchdog->timed_out(waited, label());
      throw BackendFailure(
          fmt::format("rank {}: {} did not finish within {:g} s", context.rank, label(), timeout));
    }
    poll_pause(waited);
  }
}

// A freed block's last use is over when the event recorded on its stream at the free completes
// (no event: it could not be recorded, the device failed; never over for another stream). wait()
// never throws, for the allocator frees the block after it: a failed wait (the error or hang is
// reported by the stream waits) leaves the device abandoned, its blocks leaked, not freed in use.
class EventFence final : public Fence {
 public:
  EventFence(std::shared_ptr<CudaEvent> event, std::shared_ptr<detail::CudaContext> context)
      : event_(std::move(event)), context_(std::move(context)) {}
  bool done() override { return context_->closing.load() || (event_ != nullptr && event_->query()); }
  void wait() override {
    if (context_->closing.load() || context_->abandoned.load()) return;
    try {
      if (event_ != nullptr) return event_->synchronize();
    } catch (...) {
    }
    context_->abandoned = true;
  }

 private:
  const std::shared_ptr<CudaEvent> event_;
  const std::shared_ptr<detail::CudaContext> context_;
};

}  // namespace

// ---- CudaEvent ---------------------------------------------------------------------------------

CudaEvent::CudaEvent(std::shared_ptr<detail::CudaContext> context, cudaEvent_t event,
                     const std::string& stream_name, std::uint64_t sequence)
    : context_(std::move(context)), event_(event), stream_name_(stream_name), sequence_(sequence) {}

CudaEvent::~CudaEvent() {
  context_->give_back(event_);
}

std::string CudaEvent::label() const {
  return fmt::format("the work on the {} before its event {}", stream_name_, sequence_);
}

bool CudaEvent::query() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaSuccess) return true;
  if (e != cudaErrorNotReady) check_cuda(e, "cudaEventQuery", label(), context_->rank);
  (void)cudaGetLastError();
  return false;
}

void CudaEvent::wait() const {
  poll(
      *context_, [this] { return cudaEventQuery(event_); }, "cudaEventQuery", [this] { return label(); });
}

double CudaEvent::seconds_since(const Event& start) const {
  const auto* begin = dynamic_cast<const CudaEvent*>(&start);
  if (begin == nullptr) throw UsageError("seconds_since: events of different backends");
  begin->wait();
  wait();
  float ms = 0.0f;
  check_cuda(cudaEventElapsedTime(&ms, begin->event_, event_), "cudaEventElapsedTime", label(),
             context_->rank);
  return static_cast<double>(ms) / 1000.0;
}

// ---- CudaStream --------------------------------------------------------------------------------

CudaStream::CudaStream(std::string name, int index, std::shared_ptr<detail::CudaContext> context)
    : name_(std::move(name)), index_(index), context_(std::move(context)) {
  check_cuda(cudaSetDevice(context_->device), "cudaSetDevice", name_, context_->rank);
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", name_,
             context_->rank);
}

CudaStream::~CudaStream() {
  // cublasDestroy synchronizes the device: skipped when the device's work could not finish.
  if (cublas_ != nullptr && !context_->abandoned.load()) (void)cublasDestroy(cublas_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);  // returns at once even if busy
  (void)cudaGetLastError();
}

CudaStream* CudaStream::current() {
  return t_current;
}

void CudaStream::enqueue(std::function<void()> work) {
  assert(work && "enqueue: empty work");
  check_cuda(cudaSetDevice(context_->device), "cudaSetDevice", name_, context_->rank);
  // This stream is the thread's current one while `work` runs (nesting restores the outer one).
  const struct Restore {
    CudaStream* previous;
    ~Restore() { t_current = previous; }
  } restore{std::exchange(t_current, this)};
  work();
}

void CudaStream::wait(const EventPtr& event) {
  const auto* cuda_event = dynamic_cast<const CudaEvent*>(event.get());
  if (cuda_event == nullptr)
    throw UsageError(
        fmt::format("rank {}: the {} was told to wait for no CUDA event", context_->rank, name_));
  check_cuda(cudaStreamWaitEvent(stream_, cuda_event->handle(), 0), "cudaStreamWaitEvent",
             fmt::format("the {} waiting for {}", name_, cuda_event->label()), context_->rank);
}

EventPtr CudaStream::record() {
  auto event = std::make_shared<CudaEvent>(context_, context_->take_event(), name_, ++events_);
  check_cuda(cudaEventRecord(event->handle(), stream_), "cudaEventRecord", name_, context_->rank);
  return event;
}

void CudaStream::synchronize() {
  poll(
      *context_, [this] { return cudaStreamQuery(stream_); }, "cudaStreamQuery",
      [this] { return "the " + name_; });
}

bool CudaStream::drain(double timeout_s) noexcept {
  const auto start = Clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaSuccess) return true;
    (void)cudaGetLastError();
    const double waited = seconds_since(start);
    if (e != cudaErrorNotReady || waited > timeout_s) return false;
    poll_pause(waited);
  }
}

cublasHandle_t CudaStream::cublas() {
  std::call_once(cublas_once_, [this] {
    check_cuda(cudaSetDevice(context_->device), "cudaSetDevice", name_, context_->rank);
    cublasHandle_t handle = nullptr;
    check_cublas(cublasCreate(&handle), "cublasCreate", name_, context_->rank);
    const cublasStatus_t s = cublasSetStream(handle, stream_);
    if (s != CUBLAS_STATUS_SUCCESS) {
      (void)cublasDestroy(handle);
      check_cublas(s, "cublasSetStream", name_, context_->rank);
    }
    cublas_ = handle;
  });
  return cublas_;
}

// ---- CudaDevice: construction, memory ----------------------------------------------------------

CudaDevice::CudaDevice(CudaDeviceOptions options) : options_(options) {
  const int rank = options_.rank;
  assert(options_.timeout_s > 0.0);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) (void)cudaGetLastError();
  check_cuda(e, "cudaGetDeviceCount", "", rank);
  if (options_.device < 0 || options_.device >= count) {
    throw UsageError(fmt::format("rank {}: CUDA device {} does not exist ({} device{})", rank,
                                 options_.device, count, count == 1 ? "" : "s"));
  }
  context_ = std::make_shared<detail::CudaContext>(rank, options_.device, options_.timeout_s);
  use_device();
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, options_.device), "cudaGetDeviceProperties");
  l2_bytes_ = prop.l2CacheSize > 0 ? static_cast<std::size_t>(prop.l2CacheSize) : 0;
  const CudaVersions v = cuda_versions();
  name_ = fmt::format(
      "{} (sm_{}{}, {:.1f} GiB, CUDA runtime {}, driver {}, cuBLAS {})", prop.name, prop.major, prop.minor,
      static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), format_cuda_version(v.runtime),
      format_cuda_version(v.driver), format_cublas_version(v.cublas));
  // Stream-ordered scratch (the bf16 GEMM's operands) stays in the device's pool between steps rather
  // than going back to the driver at every synchronization.
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, options_.device), "cudaDeviceGetDefaultMemPool");
  std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  compute_ = std::make_unique<CudaStream>("compute stream", 0, context_);
  if (options_.comm_stream) comm_ = std::make_unique<CudaStream>("comm stream", 1, context_);

  auto raw_allocate = [this, pool](std::size_t bytes) -> void* {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status != cudaErrorMemoryAllocation) {
      check(status, "cudaMalloc", fmt::format("{} B", bytes));
      return p;
    }
    (void)cudaGetLastError();
    // The allocator frees its cache and retries (or throws OutOfMemory); cudaFree waits for all the
    // GPU's work: the streams finish first (timeout, watchdog), so a hang throws rather than blocks.
    compute_->synchronize();
    if (comm_) comm_->synchronize();
    (void)cudaMemPoolTrimTo(pool, 0);  // and the stream-ordered scratch goes back to the driver
    return nullptr;
  };
  auto raw_free = [context = context_.get()](void* p) {
    if (context->abandoned.load()) return;  // cudaFree would wait for work that may never end
    if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
  };
  allocator_ = std::make_unique<CachingAllocator>(std::move(raw_allocate), std::move(raw_free),
                                                  options_.capacity_bytes, fmt::format("rank {}", rank));
}

CudaDevice::~CudaDevice() {
  (void)cudaSetDevice(options_.device);
  const auto start = Clock::now();
  const double timeout = context_->timeout_s.load();  // for both streams together
  bool drained = compute_->drain(timeout);
  if (comm_) drained = comm_->drain(std::max(0.0, timeout - seconds_since(start))) && drained;
  context_->closing = true;
  if (!drained) context_->abandoned = true;
  allocator_.reset();
  comm_.reset();
  compute_.reset();
  (void)cudaGetLastError();
}

void CudaDevice::set_watchdog(CudaWatchdog* watchdog) {
  context_->watchdog = watchdog;
}

void CudaDevice::set_timeout(double seconds) {
  assert(seconds > 0.0);
  context_->timeout_s = seconds;
}

double CudaDevice::timeout() const {
  return context_->timeout_s.load();
}

void CudaDevice::use_device() const {
  check(cudaSetDevice(options_.device), "cudaSetDevice");
}

void CudaDevice::check(cudaError_t e, std::string_view call, std::string_view what) const {
  check_cuda(e, call, what, options_.rank);
}

CudaStream& CudaDevice::own(Stream& s) const {
  auto* cuda_stream = dynamic_cast<CudaStream*>(&s);
  if (cuda_stream == nullptr || (cuda_stream != compute_.get() && cuda_stream != comm_.get()))
    throw UsageError(fmt::format("rank {}: a kernel on a stream of another device", options_.rank));
  // Inside enqueue the device is current already; elsewhere (the host thread) make it so.
  if (CudaStream::current() != cuda_stream) use_device();
  return *cuda_stream;
}

CudaStream* CudaDevice::current_stream() const {
  CudaStream* current = CudaStream::current();
  if (current != nullptr && (current == compute_.get() || current == comm_.get())) return current;
  use_device();
  return nullptr;
}

float* CudaDevice::allocate(std::size_t bytes, std::string_view what) {
  const CudaStream* current = current_stream();
  return static_cast<float*>(allocator_->allocate(bytes, what, current != nullptr ? current->index() : 0));
}

void CudaDevice::deallocate(float* p) {
  if (p == nullptr) return;
  // The kernels enqueued so far on the stream may still read or write the block: an event fences
  // it. Destructors free buffers, so a failed device gives no event rather than an exception.
  CudaStream* stream = compute_.get();
  std::shared_ptr<CudaEvent> event;
  try {
    if (CudaStream* current = current_stream(); current != nullptr) stream = current;
    event = std::static_pointer_cast<CudaEvent>(stream->record());
  } catch (...) {
  }
  allocator_->deallocate(p, stream->index(), std::make_shared<EventFence>(std::move(event), context_));
}

MemoryStats CudaDevice::memory() const {
  const AllocatorStats a = allocator_->stats();
  use_device();
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return MemoryStats{a.current_bytes, a.peak_bytes, a.live, free, total};
}

double CudaDevice::now_s() const {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// ---- kernels -----------------------------------------------------------------------------------

void CudaDevice::fill(Stream& s, float* y, std::size_t n, float value) {
  check(cuda_kernels::fill(own(s).handle(), y, n, value), "the fill kernel");
}

void CudaDevice::copy(Stream& s, const float* x, float* y, std::size_t n) {
  const cudaStream_t stream = own(s).handle();
  if (n != 0)
    check(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync",
          "copy");
}

void CudaDevice::relu(Stream& s, const float* x, float* y, std::size_t n) {
  check(cuda_kernels::relu(own(s).handle(), x, y, n), "the relu kernel");
}

void CudaDevice::relu_backward(Stream& s, const float* x, const float* dy, float* dx, std::size_t n) {
  check(cuda_kernels::relu_backward(own(s).handle(), x, dy, dx, n), "the relu_backward kernel");
}

void CudaDevice::gated(Stream& s, const float* g, const float* u, float* y, std::size_t n) {
  check(cuda_kernels::gated(own(s).handle(), g, u, y, n), "the gated kernel");
}

void CudaDevice::gated_backward(Stream& s, const float* g, const float* u, const float* dy, float* dg,
                                float* du, std::size_t n) {
  check(cuda_kernels::gated_backward(own(s).handle(), g, u, dy, dg, du, n), "the gated_backward kernel");
}

void CudaDevice::touch(Stream& s, float* y, std::size_t n) {
  check(cuda_kernels::touch(own(s).handle(), y, n, 1.0f), "the touch kernel");
}

void CudaDevice::add_folded(Stream& s, const float* v, std::size_t len, std::size_t offset, float* out,
                            std::size_t period, std::size_t samples) {
  assert(period > 0);
  check(cuda_kernels::add_folded(own(s).handle(), v, len, offset, out, period, samples),
        "the add_folded kernel");
}

void CudaDevice::sum_folded(Stream& s, const float* dout, std::size_t period, std::size_t samples,
                            std::size_t offset, float* dv, std::size_t len) {
  assert(period > 0);
  check(cuda_kernels::sum_folded(own(s).handle(), dout, period, samples, offset, dv, len),
        "the sum_folded kernel");
}

void CudaDevice::gather_columns(Stream& s, const float* table, std::int64_t vocab, std::int64_t c0,
                                std::int64_t cols, const std::int32_t* tokens, std::int64_t n_rows, float* y,
                                std::int64_t ldy) {
  assert(ldy >= cols);
  check(cuda_kernels::gather_columns(own(s).handle(), table, vocab, c0, cols, tokens, n_rows, y, ldy),
        "the gather_columns kernel");
}

void CudaDevice::scatter_add_columns(Stream& s, const float* dy, std::int64_t ldy, const std::int32_t* tokens,
                                     std::int64_t n_rows, std::int64_t c0, std::int64_t cols, float* dtable,
                                     std::int64_t vocab) {
  assert(ldy >= cols);
  check(cuda_kernels::scatter_add_columns(own(s).handle(), dy, ldy, tokens, n_rows, c0, cols, dtable, vocab),
        "the scatter_add_columns kernel");
}

void CudaDevice::gather_rows(Stream& s, const float* x, std::int64_t ldx, const std::int32_t* index,
                             std::int64_t n, std::int64_t width, const float* w, float* y, std::int64_t ldy) {
  check(cuda_kernels::gather_rows(own(s).handle(), x, ldx, index, n, width, w, y, ldy),
        "the gather_rows kernel");
}

void CudaDevice::scatter_add_rows(Stream& s, const float* x, std::int64_t ldx, const std::int32_t* index,
                                  std::int64_t n, std::int64_t width, const float* w, float* y,
                                  std::int64_t ldy) {
  check(cuda_kernels::scatter_add_rows(own(s).handle(), x, ldx, index, n, width, w, y, ldy),
        "the scatter_add_rows kernel");
}

void CudaDevice::row_dots(Stream& s, const float* a, std::int64_t lda, const std::int32_t* index,
                          const float* b, std::int64_t ldb, std::int64_t n, std::int64_t width, float* out) {
  check(cuda_kernels::row_dots(own(s).handle(), a, lda, index, b, ldb, n, width, out), "the row_dots kernel");
}

void CudaDevice::mse_onehot(Stream& s, float* logits, std::int64_t rows, std::int64_t vocab,
                            const std::int32_t* targets, float scale, float* loss_out) {
  check(cuda_kernels::mse_onehot(own(s).handle(), logits, rows, vocab, targets, scale, loss_out),
        "the mse_onehot kernel");
}

void CudaDevice::adam(Stream& s, float* w, const float* g, float* m, float* v, std::size_t n,
                      const AdamParams& p) {
  assert(p.step >= 1);
  check(cuda_kernels::adam(own(s).handle(), w, g, m, v, n, p.beta1, p.beta2, p.eps, p.step_size(),
                           p.inv_sqrt_bias2()),
        "the adam kernel");
}

void CudaDevice::download(Stream& s, const float* x, float* host, std::size_t n) {
  CudaStream& stream = own(s);
  if (n == 0) return;
  check(cudaMemcpyAsync(host, x, n * sizeof(float), cudaMemcpyDeviceToHost, stream.handle()),
        "cudaMemcpyAsync", "download");
  stream.synchronize();
}

void CudaDevice::upload(Stream& s, const float* host, float* x, std::size_t n) {
  CudaStream& stream = own(s);
  if (n == 0) return;
  check(cudaMemcpyAsync(x, host, n * sizeof(float), cudaMemcpyHostToDevice, stream.handle()),
        "cudaMemcpyAsync", "upload");
  stream.synchronize();
}

void CudaDevice::spin(Stream& s, double seconds) {
  check(cuda_kernels::spin(own(s).handle(), seconds), "the spin kernel");
}

}  // namespace osdp::validate
