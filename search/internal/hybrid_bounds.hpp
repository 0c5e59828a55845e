// The LP bounds the exact hybrid search prunes with, on the priced items of hybrid_context.hpp: the
// units' hulls by class (ClassHulls), the LP of a stage's remaining operators (SuffixBound) or of any
// range of units (RangeLp), and the pipeline's bound on a step from one stage's share (step_bound,
// step_need, PipelineBounds). hybrid_chains.cpp runs the chains on them, hybrid_layout.cpp the
// layout's bounds. Internal to search/: included by those files and the tests.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
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
    for (int u = 0; u < units; ++u) {
      const UnitHull* h = &ctx.unit_hull(u, f, cap);
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
  SuffixBound(const LayoutContext& ctx, int f, int end_unit, bool first_only = false, double cap = kInf) {
    const ClassHulls classes(ctx, f, end_unit, cap);
    const std::size_t K = static_cast<std::size_t>(end_unit);
    end_ = end_unit;
    // first_only: position 0's figures alone (a prefix of U units is asked for every U: linear each,
    // not quadratic in all).
    const std::size_t stored = first_only ? 1 : K + 1;
    base_p_.assign(stored, 0.0);
    base_t_.assign(stored, 0.0);
    min_x_.assign(stored, 0.0);
    cum_p_.assign(first_only ? 1 : K + 1, std::vector<double>{0.0});
    cum_t_.assign(cum_p_.size(), std::vector<double>{0.0});
    std::vector<double> count(classes.hulls.size(), 0.0);  // of units k..K-1
    double bp = 0, bt = 0, mx = 0;                         // base_p_, base_t_, min_x_ at k
    for (std::size_t k = K; k-- > 0;) {
      const UnitHull& g = *classes.hulls[classes.class_of[k]];
      const auto& h = g.points;
      bp += h.empty() ? kInf : h.front().first;
      bt += h.empty() ? 0.0 : h.front().second;
      mx = std::max(mx, g.least_transient);
      count[classes.class_of[k]] += 1;
      if (first_only && k != 0) continue;
      base_p_[k] = bp;
      base_t_[k] = bt;
      min_x_[k] = mx;
      auto& cp = cum_p_[k];
      auto& ct = cum_t_[k];
      for (const auto& e : classes.incs) {
        const double n = count[e.c];
        if (n == 0) continue;
        cp.push_back(cp.back() + n * e.dp);
        ct.push_back(ct.back() + n * e.dt);
      }
    }
  }
  int end() const { return end_; }
  // What it holds, about (for the memory budget).
  double bytes() const {
    double n = 3.0 * static_cast<double>(base_p_.size());
    for (std::size_t k = 0; k < cum_p_.size(); ++k)
      n += static_cast<double>(cum_p_[k].size() + cum_t_[k].size());
    return 8 * n;
  }
  // `budget` is what the persistent bytes so far leave, `transient` the largest transient so far: the
  // operators from k on may use budget - max(transient, the least largest transient they force).
  double least(int k, double budget, double transient) const {
    return least_within(k, budget - std::max(transient, min_x_[static_cast<std::size_t>(k)]));
  }
  // The least transient the operators from k on force.
  double least_transient(int k) const { return min_x_[static_cast<std::size_t>(k)]; }
  // least_within(k, .) is convex in the budget R: for every lambda >= 0 it is at least
  // conjugate(k, lambda) - lambda R, where conjugate(k, lambda) = min over R of least_within(k, R) +
  // lambda R (infinity when nothing fits). The least is at the first end of an increment that saves
  // less than lambda per byte.
  double conjugate(int k, double lambda) const {
    const auto kk = static_cast<std::size_t>(k);
    if (base_p_[kk] == kInf) return kInf;
    const auto& cp = cum_p_[kk];
    const auto& ct = cum_t_[kk];
    std::size_t lo = 0, hi = cp.size() - 1;  // the least of ct[n] + lambda cp[n] is at some n in lo..hi
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (ct[mid + 1] - ct[mid] + lambda * (cp[mid + 1] - cp[mid]) >= 0)
        hi = mid;
      else
        lo = mid + 1;
    }
    return base_t_[kk] + ct[lo] + lambda * (base_p_[kk] + cp[lo]);
  }
  // The slope of least_within(k, .) at `budget` (time per byte, at most 0; 0 where nothing fits).
  double slope(int k, double budget) const {
    const auto kk = static_cast<std::size_t>(k);
    if (budget < base_p_[kk]) return 0;
    const auto& cp = cum_p_[kk];
    const auto& ct = cum_t_[kk];
    const std::size_t n =
        static_cast<std::size_t>(std::upper_bound(cp.begin(), cp.end(), budget - base_p_[kk]) - cp.begin()) -
        1;
    return n + 1 < cp.size() ? (ct[n + 1] - ct[n]) / (cp[n + 1] - cp[n]) : 0.0;
  }
  // The same within `budget` persistent bytes, transients left out: for operators spread over several
  // stages, each of which holds its own transient.
  double least_within(int k, double budget) const {
    const auto kk = static_cast<std::size_t>(k);
    if (budget < base_p_[kk]) return kInf;
    const double r = budget - base_p_[kk];
    const auto& cp = cum_p_[kk];
    const auto& ct = cum_t_[kk];
    const std::size_t n =
        static_cast<std::size_t>(std::upper_bound(cp.begin(), cp.end(), r) - cp.begin()) - 1;
    double gain = ct[n];
    if (n + 1 < cp.size()) gain += (ct[n + 1] - ct[n]) * (r - cp[n]) / (cp[n + 1] - cp[n]);
    return base_t_[kk] + gain;
  }

 private:
  int end_ = 0;
  std::vector<double> base_p_, base_t_, min_x_;
  std::vector<std::vector<double>> cum_p_, cum_t_;
};

// SuffixBound's LP of units i..j-1 (position i of the table ending at j) for any range, without the
// tables: the classes' increments (ClassHulls) each taken n_c times, n_c the range's count of that
// class. O(classes x hull points) per range.
class RangeLp {
 public:
  RangeLp(const LayoutContext& ctx, int f, int units) : classes_(ctx, f, units) {
    count_.assign(classes_.hulls.size(), std::vector<int>(static_cast<std::size_t>(units) + 1, 0));
    for (std::size_t c = 0; c < count_.size(); ++c)
      for (std::size_t u = 0; u < static_cast<std::size_t>(units); ++u)
        count_[c][u + 1] = count_[c][u] + (classes_.class_of[u] == c ? 1 : 0);
    counts_.resize(count_.size());
  }
  // SuffixBound(ctx, f, j).least(i, budget, transient).
  double least(int i, int j, double budget, double transient) const {
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

 private:
  ClassHulls classes_;
  std::vector<std::vector<int>> count_;  // count_[c][u]: units of class c before u
  mutable std::vector<double> counts_;   // per class, the range's units (scratch of least)
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
  std::function<const SuffixBound&(int j, int f)> suffix;
  std::vector<std::vector<double>> before, after;
  double before_at(int s, int i) const {
    return before[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
  }
  double after_at(int s, int j) const {
    return after[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)];
  }
};

}  // namespace osdp::search::detail
