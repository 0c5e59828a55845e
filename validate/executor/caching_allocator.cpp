#include "validate/executor/caching_allocator.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/units.hpp"
#include "validate/executor/backend.hpp"

namespace osdp::validate {

CachingAllocator::CachingAllocator(RawAllocate raw_allocate, RawFree raw_free, std::size_t capacity_bytes,
                                   std::string owner)
    : raw_allocate_(std::move(raw_allocate)),
      raw_free_(std::move(raw_free)),
      capacity_(capacity_bytes),
      owner_(std::move(owner)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  for (auto& [bytes, blocks] : cache_)
    for (Cached& c : blocks) {
      if (c.fence) c.fence->wait();
      raw_free_(c.p);
    }
  for (const auto& [p, block] : live_) raw_free_(p);
}

// A cached block of exactly `bytes` that `stream` may use now: one last used on the same stream, or
// one whose fence has completed. The most recently freed first (its pages are the warmest).
void* CachingAllocator::take_cached(std::size_t bytes, int stream) {
  const auto it = cache_.find(bytes);
  if (it == cache_.end()) return nullptr;
  auto& blocks = it->second;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    if (b->stream != stream && b->fence && !b->fence->done()) continue;
    void* p = b->p;
    blocks.erase(std::next(b).base());
    if (blocks.empty()) cache_.erase(it);
    return p;
  }
  return nullptr;
}

void* CachingAllocator::allocate(std::size_t bytes, std::string_view what, int stream) {
  using costmodel::format_bytes;
  std::lock_guard lock(mutex_);
  const std::string who = owner_.empty() ? std::string() : owner_ + ": ";
  if (capacity_ != 0 && bytes > capacity_ - stats_.current_bytes)
    throw OutOfMemory(fmt::format(
        "{}out of device memory for {}: asked {} ({} B) with {} ({} B) in use of a capacity of {} ({} B)",
        who, what, format_bytes(static_cast<double>(bytes)), bytes,
        format_bytes(static_cast<double>(stats_.current_bytes)), stats_.current_bytes,
        format_bytes(static_cast<double>(capacity_)), capacity_));
  const std::size_t size = std::max<std::size_t>(bytes, 1);
  void* p = take_cached(size, stream);
  if (p != nullptr) {
    ++stats_.cache_hits;
  } else {
    p = raw_allocate_(size);
    if (p == nullptr && !cache_.empty()) {
      // The device is full: give the cached blocks back (waiting for their last use) and retry.
      release_cached_locked();
      p = raw_allocate_(size);
    }
    if (p == nullptr)
      throw OutOfMemory(
          fmt::format("{}out of device memory for {}: asked {} ({} B) with {} ({} B) in use; the "
                      "device has no block of that size left",
                      who, what, format_bytes(static_cast<double>(bytes)), bytes,
                      format_bytes(static_cast<double>(stats_.current_bytes)), stats_.current_bytes));
    ++stats_.device_allocations;
    stats_.reserved_bytes += size;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  // The bytes asked are counted, not the block's size.
  live_.emplace(p, Live{size, bytes});
  stats_.current_bytes += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  stats_.live = live_.size();
  return p;
}

void CachingAllocator::deallocate(void* p, int stream, FencePtr fence) {
  if (p == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto it = live_.find(p);
  if (it == live_.end())
    throw Error(fmt::format("{}deallocate: {} was not allocated here (or was freed twice)",
                            owner_.empty() ? "" : owner_ + ": ", p));
  const Live block = it->second;
  live_.erase(it);
  stats_.current_bytes -= block.asked;
  stats_.live = live_.size();
  cache_[block.size].push_back(Cached{p, stream, std::move(fence)});
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

std::size_t CachingAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  return release_cached_locked();
}

std::size_t CachingAllocator::release_cached_locked() {
  std::size_t released = 0;
  for (auto& [size, blocks] : cache_)
    for (Cached& c : blocks) {
      if (c.fence) c.fence->wait();
      raw_free_(c.p);
      released += size;
    }
  cache_.clear();
  stats_.reserved_bytes -= released;
  return released;
}

}  // namespace osdp::validate
