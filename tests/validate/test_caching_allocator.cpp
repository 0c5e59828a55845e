// The caching allocator both devices use: exact accounting of the bytes asked, reuse of freed
// blocks, stream order (a block freed on one stream goes to another only once its fence is done),
// the capacity, and a full device (cached blocks given back, then a retry). The device is a fake
// with a byte budget that counts its blocks.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include "costmodel/error.hpp"
#include "validate/executor/backend.hpp"
#include "validate/executor/caching_allocator.hpp"

using namespace osdp;
using namespace osdp::validate;

namespace {

struct FakeDevice {
  std::size_t budget = 1u << 30;
  std::size_t used = 0;
  std::map<void*, std::size_t> blocks;
  void* allocate(std::size_t bytes) {
    if (bytes > budget - used) return nullptr;
    void* p = std::malloc(bytes);
    blocks[p] = bytes;
    used += bytes;
    return p;
  }
  void free(void* p) {
    used -= blocks.at(p);
    blocks.erase(p);
    std::free(p);
  }
};

CachingAllocator make(FakeDevice& d, std::size_t capacity = 0) {
  return CachingAllocator([&d](std::size_t b) { return d.allocate(b); }, [&d](void* p) { d.free(p); },
                          capacity, "rank 3");
}

struct FakeFence final : Fence {
  bool finished = false;
  int waits = 0;
  bool done() override { return finished; }
  void wait() override {
    ++waits;
    finished = true;
  }
};

}  // namespace

TEST_CASE("caching allocator: counts the bytes asked, exactly, with the peak", "[validate][allocator]") {
  FakeDevice dev;
  auto alloc = make(dev);
  void* a = alloc.allocate(100, "a");
  void* b = alloc.allocate(200, "b");
  void* z = alloc.allocate(0, "empty");
  CHECK(alloc.stats().current_bytes == 300);
  CHECK(alloc.stats().peak_bytes == 300);
  CHECK(alloc.stats().live == 3);
  CHECK(z != nullptr);
  CHECK(z != a);
  alloc.deallocate(a);
  CHECK(alloc.stats().current_bytes == 200);
  CHECK(alloc.stats().peak_bytes == 300);
  alloc.reset_peak();
  CHECK(alloc.stats().peak_bytes == 200);
  alloc.deallocate(b);
  alloc.deallocate(z);
  CHECK(alloc.stats().current_bytes == 0);
  CHECK(alloc.stats().live == 0);
  // Freed blocks stay with the allocator (reserved), not with the device's user.
  CHECK(alloc.stats().reserved_bytes == 100 + 200 + 1);
  CHECK(dev.used == 301);
}

TEST_CASE("caching allocator: a freed block of the same size is reused, not asked again",
          "[validate][allocator]") {
  FakeDevice dev;
  auto alloc = make(dev);
  // Two "steps" asking the same sizes: the second asks nothing of the device.
  for (int step = 0; step < 2; ++step) {
    void* x = alloc.allocate(4096, "x");
    void* y = alloc.allocate(512, "y");
    alloc.deallocate(x);
    void* w = alloc.allocate(4096, "w");  // x's block
    CHECK(w == x);
    alloc.deallocate(y);
    alloc.deallocate(w);
  }
  CHECK(alloc.stats().device_allocations == 2);
  CHECK(alloc.stats().cache_hits == 4);
  CHECK(dev.blocks.size() == 2);
  void* other = alloc.allocate(4095, "a size not cached");
  CHECK(alloc.stats().device_allocations == 3);
  alloc.deallocate(other);
}

TEST_CASE("caching allocator: stream order decides when a block may change streams",
          "[validate][allocator]") {
  FakeDevice dev;
  auto alloc = make(dev);
  auto fence = std::make_shared<FakeFence>();
  void* p = alloc.allocate(256, "gathered weights", /*stream=*/1);
  alloc.deallocate(p, 1, fence);  // kernels on stream 1 may still read it
  void* q = alloc.allocate(256, "on the other stream", 0);
  CHECK(q != p);  // not before the fence
  CHECK(alloc.stats().device_allocations == 2);
  void* r = alloc.allocate(256, "same stream", 1);
  CHECK(r == p);  // the stream's own order makes it safe
  alloc.deallocate(r, 1, fence);
  fence->finished = true;
  void* s = alloc.allocate(256, "after the fence", 0);
  CHECK(s == p);
  CHECK(alloc.stats().device_allocations == 2);
  CHECK(fence->waits == 0);  // nobody had to wait
  alloc.deallocate(q);
  alloc.deallocate(s);
}

