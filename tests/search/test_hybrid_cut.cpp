// The exact hybrid search's cheap label test (search/internal/hybrid_chains.hpp, Cut) against its definition:
// it refuses only labels for which every end of the stage fails, own = tau + fixed + LP >= need, and
// with one end it is exact at the parents' budgets. Also the pieces it is made of: the LP's conjugate
// and slope (SuffixBound) against the LP on a fine grid, and step_need against step_bound; and the
// LP of a range of units (SuffixBound's tables, alone or sharing their positions, and RangeLp, both by
// unit classes) against the LP written out unit by unit, and the same per band of largest transient
// against brute force.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "../costmodel/cost_fixtures.hpp"
#include "costmodel/plan_cost.hpp"
#include "search/internal/hybrid_bounds.hpp"
#include "search/internal/hybrid_chains.hpp"

namespace osdp {
namespace {

using costmodel::PlanCostModel;
using search::detail::BandedSuffix;
using search::detail::Chain;
using search::detail::Cut;
using search::detail::kInf;
using search::detail::Label;
using search::detail::LayoutContext;
using search::detail::RangeLp;
using search::detail::SuffixBound;
using search::detail::SuffixPool;
using search::detail::TransientBands;

costmodel::ModelSpec small_gpt(int layers) {
  costmodel::ModelSpec m;
  m.name = "small";
  m.stages = {costmodel::StageSpec{layers, 128, 4, 512}};
  m.seq = 64;
  m.vocab = 512;
  return m;
}

// One layout of a 4-layer GPT on 4 ranks, with splits and checkpointing: many hull points per unit.
struct Fixture {
  costmodel::ModelSpec model = small_gpt(4);
  PlanCostModel cost{costmodel::cost_fixtures::synthetic_cluster(1, 4), nullptr, model.precision,
                     costmodel::CostOptions{}};
  costmodel::Workload hw = costmodel::lower(model, 1);
  search::HybridSearchOptions options = [] {
    search::HybridSearchOptions o;
    o.space.split_max = 2;
    o.space.checkpoint = search::CheckpointPolicy::kAuto;
    return o;
  }();
  search::HybridLayout layout{1, 2, 2, costmodel::PipelineSchedule::k1F1B, false};
  LayoutContext ctx{cost, hw, layout, options, {}, nullptr};
  int units() const { return static_cast<int>(hw.units.size()); }
  // Units k..U-1 at their smallest and at their largest hull points: where the LP starts to fit and
  // where it stops falling.
  std::pair<double, double> range(int k, int f) const {
    double lo = 0, hi = 0;
    for (int u = k; u < units(); ++u) {
      const auto& h = ctx.unit_hull(u, f);
      lo += h.points.front().first;
      hi += h.points.back().first;
    }
    return {lo, hi};
  }
};

TEST_CASE("the LP's conjugate is its least plus lambda times the budget and its slope a tangent's",
          "[hybrid]") {
  Fixture fx;
  const int f = 2;
  const SuffixBound sb(fx.ctx, f, fx.units());
  int checked = 0;
  for (int k = 0; k < fx.units(); ++k) {
    const auto [lo, hi] = fx.range(k, f);
    REQUIRE(hi > lo);
    CHECK(sb.least_within(k, lo * (1 - 1e-9)) == kInf);
    CHECK(sb.conjugate(k, 0.0) == Approx(sb.least_within(k, hi)).epsilon(1e-12));
    CHECK(sb.slope(k, hi * 1.01) == 0.0);
    CHECK(sb.slope(k, lo * 0.99) == 0.0);
    const int n = 4000;
    const double step = (hi - lo) / n;
    std::vector<double> grid;
    for (int g = 0; g <= n + 50; ++g) grid.push_back(lo + g * step);
    double steepest = 0;
    for (double r : grid) steepest = std::max(steepest, -sb.slope(k, r));
    REQUIRE(steepest > 0);
    // The slope at r: a line through (r, LP(r)) that no grid point is below.
    for (int g = 0; g <= n; g += 97) {
      const double r0 = grid[static_cast<std::size_t>(g)], v0 = sb.least_within(k, r0), s0 = sb.slope(k, r0);
      CHECK(s0 <= 0);
      double lowest = kInf;  // the least of LP - line over the grid
      for (double r : grid) lowest = std::min(lowest, sb.least_within(k, r) - (v0 + s0 * (r - r0)));
      CHECK(lowest >= -1e-12 * v0);
      ++checked;
    }
    // conjugate(lambda) is at most LP(r) + lambda r everywhere, and the grid's least is within half a
    // step's change of it: LP is piecewise linear, its least plus lambda r at a breakpoint, and the
    // grid point nearest to it is at most step / 2 away along slopes no steeper than `steepest`.
    for (const double lambda : {0.0, steepest / 7, steepest / 2, steepest, 2 * steepest}) {
      const double h = sb.conjugate(k, lambda);
      double least = kInf;
      for (double r : grid) least = std::min(least, sb.least_within(k, r) + lambda * r);
      CHECK(least >= h - 1e-12 * std::abs(h));
      CHECK(least <= h + (lambda + steepest) * step / 2 + 1e-12 * std::abs(h));
      ++checked;
    }
  }
  CHECK(checked > 40);
}

// The LP of units i..j-1 within `budget` written out unit by unit: every unit at its hull's first
// point, then all units' increments bought by slope, steepest first, the last one in part; the
// units' least transients (the largest of them, or `transient` if larger) set aside first.
double unit_by_unit(const LayoutContext& ctx, int f, int i, int j, double budget, double transient) {
  double p = 0, t = 0, x = transient;
  std::vector<std::pair<double, double>> incs;
  for (int u = i; u < j; ++u) {
    const auto& h = ctx.unit_hull(u, f);
    if (h.points.empty()) return kInf;
    p += h.points.front().first;
    t += h.points.front().second;
    x = std::max(x, h.least_transient);
    for (std::size_t k = 1; k < h.points.size(); ++k)
      incs.emplace_back(h.points[k].first - h.points[k - 1].first,
                        h.points[k].second - h.points[k - 1].second);
  }
  double r = budget - x - p;
  if (r < 0) return kInf;
  std::sort(incs.begin(), incs.end(), [](const auto& a, const auto& b) {
    return a.second / a.first < b.second / b.first;  // most time saved per byte first
  });
  for (const auto& [dp, dt] : incs) {
    if (r >= dp) {
      r -= dp;
      t += dt;
    } else {
      t += dt * r / dp;
      break;
    }
  }
  return t;
}

TEST_CASE("the LP of a range of units, by suffix tables and by unit classes, is the units' own", "[hybrid]") {
  Fixture fx;
  const int U = fx.units();
  int finite = 0, infinite = 0;
  search::detail::SuffixPool pool;  // the tables' positions shared: the same figures, bit for bit
  for (const int f : {1, 2}) {
    const search::detail::RangeLp range(fx.ctx, f, U);
    for (int j = 1; j <= U; ++j) {
      const SuffixBound table(fx.ctx, f, j);
      const SuffixBound shared(fx.ctx, f, j, false, kInf, &pool);
      CHECK(shared.bytes() == table.bytes());
      for (int i = 0; i < j; ++i) {
        const auto [lo, hi] = fx.range(i, f);  // of units i..U-1: covers i..j-1's range and beyond
        for (const double x : {0.0, 0.05 * hi})
          for (int g = 0; g <= 20; ++g) {
            const double budget = 0.8 * lo * (j - i) / (U - i) + 1.2 * hi * g / 20;
            const double want = unit_by_unit(fx.ctx, f, i, j, budget, x);
            INFO("f " << f << " units " << i << ".." << j - 1 << " budget " << budget << " transient " << x);
            CHECK(shared.least(i, budget, x) == table.least(i, budget, x));
            CHECK(shared.conjugate(i, 1e-9 * g) == table.conjugate(i, 1e-9 * g));
            if (want == kInf) {
              CHECK(table.least(i, budget, x) == kInf);
              CHECK(range.least(i, j, budget, x) == kInf);
              ++infinite;
            } else {
              CHECK(table.least(i, budget, x) == Approx(want).epsilon(1e-12));
              CHECK(range.least(i, j, budget, x) == Approx(want).epsilon(1e-12));
              ++finite;
            }
          }
      }
      if (j == U) {  // the position-0 table alone
        const SuffixBound first(fx.ctx, f, j, true);
        for (int g = 0; g <= 20; ++g) {
          const double budget = 1.2 * fx.range(0, f).second * g / 20;
          const double want = unit_by_unit(fx.ctx, f, 0, j, budget, 0.0);
          if (want == kInf)
            CHECK(first.least(0, budget, 0.0) == kInf);
          else
            CHECK(first.least(0, budget, 0.0) == Approx(want).epsilon(1e-12));
        }
      }
    }
  }
  CHECK(finite > 500);
  CHECK(infinite > 50);
}

TEST_CASE("step_need is where step_bound reaches the bound", "[hybrid]") {
  std::mt19937 rng(20261127);
  std::uniform_real_distribution<double> u01(0, 1);
  int below_mean = 0, above_mean = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int pp = 1 << (rng() % 4), s = static_cast<int>(rng() % static_cast<unsigned>(pp));
    const int m = 1 + static_cast<int>(rng() % 8);
    const double before = s > 0 ? s * u01(rng) : 0, after = s + 1 < pp ? (pp - 1 - s) * u01(rng) : 0;
    const double bound = search::detail::step_bound(u01(rng), before, after, s, m, pp);
    const double need = search::detail::step_need(before, after, s, m, pp, bound);
    INFO("pp " << pp << " s " << s << " m " << m);
    CHECK(search::detail::step_bound(need, before, after, s, m, pp) == Approx(bound).epsilon(1e-12));
    CHECK(search::detail::step_bound(need - 1e-6, before, after, s, m, pp) < bound);
    const double c = std::max(s > 0 ? before / s : 0.0, s + 1 < pp ? after / (pp - 1 - s) : 0.0);
    (need < c ? below_mean : above_mean) += 1;
  }
  CHECK(below_mean > 100);  // both pieces of step_bound are met
  CHECK(above_mean > 100);
}

// Whether every end fails for a label: own = tau + fixed + LP >= need (keep's test).
bool every_end_fails(const std::vector<Cut::End>& ends, const Label& l, double budget) {
  for (const Cut::End& e : ends) {
    const double lp = e.lp ? e.lp->least(e.k, budget - l.persistent, l.transient) : 0.0;
    if (l.time + e.fixed + lp < e.need) return false;
  }
  return true;
}

TEST_CASE("the cut refuses only labels every end refuses, and with one end all it can at the parents",
          "[hybrid]") {
  Fixture fx;
  std::mt19937 rng(20261128);
  std::uniform_real_distribution<double> u01(0, 1);
  const int U = fx.units();
  // The LP tables of a stage's ends (forward: units u+1..j-1 for every end j), f = 2.
  std::vector<SuffixBound> tables;
  for (int j = 0; j <= U; ++j) tables.emplace_back(fx.ctx, 2, j);
  const double budget = fx.range(0, 2).second;  // room for the whole model's largest hull points
  int refused = 0, failing = 0, exact = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const bool one_end = trial % 2 == 0;
    const int u = static_cast<int>(rng() % static_cast<unsigned>(U - 1));
    // Ends: one LP end (units u+1..U-1), or the empty end and every j up to U with random needs and
    // exits.
    std::vector<Cut::End> ends;
    const double scale = tables[static_cast<std::size_t>(U)].least_within(0, budget);
    if (one_end) {
      ends.push_back({scale * (0.5 + u01(rng)), 0.0, &tables[static_cast<std::size_t>(U)], u + 1});
    } else {
      ends.push_back({scale * u01(rng), 0.1 * scale * u01(rng), nullptr, 0});
      for (int j = u + 2; j <= U; ++j)
        ends.push_back(
            {scale * (0.5 + u01(rng)), 0.1 * scale * u01(rng), &tables[static_cast<std::size_t>(j)], u + 1});
    }
    // Parents with budgets across the LP's range, and labels grown from them by one random item.
    Chain ch;
    std::vector<int> current;
    const auto [lo, hi] = fx.range(u + 1, 2);
    for (int p = 0; p < 9; ++p) {
      Label l;
      l.persistent = budget - lo - (hi - lo) * 1.1 * u01(rng);
      l.transient = 0;
      l.time = scale * u01(rng);
      ch.arena.push_back(l);
      current.push_back(static_cast<int>(ch.arena.size()) - 1);
    }
    const double bound = scale;  // the margin's scale only
    const Cut cut(ch, current, ends, budget, bound);
    for (int q = 0; q < 200; ++q) {
      Label l = ch.arena[static_cast<std::size_t>(current[rng() % current.size()])];
      l.persistent += (hi - lo) * 0.2 * (u01(rng) - 0.5);
      l.transient = u01(rng) < 0.3 ? (hi - lo) * 0.1 * u01(rng) : 0.0;
      l.time += scale * 0.3 * (u01(rng) - 0.5);
      const bool fails = every_end_fails(ends, l, budget);
      if (!cut.pass(l)) {
        ++refused;
        INFO("trial " << trial << " label " << q);
        CHECK(fails);
      }
      failing += fails ? 1 : 0;
    }
    if (!one_end) continue;
    // At a parent's own budget (no transient), the one end's LP and the cut's line meet: a label
    // failing by more than the margin is refused. The parents at the least, median and most budget.
    std::vector<Label> at_parents;
    for (int li : current) at_parents.push_back(ch.arena[static_cast<std::size_t>(li)]);
    std::sort(at_parents.begin(), at_parents.end(),
              [](const Label& a, const Label& b) { return a.persistent > b.persistent; });
    for (std::size_t pick : {std::size_t{0}, at_parents.size() / 2, at_parents.size() - 1}) {
      Label l = at_parents[pick];
      const double lp = ends[0].lp->least(ends[0].k, budget - l.persistent, 0.0);
      if (lp == kInf) continue;
      l.time = ends[0].need - lp + 1e-6 * bound;  // fails by 1e-6 of the bound
      CHECK_FALSE(cut.pass(l));
      l.time = ends[0].need - lp - 1e-6 * bound;  // passes
      CHECK(cut.pass(l));
      ++exact;
    }
  }
  CHECK(exact > 300);
  CHECK(failing > 5000);
  CHECK(refused > 0);
  // Without a bound the cut takes everything.
  Chain ch;
  ch.arena.push_back(Label{});
  const Cut open(ch, {0}, {{0.0, 0.0, nullptr, 0}}, budget, kInf);
  CHECK(open.pass(Label{1e9, 1e9, 1e9, -1, -1, -1, 1}));
}

