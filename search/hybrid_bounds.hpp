// The priced items of one hybrid layout and the LP bounds the exact search prunes with
// (hybrid_chains.cpp runs the chains on them, hybrid_layout.cpp the layout's bounds,
// hybrid_split.cpp the incumbent): an operator's items per TP degree (LayoutContext::items), a unit's
// relaxation (UnitHull), the LP of a stage's remaining operators (SuffixBound), and the pipeline's
// bound on a step from one stage's share (step_bound, PipelineBounds). Internal to search/: included
// by those files, hybrid_brute.cpp and the tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "costmodel/hybrid.hpp"
#include "search/hull.hpp"
#include "search/hybrid_layout.hpp"
#include "search/solvers.hpp"

namespace osdp::search::detail {

using costmodel::Choice;
using costmodel::HybridCostModel;
using costmodel::HybridOpCost;
using costmodel::HybridWorkload;
using costmodel::Operator;

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kMiB = 1024.0 * 1024.0;

struct Item {
  Choice choice;
  HybridOpCost cost;
  double time_s = 0;  // what the search minimises (osdp's time, or galvatron's)
};

using Points = std::vector<std::pair<double, double>>;  // (persistent bytes, time)

// The points no other point beats in both coordinates, by persistent bytes ascending.
inline Points pareto_2d(Points pts) {
  std::sort(pts.begin(), pts.end());
  Points out;
  for (const auto& q : pts)
    if (out.empty() || q.second < out.back().second) out.push_back(q);
  return out;
}

// The lower convex hull of a Pareto staircase (persistent ascending, time descending).
inline Points lower_hull(const Points& stair) {
  Points hull;
  for (const int i : detail::lower_hull(
           stair, [](const auto& q) { return q.first; }, [](const auto& q) { return q.second; }))
    hull.push_back(stair[static_cast<std::size_t>(i)]);
  return hull;
}

// The lower hull of every sum of one point from each set (the Minkowski sum), from the sets' own
// lower hulls: a lower-left hull is where w . (bytes, time) is least for some w >= 0, and the least
// of a sum is the sum of the leasts, so it starts at the sum of the first points and takes every
// hull's edges by slope, steepest first. Consecutive edges of one slope leave their middle point in
// (lower_hull drops it). Empty when some set is.
inline Points hull_of_sums(const std::vector<Points>& hulls) {
  std::pair<double, double> at{0.0, 0.0};
  Points edges;
  for (const Points& h : hulls) {
    if (h.empty()) return {};
    at.first += h.front().first;
    at.second += h.front().second;
    for (std::size_t k = 1; k < h.size(); ++k)
      edges.emplace_back(h[k].first - h[k - 1].first, h[k].second - h[k - 1].second);
  }
  std::sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) {
    return a.second * b.first < b.second * a.first;  // steeper (more time saved per byte) first
  });
  Points out{at};
  for (const auto& [dp, dt] : edges) {
    at.first += dp;
    at.second += dt;
    out.push_back(at);
  }
  return out;
}

// A unit's relaxation for the LP bound: the lower hull of (persistent bytes, time) over every degree
// it allows and every combination of its operators' items at that degree (re-layouts left out), and
// the least largest transient any of them has.
struct UnitHull {
  Points points;
  double least_transient = 0;
};

// A cost per degree of one unit, indexed by degree (infinity for those it does not allow), and the
// least of them: what a label of that degree pays at a stage's end or start, and what any pays.
struct DegreeCosts {
  std::vector<double> at;
  double least = kInf;
};

