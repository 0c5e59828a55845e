#include "search/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <queue>
#include <vector>

#include <fmt/format.h>

#include "costmodel/bounds.hpp"
#include "costmodel/error.hpp"

namespace osdp::search {
namespace {

using costmodel::kInf;
// Batch sizes bounded one by one before the rest are taken as a range. Measured on the bundled
// and audited cases (tests/bench/bench_search_versus.sh): with every batch size in one range the
// models whose largest batch is under 20 searched up to 1.6x slower (more bounds on ranges than
// there are batch sizes); with 256 singles the small models whose batch runs into the thousands
// searched 5-8x slower (a bound for each).
constexpr int kSingles = 16;

// Batch sizes lo..hi and a lower bound on the step time per sample, T(b) / b, of every plan at any of
// them. Two facts about a plan's step time T_p(b) under the cost model give it:
//   - T_p(b) / b never rises with b: each part of the step is affine in b with a non-negative
//     intercept (a GEMM's time is flops (d + d_half) / (peak d), which is affine in b while d grows
//     with b and linear once it stops; elementwise passes, recomputation), constant (collectives,
//     the optimizer), or the larger of two such parts (overlap);
//   - a plan that fits at b fits at every smaller b (memory grows with b).
// So for lo <= b <= hi the best plan at b, p, fits at lo and T_p(b) / b >= T_p(hi) / hi: the step
// time per sample at any b of the range is at least the lower bound (LP relaxation) of the instance
// with the times priced at hi and the memory at lo, divided by hi. For one batch size that is the
// strategy's bound at b over b. Either of the strategy's bounds will do: a range is bounded first
// with the quick one (one LP) and again with the tight one (one LP per threshold) only when it
// reaches the top of the open list unrefuted.
struct Range {
  int lo = 0, hi = 0;
  double per_sample_s = 0;  // lower bound on T(b) / b over the range
  bool tight = false;       // per_sample_s from BatchSolver::lower_bound_s, else quick_lower_bound_s
  // Priced at lo, kept while the range is wider than one batch size (its halves reuse it); a single
  // batch size is priced again when solved, so that the open list holds no more than a few pricings
  // (each is as large as the model: 256 of a 20,000-layer model's took gigabytes).
  std::shared_ptr<const BatchCosts> costs;
  // Infinite bound (nothing fits at lo, hence at no b >= lo): 0.
  double max_throughput(double n) const { return per_sample_s > 0 ? n / per_sample_s : kInf; }
};

// `at_lo` with each choice's time replaced by its time in `at_hi` (the same choices, in order).
BatchCosts times_of(const BatchCosts& at_lo, const BatchCosts& at_hi) {
  BatchCosts mixed = at_lo;
  std::map<const ShapePrices*, std::shared_ptr<const ShapePrices>> done;  // per shape, once
  for (std::size_t i = 0; i < mixed.ops.size(); ++i) {
    std::shared_ptr<const ShapePrices>& shape = done[at_lo.ops[i].prices.get()];
    if (!shape) {
      auto prices = std::make_shared<ShapePrices>(*at_lo.ops[i].prices);
      for (std::size_t j = 0; j < prices->costs.size(); ++j)
        prices->costs[j].time_s = at_hi.ops[i].costs()[j].time_s;
      shape = std::move(prices);
    }
    mixed.ops[i].prices = shape;
  }
  mixed.fixed_time_s = at_hi.fixed_time_s;
  return mixed;
}

}  // namespace

SearchResult run_search(const costmodel::Workload& w, const costmodel::CostModel& model,
                        const BatchSolver& strategy, const SearchOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  const SpaceOptions space = strategy.space(opt.space);
  if (space.groups && !model.two_levels())
    throw UsageError(fmt::format(
        "{}: node groups and two-level collectives need a cluster of several nodes with several devices each "
        "and an inter-node link",
        opt.space.groups ? "--groups" : fmt::format("strategy {}", strategy.name())));
  auto price = [&](int b) {
    BatchCosts c = price_batch(w, model, space, b, opt.memory_limit_bytes, opt.reserve_bytes);
    c.deadline = opt.deadline;
    return c;
  };
  auto fits = [&](int b) { return strategy.min_peak_bytes(price(b)) <= opt.memory_limit_bytes; };

  SearchResult res;
  res.strategy = strategy.name();
  res.memory_limit_bytes = opt.memory_limit_bytes;

  int b_max = 1;  // the largest batch size at which some plan fits (1 when none does)
  if (opt.batch) {
    b_max = *opt.batch;
  } else if (fits(1)) {
    // Largest fitting batch: double, then bisect (the smallest peak grows with b).
    int lo = 1, hi = 2;
    while (hi <= opt.max_batch && fits(hi)) {
      lo = hi;
      hi = hi > opt.max_batch / 2 ? opt.max_batch + 1 : hi * 2;
    }
    hi = std::min(hi, opt.max_batch + 1);
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    b_max = lo;
  }
  const int b_min = opt.batch ? *opt.batch : 1;

  // Best first over ranges of batch sizes, by the largest throughput their bound allows: a single
  // batch size is solved (told the time it must beat), a wider range is split in two, each half
  // bounded as Range says. The search ends when the best remaining bound cannot beat the best
  // plan found; every batch size left is then proved no better, and the ranges say by what bound.
  const double n = model.world_size();
  auto bounded = [&](int lo, int hi, std::shared_ptr<const BatchCosts> at_lo, bool tight) {
    if (!at_lo) at_lo = std::make_shared<const BatchCosts>(price(lo));
    auto bound = [&](const BatchCosts& c) {
      return tight ? strategy.lower_bound_s(c) : strategy.quick_lower_bound_s(c);
    };
    const double per_sample = lo == hi ? bound(*at_lo) / lo : bound(times_of(*at_lo, price(hi))) / hi;
    return Range{lo, hi, per_sample, tight, lo < hi ? std::move(at_lo) : nullptr};
  };
  auto worse = [&](const Range& a, const Range& b) {
    const double ta = a.max_throughput(n), tb = b.max_throughput(n);
    return ta != tb ? ta < tb : a.lo > b.lo;  // ties: the smaller batch size first
  };
  std::priority_queue<Range, std::vector<Range>, decltype(worse)> open(worse);
  // The smallest batch sizes, where a plan's time per sample changes most from one to the next and
  // a range's bound is loosest, are bounded one by one; the rest as one range.
  const int singles_to = std::min(b_max, b_min + kSingles - 1);
  for (int b = b_min; b <= singles_to; ++b) open.push(bounded(b, b, nullptr, false));
  if (singles_to < b_max) open.push(bounded(singles_to + 1, b_max, nullptr, false));

  double best_thr = 0;
  while (!open.empty()) {
    const Range r = open.top();
    open.pop();
    if (std::isinf(r.per_sample_s) || (best_thr > 0 && r.max_throughput(n) <= best_thr)) {
      // Neither this range nor any left can beat the best: record them as proved.
      res.skipped_ranges.push_back({r.lo, r.hi, r.max_throughput(n)});
      if (r.lo == r.hi) {
        BatchCandidate cand;
        cand.batch = r.lo;
        cand.skipped = true;
        res.candidates.push_back(cand);
      }
      continue;
    }
    if (!r.tight) {
      open.push(bounded(r.lo, r.hi, r.costs, true));
      continue;
    }
    if (r.lo < r.hi) {
      const int mid = r.lo + (r.hi - r.lo) / 2;
      open.push(bounded(r.lo, mid, r.costs, false));
      open.push(bounded(mid + 1, r.hi, nullptr, false));
      continue;
    }
    const int b = r.lo;
    if (res.feasible && std::chrono::steady_clock::now() > opt.deadline) {
      res.complete = false;  // out of time: the best plan so far, the rest unproved
      break;
    }
    const BatchCosts costs = price(b);  // a single batch size holds no pricing (see Range)
    BatchCandidate cand;
    cand.batch = b;
    const double cutoff = best_thr > 0 ? n * b / best_thr : kInf;
    SolverOutcome o = strategy.solve(costs, cutoff);
    cand.nodes = o.solution.nodes;
    cand.complete = o.solution.complete;
    cand.skipped = o.solution.bounded;
    res.complete = res.complete && o.solution.complete;
    if (o.solution.feasible) {
      cand.feasible = true;
      cand.time_s = o.solution.time_s;
      cand.peak_bytes = o.solution.peak_bytes;
      cand.throughput = n * b / o.solution.time_s;
      if (cand.throughput > best_thr || (cand.throughput == best_thr && b < res.batch)) {
        best_thr = cand.throughput;
        res.feasible = true;
        res.batch = b;
        res.time_s = cand.time_s;
        res.peak_bytes = cand.peak_bytes;
        res.throughput = cand.throughput;
        res.choices = o.choices;
        res.outcome = std::move(o);
      }
    } else if (!res.feasible && res.outcome.instance.groups.empty()) {
      res.outcome = std::move(o);
    }
    res.candidates.push_back(cand);
  }
  std::sort(res.candidates.begin(), res.candidates.end(),
            [](const BatchCandidate& a, const BatchCandidate& b) { return a.batch < b.batch; });
  std::sort(res.skipped_ranges.begin(), res.skipped_ranges.end(),
            [](const SkippedRange& a, const SkippedRange& b) { return a.from < b.from; });
  if (!res.feasible) {
    // What the strategy makes of the smallest batch size, for the report (--emit-costs) and the memory
    // that would fit.
    if (res.outcome.instance.groups.empty()) res.outcome = strategy.solve(price(b_min), kInf);
    res.min_fit_bytes = strategy.min_peak_bytes(price(b_min));
  }
  res.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace osdp::search
