// The exact hybrid search's labels and their Pareto filter (search/hybrid_chains.cpp): a label is a
// partial plan of a stage, its persistent bytes, largest transient bytes and time; the filter keeps,
// per tensor-parallel degree, the labels no other beats in all three. Internal to search/: included by
// hybrid_chains.hpp, and by tests/search/test_hybrid_pareto.cpp, which holds it to brute force.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <tuple>
#include <vector>

namespace osdp::search::detail {

struct Label {
  double persistent = 0, transient = 0, time = 0;
  int parent = -1;
  int op = -1, item = -1, t = -1;
};

// The labels of one step, grouped by the item they add: run r is grown[runs[r]..runs[r + 1]), and
// rank[i] orders grown[i] as the chains first listed them (label-major, item-minor), which breaks
// ties between equal labels.
struct Grown {
  std::vector<Label> labels;
  std::vector<std::int64_t> rank;
  std::vector<std::size_t> runs{0};
  void clear() {
    labels.clear();
    rank.clear();
    runs.assign(1, 0);
  }
  void end_run() { runs.push_back(labels.size()); }
};

// Keeps the labels no other label of the same degree beats in persistent bytes, largest transient
// and time, that still fit and that `keep` accepts; appends them to the arena and returns their
// indices. `keep` is asked only of the labels no other beats: it must refuse every label worse in all
// three than one it refuses (the chains' bounds are), so the result is the same as asking all.
template <class Keep>
std::vector<int> pareto(std::vector<Label>& arena, const Grown& grown, double budget, Keep keep) {
  // Sorted by value, not through the labels: the sort is most of the search's time. Each run adds one
  // item to labels that an earlier call left in this order, so a run is mostly sorted already: the
  // runs are sorted one by one (checked first) and merged, the same order as sorting them all.
  struct Key {
    int t;
    double transient, persistent, time;
    std::int64_t rank;
    int index;
  };
  const auto less = [](const Key& x, const Key& y) {
    return std::tie(x.t, x.transient, x.persistent, x.time, x.rank) <
           std::tie(y.t, y.transient, y.persistent, y.time, y.rank);
  };
  std::vector<Key> keys, merged;
  keys.reserve(grown.labels.size());
  std::vector<std::size_t> bounds{0};
  for (std::size_t r = 0; r + 1 < grown.runs.size(); ++r) {
    for (std::size_t i = grown.runs[r]; i < grown.runs[r + 1]; ++i) {
      const Label& l = grown.labels[i];
      if (l.persistent + l.transient <= budget)
        keys.push_back({l.t, l.transient, l.persistent, l.time, grown.rank[i], static_cast<int>(i)});
    }
    const auto first = keys.begin() + static_cast<std::ptrdiff_t>(bounds.back());
    if (!std::is_sorted(first, keys.end(), less)) std::sort(first, keys.end(), less);
    if (keys.size() > bounds.back()) bounds.push_back(keys.size());
  }
  // Pairwise merges, log(runs) rounds.
  while (bounds.size() > 2) {
    merged.resize(keys.size());
    std::vector<std::size_t> next{0};
    for (std::size_t r = 0; r + 1 < bounds.size(); r += 2) {
      const auto at = [&](std::size_t b) { return keys.begin() + static_cast<std::ptrdiff_t>(bounds[b]); };
      const auto out = merged.begin() + static_cast<std::ptrdiff_t>(bounds[r]);
      if (r + 2 < bounds.size()) {
        std::merge(at(r), at(r + 1), at(r + 1), at(r + 2), out, less);
        next.push_back(bounds[r + 2]);
      } else {
        std::copy(at(r), at(r + 1), out);
        next.push_back(bounds[r + 1]);
      }
    }
    keys.swap(merged);
    bounds.swap(next);
  }
  // One sweep in that order. Per degree, `stair` holds the labels kept from the transients before
  // the current one, as a staircase (persistent ascending, time descending); a label is beaten when
  // one there with no more persistent bytes, or one before it of its own transient (no more bytes by
  // the order), takes no more time. The transient's kept labels join the staircase when it ends.
  std::vector<int> out;
  std::vector<std::pair<double, double>> stair, joined, group;  // (persistent, time)
  const auto flush = [&] {
    joined.clear();
    std::merge(stair.begin(), stair.end(), group.begin(), group.end(), std::back_inserter(joined));
    stair.clear();
    for (const auto& q : joined)
      if (stair.empty() || q.second < stair.back().second) stair.push_back(q);
    group.clear();
  };
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::size_t at = 0;
  double group_least = kNone;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const Key& l = keys[k];
    const bool new_degree = k == 0 || l.t != keys[k - 1].t;
    const bool new_transient = new_degree || l.transient != keys[k - 1].transient;
    if (new_degree) {
      stair.clear();
      group.clear();
    } else if (new_transient) {
      flush();
    }
    if (new_transient) {  // walk the staircase from its start
      at = 0;
      group_least = kNone;
    }
    while (at < stair.size() && stair[at].first <= l.persistent) ++at;
    const double before = at > 0 ? stair[at - 1].second : kNone;
    if (std::min(before, group_least) <= l.time) continue;
    group_least = l.time;
    group.emplace_back(l.persistent, l.time);
    const Label& kept = grown.labels[static_cast<std::size_t>(l.index)];
    if (!keep(kept)) continue;
    arena.push_back(kept);
    out.push_back(static_cast<int>(arena.size()) - 1);
  }
  return out;
}

}  // namespace osdp::search::detail
