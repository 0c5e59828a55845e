// The CPU device of the `mpi` backend: host memory behind a tracking allocator with an optional
// capacity, streams that are worker threads running closures in FIFO order (CUDA stream semantics:
// waits on events, recorded events, the first error kept and every later event failed), and the
// kernels written with Eigen on one thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "validate/executor/backend.hpp"
#include "validate/executor/caching_allocator.hpp"

namespace osdp::validate {

struct CpuDeviceOptions {
  std::size_t capacity_bytes = 0;  // 0 = unlimited
  bool comm_thread = true;         // false: comm_stream() is the compute stream (one thread)
  int rank = 0;                    // names this rank in error messages
};

// A cache size as sysfs writes it ("48K", "2048K", "32M", "1G", a bare byte count), in bytes; 0
// when the text is not one.
std::size_t parse_cache_size(std::string_view text);

namespace detail {
// What the device, its streams and their events share (events may outlive the device).
struct CpuContext {
  explicit CpuContext(int r) : rank(r) {}
  const int rank;
  std::atomic<double> timeout_s{60.0};
};
class CpuEvent;
}  // namespace detail

// One worker thread running the enqueued work in issue order. If a closure throws, the error is kept
// (osdp::Error as thrown, anything else as BackendFailure), all later work is skipped, and every
// event recorded after it fails with that error. A wait on an event gives up after the device's
// timeout with BackendFailure "rank R: waited T s for <label>". Destroying the stream drops the
// work not started yet (its events fail) and joins the thread.
class CpuStream final : public Stream {
 public:
  CpuStream(std::string name, std::shared_ptr<detail::CpuContext> context);
  ~CpuStream() override { shutdown(); }
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  void enqueue(std::function<void()> work) override;
  void wait(const EventPtr& event) override;
  EventPtr record() override;  // labelled "the work on the <name> before its event N"
  // `label` says what the event follows ("all-gather layer3 slice 0"); it names the event when a
  // wait on it times out.
  EventPtr record(std::string label);
  void synchronize() override;  // no timeout of its own: its waits on events have one
  const std::string& name() const { return name_; }

  // Drops the work not started yet (failing its events), wakes a wait on an event and joins the
  // thread. Idempotent; the destructor calls it.
  void shutdown();

 private:
  struct Item {
    std::function<void()> work;                 // work, or
    std::shared_ptr<detail::CpuEvent> waits;    // a wait on this event, or
    std::shared_ptr<detail::CpuEvent> records;  // this event completes
  };
  void push(Item item);
  void run();
  void execute(Item& item);
  void fail(std::exception_ptr error);

  const std::string name_;
  const std::shared_ptr<detail::CpuContext> context_;
  mutable std::mutex mutex_;
  std::condition_variable queue_cv_;  // work arrived or stop
  std::condition_variable done_cv_;   // an item finished
  std::deque<Item> queue_;
  std::uint64_t issued_ = 0;       // items pushed
  std::uint64_t finished_ = 0;     // items run or skipped
  std::uint64_t events_ = 0;       // events recorded (for default labels)
  std::exception_ptr error_;       // the first error; sticky
  std::atomic<bool> stop_{false};  // shutdown asked: drop the queue, leave a wait on an event
  std::thread thread_;             // last: starts once everything above is constructed
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(CpuDeviceOptions options = {});
  ~CpuDevice() override;
  CpuDevice(const CpuDevice&) = delete;
  CpuDevice& operator=(const CpuDevice&) = delete;

  std::string name() const override;
  // The largest cache of CPU 0 in sysfs (/sys/devices/system/cpu/cpu0/cache/index*/size), shared by
  // the cores listed beside it; 0 where sysfs does not say.
  std::size_t cache_bytes() const override;
  // Timeout of every wait on an event (stream-side and Event::synchronize), default 60 s.
  void set_timeout(double seconds);
  double timeout() const;
  const CpuDeviceOptions& options() const { return options_; }

  // 64-byte aligned, contents unspecified; bytes counted as asked.
  float* allocate(std::size_t bytes, std::string_view what) override;
  void deallocate(float* p) override;
  MemoryStats memory() const override;
  void reset_peak() override;

  CpuStream& compute_stream() override { return *compute_; }
  CpuStream& comm_stream() override { return comm_ ? *comm_ : *compute_; }
  // The stream's thread spins on a flag until the gate opens.
  std::unique_ptr<StreamGate> hold(Stream& s) override;

  // Kernels run synchronously on the calling thread (work running on the stream); `s` is unused.
  void gemm(Stream& s, const Gemm& g) override;
  void fill(Stream& s, float* y, std::size_t n, float value) override;
  void copy(Stream& s, const float* x, float* y, std::size_t n) override;
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
  void download(Stream& s, const float* x, float* host, std::size_t n) override;
  void upload(Stream& s, const float* host, float* x, std::size_t n) override;
  double now_s() const override;

 private:
  const CpuDeviceOptions options_;
  std::shared_ptr<detail::CpuContext> context_;
  CachingAllocator allocator_;
  std::unique_ptr<CpuStream> compute_;
  std::unique_ptr<CpuStream> comm_;  // null without a comm thread
};

}  // namespace osdp::validate
