// The exact hybrid search's labels and their Pareto filter (search/hybrid_chains.cpp): a label is a
// partial plan of a stage, its persistent bytes, largest transient bytes and time; the filter keeps,
// per tensor-parallel degree, the labels no other beats in all three. `pareto` filters labels already
// grown; `pareto_sum` grows them from their parents and filters in one pass, forming few of those
// the filter would drop. Internal to search/: included by hybrid_chains.hpp, and by
// tests/search/test_hybrid_pareto.cpp, which holds both to brute force.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
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

// Joins the labels a transient kept (`group`, persistent ascending) to the staircase of the
// transients before it (`stair`): merged by persistent bytes, each kept when it takes less time than
// every one before it. `group` is left empty; `joined` is scratch.
inline void join_staircase(std::vector<std::pair<double, double>>& stair,
                           std::vector<std::pair<double, double>>& group,
                           std::vector<std::pair<double, double>>& joined) {
  joined.clear();
  std::merge(stair.begin(), stair.end(), group.begin(), group.end(), std::back_inserter(joined));
  stair.clear();
  for (const auto& q : joined)
    if (stair.empty() || q.second < stair.back().second) stair.push_back(q);
  group.clear();
}

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
  const auto flush = [&] { join_staircase(stair, group, joined); };
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

// A child's persistent bytes: its parent's, plus an item's states and f micro-batches of its
// activations. Where the target has FMA, compilers contract the expression P + s + f a the chains
// have always written to fma(f, a, P + s) (GCC's default for C++, Clang's within an expression);
// written out, so that moving the sum elsewhere does not move its last bit.
inline double grown_persistent(double parent, double states, int f, double act) {
#ifdef FP_FAST_FMA
  return std::fma(static_cast<double>(f), act, parent + states);
#else
  return parent + states + f * act;
#endif
}

// The parents of one step, in their order, cut into staircases: runs of one degree and one largest
// transient whose persistent bytes strictly rise and times strictly fall. A Pareto filter's output is
// one staircase per degree and transient (the filter keeps a label only when it takes less time than
// every label before it of its degree and transient, and none of those has more bytes).
struct Staircases {
  struct Parent {
    double persistent, transient, time;
    int t, index;  // index: the parent's place in the arena
  };
  std::vector<Parent> at;
  std::vector<std::size_t> first;  // staircase g is at[first[g]..first[g + 1])
  std::vector<double> rise;        // per staircase, the least rise of persistent bytes in it
  static constexpr double kNoRise = std::numeric_limits<double>::infinity();

  Staircases() = default;
  Staircases(const std::vector<Label>& arena, const std::vector<int>& parents) { assign(arena, parents); }
  // Cut `parents` (their storage reused).
  void assign(const std::vector<Label>& arena, const std::vector<int>& parents) {
    at.clear();
    first.assign(1, 0);
    rise.clear();
    for (std::size_t p = 0; p < parents.size(); ++p) {
      const Label& l = arena[static_cast<std::size_t>(parents[p])];
      if (p == 0) {
        rise.push_back(kNoRise);
      } else {
        const Parent& b = at.back();
        if (l.t != b.t || l.transient != b.transient || !(l.persistent > b.persistent) ||
            !(l.time < b.time)) {
          first.push_back(p);
          rise.push_back(kNoRise);
        } else {
          rise.back() = std::min(rise.back(), l.persistent - b.persistent);
        }
      }
      at.push_back({l.persistent, l.transient, l.time, l.t, parents[p]});
    }
    if (!at.empty()) first.push_back(at.size());
  }
  std::size_t size() const { return rise.size(); }
};

// What one row of a step adds to each parent of one staircase: a child has persistent bytes
// grown_persistent(P, states, f, act), largest transient max(X, transient), time tau + time; it
// stands for (op, item) at degree t, and ranks p rank_scale + rank_offset (p: its parent's place).
// With `takes` (pareto_sum), parent p has a child in this row only when takes[p] > q.
struct SumRow {
  std::size_t stair;
  double states = 0, act = 0;
  int f = 0;
  double transient = -std::numeric_limits<double>::infinity(), time = 0;
  int op = -1, item = -1;
  std::int64_t rank_scale = 1, rank_offset = 0;
  std::size_t q = 0;
};

// The child of parent `a` in row `r` at degree `t`, as SumRow says.
inline Label grown_child(const Staircases::Parent& a, const SumRow& r, int t) {
  Label n;
  n.persistent = grown_persistent(a.persistent, r.states, r.f, r.act);
  n.transient = std::max(a.transient, r.transient);
  n.time = a.time + r.time;
  n.parent = a.index;
  n.op = r.op;
  n.item = r.item;
  n.t = t;
  return n;
}

