// A memo of the exact hybrid search's Pareto steps (search/hybrid_chains.cpp): the children of one
// pareto_sum call that no other beats, before `keep` is asked, by everything they depend on (the
// parents' bytes, transients, times and degrees, the rows, the degree, the budget and what the unit
// still owes). On a model of identical layers the chains of different stage starts and stages grow
// the same labels step after step and differ only in what their bounds keep: a chain that meets a
// step another has taken asks its own `keep` of that step's children instead of growing them again.
// Internal to search/: included by hybrid_chains.cpp, and by tests/search/test_hybrid_pareto.cpp.
//
// Why it is exact: a step's labels are the children no other beats (the filter), less those `keep`
// refuses; the first part depends on the key alone. A chain's cut only skips children `keep`
// refuses, and every child one of them beats, so the chains that fill the memo run without their cut
// (the children it holds are all those no other beats) and each chain's labels are the same as had
// it grown them itself.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

#include "search/internal/hybrid_pareto.hpp"

namespace osdp::search::detail {

class SumMemo {
 public:
  using Child = SumChild;
  // Holds at most about max_bytes (keys and children); past that, steps are no longer added.
  explicit SumMemo(double max_bytes) : max_bytes_(max_bytes) {}

  // The key of a pareto_sum call (every value it depends on but `keep`, bit for bit) into `key`.
  // `owed`: what fits adds to a child (persistent bytes, transient).
  static void key_of(const Staircases& ps, const std::vector<SumRow>& rows, int t, double budget,
                     double owed_persistent, double owed_transient, std::vector<double>& key) {
    key.resize(5 + 4 * ps.at.size() + 9 * rows.size());
    double* k = key.data();
    const auto put = [&k](double v) { *k++ = v; };
    put(t);
    put(budget);
    put(owed_persistent);
    put(owed_transient);
    put(static_cast<double>(ps.at.size()));
    for (const Staircases::Parent& a : ps.at) {
      put(a.persistent);
      put(a.transient);
      put(a.time);
      put(a.t);
    }
    for (const SumRow& r : rows) {
      put(static_cast<double>(r.stair));
      put(r.states);
      put(r.act);
      put(r.f);
      put(r.transient);
      put(r.time);
      put(r.item);
      put(static_cast<double>(r.rank_scale));
      put(static_cast<double>(r.rank_offset));
    }
  }

  // The children recorded under `key`, in order, if any were.
  struct Found {
    bool found = false;
    const Child *first = nullptr, *last = nullptr;
  };
  // FNV-1a-like over the bits, 64 at a time, in four independent lanes (a key holds thousands of
  // values, and one lane's chain of multiplications was a twentieth of a 70B search), then mixed.
  static std::uint64_t hash(const std::vector<double>& key) {
    const auto mix = [](std::uint64_t a, std::uint64_t x) {
      a = (a ^ x) * 1099511628211ULL;
      return a ^ (a >> 29);
    };
    std::uint64_t h[4] = {1469598103934665603ULL, 0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL,
                          0x165667b19e3779f9ULL};
    std::size_t i = 0;
    for (; i + 4 <= key.size(); i += 4)
      for (std::size_t l = 0; l < 4; ++l) h[l] = mix(h[l], std::bit_cast<std::uint64_t>(key[i + l]));
    for (; i < key.size(); ++i) h[0] = mix(h[0], std::bit_cast<std::uint64_t>(key[i]));
    std::uint64_t out = key.size();
    for (const std::uint64_t x : h) out = mix(out, x);
    return out;
  }
  // find and insert take the key's hash (hash(key)), computed once for both.
  Found find(const std::vector<double>& key, std::uint64_t h) const {
    const auto [first, last] = index_.equal_range(h);
    for (auto it = first; it != last; ++it) {
      const Entry& e = entries_[it->second];
      if (e.key.size() == key.size() &&
          std::memcmp(e.key.data(), key.data(), key.size() * sizeof(double)) == 0)
        return {true, e.children.data(), e.children.data() + e.children.size()};
    }
    return {};
  }
  void insert(const std::vector<double>& key, std::uint64_t h, const std::vector<Child>& children) {
    const double bytes = static_cast<double>(key.size() * sizeof(double) + children.size() * sizeof(Child));
    if (bytes_ + bytes > max_bytes_) return;
    bytes_ += bytes;
    index_.emplace(h, entries_.size());
    entries_.push_back({key, children});
  }

 private:
  // Each step's key and children in their own allocation: one flat store of all of them grew by
  // doubling, copying and faulting in its pages again (a quarter of a 70B search's time).
  struct Entry {
    std::vector<double> key;
    std::vector<Child> children;
  };
  double bytes_ = 0, max_bytes_;
  std::unordered_multimap<std::uint64_t, std::size_t> index_;
  std::vector<Entry> entries_;
};

}  // namespace osdp::search::detail
