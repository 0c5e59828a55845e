// CPU streams: a worker thread per stream running enqueued closures in order, events for waits
// across streams (with the device's timeout), errors that stick to a stream and spread to waiters.
#include <algorithm>
#include <cassert>
#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "validate/cpu/cpu_device.hpp"

namespace osdp::validate {

using Clock = std::chrono::steady_clock;

namespace {

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// osdp::Error as thrown; anything else becomes a BackendFailure carrying its message.
std::exception_ptr as_error(std::exception_ptr error, int rank, const std::string& stream) {
  try {
    std::rethrow_exception(error);
  } catch (const Error&) {
    return error;
  } catch (const std::exception& e) {
    return std::make_exception_ptr(BackendFailure(fmt::format("rank {}: {}: {}", rank, stream, e.what())));
  } catch (...) {
    return std::make_exception_ptr(
        BackendFailure(fmt::format("rank {}: {}: unknown exception", rank, stream)));
  }
}

}  // namespace

namespace detail {

class CpuEvent final : public Event {
 public:
  CpuEvent(std::shared_ptr<const CpuContext> context, std::string label)
      : context_(std::move(context)), label_(std::move(label)) {}

  // The stream reached the event: success (time stamped now) when `error` is null.
  void complete(std::exception_ptr error) {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      error_ = std::move(error);
      at_ = Clock::now();
    }
    cv_.notify_all();
  }

  // Waits for completion until `deadline` (or `*stop`, checked every 20 ms). True when complete,
  // with `*error` set to its failure or null.
  bool await(Clock::time_point deadline, const std::atomic<bool>* stop, std::exception_ptr* error) {
    std::unique_lock lock(mutex_);
    while (!done_) {
      if (stop != nullptr && stop->load()) return false;
      const auto now = Clock::now();
      if (now >= deadline) return false;
      cv_.wait_until(lock,
                     stop == nullptr ? deadline : std::min(deadline, now + std::chrono::milliseconds(20)));
    }
    *error = error_;
    return true;
  }

  std::exception_ptr timeout_error(double seconds) const {
    return std::make_exception_ptr(
        BackendFailure(fmt::format("rank {}: waited {:g} s for {}", context_->rank, seconds, label_)));
  }

  void synchronize() override {
    const double timeout = context_->timeout_s.load();
    std::exception_ptr error;
    if (!await(deadline_after(timeout), nullptr, &error)) std::rethrow_exception(timeout_error(timeout));
    if (error) std::rethrow_exception(error);
  }

  double seconds_since(const Event& start) const override {
    const auto* begin = dynamic_cast<const CpuEvent*>(&start);
    assert(begin != nullptr && "seconds_since: events of different backends");
    std::scoped_lock lock(mutex_, begin->mutex_);
    assert(done_ && begin->done_ && "seconds_since: synchronize the events first");
    return std::chrono::duration<double>(at_ - begin->at_).count();
  }

 private:
  const std::shared_ptr<const CpuContext> context_;
  const std::string label_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  Clock::time_point at_{};
};

}  // namespace detail

// ---- CpuStream -------------------------------------------------------------------------------

CpuStream::CpuStream(std::string name, std::shared_ptr<detail::CpuContext> context)
    : name_(std::move(name)), context_(std::move(context)), thread_([this] { run(); }) {}

void CpuStream::push(Item item) {
  {
    std::lock_guard lock(mutex_);
    assert(!stop_ && "work enqueued on a stream that was shut down");
    queue_.push_back(std::move(item));
    ++issued_;
  }
  queue_cv_.notify_one();
}

void CpuStream::enqueue(std::function<void()> work) {
  assert(work && "enqueue: empty work");
  push(Item{std::move(work), nullptr, nullptr});
}

void CpuStream::wait(const EventPtr& event) {
  auto cpu_event = std::dynamic_pointer_cast<detail::CpuEvent>(event);
  assert(cpu_event != nullptr && "wait: not an event of the cpu device");
  push(Item{{}, std::move(cpu_event), nullptr});
}

EventPtr CpuStream::record(std::string label) {
  auto event = std::make_shared<detail::CpuEvent>(context_, std::move(label));
  push(Item{{}, nullptr, event});
  return event;
}

EventPtr CpuStream::record() {
  const std::uint64_t n = [&] {
    std::lock_guard lock(mutex_);
    return ++events_;
  }();
  return record(fmt::format("the work on the {} before its event {}", name_, n));
}

void CpuStream::synchronize() {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = issued_;
  done_cv_.wait(lock, [&] { return finished_ >= target; });
  if (error_) std::rethrow_exception(error_);
}

void CpuStream::fail(std::exception_ptr error) {
  std::lock_guard lock(mutex_);
  if (!error_) error_ = std::move(error);
}

void CpuStream::execute(Item& item) {
  const std::exception_ptr error = [&] {
    std::lock_guard lock(mutex_);
    return error_;
  }();
  if (item.records) {
    item.records->complete(error);  // failed when anything before it failed
    return;
  }
  if (error) return;  // skip everything after the first error
  if (item.work) {
    try {
      item.work();
    } catch (...) {
      fail(as_error(std::current_exception(), context_->rank, name_));
    }
    return;
  }
  const double timeout = context_->timeout_s.load();
  std::exception_ptr event_error;
  if (item.waits->await(deadline_after(timeout), &stop_, &event_error)) {
    if (event_error) fail(event_error);  // the stream fails the way the event did
  } else if (!stop_) {
    fail(item.waits->timeout_error(timeout));
  }
}

void CpuStream::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock lock(mutex_);
      queue_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    execute(item);
    item = Item{};  // release what the closure captured before reporting it done
    {
      std::lock_guard lock(mutex_);
      ++finished_;
    }
    done_cv_.notify_all();
  }
}

void CpuStream::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) return;
    stop_ = true;
  }
  queue_cv_.notify_all();
  thread_.join();
  std::deque<Item> dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.swap(queue_);
    finished_ += dropped.size();
  }
  const auto error = std::make_exception_ptr(BackendFailure(
      fmt::format("rank {}: the {} was destroyed before this work ran", context_->rank, name_)));
  for (auto& item : dropped) {
    if (item.records) item.records->complete(error);
  }
  done_cv_.notify_all();
}

}  // namespace osdp::validate
