// The CUDA device's memory on a real GPU (validate/cuda_device.hpp, validate/caching_allocator.hpp): the
// allocator's accounting and reuse, fences between the streams, out of memory past osdp's capacity and
// past the GPU's (the cache goes back to the GPU after the streams finished, within the timeout), and
// kernels and batched GEMM strides on buffers past 2^31 elements (64-bit indexing). Without a GPU
// gpu_main.cpp skips the whole file (exit 77).
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "validate/cuda/cuda_device.hpp"

namespace {

using namespace osdp::validate;
using Catch::Matchers::Contains;

constexpr std::size_t kGiB = std::size_t{1} << 30;

// `n` floats of `x` from element `at`, on the host.
std::vector<float> read(CudaDevice& dev, const float* x, std::size_t at, std::size_t n) {
  std::vector<float> host(n);
  dev.download(dev.compute_stream(), x + at, host.data(), n);
  return host;
}

// True when the GPU has `bytes` free (and 1 GiB to spare); else says that the test is skipped.
bool has_free(CudaDevice& dev, std::size_t bytes) {
  const std::size_t free = dev.memory().device_free;
  if (free >= bytes + kGiB) return true;
  WARN("skipped: the GPU has " << free << " B free, the test needs " << bytes << " B");
  return false;
}

}  // namespace

TEST_CASE("the device names the GPU, counts the bytes asked and reuses freed blocks",
          "[gpu][device][memory]") {
  CudaDevice dev;
  INFO(dev.name());
  CHECK_THAT(dev.name(),
             Contains("(sm_") && Contains("GiB") && Contains("CUDA runtime") && Contains("cuBLAS"));
  CHECK(cuda_versions().driver > 0);
  const MemoryStats before = dev.memory();
  CHECK(before.device_total > 0);
  CHECK(before.device_free > 0);
  CHECK(before.device_free <= before.device_total);
  const auto step = [&] {
    dev.compute_stream().enqueue([&] {
      float* a = dev.allocate(1000, "a");
      float* b = dev.allocate(4096, "b");
      dev.fill(dev.compute_stream(), b, 1024, 1.0f);
      dev.deallocate(a);
      float* c = dev.allocate(1000, "c");  // a's block: same size, same stream
      dev.deallocate(b);
      dev.deallocate(c);
    });
  };
  step();
  const AllocatorStats first = dev.allocator_stats();
  CHECK(first.current_bytes == 0);
  CHECK(first.peak_bytes == 5096);
  CHECK(first.live == 0);
  CHECK(first.device_allocations == 2);
  step();
  const AllocatorStats second = dev.allocator_stats();
  CHECK(second.device_allocations == first.device_allocations);
  CHECK(second.cache_hits > first.cache_hits);
  CHECK(second.peak_bytes == 5096);
  float* p = dev.allocate(333, "odd");
  const MemoryStats m = dev.memory();
  CHECK(m.current_bytes == 333);
  CHECK(m.allocations == 1);
  dev.reset_peak();
  CHECK(dev.memory().peak_bytes == 333);
  dev.deallocate(p);
  dev.compute_stream().synchronize();
}

TEST_CASE("a block freed on one stream goes to the other only once its use is over",
          "[gpu][device][memory]") {
  CudaDevice dev;
  float* p = dev.allocate(4096, "p");  // on the compute stream
  dev.spin(dev.compute_stream(), 0.5);
  dev.deallocate(p);  // fenced behind the spin
  float* q = nullptr;
  dev.comm_stream().enqueue([&] { q = dev.allocate(4096, "q"); });
  CHECK(q != p);
  CHECK(dev.allocator_stats().device_allocations == 2);
  dev.compute_stream().synchronize();
  float* r = nullptr;
  dev.comm_stream().enqueue([&] { r = dev.allocate(4096, "r"); });
  CHECK(r == p);  // the fence has completed
  CHECK(dev.allocator_stats().device_allocations == 2);
  dev.deallocate(q);
  dev.deallocate(r);
}

TEST_CASE("past the capacity allocate throws OutOfMemory naming the buffer and the bytes",
          "[gpu][device][memory]") {
  CudaDeviceOptions options;
  options.capacity_bytes = 1 << 20;
  options.rank = 2;
  CudaDevice dev(options);
  float* a = dev.allocate(512 * 1024, "layer2 weights");
  CHECK_THROWS_AS(dev.allocate(768 * 1024, "layer3.mlp activations"), OutOfMemory);
  CHECK_THROWS_WITH(dev.allocate(768 * 1024, "layer3.mlp activations"),
                    Contains("rank 2") && Contains("layer3.mlp activations") && Contains("786432 B"));
  CHECK(dev.memory().current_bytes == 512 * 1024);
  dev.deallocate(a);
  float* b = dev.allocate(768 * 1024, "layer3.mlp activations");  // fits now
  dev.deallocate(b);
}