// A child that pareto_sum's filter keeps (before `keep` is asked): its values, its parent's place
// among the parents and its row.
struct SumChild {
  double persistent, transient, time;
  std::uint32_t p, row;
};

// pareto_sum's buffers, kept from call to call (a chain makes millions of children in thousands of
// calls).
struct SumScratch {
  struct Head {  // a row's next child, and the least time of the staircase at its bytes
    double persistent, time, stair;
    std::uint32_t row, p;
  };
  std::vector<double> transient;
  std::vector<std::uint32_t> by_transient, cursor;
  std::vector<std::pair<double, double>> stair, joined, group;  // (persistent, time)
  std::vector<Head> heap;
  Grown grown;
};

// The same as growing every child of the rows (those that fit the budget, pass `fits` and `admit`)
// and filtering them with pareto, without forming most of those it would drop; the labels kept go to
// `out`. `fits` must refuse every child with more persistent bytes than one it refuses at the same
// transient (a budget does); `admit` is any test (the chains' cut). With `record`, the children the
// filter keeps, before `keep` is asked, go there in order; returns false when it could not record
// them (rows whose order rounding could upset: pareto filtered them).
//
// A row's children, in its parents' order, rise strictly in persistent bytes (checked: each parents'
// rise must outlast the rounding of the sum; else every child is grown and filtered by pareto) and
// never rise in time, at one largest transient. The rows of one transient are merged by a heap in the
// filter's order (persistent, time, rank), and swept as pareto sweeps. A child is checked against the
// labels kept before it when its row offers it, and again (against its own transient's, which may
// have grown) when it comes out of the heap. When a child is beaten by time v, or taken with time v,
// every later child of its row of time v or more is beaten: more bytes, no less time. A galloping
// search skips them unformed.
template <class Fits, class Admit, class Keep>
bool pareto_sum(std::vector<Label>& arena, const Staircases& ps, const std::vector<SumRow>& rows,
                const std::vector<std::size_t>* takes, int t, double budget, Fits fits, Admit admit,
                Keep keep, SumScratch& sc, std::vector<int>& out, std::vector<SumChild>* record = nullptr) {
  out.clear();
  if (record) record->clear();
  const auto child = [&](const SumRow& r, std::size_t p) { return grown_child(ps.at[p], r, t); };
  const auto live = [&](const SumRow& r, std::size_t p) { return !takes || (*takes)[p] > r.q; };
  const auto rank = [](const SumRow& r, std::size_t p) {
    return static_cast<std::int64_t>(p) * r.rank_scale + r.rank_offset;
  };
  const auto grows = [&](const Label& n) { return n.persistent + n.transient <= budget && fits(n); };
  // Each row's children rise strictly in persistent bytes when its parents' least rise is over what
  // rounding the sum (two roundings, each at most half an ulp of its result) can take from it.
  bool ordered = true;
  for (const SumRow& r : rows) {
    const double rise = ps.rise[r.stair];
    if (rise == Staircases::kNoRise) continue;
    const double most =
        std::fabs(ps.at[ps.first[r.stair + 1] - 1].persistent) + std::fabs(r.states) + std::fabs(r.f * r.act);
    if (!(rise > 4 * DBL_EPSILON * most)) ordered = false;
  }
  if (!ordered) {
    Grown& grown = sc.grown;
    grown.clear();
    for (const SumRow& r : rows) {
      for (std::size_t p = ps.first[r.stair]; p < ps.first[r.stair + 1]; ++p) {
        if (!live(r, p)) continue;
        const Label n = child(r, p);
        if (!grows(n) || !admit(n)) continue;
        grown.labels.push_back(n);
        grown.rank.push_back(rank(r, p));
      }
      grown.end_run();
    }
    out = pareto(arena, grown, budget, keep);
    return false;
  }

  // The rows by their children's transient.
  auto& transient = sc.transient;
  auto& by_transient = sc.by_transient;
  transient.resize(rows.size());
  by_transient.resize(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    transient[i] = std::max(ps.at[ps.first[rows[i].stair]].transient, rows[i].transient);
    by_transient[i] = static_cast<std::uint32_t>(i);
  }
  std::sort(by_transient.begin(), by_transient.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::tie(transient[a], a) < std::tie(transient[b], b);
  });
  constexpr double kNone = std::numeric_limits<double>::infinity();
  // The sweep of pareto: `stair` holds the labels kept at the transients before this one, `group`
  // those of this one, the least time of which is group_least.
  auto& stair = sc.stair;
  auto& group = sc.group;
  stair.clear();
  group.clear();
  double group_least = kNone;
  // The least time in stair within `persistent` bytes; cursor[i] is row i's place in it (its children
  // rise in bytes, so the place only moves on: galloping from it).
  auto& cursor = sc.cursor;
  cursor.assign(rows.size(), 0);
  const auto stair_at = [&](std::size_t i, double persistent) {
    std::size_t lo = cursor[i], hi = lo, step = 1;
    while (hi < stair.size() && stair[hi].first <= persistent) {
      lo = hi + 1;
      hi += step;
      step *= 2;
    }
    hi = std::min(hi, stair.size());
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (stair[mid].first <= persistent)
        lo = mid + 1;
      else
        hi = mid;
    }
    cursor[i] = static_cast<std::uint32_t>(lo);
    return lo > 0 ? stair[lo - 1].second : kNone;
  };
  // The first parent from `from` on whose child in row r takes less time than `least` (times never
  // rise along a row): galloping, since it is mostly near.
  const auto skip = [&](const SumRow& r, std::size_t from, std::size_t end, double least) {
    std::size_t lo = from, hi = from, step = 1;
    while (hi < end && !(ps.at[hi].time + r.time < least)) {
      lo = hi + 1;
      hi += step;
      step *= 2;
    }
    hi = std::min(hi, end);
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (ps.at[mid].time + r.time < least)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  };
  using Head = SumScratch::Head;
  // Row i's first child from parent `from` on that the labels so far do not beat (none under `least`
  // does), that grows and that is admitted; false when there is none.
  const auto next = [&](std::size_t i, std::size_t from, double least, Head& h) {
    const SumRow& r = rows[i];
    const std::size_t end = ps.first[r.stair + 1];
    std::size_t p = skip(r, from, end, least);
    while (p < end) {
      if (!live(r, p)) {
        ++p;
        continue;
      }
      const Label n = child(r, p);
      if (!grows(n)) return false;  // nor any later child: more bytes, the same transient
      const double below = stair_at(i, n.persistent);
      const double beaten = std::min(below, group_least);
      if (beaten <= n.time) {
        p = skip(r, p + 1, end, beaten);
        continue;
      }
      if (!admit(n)) {
        ++p;
        continue;
      }
      h = {n.persistent, n.time, below, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(p)};
      return true;
    }
    return false;
  };
  // The rows' next children in a heap, first in the filter's order at the top.
  const auto first_of = [&](const Head& x, const Head& y) {
    if (x.persistent != y.persistent) return x.persistent < y.persistent;
    if (x.time != y.time) return x.time < y.time;
    return rank(rows[x.row], x.p) < rank(rows[y.row], y.p);
  };
  auto& heap = sc.heap;
  const auto sift_down = [&](std::size_t i) {
    const Head x = heap[i];
    for (;;) {
      std::size_t c = 2 * i + 1;
      if (c >= heap.size()) break;
      if (c + 1 < heap.size() && first_of(heap[c + 1], heap[c])) ++c;
      if (!first_of(heap[c], x)) break;
      heap[i] = heap[c];
      i = c;
    }
    heap[i] = x;
  };
  for (std::size_t b = 0; b < by_transient.size();) {
    std::size_t e = b;
    while (e < by_transient.size() && transient[by_transient[e]] == transient[by_transient[b]]) ++e;
    group_least = kNone;
    heap.clear();
    for (std::size_t k = b; k < e; ++k) {
      Head h;
      if (next(by_transient[k], ps.first[rows[by_transient[k]].stair], kNone, h)) heap.push_back(h);
    }
    for (std::size_t i = heap.size() / 2; i-- > 0;) sift_down(i);
    while (!heap.empty()) {
      const Head h = heap.front();
      // Checked against the staircase when its row offered it; its transient's labels may have grown.
      double least = std::min(h.stair, group_least);
      if (!(least <= h.time)) {
        group_least = least = h.time;
        group.emplace_back(h.persistent, h.time);
        const Label n = child(rows[h.row], h.p);
        if (record) record->push_back({n.persistent, n.transient, n.time, h.p, h.row});
        if (keep(n)) {
          arena.push_back(n);
          out.push_back(static_cast<int>(arena.size()) - 1);
        }
      }
      if (!next(h.row, h.p + 1, least, heap.front())) {
        heap.front() = heap.back();
        heap.pop_back();
      }
      if (!heap.empty()) sift_down(0);
    }
    join_staircase(stair, group, sc.joined);
    b = e;
  }
  return true;
}

}  // namespace osdp::search::detail