// Everything one layout's search needs.
class LayoutContext {
 public:
  LayoutContext(const HybridCostModel& model, const HybridWorkload& hw, const HybridLayout& layout,
                const HybridSearchOptions& options, ItemRules rules, PartsCache* cache, int price_b0 = 0)
      : model_(model),
        hw_(hw),
        layout_(layout),
        options_(options),
        rules_(rules),
        cache_(cache ? cache : &own_cache_),
        price_b0_(price_b0 > 0 ? price_b0 : layout.b0) {
    const auto& units = hw.units;
    if (cache_->allowed.size() != units.size()) {
      cache_->allowed.assign(units.size(), {});
      cache_->unit_class.assign(units.size(), 0);
      cache_->op_unit.assign(hw.workload.operators.size(), -1);
      std::map<std::vector<int>, int> classes;
      for (std::size_t u = 0; u < units.size(); ++u) {
        for (int oi : units[u].ops) cache_->op_unit[static_cast<std::size_t>(oi)] = static_cast<int>(u);
        for (int t = 1; t <= model.node_size(); t *= 2) {
          if (!options.tp.empty() && std::find(options.tp.begin(), options.tp.end(), t) == options.tp.end())
            continue;
          if (!model.valid(layout.pp, t)) continue;
          bool ok = true;
          for (int oi : units[u].ops) ok = ok && costmodel::tp_allowed(op(oi), t);
          if (ok) cache_->allowed[u].push_back(t);
        }
        std::vector<int> shapes;
        for (int oi : units[u].ops) shapes.push_back(op(oi).shape_id);
        cache_->unit_class[u] = classes.try_emplace(shapes, static_cast<int>(classes.size())).first->second;
      }
    }
    fixed_ = model.fixed_bytes(hw.workload);
  }

  const Operator& op(int oi) const { return hw_.workload.operators[static_cast<std::size_t>(oi)]; }
  const std::vector<int>& allowed(int u) const { return cache_->allowed[static_cast<std::size_t>(u)]; }
  int unit_of(int oi) const { return cache_->op_unit[static_cast<std::size_t>(oi)]; }
  // Units of one class have operators of the same shapes, so the same items.
  int unit_class(int u) const { return cache_->unit_class[static_cast<std::size_t>(u)]; }
  double fixed() const { return fixed_; }
  double capacity() const { return model_.capacity_bytes(); }
  int in_flight(int s) const {
    return HybridCostModel::in_flight(layout_.schedule, layout_.pp, s, layout_.m);
  }

  // The items of an operator at degree t: every choice of the space, less those another item is no
  // worse than in time, states, activations and transient bytes. Times are priced at price_b0 (a
  // range's bound prices them at its largest b0), memory at the layout's b0.
  const std::vector<Item>& items(int oi, int t) const {
    const Operator& o = op(oi);
    auto& slot = items_[{o.shape_id, t}];
    if (!slot.empty()) return slot;
    auto [shape_it, fresh_shape] = cache_->shapes.try_emplace({o.shape_id, t});
    PartsCache::Shape& shape = shape_it->second;
    if (fresh_shape) {
      shape.sliced = costmodel::tp_slice(o, t, layout_.sequence_parallel, hw_.workload.bytes, model_dropout(),
                                         hw_.workload.seq);
      SpaceOptions space = options_.space;
      if (rules_.galvatron) space.split_max = 1;
      for (const Choice& c : choices_for(shape.sliced, space)) {
        if (rules_.galvatron && !(c.replicate || c.is_zdp())) continue;
        if (rules_.galvatron && (c.node_group || c.two_level)) continue;
        shape.choices.push_back(c);
      }
    }
    auto [parts_it, fresh_parts] = cache_->parts.try_emplace({o.shape_id, t, price_b0_});
    auto& parts = parts_it->second;
    if (fresh_parts)
      for (const Choice& c : shape.choices)
        parts.push_back(model_.op_parts(o, shape.sliced, t, c, price_b0_, layout_.pp, hw_.workload.bytes,
                                        hw_.workload.seq));
    std::vector<Item> all;
    for (std::size_t k = 0; k < shape.choices.size(); ++k) {
      Item it;
      it.choice = shape.choices[k];
      it.cost = model_.op_cost(parts[k], shape.sliced, t, it.choice, layout_.b0, layout_.m, layout_.pp,
                               hw_.workload.bytes);
      it.time_s = it.cost.time_s;
      if (rules_.galvatron) {
        auto up = [](double b) { return std::ceil(b / kMiB) * kMiB; };
        it.cost.states_bytes = up(it.cost.states_bytes);
        it.cost.act_bytes = up(it.cost.act_bytes);
        it.cost.transient_bytes = up(it.cost.transient_bytes);
        if (rules_.overlap > 0)
          it.time_s = std::max(rules_.overlap * it.cost.compute_s, rules_.overlap * it.cost.dp_comm_s) +
                      it.cost.tp_comm_s;
      }
      all.push_back(it);
    }
    // Sorted, an item can only be beaten by one before it, and then by one already kept.
    std::stable_sort(all.begin(), all.end(), [](const Item& x, const Item& y) {
      return std::tie(x.time_s, x.cost.states_bytes, x.cost.act_bytes, x.cost.transient_bytes) <
             std::tie(y.time_s, y.cost.states_bytes, y.cost.act_bytes, y.cost.transient_bytes);
    });
    for (const Item& x : all) {
      bool dominated = false;
      for (const Item& y : slot) {
        if (y.cost.states_bytes <= x.cost.states_bytes && y.cost.act_bytes <= x.cost.act_bytes &&
            y.cost.transient_bytes <= x.cost.transient_bytes) {
          dominated = true;  // y.time_s <= x.time_s by the order
          break;
        }
      }
      if (!dominated) slot.push_back(x);
    }
    return slot;
  }