TEST_CASE("caching allocator: the capacity bounds the bytes in use and the error names them",
          "[validate][allocator]") {
  FakeDevice dev;
  auto alloc = make(dev, 1000);
  void* a = alloc.allocate(600, "layer0.attention.activations");
  try {
    (void)alloc.allocate(401, "layer1.mlp.gathered");
    FAIL("no OutOfMemory");
  } catch (const OutOfMemory& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("rank 3"));
    CHECK_THAT(m, Catch::Contains("layer1.mlp.gathered"));
    CHECK_THAT(m, Catch::Contains("(401 B)"));
    CHECK_THAT(m, Catch::Contains("(600 B) in use"));
    CHECK_THAT(m, Catch::Contains("(1000 B)"));
  }
  void* b = alloc.allocate(400, "fits exactly");
  CHECK(alloc.stats().current_bytes == 1000);
  alloc.deallocate(a);
  alloc.deallocate(b);
}

TEST_CASE("caching allocator: a full device gets the cached blocks back, then the error",
          "[validate][allocator]") {
  FakeDevice dev;
  dev.budget = 1024;
  auto alloc = make(dev);
  auto fence = std::make_shared<FakeFence>();
  void* a = alloc.allocate(512, "a", 0);
  alloc.deallocate(a, 0, fence);          // cached, its last use not finished
  void* b = alloc.allocate(768, "b", 1);  // 512 + 768 > 1024: release (waiting), retry
  CHECK(b != nullptr);
  CHECK(fence->waits == 1);
  CHECK(alloc.stats().reserved_bytes == 768);
  CHECK(dev.used == 768);
  CHECK_THROWS_AS(alloc.allocate(512, "c"), OutOfMemory);
  CHECK_THROWS_WITH(alloc.allocate(512, "c"), Catch::Contains("no block of that size left"));
  CHECK(alloc.stats().current_bytes == 768);  // the failures changed nothing
  alloc.deallocate(b);
  CHECK(alloc.release_cached() == 768);
  CHECK(dev.used == 0);
}

TEST_CASE("caching allocator: a pointer it did not hand out is an error", "[validate][allocator]") {
  FakeDevice dev;
  auto alloc = make(dev);
  int x = 0;
  CHECK_THROWS_AS(alloc.deallocate(&x), Error);
  void* p = alloc.allocate(8, "p");
  alloc.deallocate(p);
  CHECK_THROWS_WITH(alloc.deallocate(p), Catch::Contains("freed twice"));
  alloc.deallocate(nullptr);  // as free(nullptr)
}

TEST_CASE("caching allocator: every block goes back to the device at the end", "[validate][allocator]") {
  FakeDevice dev;
  {
    auto alloc = make(dev);
    void* kept = alloc.allocate(64, "still live");
    alloc.deallocate(alloc.allocate(128, "cached"));
    CHECK(dev.blocks.size() == 2);
    (void)kept;
  }
  CHECK(dev.blocks.empty());
  CHECK(dev.used == 0);
}

TEST_CASE("caching allocator: current and peak follow a random trace exactly", "[validate][allocator]") {
  FakeDevice dev;
  auto alloc = make(dev);
  std::mt19937 rng(7);
  std::map<void*, std::size_t> live;
  std::map<std::size_t, int> live_of_size, most_of_size;
  std::size_t current = 0, peak = 0;
  for (int i = 0; i < 2000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      const std::size_t bytes = 64 * (1 + rng() % 8);
      void* p = alloc.allocate(bytes, "random", static_cast<int>(rng() % 2));
      REQUIRE(live.count(p) == 0);  // never two live users of one block
      live[p] = bytes;
      most_of_size[bytes] = std::max(most_of_size[bytes], ++live_of_size[bytes]);
      current += bytes;
      peak = std::max(peak, current);
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      current -= it->second;
      --live_of_size[it->second];
      alloc.deallocate(it->first, static_cast<int>(rng() % 2));
      live.erase(it);
    }
    REQUIRE(alloc.stats().current_bytes == current);
    REQUIRE(alloc.stats().peak_bytes == peak);
    REQUIRE(alloc.stats().live == live.size());
  }
  for (const auto& [p, bytes] : live) alloc.deallocate(p);
  // No fences: a cached block of the right size is always taken, so the device holds, per size,
  // as many blocks as were ever live at once, and no more.
  std::size_t expected = 0;
  for (const auto& [bytes, most] : most_of_size) expected += bytes * static_cast<std::size_t>(most);
  CHECK(alloc.stats().reserved_bytes == expected);
  CHECK(dev.used == expected);
}
