// The LP bounds the exact hybrid search prunes with, on the priced items of hybrid_context.hpp: the
// units' hulls by class (ClassHulls), the LP of a stage's remaining operators (SuffixBound) or of any
// range of units (RangeLp), and the pipeline's bound on a step from one stage's share (step_bound,
// step_need, PipelineBounds). hybrid_chains.cpp runs the chains on them, hybrid_layout.cpp the
// layout's bounds. Internal to search/: included by those files and the tests.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "search/internal/hybrid_context.hpp"

namespace osdp::search::detail {

// The units before `units` by class, for the LP bounds: units of one class have one hull (one
// UnitHull object), and the LP's greedy buys a set of units' n copies of a class's increment one after
// another at one slope, so the LP of any set of units is all classes' increments in one order, each
// taken n_c times (n_c: the set's units of that class).
struct ClassHulls {
  struct Inc {
    std::size_t c;
    double dp, dt;
  };
  std::vector<const UnitHull*> hulls;  // per class
  std::vector<std::size_t> class_of;   // per unit
  std::vector<Inc> incs;               // every class's increments, steepest (most time per byte) first
  ClassHulls(const LayoutContext& ctx, int f, int units, double cap = kInf) {
    std::vector<const UnitHull*> of_class;  // by the context's unit class: one lookup each
    for (int u = 0; u < units; ++u) {
      const auto cls = static_cast<std::size_t>(ctx.unit_class(u));
      if (cls >= of_class.size()) of_class.resize(cls + 1, nullptr);
      if (!of_class[cls]) of_class[cls] = &ctx.unit_hull(u, f, cap);
      const UnitHull* h = of_class[cls];
      const auto it = std::find(hulls.begin(), hulls.end(), h);
      class_of.push_back(static_cast<std::size_t>(it - hulls.begin()));
      if (it == hulls.end()) hulls.push_back(h);
    }
    for (std::size_t c = 0; c < hulls.size(); ++c) {
      const auto& h = hulls[c]->points;
      for (std::size_t x = 1; x < h.size(); ++x)
        incs.push_back({c, h[x].first - h[x - 1].first, h[x].second - h[x - 1].second});
    }
    std::stable_sort(incs.begin(), incs.end(),
                     [](const Inc& a, const Inc& b) { return a.dt * b.dp < b.dt * a.dp; });
  }
};

// The positions of SuffixBound's tables (below), shared by the tables of one layout. A position's
// figures depend only on the units from it to its table's end (their hulls, in order) and on the order
// of the classes' increments (ClassHulls): a layout's tables over identical layers hold many equal
// positions, and each is built once, by the same sums as alone (so to the same bits).
class SuffixPool {
 public:
  struct Position {
    double base_p = 0, base_t = 0, min_x = 0;
    std::vector<double> count;  // units of each class from the position to the end
    std::vector<double> cum_p{0.0}, cum_t{0.0};
  };
  // The position of no units for `classes`, and the one of a unit of class c before `next`.
  const Position* empty(const ClassHulls& classes) {
    const std::size_t sig = signature(classes);
    auto& slot = made_[{sig, kNoClass, nullptr}];
    if (!slot) {
      Position& p = positions_.emplace_back();
      p.count.assign(classes.hulls.size(), 0.0);
      slot = &p;
    }
    return slot;
  }
  const Position* before(const ClassHulls& classes, std::size_t c, const Position* next) {
    auto& slot = made_[{signature(classes), c, next}];
    if (slot) return slot;
    Position& p = positions_.emplace_back();
    const UnitHull& g = *classes.hulls[c];
    const auto& h = g.points;
    p.base_p = next->base_p + (h.empty() ? kInf : h.front().first);
    p.base_t = next->base_t + (h.empty() ? 0.0 : h.front().second);
    p.min_x = std::max(next->min_x, g.least_transient);
    p.count = next->count;
    p.count[c] += 1;
    for (const auto& e : classes.incs) {
      const double n = p.count[e.c];
      if (n == 0) continue;
      p.cum_p.push_back(p.cum_p.back() + n * e.dp);
      p.cum_t.push_back(p.cum_t.back() + n * e.dt);
    }
    slot = &p;
    return slot;
  }