  // Re-layout into unit u from degree t (t < 0: none, the first unit of the model).
  double relayout_into(int u, int from, int t) const {
    if (from < 0 || u == 0) return 0;
    return model_.relayout_s(from, t, price_b0_, hw_.workload.seq,
                             hw_.units[static_cast<std::size_t>(u - 1)].hidden,
                             hw_.workload.bytes.activation);
  }
  // What ends stage s after unit u at degree t: the re-layout to 1 and the sends (not the last
  // stage), the tied copy's gradient all-reduce (the last).
  double stage_end(int s, int u, int t) const {
    if (s + 1 < layout_.pp) {
      const auto exit = model_.stage_exit(hw_, layout_.pp, price_b0_, s, u, t);
      return exit.relayout_s + 2 * exit.send_s;
    }
    return model_.tied_sync_s(hw_, layout_.pp, t, layout_.sequence_parallel) / layout_.m;
  }

  // Stage s's end after unit u at each of u's degrees (stage_end), and the least: what a stage ending
  // there pays (its sends and, for the last stage, the tied copy's all-reduce).
  DegreeCosts exits(int s, int u) const {
    return by_degree(u, [&](int t) { return stage_end(s, u, t); });
  }
  // The re-layout into unit i from degree 1 at each of i's degrees, and the least: what a later stage
  // starting at unit i pays to take its input.
  DegreeCosts entries(int i) const {
    return by_degree(i, [&](int t) { return relayout_into(i, 1, t); });
  }

  const HybridLayout& layout() const { return layout_; }
  const HybridWorkload& workload() const { return hw_; }

  // Unit u's least persistent bytes with f micro-batches' activations in flight and its least largest
  // transient, over every degree it allows (the first point of unit_hull(u, f) and its
  // least_transient, without the hull; infinity when some operator has no item).
  std::pair<double, double> least_bytes(int u, int f) const {
    double p_least = kInf, x_least = kInf;
    for (int t : allowed(u)) {
      double p = 0, x = 0;
      for (int oi : hw_.units[static_cast<std::size_t>(u)].ops) {
        double op_p = kInf, op_x = kInf;
        for (const auto& it : items(oi, t)) {
          op_p = std::min(op_p, it.cost.states_bytes + f * it.cost.act_bytes);
          op_x = std::min(op_x, it.cost.transient_bytes);
        }
        p += op_p;
        x = std::max(x, op_x);
      }
      p_least = std::min(p_least, p);
      x_least = std::min(x_least, x);
    }
    return {p_least, x_least};
  }

