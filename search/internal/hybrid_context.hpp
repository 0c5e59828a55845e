// The priced items of one hybrid layout (LayoutContext: an operator's items per TP degree, a unit's
// relaxation as a hull of (persistent bytes, time), its exits and entries per degree) and the hull
// arithmetic they are built with. hybrid_bounds.hpp builds the LP bounds on them; hybrid_chains.cpp,
// hybrid_layout.cpp, hybrid_split.cpp and hybrid_brute.cpp search with them. Internal to search/:
// included by those files and the tests.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "costmodel/bounds.hpp"
#include "costmodel/plan_cost.hpp"
#include "search/internal/hull.hpp"
#include "search/internal/hybrid_layout.hpp"
#include "search/solvers.hpp"

namespace osdp::search::detail {

using costmodel::Choice;
using costmodel::OpCost;
using costmodel::Operator;
using costmodel::PlanCostModel;
using costmodel::Workload;

using costmodel::kInf;
inline constexpr double kMiB = 1024.0 * 1024.0;

struct Item {
  Choice choice;
  OpCost cost;
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
  LayoutContext(const PlanCostModel& model, const Workload& hw, const HybridLayout& layout,
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
      cache_->op_unit.assign(hw.operators.size(), -1);
      std::map<std::vector<int>, int> classes;
      for (std::size_t u = 0; u < units.size(); ++u) {
        for (int oi : units[u].ops) cache_->op_unit[static_cast<std::size_t>(oi)] = static_cast<int>(u);
        for (int t = 1; t <= model.node_size(); t *= 2) {
          if (!options.tp.empty() && std::find(options.tp.begin(), options.tp.end(), t) == options.tp.end())
            continue;
          if (!model.valid(layout.pp, t)) continue;
          if ((model.world_size() / layout.pp) % (t * layout.cp) != 0) continue;  // TP x CP in the stage
          bool ok = true;
          for (int oi : units[u].ops)
            ok = ok && costmodel::tp_allowed(op(oi), t) &&
                 costmodel::cp_allowed(costmodel::tp_slice(op(oi), t, false, hw), layout.cp,
                                       layout.cp_all_to_all);
          if (ok) cache_->allowed[u].push_back(t);
        }
        std::vector<int> shapes;
        for (int oi : units[u].ops) shapes.push_back(op(oi).shape_id);
        cache_->unit_class[u] = classes.try_emplace(shapes, static_cast<int>(classes.size())).first->second;
      }
    }
    fixed_ = model.fixed_bytes(hw);
  }

  // The budgets: BudgetStop past the deadline, or once what this layout's solve holds (counted by
  // hold()) and `extra` pass the memory budget.
  void check(double extra = 0) const {
    check_deadline(options_);
    if (held_ + extra > options_.memory_budget_bytes) throw BudgetStop{true};
  }
  void hold(double bytes) const {
    held_ += bytes;
    check();
  }
  const HybridSearchOptions& options() const { return options_; }

  const Operator& op(int oi) const { return hw_.operators[static_cast<std::size_t>(oi)]; }
  const std::vector<int>& allowed(int u) const { return cache_->allowed[static_cast<std::size_t>(u)]; }
  int unit_of(int oi) const { return cache_->op_unit[static_cast<std::size_t>(oi)]; }
  // Units of one class have operators of the same shapes, so the same items.
  int unit_class(int u) const { return cache_->unit_class[static_cast<std::size_t>(u)]; }
  double fixed() const { return fixed_; }
  double capacity() const { return model_.capacity_bytes(); }
  int in_flight(int s) const { return PlanCostModel::in_flight(layout_.schedule, layout_.pp, s, layout_.m); }

  // The items of an operator at degree t: every choice of the space, less those another item is no
  // worse than in time, states, activations and transient bytes. Times are priced at price_b0 (a
  // range's bound prices them at its largest b0), memory at the layout's b0.
  const std::vector<Item>& items(int oi, int t) const {
    const Operator& o = op(oi);
    auto& slot = items_[{o.shape_id, t}];
    if (!slot.empty()) return slot;
    auto [shape_it, fresh_shape] = cache_->shapes.try_emplace({o.shape_id, t});
    PartsCache::Shape& shape = shape_it->second;
    const costmodel::CpLayout cp{layout_.cp, layout_.cp_all_to_all};
    if (fresh_shape) {
      const Operator tp_sliced = costmodel::tp_slice(o, t, layout_.sequence_parallel, hw_);
      // The operator each choice prices: costmodel::plan_slice (TP, then EP, then CP), one per EP degree.
      const auto slice = [&](const Choice& c) {
        return costmodel::plan_slice(o, t, layout_.sequence_parallel, hw_, c,
                                     model_.options().expert_imbalance, cp);
      };
      SpaceOptions space = options_.space;
      if (rules_.galvatron) space.split_max = 1;
      const int group = model_.world_size() / layout_.pp / t;
      for (const Choice& c : choices_for(tp_sliced, space, rules_.galvatron ? 0 : group)) {
        if (rules_.galvatron && !(c.replicate || c.is_zdp())) continue;
        if (rules_.galvatron && (c.node_group || c.two_level)) continue;
        if (rules_.galvatron && c.selective) continue;  // its released code checkpoints whole layers
        shape.choices.push_back(c);
        if (c.ep > 1 && !shape.ep_sliced.count(c.ep)) shape.ep_sliced.emplace(c.ep, slice(c));
      }
      shape.sliced = slice(Choice{});
    }
    auto [parts_it, fresh_parts] = cache_->parts.try_emplace({o.shape_id, t, price_b0_});
    auto& parts = parts_it->second;
    if (fresh_parts)
      for (const Choice& c : shape.choices)
        parts.push_back(model_.op_parts(o, shape.of(c), t, c, price_b0_, layout_.pp, hw_.bytes, hw_.seq, cp));
    std::vector<Item> all;
    for (std::size_t k = 0; k < shape.choices.size(); ++k) {
      Item it;
      it.choice = shape.choices[k];
      it.cost = model_.op_cost(parts[k], shape.of(it.choice), t, it.choice, layout_.b0, layout_.m, layout_.pp,
                               hw_.bytes);
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
    return model_.relayout_s(from, t, price_b0_, hw_.seq / layout_.cp,
                             hw_.units[static_cast<std::size_t>(u - 1)].hidden, hw_.bytes.activation);
  }
  // What ends stage s after unit u at degree t: the re-layout to 1 and the sends (not the last
  // stage), the tied copy's gradient all-reduce (the last).
  double stage_end(int s, int u, int t) const {
    if (s + 1 < layout_.pp) {
      const auto exit = model_.stage_exit(hw_, layout_.pp, price_b0_, s, u, t, layout_.cp);
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
  const Workload& workload() const { return hw_; }

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
  const PlanCostModel& model_;
  const Workload& hw_;
  HybridLayout layout_;
  const HybridSearchOptions& options_;
  ItemRules rules_;
  PartsCache own_cache_;
  PartsCache* cache_;
  int price_b0_;  // the b0 times are priced at (memory is at layout_.b0)
  double fixed_ = 0;
  mutable double held_ = 0;  // bytes of this solve's tables and labels (hold())
  mutable std::map<std::pair<int, int>, std::vector<Item>> items_;
  mutable std::map<std::pair<int, int>, UnitHull> unit_hulls_;             // (unit class, f)
  mutable std::map<std::tuple<int, int, double>, UnitHull> capped_hulls_;  // (unit class, f, cap)
};

}  // namespace osdp::search::detail
