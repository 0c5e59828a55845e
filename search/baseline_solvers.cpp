#include <algorithm>
#include <functional>

#include "search/solvers.hpp"

namespace osdp::search {

Solution solve_brute_force(const Instance& inst) {
  const std::size_t ngroups = inst.groups.size();
  std::vector<int> sel(ngroups, 0);
  Solution best;
  std::int64_t visited = 0;
  while (true) {
    Solution s = evaluate(inst, sel);
    ++visited;
    if (s.feasible && s.time_s < best.time_s) best = s;
    std::size_t g = 0;
    while (g < ngroups && ++sel[g] == static_cast<int>(inst.groups[g].items.size())) sel[g++] = 0;
    if (g == ngroups) break;
  }
  best.nodes = visited;
  return best;
}

Solution solve_dfs(const Instance& inst, std::int64_t node_budget) {
  const std::size_t ngroups = inst.groups.size();
  std::vector<double> suf_p(ngroups + 1, 0), suf_t(ngroups + 1, 0);
  for (std::size_t g = ngroups; g-- > 0;) {
    double mp = std::numeric_limits<double>::infinity(), mt = mp;
    for (const auto& it : inst.groups[g].items) {
      mp = std::min(mp, it.persistent_bytes);
      mt = std::min(mt, it.time_s);
    }
    suf_p[g] = suf_p[g + 1] + mp;
    suf_t[g] = suf_t[g + 1] + mt;
  }
  // Items of each group tried fastest first, as the seed paper's search does.
  std::vector<std::vector<int>> order(ngroups);
  for (std::size_t g = 0; g < ngroups; ++g) {
    order[g].resize(inst.groups[g].items.size());
    for (std::size_t i = 0; i < order[g].size(); ++i) order[g][i] = static_cast<int>(i);
    std::stable_sort(order[g].begin(), order[g].end(), [&](int a, int b) {
      return inst.groups[g].items[a].time_s < inst.groups[g].items[b].time_s;
    });
  }
  std::vector<int> sel(ngroups, 0), best_sel;
  double best_t = std::numeric_limits<double>::infinity();
  std::int64_t nodes = 0;
  bool stopped = false;
  std::function<void(std::size_t, double, double, double)> visit = [&](std::size_t g, double t, double p,
                                                                       double tr) {
    if (stopped) return;
    if (++nodes > node_budget) {
      stopped = true;
      return;
    }
    if (g == ngroups) {
      if (t < best_t) {
        best_t = t;
        best_sel = sel;
      }
      return;
    }
    for (int i : order[g]) {
      const Item& it = inst.groups[g].items[i];
      const double nt = t + it.time_s, np = p + it.persistent_bytes;
      const double ntr = std::max(tr, it.transient_bytes);
      if (nt + suf_t[g + 1] >= best_t) continue;
      if (inst.fixed_memory_bytes + np + suf_p[g + 1] + ntr > inst.capacity_bytes) continue;
      sel[g] = i;
      visit(g + 1, nt, np, ntr);
      if (stopped) return;
    }
  };
  visit(0, inst.fixed_time_s, 0.0, 0.0);
  Solution s;
  if (!best_sel.empty() || (ngroups == 0 && best_t < std::numeric_limits<double>::infinity()))
    s = evaluate(inst, best_sel);
  s.nodes = nodes;
  s.complete = !stopped;
  return s;
}

}  // namespace osdp::search