// Every plan of units i..j-1 (per unit one degree, per operator one item at it) as (persistent bytes
// with f micro-batches in flight, largest transient, time), less those another is no worse than in
// all three (neither the least time that fits nor anything else here needs them).
struct Plan3 {
  double p, x, t;
};
std::vector<Plan3> undominated(std::vector<Plan3> all) {
  std::sort(all.begin(), all.end(), [](const Plan3& a, const Plan3& b) {
    return a.t != b.t ? a.t < b.t : a.p != b.p ? a.p < b.p : a.x < b.x;
  });
  std::vector<Plan3> kept;
  for (const Plan3& q : all) {
    bool beaten = false;
    for (const Plan3& k : kept) beaten = beaten || (k.p <= q.p && k.x <= q.x);
    if (!beaten) kept.push_back(q);
  }
  return kept;
}
std::vector<Plan3> every_plan(const LayoutContext& ctx, int f, int i, int j) {
  std::vector<Plan3> plans{{0, 0, 0}};
  for (int u = i; u < j; ++u) {
    std::vector<Plan3> unit{};  // the unit's own plans, over its degrees
    for (int t : ctx.allowed(u)) {
      std::vector<Plan3> at{{0, 0, 0}};
      for (int oi : ctx.workload().units[static_cast<std::size_t>(u)].ops) {
        std::vector<Plan3> next;
        for (const Plan3& a : at)
          for (const auto& it : ctx.items(oi, t))
            next.push_back({a.p + it.cost.states_bytes + f * it.cost.act_bytes,
                            std::max(a.x, it.cost.transient_bytes), a.t + it.time_s});
        at.swap(next);
      }
      unit.insert(unit.end(), at.begin(), at.end());
    }
    unit = undominated(std::move(unit));
    std::vector<Plan3> next;
    for (const Plan3& a : plans)
      for (const Plan3& b : unit) next.push_back({a.p + b.p, std::max(a.x, b.x), a.t + b.t});
    plans = undominated(std::move(next));
  }
  return plans;
}