 private:
  static constexpr std::size_t kNoClass = static_cast<std::size_t>(-1);
  // Tables whose classes have the same hulls in the same order have the same increments in the same
  // order: the hulls name them.
  std::size_t signature(const ClassHulls& classes) {
    const auto it = std::find(signatures_.begin(), signatures_.end(), classes.hulls);
    if (it != signatures_.end()) return static_cast<std::size_t>(it - signatures_.begin());
    signatures_.push_back(classes.hulls);
    return signatures_.size() - 1;
  }
  std::vector<std::vector<const UnitHull*>> signatures_;
  std::map<std::tuple<std::size_t, std::size_t, const Position*>, const Position*> made_;
  std::deque<Position> positions_;
};

// The LP relaxation of a stage's remaining operators (the flat exact's bound, solvers.hpp): every
// operator of the units before `end_unit` one group, its items over every degree its unit allows
// (the degrees' coupling, re-layouts and transients relaxed), persistent bytes with f micro-batches
// in flight (the fewest of any stage). least(k, R) is a lower bound on the time of the operators
// from position k to the end within R persistent bytes (infinity when even their smallest do not
// fit): the smallest-persistent items, then the lower hull's increments bought greedily by slope.
class SuffixBound {
 public:
  // first_only: the bound from position 0 only (least(0, ...), conjugate(0, ...), slope(0, ...)),
  // without the other positions' tables.
  // cap: only the items whose transient is at most cap.
  // pool: where the positions are kept, shared with the layout's other tables (else its own).
  SuffixBound(const LayoutContext& ctx, int f, int end_unit, bool first_only = false, double cap = kInf,
              SuffixPool* pool = nullptr) {
    const ClassHulls classes(ctx, f, end_unit, cap);
    const std::size_t K = static_cast<std::size_t>(end_unit);
    end_ = end_unit;
    if (!pool) {
      own_ = std::make_unique<SuffixPool>();
      pool = own_.get();
    }
    // first_only: position 0's figures alone (a prefix of U units is asked for every U: linear each,
    // not quadratic in all): the sums of every unit, the increments once.
    if (first_only) {
      SuffixPool::Position p;
      p.count.assign(classes.hulls.size(), 0.0);
      for (std::size_t k = K; k-- > 0;) {
        const UnitHull& g = *classes.hulls[classes.class_of[k]];
        const auto& h = g.points;
        p.base_p += h.empty() ? kInf : h.front().first;
        p.base_t += h.empty() ? 0.0 : h.front().second;
        p.min_x = std::max(p.min_x, g.least_transient);
        p.count[classes.class_of[k]] += 1;
      }
      for (const auto& e : classes.incs) {
        const double n = p.count[e.c];
        if (n == 0) continue;
        p.cum_p.push_back(p.cum_p.back() + n * e.dp);
        p.cum_t.push_back(p.cum_t.back() + n * e.dt);
      }
      first_ = std::make_unique<SuffixPool::Position>(std::move(p));
      pos_.assign(1, first_.get());
      return;
    }
    pos_.assign(K + 1, nullptr);
    pos_[K] = pool->empty(classes);
    for (std::size_t k = K; k-- > 0;) pos_[k] = pool->before(classes, classes.class_of[k], pos_[k + 1]);
  }
  int end() const { return end_; }
  // What it holds, about (for the memory budget): its positions as if it had them alone.
  double bytes() const {
    double n = 3.0 * static_cast<double>(pos_.size());
    for (const SuffixPool::Position* p : pos_) n += static_cast<double>(p->cum_p.size() + p->cum_t.size());
    return 8 * n;
  }
  // `budget` is what the persistent bytes so far leave, `transient` the largest transient so far: the
  // operators from k on may use budget - max(transient, the least largest transient they force).
  double least(int k, double budget, double transient) const {
    return least_within(k, budget - std::max(transient, at(k).min_x));
  }
  // The least transient the operators from k on force.
  double least_transient(int k) const { return at(k).min_x; }
  // least_within(k, .) is convex in the budget R: for every lambda >= 0 it is at least
  // conjugate(k, lambda) - lambda R, where conjugate(k, lambda) = min over R of least_within(k, R) +
  // lambda R (infinity when nothing fits). The least is at the first end of an increment that saves
  // less than lambda per byte.
  double conjugate(int k, double lambda) const {
    const SuffixPool::Position& p = at(k);
    if (p.base_p == kInf) return kInf;
    const auto& cp = p.cum_p;
    const auto& ct = p.cum_t;
    std::size_t lo = 0, hi = cp.size() - 1;  // the least of ct[n] + lambda cp[n] is at some n in lo..hi
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (ct[mid + 1] - ct[mid] + lambda * (cp[mid + 1] - cp[mid]) >= 0)
        hi = mid;
      else
        lo = mid + 1;
    }
    return p.base_t + ct[lo] + lambda * (p.base_p + cp[lo]);
  }
  // The slope of least_within(k, .) at `budget` (time per byte, at most 0; 0 where nothing fits).
  double slope(int k, double budget) const {
    const SuffixPool::Position& p = at(k);
    if (budget < p.base_p) return 0;
    const auto& cp = p.cum_p;
    const auto& ct = p.cum_t;
    const std::size_t n =
        static_cast<std::size_t>(std::upper_bound(cp.begin(), cp.end(), budget - p.base_p) - cp.begin()) - 1;
    return n + 1 < cp.size() ? (ct[n + 1] - ct[n]) / (cp[n + 1] - cp[n]) : 0.0;
  }
  // The same within `budget` persistent bytes, transients left out: for operators spread over several
  // stages, each of which holds its own transient.
  double least_within(int k, double budget) const {
    const SuffixPool::Position& p = at(k);
    if (budget < p.base_p) return kInf;
    const double r = budget - p.base_p;
    const auto& cp = p.cum_p;
    const auto& ct = p.cum_t;
    const std::size_t n =
        static_cast<std::size_t>(std::upper_bound(cp.begin(), cp.end(), r) - cp.begin()) - 1;
    double gain = ct[n];
    if (n + 1 < cp.size()) gain += (ct[n + 1] - ct[n]) * (r - cp[n]) / (cp[n + 1] - cp[n]);
    return p.base_t + gain;
  }