TEST_CASE("when cudaMalloc fails the cache goes back to the GPU, then OutOfMemory names the buffer and bytes",
          "[gpu][device][memory]") {
  CudaDeviceOptions options;
  options.rank = 4;
  CudaDevice dev(options);
  float* small = dev.allocate(1 << 20, "small");
  dev.fill(dev.compute_stream(), small, (1 << 20) / sizeof(float), 1.0f);
  dev.deallocate(small);  // cached, fenced behind the fill
  CHECK(dev.allocator_stats().reserved_bytes == 1 << 20);
  const std::size_t huge = dev.memory().device_total + 16 * kGiB;  // more than the GPU has
  CHECK_THROWS_AS(dev.allocate(huge, "layer7.mlp activations"), OutOfMemory);
  CHECK_THROWS_WITH(dev.allocate(huge, "layer7.mlp activations"), Contains("rank 4") &&
                                                                      Contains("layer7.mlp activations") &&
                                                                      Contains(std::to_string(huge) + " B"));
  const AllocatorStats after = dev.allocator_stats();
  CHECK(after.reserved_bytes == 0);  // the cached block went back to the GPU before the retry
  CHECK(after.current_bytes == 0);
  CHECK(after.live == 0);
  float* again = dev.allocate(1 << 20, "again");  // the device goes on
  dev.fill(dev.compute_stream(), again, 4, 2.0f);
  CHECK(read(dev, again, 0, 4) == std::vector<float>(4, 2.0f));
  dev.deallocate(again);

  // Returning the cache waits for the GPU's work (cudaFree would wait for all of it): a stream that
  // does not finish fails within the timeout, naming the rank and the stream, instead of blocking.
  dev.set_timeout(0.3);
  dev.spin(dev.comm_stream(), 3.0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(dev.allocate(huge, "layer7.mlp activations"),
                    Contains("rank 4: the comm stream did not finish within 0.3 s"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 2.0);
  dev.set_timeout(30);
  dev.comm_stream().synchronize();
}

TEST_CASE("kernels and batched GEMM strides reach past 2^31 elements", "[gpu][device][memory][large]") {
  CudaDevice dev;
  CudaStream& s = dev.compute_stream();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SECTION("elementwise kernels over 2^31 + 33 floats (8 GiB)") {
    const std::size_t n = (std::size_t{1} << 31) + 33;
    if (!has_free(dev, n * sizeof(float))) return;
    float* x = dev.allocate(n * sizeof(float), "large buffer");
    // A 32-bit index stops short of 2^31 or wraps to a negative offset (an illegal address).
    const std::size_t edges[] = {0, (std::size_t{1} << 31) - 1, std::size_t{1} << 31, n - 1};
    dev.fill(s, x, n, -2.0f);
    for (const std::size_t at : edges) CHECK(read(dev, x, at, 1)[0] == -2.0f);
    dev.relu(s, x, x, n);  // in place
    for (const std::size_t at : edges) CHECK(read(dev, x, at, 1)[0] == 0.0f);
    dev.fill(s, x, n, 3.0f);
    dev.touch(s, x, n);
    CHECK(read(dev, x, n - 40, 40) == std::vector<float>(40, 3.0f));
    dev.deallocate(x);
  }
  SECTION("C matrices 2^30 + 5 floats apart: the third starts past 2^31 (12 GiB)") {
    // A and B packed (batch after batch), C's matrices far apart with NaN around and in them (beta = 0).
    const std::int64_t m = 8, n = 4, k = 16, stride = (std::int64_t{1} << 30) + 5, batch = 3;
    const auto total = static_cast<std::size_t>(stride * batch);
    if (!has_free(dev, total * sizeof(float))) return;
    const auto a_elems = static_cast<std::size_t>(batch * m * k),
               b_elems = static_cast<std::size_t>(batch * k * n);
    float* a = dev.allocate(a_elems * sizeof(float), "a");
    float* b = dev.allocate(b_elems * sizeof(float), "b");
    float* c = dev.allocate(total * sizeof(float), "c");
    dev.fill(s, a, a_elems, 1.0f);
    dev.fill(s, b, b_elems, 2.0f);
    dev.fill(s, c, total, nan);
    Gemm g{.m = m, .n = n, .k = k, .a = a, .lda = k, .b = b, .ldb = n, .c = c, .ldc = n, .batch = batch};
    g.stride_a = m * k;
    g.stride_b = k * n;
    g.stride_c = stride;
    dev.gemm(s, g);
    for (std::int64_t i = 0; i < batch; ++i) {
      INFO("matrix " << i);
      const auto at = static_cast<std::size_t>(i * stride);
      CHECK(read(dev, c, at, static_cast<std::size_t>(m * n)) ==
            std::vector<float>(static_cast<std::size_t>(m * n), 2.0f * static_cast<float>(k)));
      if (i + 1 < batch) CHECK(std::isnan(read(dev, c, at + static_cast<std::size_t>(m * n), 1)[0]));
    }
    dev.deallocate(a);
    dev.deallocate(b);
    dev.deallocate(c);
  }
}

TEST_CASE("a gate holds the stream until it opens; the timed work then runs back to back",
          "[gpu][device][gate]") {
  CudaDevice dev;
  Stream& s = dev.compute_stream();
  float* y = dev.allocate(sizeof(float), "y");
  s.enqueue([&] { dev.fill(s, y, 1, 1.0f); });
  s.synchronize();
  auto gate = dev.hold(s);
  const EventPtr before = s.record();
  s.enqueue([&] { dev.fill(s, y, 1, 2.0f); });
  const EventPtr after = s.record();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(std::static_pointer_cast<CudaEvent>(after)->query());  // held
  gate->open();
  after->synchronize();
  before->synchronize();
  CHECK(after->seconds_since(*before) < 0.05);  // the fill, not the 200 ms of holding
  CHECK(read(dev, y, 0, 1)[0] == 2.0f);
  gate.reset();  // after opening: returns at once
  dev.deallocate(y);
}