// The pipeline's bound per band of largest transient (TransientBands, BandedSuffix, RangeLp with
// bands) against brute force: over every choice of items and degrees of a range of units (re-layouts
// left out, as in the LP), the least time of those that fit with the transient already held is never
// below the banded bound, which is never below the LP of all items, and is above it where the items'
// own transients decide what fits.
TEST_CASE("the banded LP bounds every plan of a range and is at least the LP of all items", "[hybrid]") {
  Fixture fx;
  const int U = fx.units();
  const double budget = fx.ctx.capacity() - fx.ctx.fixed();
  // Bands no wider than a tenth of the largest transient: several, of several transients each.
  double widest = 0;
  for (int u = 0; u < U; ++u)
    for (int t : fx.ctx.allowed(u))
      for (int oi : fx.hw.units[static_cast<std::size_t>(u)].ops)
        for (const auto& it : fx.ctx.items(oi, t)) widest = std::max(widest, it.cost.transient_bytes);
  const TransientBands bands(fx.ctx, budget, widest / 10);
  REQUIRE(bands.size() >= 4);
  for (std::size_t b = 0; b < bands.size(); ++b) {
    CHECK(bands.lo[b] <= bands.hi[b]);
    CHECK(bands.hi[b] - bands.lo[b] <= widest / 10);
    if (b > 0) CHECK(bands.lo[b] > bands.hi[b - 1]);
  }
  int tighter = 0, checked = 0, none = 0;
  SuffixPool pool;
  for (const int f : {1, 2}) {
    const RangeLp range(fx.ctx, f, U, &bands);
    for (int j = 1; j <= U; ++j) {
      const BandedSuffix banded(fx.ctx, f, j, bands, &pool);
      const SuffixBound plain(fx.ctx, f, j);
      for (int i = std::max(0, j - 2); i < j; ++i) {
        const std::vector<Plan3> plans = every_plan(fx.ctx, f, i, j);
        double lo = kInf, hi = 0;  // the plans' persistent bytes plus transient, least and most
        for (const Plan3& q : plans) {
          lo = std::min(lo, q.p + q.x);
          hi = std::max(hi, q.p + q.x);
        }
        for (const double x : {0.0, bands.lo[bands.size() / 2], bands.hi.back()})
          for (int g = 0; g <= 24; ++g) {
            const double room = 0.9 * lo + (1.1 * hi - 0.9 * lo) * g / 24 + x;  // budget less the bytes held
            double best = kInf;  // brute force: the least time that fits, the transient x held
            for (const Plan3& q : plans)
              if (q.p + std::max(q.x, x) <= room) best = std::min(best, q.t);
            const double b = banded.least(i, room, x), a = plain.least(i, room, x);
            INFO("f " << f << " units " << i << ".." << j - 1 << " room " << room << " transient " << x);
            CHECK(b <= best * (1 + 1e-12));
            CHECK(b >= a * (1 - 1e-12));
            if (b == kInf)
              CHECK(range.least(i, j, room, x) == kInf);
            else
              CHECK(range.least(i, j, room, x) == Approx(b).epsilon(1e-12));
            if (best == kInf) ++none;
            if (b < kInf && b > a * (1 + 1e-6)) ++tighter;
            ++checked;
          }
      }
    }
  }
  CHECK(checked > 500);
  CHECK(none > 20);
  CHECK(tighter > 50);  // the bands decide, not only the budget
}

}  // namespace
}  // namespace osdp
