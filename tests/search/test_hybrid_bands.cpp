// The pipeline's bound per band of largest transient (search/internal/hybrid_bounds.hpp:
// TransientBands, BandedSuffix, RangeLp with bands) against brute force: over every choice of items
// and degrees of a range of units (re-layouts left out, as in the LP), the least time of those that
// fit with the transient already held is never below the banded bound, which is never below the LP of
// all items, and is above it where the items' own transients decide what fits.
#include <algorithm>
#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "../costmodel/cost_fixtures.hpp"
#include "costmodel/plan_cost.hpp"
#include "search/internal/hybrid_bounds.hpp"

namespace osdp {
namespace {

using costmodel::PlanCostModel;
using search::detail::BandedSuffix;
using search::detail::kInf;
using search::detail::LayoutContext;
using search::detail::RangeLp;
using search::detail::SuffixBound;
using search::detail::SuffixPool;
using search::detail::TransientBands;

// A 2-layer GPT on 4 ranks with splits and every checkpointing mode: items of many transients.
struct Fixture {
  costmodel::ModelSpec model = [] {
    costmodel::ModelSpec m;
    m.name = "small";
    m.stages = {costmodel::StageSpec{2, 128, 4, 512}};
    m.seq = 64;
    m.vocab = 512;
    return m;
  }();
  PlanCostModel cost{costmodel::cost_fixtures::synthetic_cluster(1, 4), nullptr, model.precision,
                     costmodel::CostOptions{}};
  costmodel::Workload hw = costmodel::lower(model, 1);
  search::HybridSearchOptions options = [] {
    search::HybridSearchOptions o;
    o.space.split_max = 2;
    o.space.checkpoint = search::CheckpointPolicy::kAuto;
    return o;
  }();
  search::HybridLayout layout{2, 2, 2, costmodel::PipelineSchedule::k1F1B, false};
  LayoutContext ctx{cost, hw, layout, options, {}, nullptr};
  int units() const { return static_cast<int>(hw.units.size()); }
};

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
