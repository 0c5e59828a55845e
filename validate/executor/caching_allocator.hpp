// The caching allocator every device uses (CPU and GPU alike): raw blocks from the device, kept for
// reuse when freed (a training step asks for the same sizes every step, so after the first step no
// block is asked of the device: no page faults on the CPU, no cudaMalloc synchronisations on a GPU),
// with exact accounting of the bytes asked (not of the blocks held) and an optional capacity.
//
// Stream order: on a GPU, a block freed by the host may still be read by kernels enqueued before the
// free. Each freed block carries the stream it was used on and a Fence that completes when that use
// is over (a CUDA event). A cached block is handed out again at once to the same stream (its order
// makes the reuse safe), to another stream only once its fence has completed. When the device is
// full the allocator waits for the fences, returns its cached blocks to the device and tries again
// before it throws OutOfMemory.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace osdp::validate {

// Completes when the work that used a freed block is over.
class Fence {
 public:
  virtual ~Fence() = default;
  virtual bool done() = 0;  // non-blocking
  virtual void wait() = 0;  // the host waits
};
using FencePtr = std::shared_ptr<Fence>;

struct AllocatorStats {
  std::size_t current_bytes = 0;   // asked by live allocations
  std::size_t peak_bytes = 0;      // the most current_bytes has been since the last reset_peak()
  std::size_t live = 0;            // live allocations
  std::size_t reserved_bytes = 0;  // held from the device: live blocks and cached ones
  std::size_t peak_reserved_bytes = 0;
  std::size_t device_allocations = 0;  // blocks asked of the device so far
  std::size_t cache_hits = 0;          // allocations served from the cache
};

class CachingAllocator {
 public:
  // Returns nullptr when the device has no room (never throws for that).
  using RawAllocate = std::function<void*(std::size_t bytes)>;
  using RawFree = std::function<void(void*)>;

  // `capacity_bytes` (0: none) bounds the bytes asked by live allocations, as a device of that size
  // would; `owner` names the rank or device in error messages ("rank 1").
  CachingAllocator(RawAllocate raw_allocate, RawFree raw_free, std::size_t capacity_bytes = 0,
                   std::string owner = "");
  ~CachingAllocator();  // returns every block (cached and live) to the device
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream` (any small integer naming a stream). Throws
  // OutOfMemory naming `what`, the bytes asked, the bytes in use and the capacity.
  void* allocate(std::size_t bytes, std::string_view what, int stream = 0);
  // `p` was last used on `stream`; `fence` (null: the use is over already) completes when it is.
  // Throws osdp::Error for a pointer this allocator did not hand out.
  void deallocate(void* p, int stream = 0, FencePtr fence = nullptr);

  AllocatorStats stats() const;
  void reset_peak();
  // Waits for the fences of cached blocks and returns them all to the device; the bytes returned.
  std::size_t release_cached();

 private:
  struct Live {
    std::size_t size;   // of the block
    std::size_t asked;  // by the caller
  };
  struct Cached {
    void* p;
    int stream;
    FencePtr fence;
  };
  void* take_cached(std::size_t bytes, int stream);
  std::size_t release_cached_locked();

  RawAllocate raw_allocate_;
  RawFree raw_free_;
  const std::size_t capacity_;
  const std::string owner_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Live> live_;
  std::unordered_map<std::size_t, std::vector<Cached>> cache_;  // bytes -> freed blocks
  AllocatorStats stats_;
};

}  // namespace osdp::validate