  // Unit u's relaxation with f micro-batches' activations in flight, of its items whose transient
  // is at most `cap` (cached per operator shapes; no points when some operator has none at any degree).
  const UnitHull& unit_hull(int u, int f, double cap = kInf) const {
    const int cls = cache_->unit_class[static_cast<std::size_t>(u)];
    // Uncapped hulls are asked per unit by every bound: their own map, keyed without the cap.
    UnitHull* slot = nullptr;
    if (cap == kInf) {
      auto [it, fresh] = unit_hulls_.try_emplace({cls, f});
      if (!fresh) return it->second;
      slot = &it->second;
    } else {
      auto [it, fresh] = capped_hulls_.try_emplace({cls, f, cap});
      if (!fresh) return it->second;
      slot = &it->second;
    }
    UnitHull& h = *slot;
    Points pts;
    h.least_transient = kInf;
    std::vector<Points> op_hulls;
    for (int t : allowed(u)) {
      op_hulls.clear();
      double x = 0;
      for (int oi : hw_.units[static_cast<std::size_t>(u)].ops) {
        Points own;
        double least_x = kInf;
        for (const auto& it : items(oi, t)) {
          if (it.cost.transient_bytes > cap) continue;
          least_x = std::min(least_x, it.cost.transient_bytes);
          own.emplace_back(it.cost.states_bytes + f * it.cost.act_bytes, it.time_s);
        }
        op_hulls.push_back(lower_hull(pareto_2d(std::move(own))));
        x = std::max(x, least_x);
      }
      const Points sums = hull_of_sums(op_hulls);
      if (sums.empty()) continue;
      pts.insert(pts.end(), sums.begin(), sums.end());
      h.least_transient = std::min(h.least_transient, x);
    }
    h.points = lower_hull(pareto_2d(std::move(pts)));
    return h;
  }

 private:
  template <class Of>
  DegreeCosts by_degree(int u, Of of) const {
    DegreeCosts d;
    const auto& ts = allowed(u);
    d.at.assign(ts.empty() ? 0 : static_cast<std::size_t>(ts.back()) + 1, kInf);
    for (int t : ts) {
      d.at[static_cast<std::size_t>(t)] = of(t);
      d.least = std::min(d.least, d.at[static_cast<std::size_t>(t)]);
    }
    return d;
  }
  bool model_dropout() const { return model_.dropout(); }
  const HybridCostModel& model_;
  const HybridWorkload& hw_;
  HybridLayout layout_;
  const HybridSearchOptions& options_;
  ItemRules rules_;
  PartsCache own_cache_;
  PartsCache* cache_;
  int price_b0_;  // the b0 times are priced at (memory is at layout_.b0)
  double fixed_ = 0;
  mutable std::map<std::pair<int, int>, std::vector<Item>> items_;
  mutable std::map<std::pair<int, int>, UnitHull> unit_hulls_;             // (unit class, f)
  mutable std::map<std::tuple<int, int, double>, UnitHull> capped_hulls_;  // (unit class, f, cap)
};

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
    base_p_.assign(K + 1, 0.0);
    base_t_.assign(K + 1, 0.0);
    min_x_.assign(K + 1, 0.0);
    cum_p_.assign(first_only ? 1 : K + 1, std::vector<double>{0.0});
    cum_t_.assign(cum_p_.size(), std::vector<double>{0.0});
    std::vector<double> count(classes.hulls.size(), 0.0);  // of units k..K-1
    for (std::size_t k = K; k-- > 0;) {
      const UnitHull& g = *classes.hulls[classes.class_of[k]];
      const auto& h = g.points;
      base_p_[k] = base_p_[k + 1] + (h.empty() ? kInf : h.front().first);
      base_t_[k] = base_t_[k + 1] + (h.empty() ? 0.0 : h.front().second);
      min_x_[k] = std::max(min_x_[k + 1], g.least_transient);
      count[classes.class_of[k]] += 1;
      if (first_only && k != 0) continue;
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
  int end() const { return static_cast<int>(base_p_.size()) - 1; }
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
