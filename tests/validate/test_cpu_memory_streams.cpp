// The cpu device's tracked allocator (counts computed by hand below) and its streams: FIFO order,
// waits on events across streams, sticky errors, timeouts that name the event, and destruction that
// neither hangs nor runs the work still queued.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "validate/cpu/cpu_device.hpp"

namespace {

using namespace osdp::validate;
using namespace std::chrono_literals;

void require_stats(const CpuDevice& dev, std::size_t current, std::size_t peak, std::size_t count) {
  const MemoryStats m = dev.memory();
  CHECK(m.current_bytes == current);
  CHECK(m.peak_bytes == peak);
  CHECK(m.allocations == count);
  CHECK(m.device_free == 0);
  CHECK(m.device_total == 0);
}

// Order in which work ran, across threads.
struct Log {
  std::mutex mutex;
  std::vector<std::string> entries;
  void add(std::string entry) {
    std::lock_guard lock(mutex);
    entries.push_back(std::move(entry));
  }
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const osdp::Error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace

TEST_CASE("the allocator counts current, peak and live allocations exactly", "[device]") {
  CpuDevice dev({1000, true, 0});
  require_stats(dev, 0, 0, 0);
  float* a = dev.allocate(100, "a");
  require_stats(dev, 100, 100, 1);
  float* b = dev.allocate(300, "b");
  require_stats(dev, 400, 400, 2);
  CHECK(reinterpret_cast<std::uintptr_t>(a) % 64 == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(b) % 64 == 0);
  dev.deallocate(a);  // 300 in use, peak stays 400
  require_stats(dev, 300, 400, 1);
  float* c = dev.allocate(600, "c");  // 900
  require_stats(dev, 900, 900, 2);
  dev.deallocate(c);
  require_stats(dev, 300, 900, 1);
  dev.reset_peak();  // peak = current
  require_stats(dev, 300, 300, 1);
  dev.deallocate(nullptr);  // no-op
  require_stats(dev, 300, 300, 1);
  float* empty = dev.allocate(0, "empty");  // a live allocation of 0 bytes
  require_stats(dev, 300, 300, 2);
  float* d = dev.allocate(700, "d");  // exactly the capacity
  require_stats(dev, 1000, 1000, 3);
  dev.deallocate(d);
  dev.deallocate(empty);
  dev.deallocate(b);
  require_stats(dev, 0, 1000, 0);
}

TEST_CASE("an allocation past the capacity throws OutOfMemory naming what and the bytes", "[device]") {
  CpuDevice dev({4096, true, 2});
  float* a = dev.allocate(3000, "activations");
  REQUIRE_THROWS_AS(dev.allocate(1097, "layer3.mlp weights"), OutOfMemory);
  const std::string msg = message_of([&] { dev.allocate(1097, "layer3.mlp weights"); });
  CHECK_THAT(msg, Catch::Contains("rank 2") && Catch::Contains("layer3.mlp weights") &&
                      Catch::Contains("1097 B") && Catch::Contains("3000 B") && Catch::Contains("4096 B"));
  require_stats(dev, 3000, 3000, 1);  // the failed allocations changed nothing
  float* b = dev.allocate(1096, "fits");
  dev.deallocate(b);
  dev.deallocate(a);
}

TEST_CASE("both streams allocate concurrently without losing a count", "[device]") {
  CpuDevice dev;
  for (Stream* s : {static_cast<Stream*>(&dev.compute_stream()), static_cast<Stream*>(&dev.comm_stream())}) {
    s->enqueue([&dev] {
      for (int i = 0; i < 2000; ++i) {
        float* p = dev.allocate(static_cast<std::size_t>(4 * (i % 17 + 1)), "churn");
        dev.deallocate(p);
      }
    });
  }
  dev.compute_stream().synchronize();
  dev.comm_stream().synchronize();
  const MemoryStats m = dev.memory();
  CHECK(m.current_bytes == 0);
  CHECK(m.allocations == 0);
  CHECK(m.peak_bytes <= 2 * 4 * 17);
  CHECK(m.peak_bytes >= 4 * 17);
}

TEST_CASE("a gate holds the stream's work until it opens", "[device]") {
  CpuDevice dev(CpuDeviceOptions{0, true, 0});
  std::atomic<bool> ran{false};
  auto gate = dev.hold(dev.comm_stream());
  dev.comm_stream().enqueue([&] { ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(ran.load());
  gate->open();
  dev.comm_stream().synchronize();
  CHECK(ran.load());
  // A gate dropped unopened opens: the stream is never left held.
  auto dropped = dev.hold(dev.compute_stream());
  dropped.reset();
  dev.compute_stream().synchronize();
}

TEST_CASE("a stream runs its work in issue order on one thread", "[device]") {
  CpuDevice dev;
  std::vector<int> order;  // only the stream's thread writes it
  std::thread::id id;
  std::atomic<bool> one_thread{true};
  for (int i = 0; i < 200; ++i) {
    dev.compute_stream().enqueue([&, i] {
      if (i == 0) id = std::this_thread::get_id();
      if (std::this_thread::get_id() != id) one_thread = false;
      order.push_back(i);
    });
  }
  dev.compute_stream().synchronize();
  REQUIRE(order.size() == 200);
  for (int i = 0; i < 200; ++i) REQUIRE(order[static_cast<std::size_t>(i)] == i);
  CHECK(one_thread);
  CHECK(id != std::this_thread::get_id());
}

TEST_CASE("work on the comm stream that waits for an event runs after the compute work before it",
          "[device]") {
  CpuDevice dev;
  REQUIRE(&dev.comm_stream() != &dev.compute_stream());
  Log log;
  std::promise<void> release;
  auto released = release.get_future().share();
  dev.compute_stream().enqueue([&, released] {
    released.wait();
    log.add("compute");
  });
  auto event = dev.compute_stream().record();
  dev.comm_stream().enqueue([&] { log.add("comm before wait"); });
  dev.comm_stream().wait(event);
  dev.comm_stream().enqueue([&] { log.add("comm after wait"); });
  // Give the comm stream time to run ahead if the wait did not hold it back.
  std::this_thread::sleep_for(50ms);
  release.set_value();
  dev.comm_stream().synchronize();
  dev.compute_stream().synchronize();
  CHECK(log.entries == std::vector<std::string>{"comm before wait", "compute", "comm after wait"});
}

TEST_CASE("without a comm thread both streams are one thread in issue order", "[device]") {
  CpuDevice dev({0, false, 0});
  REQUIRE(&dev.comm_stream() == &dev.compute_stream());
  Log log;
  dev.compute_stream().enqueue([&] {
    std::this_thread::sleep_for(20ms);
    log.add("compute");
  });
  dev.comm_stream().enqueue([&] { log.add("comm"); });
  dev.comm_stream().synchronize();
  CHECK(log.entries == std::vector<std::string>{"compute", "comm"});
}

TEST_CASE("events time the work between them", "[device]") {
  CpuDevice dev;
  auto& s = dev.compute_stream();
  auto start = s.record();
  s.enqueue([] { std::this_thread::sleep_for(30ms); });
  auto end = s.record();
  end->synchronize();
  start->synchronize();
  const double seconds = end->seconds_since(*start);
  CHECK(seconds >= 0.030);
  CHECK(seconds < 2.0);
  const double t0 = dev.now_s();
  std::this_thread::sleep_for(10ms);
  CHECK(dev.now_s() - t0 >= 0.010);
}

TEST_CASE("a throwing closure fails the stream, later events and streams waiting on them", "[device]") {
  CpuDevice dev;
  auto& compute = dev.compute_stream();
  auto before = compute.record();
  bool ran_after = false;
  compute.enqueue([] { throw std::runtime_error("boom in layer 42"); });
  compute.enqueue([&] { ran_after = true; });
  auto after = compute.record();
  dev.comm_stream().wait(after);
  bool comm_ran = false;
  dev.comm_stream().enqueue([&] { comm_ran = true; });

  CHECK_NOTHROW(before->synchronize());
  CHECK_THAT(message_of([&] { compute.synchronize(); }), Catch::Contains("boom in layer 42"));
  CHECK_THAT(message_of([&] { after->synchronize(); }), Catch::Contains("boom in layer 42"));
  CHECK_THAT(message_of([&] { dev.comm_stream().synchronize(); }), Catch::Contains("boom in layer 42"));
  CHECK_FALSE(ran_after);
  CHECK_FALSE(comm_ran);
  // Sticky: the stream stays failed.
  compute.enqueue([] {});
  CHECK_THROWS_AS(compute.synchronize(), osdp::Error);
}

TEST_CASE("an osdp::Error thrown by work keeps its type", "[device]") {
  CpuDevice dev({64, true, 0});
  dev.compute_stream().enqueue([&dev] { dev.allocate(65, "too big"); });
  CHECK_THROWS_AS(dev.compute_stream().synchronize(), OutOfMemory);
}

TEST_CASE("a wait on an event past the timeout fails with the event's label", "[device]") {
  CpuDevice dev({0, true, 3});
  dev.set_timeout(0.1);
  CHECK(dev.timeout() == 0.1);
  std::promise<void> release;
  auto released = release.get_future().share();
  dev.compute_stream().enqueue([released] { released.wait(); });
  auto event = dev.compute_stream().record("all-gather layer7 slice 1");
  bool comm_ran = false;
  dev.comm_stream().wait(event);
  dev.comm_stream().enqueue([&] { comm_ran = true; });

  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THAT(message_of([&] { dev.comm_stream().synchronize(); }),
             Catch::Equals("rank 3: waited 0.1 s for all-gather layer7 slice 1"));
  CHECK_THROWS_AS(dev.comm_stream().synchronize(), BackendFailure);
  CHECK_FALSE(comm_ran);
  // The host's wait has the same timeout.
  CHECK_THAT(message_of([&] { event->synchronize(); }),
             Catch::Equals("rank 3: waited 0.1 s for all-gather layer7 slice 1"));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  // An unlabelled event says which stream and which event.
  auto unlabelled = dev.compute_stream().record();
  CHECK_THAT(message_of([&] { unlabelled->synchronize(); }),
             Catch::Contains("rank 3: waited 0.1 s for the work on the compute stream before its event"));
  release.set_value();
  CHECK_NOTHROW(event->synchronize());
  CHECK_NOTHROW(dev.compute_stream().synchronize());
}

TEST_CASE("destroying a device drops queued work and fails its events without hanging", "[device]") {
  std::atomic<int> ran{0};
  EventPtr last;
  const auto t0 = std::chrono::steady_clock::now();
  {
    CpuDevice dev;
    dev.compute_stream().enqueue([] { std::this_thread::sleep_for(100ms); });
    for (int i = 0; i < 100; ++i) dev.compute_stream().enqueue([&ran] { ++ran; });
    last = dev.compute_stream().record("the queued work");
    dev.comm_stream().wait(last);  // the comm stream is blocked in this wait when the device goes
    dev.comm_stream().enqueue([&ran] { ++ran; });
    std::this_thread::sleep_for(20ms);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(ran == 0);
  CHECK_THAT(message_of([&] { last->synchronize(); }), Catch::Contains("destroyed"));
}