 private:
  const SuffixPool::Position& at(int k) const { return *pos_[static_cast<std::size_t>(k)]; }
  int end_ = 0;
  std::vector<const SuffixPool::Position*> pos_;
  std::unique_ptr<SuffixPool> own_;
  std::unique_ptr<SuffixPool::Position> first_;
};

// The bands of largest transient a pipeline's bounds (BandedSuffix, RangeLp) take a stage's plans in.
// A plan of a stage's remaining units, with transient X already held, ends with a largest transient
// X* >= X: each item it takes is within X*, its persistent bytes within the budget less X*. The items'
// transients are cut into bands [lo, hi] no wider than `width`. Where X* is an item's, it lies in
// some band b, and the plan takes only items within hi_b under budget - max(X, lo_b); where X* = X,
// the band of its largest item's transient holds it likewise. So the least over the bands of the LP
// of the items within hi_b under budget - max(X, lo_b) bounds every plan. The LP of all items under
// budget - X (SuffixBound alone) charges no item its own transient and lies further below: on Llama
// 3.1 405B's two stages 2.1% under the optimum, against 0.07% with bands of budget / 64.
struct TransientBands {
  std::vector<double> lo, hi;  // ascending; empty: one band of every item (the plain LP)
  TransientBands() = default;
  // Every transient of an item some unit of the layout may take, at most `budget` (one over it fits
  // nowhere), in bands no wider than `width`.
  TransientBands(const LayoutContext& ctx, double budget, double width) {
    std::vector<double> xs;
    const auto& units = ctx.workload().units;
    for (std::size_t u = 0; u < units.size(); ++u)
      for (int t : ctx.allowed(static_cast<int>(u)))
        for (int oi : units[u].ops)
          for (const auto& it : ctx.items(oi, t))
            if (it.cost.transient_bytes <= budget) xs.push_back(it.cost.transient_bytes);
    std::sort(xs.begin(), xs.end());
    xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
    for (std::size_t k = 0; k < xs.size();) {
      std::size_t e = k;
      while (e + 1 < xs.size() && xs[e + 1] - xs[k] <= width) ++e;
      lo.push_back(xs[k]);
      hi.push_back(xs[e]);
      k = e + 1;
    }
  }
  std::size_t size() const { return lo.size(); }
};

