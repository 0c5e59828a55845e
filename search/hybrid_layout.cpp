// The exact solve of one hybrid layout (hybrid_layout.hpp): its bounds, the stages' LP table, the
// chains of each stage (hybrid_chains.cpp) priced from the last back, and the best split of them.
#include "search/internal/hybrid_layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <tuple>

#include "search/internal/hybrid_bounds.hpp"
#include "search/internal/hybrid_chains.hpp"
#include "search/internal/hybrid_memo.hpp"

namespace osdp::search {

using costmodel::Plan;
using costmodel::PlanCostModel;
using costmodel::Workload;

namespace detail {
namespace {

// What one layout's memo of chain steps may hold (hybrid_memo.hpp): past it, steps are not added.
constexpr double kMemoBytes = 64.0 * 1024 * 1024;
// A pipeline's bounds take the items' transients in bands no wider than the memory budget over this
// (TransientBands): on Llama 3.1 405B's two stages 16 bands, and a bound 0.07% under the optimum
// (one per transient: 165 and 0.05%; budget / 16: 5 and 0.5%).
constexpr double kBandsPerBudget = 64;

// Whether some split has every stage within its own memory in the relaxation: each unit at its
// least persistent bytes (with its stage's micro-batches in flight) and least transient. Memory
// grows with b0, so where none does, no larger b0 fits either. A stage's bytes in this relaxation
// only fall as its first unit moves later, so unit j can end stage s when stage s fits starting at
// the last unit before j that stage s - 1 can end on.
bool relaxation_fits(const LayoutContext& ctx) {
  const int U = static_cast<int>(ctx.workload().units.size()), pp = ctx.layout().pp;
  if (U < pp) return false;
  const double budget = ctx.capacity() - ctx.fixed();
  std::vector<char> reach(static_cast<std::size_t>(U) + 1, 0), next(reach.size(), 0);
  std::vector<std::pair<double, double>> least(static_cast<std::size_t>(U));
  int f_filled = -1;
  reach[0] = 1;
  for (int s = 0; s < pp; ++s) {
    const int f = ctx.in_flight(s);
    if (f != f_filled) {
      std::map<int, std::pair<double, double>> by_class;  // units of one class have one least
      for (int u = 0; u < U; ++u) {
        const auto [it, fresh] = by_class.try_emplace(ctx.unit_class(u));
        if (fresh) it->second = ctx.least_bytes(u, f);
        least[static_cast<std::size_t>(u)] = it->second;
      }
      f_filled = f;
    }
    std::fill(next.begin(), next.end(), 0);
    int from = -1;  // the stage's first unit: the last unit before j that the stages before reach
    double p = 0, x = 0;
    for (int j = 1; j <= U - (pp - 1 - s); ++j) {
      if (reach[static_cast<std::size_t>(j - 1)]) {
        from = j - 1;
        p = 0;
        x = 0;
      }
      if (from < 0) continue;
      p += least[static_cast<std::size_t>(j - 1)].first;
      x = std::max(x, least[static_cast<std::size_t>(j - 1)].second);
      if (p + x <= budget) next[static_cast<std::size_t>(j)] = 1;
    }
    reach.swap(next);
  }
  return reach[static_cast<std::size_t>(U)] != 0;
}

}  // namespace

bool layout_fits(const PlanCostModel& model, const Workload& hw, const HybridLayout& layout,
                 const HybridSearchOptions& options, ItemRules rules, PartsCache* cache) {
  // Memory does not depend on the b0 times are priced at: price at 1, whose parts the cache keeps.
  return relaxation_fits(LayoutContext(model, hw, layout, options, rules, cache, 1));
}

double layout_lower_bound(const PlanCostModel& model, const Workload& hw, const HybridLayout& layout,
                          const HybridSearchOptions& options, ItemRules rules, PartsCache* cache,
                          int price_b0) {
  const LayoutContext ctx(model, hw, layout, options, rules, cache, price_b0);
  if (!relaxation_fits(ctx)) return kInf;  // also when there are fewer units than stages
  const int U = static_cast<int>(hw.units.size()), pp = layout.pp;
  const double budget = ctx.capacity() - ctx.fixed();
  const SuffixBound all(ctx, ctx.in_flight(pp - 1), U, true);
  const double least = all.least(0, pp * budget, 0.0);
  return least == kInf ? kInf : (1.0 + (layout.m - 1.0) / pp) * least;
}

std::optional<Plan> solve_layout(const PlanCostModel& model, const Workload& hw, const HybridLayout& layout,
                                 const HybridSearchOptions& options, ItemRules rules, bool even, double bound,
                                 std::int64_t* labels, PartsCache* cache, double* lower, Pricing pricing) {
  if (lower) *lower = kInf;

  const LayoutContext ctx(model, hw, layout, options, rules, cache);
  const int U = static_cast<int>(hw.units.size()), pp = layout.pp, m = layout.m;
  if (U < pp) return std::nullopt;
  std::vector<int> starts;
  if (even) {
    starts = even_stage_starts(hw, pp);
    if (starts.empty()) return std::nullopt;
  }
  // One LP structure per stage end and micro-batches in flight
  // (a stage's own chain uses its own micro-batches in flight; the other stages' bound the fewest).
  const int f_min = ctx.in_flight(pp - 1);
  SuffixPool pool;  // their positions: equal ones (identical layers) kept once
  // With a pipeline, the stages' bounds are taken per band of largest transient (TransientBands).
  const double budget = ctx.capacity() - ctx.fixed();
  const TransientBands bands =
      pp > 1 ? TransientBands(ctx, budget, budget / kBandsPerBudget) : TransientBands();
  std::map<std::pair<int, int>, std::unique_ptr<BandedSuffix>> suffix;
  // Units 0..j-1 only (least(0, ...)): the cheaper tables of position 0 alone, of the items whose
  // transient is at most cap.
  std::map<std::pair<int, double>, std::unique_ptr<SuffixBound>> prefixes;
  auto prefix_to = [&](int j, double cap = kInf) -> const SuffixBound& {
    auto& p = prefixes[{j, cap}];
    if (!p) {
      p = std::make_unique<SuffixBound>(ctx, f_min, j, true, cap);
      ctx.hold(p->bytes());
    }
    return *p;
  };
  auto suffix_to = [&](int j, int f) -> const BandedSuffix& {
    auto& p = suffix[{f, j}];
    if (!p) {
      p = std::make_unique<BandedSuffix>(ctx, f, j, bands, &pool);
      ctx.hold(p->bytes());
    }
    return *p;
  };

  // The stages' LP lower bounds (infinity: even the relaxation does not fit), and whether any split
  // has every stage within memory in the relaxation: if none, no plan fits this layout (nor a larger
  // b0), bound or not, and nothing more is priced.
  // The two stage tables at their largest: a layout that would hold more than the memory budget in
  // them alone stops the search before it starts (a pipeline over U units holds about pp U^2 costs).
  ctx.check(2 * StageTable::max_bytes(pp, U));
  ctx.hold(2 * StageTable::max_bytes(pp, U));
  StageTable lp(pp, U);
  auto at = [](const StageTable& v, int s, int i, int j) { return v(s, i, j); };
  std::map<int, RangeLp> range_lp;  // per micro-batches in flight
  for (int s = 0; s < pp; ++s) {
    const int i_lo = s == 0 ? 0 : s, i_hi = s == 0 ? 0 : U - (pp - s);
    const RangeLp& range =
        range_lp.try_emplace(ctx.in_flight(s), ctx, ctx.in_flight(s), U, &bands).first->second;
    std::vector<double> exit(static_cast<std::size_t>(U) + 1, kInf);  // the least after unit j - 1
    for (int j = 1; j <= U; ++j) exit[static_cast<std::size_t>(j)] = ctx.exits(s, j - 1).least;
    for (int i = i_lo; i <= i_hi; ++i) {
      if (even && i != starts[static_cast<std::size_t>(s)]) continue;
      const double entry = s == 0 ? 0.0 : ctx.entries(i).least;
      const int j_lo = s + 1 == pp ? U : i + 1, j_hi = s + 1 == pp ? U : U - (pp - 1 - s);
      for (int j = j_lo; j <= j_hi; ++j) {
        if (even && s + 1 < pp && j != starts[static_cast<std::size_t>(s + 1)]) continue;
        const double least = range.least(i, j, budget, 0.0);
        if (least == kInf) break;  // a longer stage fits no better
        lp.set(s, i, j) = least + entry + exit[static_cast<std::size_t>(j)];
      }
    }
  }
  {
    std::vector<std::vector<bool>> reach(static_cast<std::size_t>(pp + 1),
                                         std::vector<bool>(static_cast<std::size_t>(U + 1)));
    reach[0][0] = true;
    for (int s = 0; s < pp; ++s)
      for (int i = 0; i < U; ++i)
        if (reach[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)])
          for (int j = i + 1; j <= U; ++j)
            if (at(lp, s, i, j) < kInf)
              reach[static_cast<std::size_t>(s + 1)][static_cast<std::size_t>(j)] = true;
    if (!reach[static_cast<std::size_t>(pp)][static_cast<std::size_t>(U)]) return std::nullopt;
  }
  // One stage (the exact search's own items): solved per band of largest transient, in the order of
  // each band's LP (step time, then the band's bottom).
  const bool by_cap = pp == 1 && !even && !rules.galvatron;
  struct CapBand {
    double lp, lo, hi;
  };
  std::vector<CapBand> cap_order;
  std::vector<int> lp_split;  // the best split in the LP
  // The whole layout in the LP: the best split of the stages' LP bounds (each stage within its own
  // memory, with its own micro-batches in flight), T = sum + (m - 1) max over them; every plan's T is
  // at least that. A layout that cannot beat `bound` even there is not priced further (not even its
  // incumbent).
  {
    double split_lp = best_stage_split(lp, pp, U, m, &lp_split, &options);
    if (by_cap && split_lp < kInf) {
      // One stage: its largest transient X is one of its items' transients, at least what some unit
      // forces (its least largest transient over its degrees). The transients are cut into bands
      // [lo, hi] no wider than budget / 256; a plan whose X is in a band takes only items within hi,
      // under budget - lo: an LP per band, and the least of them bounds every plan. A band's LP is
      // looser than one per transient by at most the band's width in memory; without bands, T5's
      // transients 1 MiB apart (71-87 MiB) took one run each.
      std::vector<double> caps;
      double forced = 0;
      for (int u = 0; u < U; ++u) forced = std::max(forced, ctx.unit_hull(u, f_min).least_transient);
      for (int u = 0; u < U; ++u)
        for (int t : ctx.allowed(u))
          for (int oi : hw.units[static_cast<std::size_t>(u)].ops)
            for (const auto& it : ctx.items(oi, t))
              if (it.cost.transient_bytes >= forced) caps.push_back(it.cost.transient_bytes);
      std::sort(caps.begin(), caps.end());
      caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
      const double width = budget / 256;
      for (std::size_t k = 0; k < caps.size();) {
        std::size_t e = k;
        while (e + 1 < caps.size() && caps[e + 1] - caps[k] <= width) ++e;
        const double least = prefix_to(U, caps[e]).least(0, budget, caps[k]);
        if (least < kInf) cap_order.push_back({m * least, caps[k], caps[e]});
        k = e + 1;
      }
      std::sort(cap_order.begin(), cap_order.end(), [](const CapBand& a, const CapBand& b) {
        return std::tie(a.lp, a.lo) < std::tie(b.lp, b.lo);
      });
      split_lp = cap_order.empty() ? kInf : std::max(split_lp, cap_order.front().lp);
    }
    if (lower) *lower = split_lp;
    if (split_lp >= bound) return std::nullopt;  // also when it is infinite: nothing fits
  }
  // The pipeline's bounds on the stages around one stage, from the LP table.
  PipelineBounds pb;
  // The tables of every (f, j) a chain asks for, built when first asked (the chains ask for those of
  // the ends worth pricing only), then kept at hand: the chains ask per unit.
  int f_max = 0;
  for (int s = 0; s < pp; ++s) f_max = std::max(f_max, ctx.in_flight(s));  // GPipe: m, 1F1B: <= pp
  std::vector<std::vector<const BandedSuffix*>> suffix_at(
      static_cast<std::size_t>(f_max) + 1, std::vector<const BandedSuffix*>(static_cast<std::size_t>(U) + 1));
  pb.suffix = [&](int j, int f) -> const BandedSuffix& {
    const BandedSuffix*& p = suffix_at[static_cast<std::size_t>(f)][static_cast<std::size_t>(j)];
    if (!p) p = &suffix_to(j, f);
    return *p;
  };
  pb.before.assign(static_cast<std::size_t>(pp + 1),
                   std::vector<double>(static_cast<std::size_t>(U + 1), kInf));
  pb.after = pb.before;
  pb.before[0][0] = 0;
  for (int s = 0; s < pp; ++s)
    for (int i = 0; i < U; ++i) {
      const double b = pb.before_at(s, i);
      if (b == kInf) continue;
      for (int j = i + 1; j <= U; ++j) {
        auto& x = pb.before[static_cast<std::size_t>(s + 1)][static_cast<std::size_t>(j)];
        x = std::min(x, b + at(lp, s, i, j));
      }
    }
  pb.after[static_cast<std::size_t>(pp)][static_cast<std::size_t>(U)] = 0;
  for (int s = pp - 1; s >= 0; --s)
    for (int j = U; j >= 1; --j) {
      const double a = pb.after_at(s + 1, j);
      if (a == kInf) continue;
      for (int i = 0; i < j; ++i) {
        auto& x = pb.after[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
        x = std::min(x, at(lp, s, i, j) + a);
      }
    }

  // The incumbent (osdp's times only: galvatron chooses by its own): one degree for every unit, on
  // even stages or on the LP's best split.
  std::optional<Plan> incumbent;
  double incumbent_t = kInf;
  const auto offer = [&](Plan&& p) {
    const auto ev = model.evaluate(hw, p);
    if (ev.fits && ev.time_s < incumbent_t) {
      incumbent_t = ev.time_s;
      incumbent = std::move(p);
    }
  };
  const bool improve = !even && !rules.galvatron && pricing.incumbents;
  if (improve) {
    std::vector<std::vector<int>> splits{even_stage_starts(hw, pp)};
    if (splits.front().empty()) splits.clear();
    if (lp_split.size() == static_cast<std::size_t>(pp) &&
        std::find(splits.begin(), splits.end(), lp_split) == splits.end())
      splits.push_back(lp_split);
    for (const auto& split : splits)
      for (int t = 1; t <= model.node_size(); t *= 2)
        if (model.valid(pp, t))
          if (auto p = uniform_plan(ctx, t, split)) offer(std::move(*p));
  }
  if (incumbent && incumbent_t >= bound && incumbent_t < pricing.ceiling &&
      incumbent_t <= bound * (1 + pricing.stretch))
    bound = std::nextafter(incumbent_t, kInf);  // the fallback returns the incumbent if nothing beats it
  const double outer_bound = bound;
  bound = std::min(bound, incumbent_t);
  // The incumbent wins unless the DP found something faster (every label that could was kept).
  auto fallback = [&]() -> std::optional<Plan> {
    if (incumbent && incumbent_t < outer_bound) return incumbent;
    return std::nullopt;
  };

  // c[s][i][j]: stages that cannot be part of a plan beating the bound are left at infinity. Whether
  // (s, i, j) is worth pricing: the units before i in stages 0..s-1 and those from j on in stages
  // s+1..pp-1 within the memory of their stages (each set's LP) and this stage's LP, at weight m.
  StageTable c(pp, U);
  auto wanted = [&](int s, int i, int j) {
    const double least = at(lp, s, i, j);
    if (least == kInf) return false;
    const double before = pb.before_at(s, i), after = pb.after_at(s + 1, j);
    if (before == kInf || after == kInf) return false;
    return step_bound(least, before, after, s, m, pp) < bound;
  };
  const std::function<const SuffixBound&(int)> prefix = [&](int u) -> const SuffixBound& {
    return prefix_to(u);
  };
  // The chain of stage s from its start i (forward) or from the model's end (the last stage). The
  // forward chains of a pipeline of three or more stages whose forward stages hold the same
  // micro-batches in flight share their steps (hybrid_memo.hpp): on identical layers most grow the
  // same labels as one before them, at another start or in another stage.
  std::optional<SumMemo> memo;
  if (pricing.share_steps && pp >= 3 && ctx.in_flight(0) == ctx.in_flight(pp - 2)) memo.emplace(kMemoBytes);
  // Only the ends worth pricing (`wanted`): a label that only they could take is dropped, and the chain
  // stops at the last of them (the last stage's at the first).
  std::vector<char> wanted_ends;
  auto chain = [&](int s, int i, const std::vector<std::pair<int, int>>& ends, std::int64_t* count) {
    wanted_ends.assign(static_cast<std::size_t>(U) + 1, 0);
    int first = U, last = 0;
    for (const auto& [a, b] : ends) {
      if (a != i && s + 1 < pp) continue;
      const int end = s + 1 == pp ? a : b;
      wanted_ends[static_cast<std::size_t>(end)] = 1;
      first = std::min(first, end);
      last = std::max(last, end);
    }
    if (s + 1 == pp) return run_backward(ctx, first, bound, count, prefix, &pb, kInf, 0, 0, &wanted_ends);
    return run_forward(ctx, s, i, last, bound, count, pb, memo ? &*memo : nullptr, &wanted_ends);
  };
  // What each priced stage chose, read off its chain's best label when the chain is run: the chains
  // are not run again for the plan.
  StagePicks picks;
  // Stages are priced one after another: from the last back, or from the first on when the first is
  // the slower of the two in the LP's best split. Once stage s + 1 is priced (from the last back), the
  // least sum of the stages after s from unit j on is known exactly, not only in the LP: the least
  // over splits of the priced costs (infinity where no plan beating the bound has such stages). It
  // replaces after[s + 1][j], which stage s's chains and `wanted` bound with: a plan that beats the
  // bound kept its later stages' labels, so their priced costs are no more than its own. From the
  // first on, before[s][i] likewise. A stage that is not the slowest weighs 1 in T, the slowest m:
  // priced first, against the LP of the others, the slowest's chain has the narrower slack, and the
  // others are then priced against its exact cost.
  const auto lp_of = [&](int s) {
    const int i = lp_split[static_cast<std::size_t>(s)];
    return at(lp, s, i, s + 1 < pp ? lp_split[static_cast<std::size_t>(s + 1)] : U);
  };
  const bool from_first =
      pp > 1 && (pricing.order == Pricing::Order::kAuto
                     ? lp_split.size() == static_cast<std::size_t>(pp) && lp_of(0) > lp_of(pp - 1)
                     : pricing.order == Pricing::Order::kFromFirst);
  for (int k = 0; k < pp; ++k) {
    ctx.check();
    const int s = from_first ? k : pp - 1 - k;
    if (k > 0 && from_first)
      for (int j = 0; j <= U; ++j) {
        double x = kInf;
        for (int i = 0; i < j; ++i) x = std::min(x, pb.before_at(s - 1, i) + at(c, s - 1, i, j));
        pb.before[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)] = x;
      }
    if (k > 0 && !from_first)
      for (int i = 0; i <= U; ++i) {
        double x = kInf;
        for (int j = i + 1; j <= U; ++j) x = std::min(x, at(c, s + 1, i, j) + pb.after_at(s + 2, j));
        pb.after[static_cast<std::size_t>(s + 1)][static_cast<std::size_t>(i)] = x;
      }
    const bool last = s + 1 == pp;
    const int i_lo = s == 0 ? 0 : s, i_hi = s == 0 ? 0 : U - (pp - s);
    std::vector<std::pair<int, int>> ends;  // (i, j) worth pricing
    for (int i = i_lo; i <= i_hi; ++i) {
      if (even && i != starts[static_cast<std::size_t>(s)]) continue;
      for (int j = last ? U : i + 1; j <= (last ? U : U - (pp - 1 - s)); ++j) {
        if (even && !last && j != starts[static_cast<std::size_t>(s + 1)]) continue;
        if (wanted(s, i, j)) ends.emplace_back(i, j);
      }
    }
    if (ends.empty()) continue;
    if (k + 1 == pp && pp > 1 && improve) {
      // Every other stage is priced: a plan of each (i, j) worth pricing, one degree and the flat
      // solver for this stage and the priced stages around it, can only lower the bound that its
      // chains prune with. Where this stage is not the slowest it weighs 1 in T, and its slack under
      // the LP's bound is m times wider than the slowest stage's.
      for (const auto& [i, j] : ends) {
        // Every plan is at least its stage's LP bound with the priced stages around it: one whose
        // bound is past the incumbent already held (by more than rounding) makes no shorter one.
        if (step_bound(at(lp, s, i, j), pb.before_at(s, i), pb.after_at(s + 1, j), s, m, pp) >
            incumbent_t * (1 + 1e-9))
          continue;
        Plan p = empty_plan(hw, layout);
        if (!priced_around(ctx, c, pb, picks, s, i, j, p)) continue;
        for (int t = 1; t <= model.node_size(); t *= 2) {
          if (!model.valid(pp, t)) continue;
          Plan q = p;
          if (flat_stage(ctx, t, s, q)) offer(std::move(q));
        }
      }
      bound = std::min(bound, incumbent_t);
    }
    if (by_cap) {
      // Per band the chain takes only the items within hi and starts every label at transient lo, so
      // its labels differ little in transient, and it is bounded by the band's LP, far tighter than the
      // LP of all items at their least transient. Every plan is found in its own band; the bands go in
      // the order of their LP until it reaches the bound, which each plan found lowers.
      double limit = bound;  // lowered by each plan found
      // The chain of one band (with beam > 0, a heuristic's), its plan kept when it is the best yet.
      const auto run_band = [&](const CapBand& band, std::size_t beam) {
        const std::function<const SuffixBound&(int)> within = [&](int u) -> const SuffixBound& {
          return prefix_to(u, band.hi);
        };
        const Chain ch = run_backward(ctx, 0, limit, labels, within, &pb, band.hi, band.lo, beam);
        if (ch.best[0] < at(c, 0, 0, U)) {
          c.set(0, 0, U) = ch.best[0];
          picks[{0, 0, U}] = picks_of(ch, ch.best_label[0]);
          limit = std::min(limit, m * ch.best[0]);
        }
      };
      // An incumbent from the first band: its chain with only the pricing.beam labels of least time
      // plus the LP of the units left kept at each unit. On gpt-64l at 16 GB, with 16, it lands 0.002%
      // over the optimum, where the one-degree incumbents are 0.06% over, and the exact chain under it
      // keeps 33K labels instead of 58K.
      if (improve && pricing.beam > 0 && !cap_order.empty()) run_band(cap_order.front(), pricing.beam);
      for (const CapBand& band : cap_order) {
        if (band.lp >= limit) break;
        ctx.check();
        run_band(band, 0);
      }
      continue;
    }
    if (last) {
      const Chain ch = chain(s, -1, ends, labels);
      for (const auto& [i, j] : ends) {
        c.set(s, i, j) = ch.best[static_cast<std::size_t>(i)];
        picks[{s, i, j}] = picks_of(ch, ch.best_label[static_cast<std::size_t>(i)]);
      }
      continue;
    }
    for (std::size_t e = 0; e < ends.size();) {
      const int i = ends[e].first;
      const Chain ch = chain(s, i, ends, labels);
      for (; e < ends.size() && ends[e].first == i; ++e) {
        const int j = ends[e].second;
        c.set(s, i, j) = ch.best[static_cast<std::size_t>(j)];
        picks[{s, i, j}] = picks_of(ch, ch.best_label[static_cast<std::size_t>(j)]);
      }
    }
  }
  // The chains keep every label that may be part of a plan shorter than the bound, not only those: the
  // best split may be no shorter, and then a shorter plan may have been dropped.
  std::vector<int> best_split;
  if (best_stage_split(c, pp, U, m, &best_split, &options) >= bound) return fallback();
  Plan plan = empty_plan(hw, layout);
  plan.stage_first_unit = best_split;
  for (int s = 0; s < pp; ++s) {
    const int i = best_split[static_cast<std::size_t>(s)];
    const int j = s + 1 < pp ? best_split[static_cast<std::size_t>(s + 1)] : U;
    rebuild(ctx, picks.at(s + 1 < pp ? std::tuple{s, i, j} : std::tuple{s, i, U}), plan);
  }
  if (incumbent && model.evaluate(hw, plan).time_s >= incumbent_t) return fallback();
  return plan;
}

}  // namespace detail

std::optional<Plan> solve_layout_exact(const PlanCostModel& model, const Workload& hw,
                                       const HybridLayout& layout, const HybridSearchOptions& options,
                                       std::int64_t* labels) {
  return detail::solve_layout(model, hw, layout, options, detail::ItemRules{}, false,
                              std::numeric_limits<double>::infinity(), labels);
}

}  // namespace osdp::search
