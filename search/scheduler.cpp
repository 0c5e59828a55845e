#include "search/scheduler.hpp"

#include <chrono>
#include <cmath>
#include <limits>

namespace osdp::search {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kEveryBatchUpTo = 256;

}  // namespace

std::vector<int> batch_grid(int b_max) {
  std::vector<int> out;
  for (int b = 1; b <= std::min(b_max, kEveryBatchUpTo); ++b) out.push_back(b);
  double x = kEveryBatchUpTo;
  while (true) {
    x *= std::pow(2.0, 1.0 / 8.0);
    const int b = static_cast<int>(std::lround(x));
    if (b >= b_max) break;
    if (b > out.back()) out.push_back(b);
  }
  if (out.back() < b_max) out.push_back(b_max);
  return out;
}

SearchResult run_search(const costmodel::Workload& w, const costmodel::CostModel& model,
                        const Strategy& strategy, const SearchOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  const SpaceOptions space = strategy.space(opt.space);
  auto price = [&](int b) {
    return price_batch(w, model, space, b, opt.memory_limit_bytes, opt.reserve_bytes);
  };
  auto fits = [&](int b) { return strategy.min_peak_bytes(price(b)) <= opt.memory_limit_bytes; };

  SearchResult res;
  res.strategy = strategy.name();
  res.memory_limit_bytes = opt.memory_limit_bytes;

  std::vector<int> grid;
  if (opt.batch) {
    grid = {*opt.batch};
  } else if (fits(1)) {
    // Largest fitting batch: double, then bisect (the smallest peak grows with b).
    int lo = 1, hi = 2;
    while (hi <= opt.max_batch && fits(hi)) {
      lo = hi;
      hi *= 2;
    }
    hi = std::min(hi, opt.max_batch + 1);
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    grid = batch_grid(lo);
  } else {
    grid = {1};
  }

  // Visit the batch sizes in order of their bound on throughput (N b / lower bound on time), so the
  // likely winner is solved first and the others mostly stop at once at its cutoff.
  const double n = model.world_size();
  std::vector<BatchCosts> priced;
  std::vector<std::pair<double, std::size_t>> order;  // (-bound on throughput, index in grid)
  for (std::size_t i = 0; i < grid.size(); ++i) {
    priced.push_back(price(grid[i]));
    const double lb = strategy.lower_bound_s(priced.back());
    order.emplace_back(lb > 0 ? -n * grid[i] / lb : -kInf, i);
  }
  std::stable_sort(order.begin(), order.end());
  res.candidates.resize(grid.size());
  double best_thr = 0;
  for (const auto& [neg_bound, i] : order) {
    const int b = grid[i];
    const BatchCosts& costs = priced[i];
    BatchCandidate& cand = res.candidates[i];
    cand.batch = b;
    const double cutoff = best_thr > 0 ? n * b / best_thr : kInf;
    StrategyOutcome o = strategy.solve(costs, cutoff);
    cand.nodes = o.solution.nodes;
    cand.complete = o.solution.complete;
    cand.skipped = o.solution.bounded;
    res.complete = res.complete && o.solution.complete;
    if (o.solution.feasible) {
      cand.feasible = true;
      cand.time_s = o.solution.time_s;
      cand.peak_bytes = o.solution.peak_bytes;
      cand.throughput = n * b / o.solution.time_s;
      if (cand.throughput > best_thr) {
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
  }
  if (!res.feasible) res.min_fit_bytes = strategy.min_peak_bytes(price(opt.batch.value_or(1)));
  res.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace osdp::search