// The least over the bands (bottoms `lo`, ascending) of band(b, x), x = max(transient, lo_b), for a
// plan already holding `transient`; all(x) is the LP of every item under the budget less x, below
// every band that holds at least x (no bands: all(transient)). From the band of `transient` (the last
// whose bottom is at most it, else the first: the bands below it take fewer items under no more
// memory) up, until all(x) reaches the least so far (the bands from there on hold at least x).
template <class Band, class All>
double least_over_bands(const std::vector<double>& lo, double transient, Band band, All all) {
  if (lo.empty()) return all(transient);
  const auto at = std::upper_bound(lo.begin(), lo.end(), transient) - lo.begin();
  const std::size_t first = at > 0 ? static_cast<std::size_t>(at - 1) : 0;
  double best = kInf;
  for (std::size_t b = first; b < lo.size(); ++b) {
    const double x = std::max(transient, lo[b]);
    if (b > first && all(x) >= best) break;
    best = std::min(best, band(b, x));
  }
  return best;
}

// SuffixBound per transient band (TransientBands) of one table end: least() is the least over the
// bands; the cut's lines (hybrid_chains.hpp) stay on the plain LP (`all`), which is below it. A band's
// table is built when a label first needs it (most labels need the band of their own transient and
// one or two above), and held against the layout's memory budget then.
class BandedSuffix {
 public:
  BandedSuffix(const LayoutContext& ctx, int f, int end_unit, const TransientBands& bands, SuffixPool* pool)
      : ctx_(&ctx),
        f_(f),
        end_(end_unit),
        pool_(pool),
        bands_(&bands),
        all_(ctx, f, end_unit, false, kInf, pool),
        by_band_(bands.size()) {}
  const SuffixBound& all() const { return all_; }
  // What it holds so far (bands built later are held as they are built).
  double bytes() const { return all_.bytes(); }
  // A lower bound on the time of the operators from position k on within `budget` persistent bytes,
  // `transient` already held: at least all().least(k, budget, transient).
  double least(int k, double budget, double transient) const {
    return least_over_bands(
        bands_->lo, transient, [&](std::size_t b, double x) { return band(b).least(k, budget, x); },
        [&](double x) { return all_.least(k, budget, x); });
  }

 private:
  const SuffixBound& band(std::size_t b) const {
    auto& p = by_band_[b];
    if (!p) {
      p = std::make_unique<SuffixBound>(*ctx_, f_, end_, false, bands_->hi[b], pool_);
      ctx_->hold(p->bytes());
    }
    return *p;
  }
  const LayoutContext* ctx_;
  int f_, end_;
  SuffixPool* pool_;
  const TransientBands* bands_;
  SuffixBound all_;
  mutable std::vector<std::unique_ptr<SuffixBound>> by_band_;  // built when first asked
};

// SuffixBound's LP of units i..j-1 (position i of the table ending at j) for any range, without the
// tables: the classes' increments (ClassHulls) each taken n_c times, n_c the range's count of that
// class. O(classes x hull points) per range. With bands, the least over them as BandedSuffix.
class RangeLp {
 public:
  RangeLp(const LayoutContext& ctx, int f, int units, const TransientBands* bands = nullptr)
      : classes_(ctx, f, units) {
    if (bands)
      for (std::size_t b = 0; b < bands->size(); ++b) {
        by_band_.push_back(std::unique_ptr<RangeLp>(new RangeLp(ctx, f, units, bands->hi[b])));
        lo_.push_back(bands->lo[b]);
      }
    count_classes(units);
  }
  // SuffixBound(ctx, f, j).least(i, budget, transient), or BandedSuffix's.
  double least(int i, int j, double budget, double transient) const {
    return least_over_bands(
        lo_, transient, [&](std::size_t b, double x) { return by_band_[b]->plain(i, j, budget, x); },
        [&](double x) { return plain(i, j, budget, x); });
  }

 private:
  // One band's (items within `cap`).
  RangeLp(const LayoutContext& ctx, int f, int units, double cap) : classes_(ctx, f, units, cap) {
    count_classes(units);
  }
  double plain(int i, int j, double budget, double transient) const {
    double base_p = 0, base_t = 0, min_x = 0;
    std::vector<double>& n = counts_;
    for (std::size_t c = 0; c < n.size(); ++c) {
      n[c] = count_[c][static_cast<std::size_t>(j)] - count_[c][static_cast<std::size_t>(i)];
      if (n[c] == 0) continue;
      const auto& h = classes_.hulls[c]->points;
      if (h.empty()) return kInf;
      base_p += n[c] * h.front().first;
      base_t += n[c] * h.front().second;
      min_x = std::max(min_x, classes_.hulls[c]->least_transient);
    }
    double r = budget - std::max(transient, min_x);
    if (r < base_p) return kInf;
    r -= base_p;
    double gain = 0;
    for (const auto& e : classes_.incs) {
      const double k = n[e.c];
      if (k == 0) continue;
      if (r >= k * e.dp) {
        r -= k * e.dp;
        gain += k * e.dt;
      } else {
        gain += k * e.dt * r / (k * e.dp);
        break;
      }
    }
    return base_t + gain;
  }
  void count_classes(int units) {
    count_.assign(classes_.hulls.size(), std::vector<int>(static_cast<std::size_t>(units) + 1, 0));
    for (std::size_t c = 0; c < count_.size(); ++c)
      for (std::size_t u = 0; u < static_cast<std::size_t>(units); ++u)
        count_[c][u + 1] = count_[c][u] + (classes_.class_of[u] == c ? 1 : 0);
    counts_.resize(count_.size());
  }
  ClassHulls classes_;
  std::vector<std::vector<int>> count_;            // count_[c][u]: units of class c before u
  mutable std::vector<double> counts_;             // per class, the range's units (scratch of least)
  std::vector<std::unique_ptr<RangeLp>> by_band_;  // with bands: one per band
  std::vector<double> lo_;                         // and each one's lo
};

// A lower bound on T = sum_s c_s + (m - 1) max_s c_s from lower bounds on stage s's c_s (`own`), on
// the sum of the s stages before it (`before`) and on the sum of the pp - 1 - s after it (`after`):
// the sum is at least own + before + after, and the slowest stage is no faster than stage s, than
// the mean of the stages before, or than the mean of those after. (With pp = 2 a priced `after` is
// the other stage's own cost, so the bound is T itself; the mean of all stages, which this is never
// below, left a slow other stage at weight 1 + (m - 1) / 2.)
inline double step_bound(double own, double before, double after, int s, int m, int pp) {
  double slowest = own;
  if (s > 0) slowest = std::max(slowest, before / s);
  if (s + 1 < pp) slowest = std::max(slowest, after / (pp - 1 - s));
  return own + before + after + (m - 1) * slowest;
}

// The least `own` at which step_bound(own, before, after, s, m, pp) reaches `bound` (it grows with
// own): where own is at least the others' slowest mean c, own + before + after + (m - 1) own; below
// it, own + before + after + (m - 1) c.
inline double step_need(double before, double after, int s, int m, int pp, double bound) {
  double c = 0;
  if (s > 0) c = std::max(c, before / s);
  if (s + 1 < pp) c = std::max(c, after / (pp - 1 - s));
  const double high = (bound - before - after) / m;
  return high >= c ? high : bound - before - after - (m - 1) * c;
}

// What the chains of a pipeline (pp > 1) bound their labels with: the LP of units k..j-1 for a
// stage with f micro-batches in flight (suffix(j, f).least(k, ...)), and from the stages' LP table the
// least sum over splits of units 0..i-1 into stages 0..s-1 (before[s][i]) and of units j..U-1 into
// stages s..pp-1 (after[s][j]), each stage within its own memory.
struct PipelineBounds {
  std::function<const BandedSuffix&(int j, int f)> suffix;
  std::vector<std::vector<double>> before, after;
  double before_at(int s, int i) const {
    return before[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
  }
  double after_at(int s, int j) const {
    return after[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)];
  }
};

}  // namespace osdp::search::detail
