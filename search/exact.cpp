#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>

#include "costmodel/bounds.hpp"
#include "search/internal/hull.hpp"
#include "search/solvers.hpp"

namespace osdp::search {
namespace {

using costmodel::kInf;
// Relative slack when comparing a bound with the incumbent: ties and rounding noise are not
// improvements worth keeping a state for.
constexpr double kRel = 1e-12;

double just_below(double ub) {
  return std::isinf(ub) ? ub : ub - std::abs(ub) * kRel;
}

struct Point {
  double p, t;
  int item;
};

// One threshold's view of the instance: each group's Pareto-efficient allowed items.
struct Restricted {
  double threshold = 0;
  double budget = 0;                       // R
  std::vector<std::vector<Point>> fronts;  // per class
  std::vector<int> cls;                    // group -> class
  double lb = kInf;                        // LP relaxation (without T0)
  double lambda = 0;                       // the LP's price of a byte: the slope it stopped on
  struct Inc {
    double dp, dt;
    int cls, to;
  };
  std::vector<Inc> incs;    // hull increments of every class, most time saved per byte first
  std::vector<int> greedy;  // an integral feasible selection from the LP
  double greedy_time = kInf;
};

std::vector<Point> pareto(const std::vector<Item>& items, double threshold) {
  std::vector<Point> pts;
  pts.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i)
    if (items[i].transient_bytes <= threshold)
      pts.push_back({items[i].persistent_bytes, items[i].time_s, static_cast<int>(i)});
  std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) {
    return a.p != b.p ? a.p < b.p : (a.t != b.t ? a.t < b.t : a.item < b.item);
  });
  std::vector<Point> front;
  for (const auto& q : pts)
    if (front.empty() || q.t < front.back().t) front.push_back(q);
  return front;
}

// Lower convex hull of a Pareto front (p increasing, t decreasing): indices into the front.
std::vector<int> hull(const std::vector<Point>& f) {
  return detail::lower_hull(
      f, [](const Point& q) { return q.p; }, [](const Point& q) { return q.t; });
}

// Groups of the instance by class (identical items), computed once per instance.
struct Classes {
  std::vector<int> of_group;
  std::vector<int> count;
  std::vector<int> rep;  // a group of each class
  explicit Classes(const Instance& inst) : of_group(group_classes(inst)) {
    for (std::size_t g = 0; g < of_group.size(); ++g) {
      const int c = of_group[g];
      if (c >= static_cast<int>(count.size())) {
        count.resize(c + 1, 0);
        rep.resize(c + 1, -1);
      }
      if (count[c]++ == 0) rep[c] = static_cast<int>(g);
    }
  }
};

// LP relaxation over classes of identical groups: start every group at its smallest persistent
// point, then buy hull increments by decreasing time saved per byte.
void relax(const Instance& inst, const Classes& classes, Restricted& r) {
  using Inc = Restricted::Inc;
  const int ncls = static_cast<int>(classes.count.size());
  const std::vector<int>& count = classes.count;
  double base_p = 0, base_t = 0;
  std::vector<Inc>& incs = r.incs;
  incs.clear();
  std::vector<std::vector<int>> hulls(ncls);
  for (int c = 0; c < ncls; ++c) {
    const auto& f = r.fronts[c];
    base_p += count[c] * f.front().p;
    base_t += count[c] * f.front().t;
    hulls[c] = hull(f);
    for (std::size_t i = 1; i < hulls[c].size(); ++i) {
      const Point& a = f[hulls[c][i - 1]];
      const Point& b = f[hulls[c][i]];
      incs.push_back({b.p - a.p, b.t - a.t, c, static_cast<int>(i)});
    }
  }
  std::sort(incs.begin(), incs.end(), [](const Inc& a, const Inc& b) {
    // more time saved per byte first (slopes are negative: compare -dt/dp)
    return (-a.dt) * b.dp > (-b.dt) * a.dp;
  });
  double left = r.budget - base_p;
  double t = base_t;
  r.lambda = 0;
  // level[c][k]: how many groups of class c reached hull position >= k (integral part).
  std::vector<std::vector<int>> reached(ncls);
  for (int c = 0; c < ncls; ++c) reached[c].assign(hulls[c].size(), 0);
  for (const Inc& inc : incs) {
    const int avail = count[inc.cls];
    const double whole = std::floor(left / inc.dp);
    const int take = static_cast<int>(std::min<double>(avail, std::max(0.0, whole)));
    t += take * inc.dt;
    left -= take * inc.dp;
    reached[inc.cls][inc.to] = take;
    if (take < avail) {
      t += (left / inc.dp) * inc.dt;  // the fractional part
      r.lambda = -inc.dt / inc.dp;
      break;
    }
  }
  r.lb = t;
  // Integral selection: within each class the first `reached[k]` groups advance to hull point k.
  // Increments of a class are taken in hull order (slopes are increasing along a convex hull).
  r.greedy.assign(inst.groups.size(), 0);
  std::vector<int> seen(ncls, 0);
  double gt = 0;
  for (std::size_t g = 0; g < r.cls.size(); ++g) {
    const int c = r.cls[g];
    const int idx = seen[c]++;
    int pos = 0;
    for (std::size_t k = 1; k < hulls[c].size(); ++k)
      if (idx < reached[c][k]) pos = static_cast<int>(k);
    const Point& pt = r.fronts[c][hulls[c][pos]];
    r.greedy[g] = pt.item;
    gt += pt.t;
  }
  r.greedy_time = gt;
}

// Items with transient <= threshold under the persistent budget `budget`.
bool restrict_to(const Instance& inst, const Classes& classes, double threshold, Restricted& r,
                 double budget) {
  r.threshold = threshold;
  r.budget = budget;
  r.fronts.assign(classes.rep.size(), {});
  r.cls = classes.of_group;
  double min_p = 0;
  for (std::size_t c = 0; c < classes.rep.size(); ++c) {
    r.fronts[c] = pareto(inst.groups[classes.rep[c]].items, threshold);
    if (r.fronts[c].empty()) return false;
    min_p += classes.count[c] * r.fronts[c].front().p;
  }
  if (min_p > r.budget) return false;
  relax(inst, classes, r);
  return true;
}

// Items with transient <= threshold under the budget that threshold leaves (capacity - M0 - threshold).
bool restrict_to(const Instance& inst, const Classes& classes, double threshold, Restricted& r) {
  return restrict_to(inst, classes, threshold, r, inst.capacity_bytes - inst.fixed_memory_bytes - threshold);
}

// Groups of one class have identical items, so one representative per class gives every threshold.
std::vector<double> candidate_thresholds(const Instance& inst, const Classes& classes) {
  std::vector<double> ts;
  for (const int g : classes.rep)
    for (const auto& it : inst.groups[g].items) ts.push_back(it.transient_bytes);
  std::sort(ts.begin(), ts.end());
  ts.erase(std::unique(ts.begin(), ts.end()), ts.end());
  return ts;
}

// The order in which the DP takes the groups: the classes with the most items that could be in a
// selection under `ub` first. An item's reduced cost at the LP's price of a byte, t + lambda p less
// its group's least, bounds from below what choosing it adds to the LP bound, so an item whose reduced
// cost is at least ub - lb is in no selection under ub. The groups with several open items are those
// the DP must branch on; taking them while the suffix after them is long, and its LP bound tight,
// keeps the fronts small (on the benchmark's 135 cases: 2.0x fewer states in all than the model's
// order, 2.8x fewer in the largest).
std::vector<int> dp_order(const Restricted& r, double ub) {
  std::vector<int> open(r.fronts.size(), 0);
  const double gap = ub - r.lb;
  for (std::size_t c = 0; c < r.fronts.size(); ++c) {
    double least = kInf;
    for (const auto& q : r.fronts[c]) least = std::min(least, q.t + r.lambda * q.p);
    for (const auto& q : r.fronts[c]) open[c] += q.t + r.lambda * q.p - least < gap;
  }
  std::vector<int> ord(r.cls.size());
  std::iota(ord.begin(), ord.end(), 0);
  std::stable_sort(ord.begin(), ord.end(), [&](int a, int b) {
    const int ca = r.cls[a], cb = r.cls[b];
    return open[ca] != open[cb] ? open[ca] > open[cb] : ca < cb;
  });
  return ord;
}

// Exact Pareto DP for one threshold; returns a selection strictly better than `ub` if one exists.
// Stops (out_of_states) once the fronts it keeps for the way back pass max_states.
bool pareto_dp(const Restricted& r, double ub, std::vector<int>& best_sel, double& best_t,
               std::int64_t& states, std::size_t max_states, bool& out_of_states,
               std::chrono::steady_clock::time_point deadline) {
  const std::size_t ngroups = r.cls.size();
  const std::vector<int> ord = dp_order(r, ub);
  // The LP bound of every suffix of groups as a function of its budget: the suffix starts at each
  // class's smallest point and buys the same increments in the same order, each as many times as
  // the suffix has groups of its class. cum_p/cum_t[s][i]: after the first i increments.
  const std::size_t ninc = r.incs.size();
  std::vector<double> base_p(ngroups + 1, 0), base_t(ngroups + 1, 0), cum_p((ngroups + 1) * (ninc + 1), 0),
      cum_t(cum_p.size(), 0);
  std::vector<int> count(r.fronts.size(), 0);
  for (std::size_t s = ngroups + 1; s-- > 0;) {
    if (s < ngroups) ++count[r.cls[ord[s]]];
    double* cp = &cum_p[s * (ninc + 1)];
    double* ct = &cum_t[s * (ninc + 1)];
    for (std::size_t c = 0; c < count.size(); ++c) {
      base_p[s] += count[c] * r.fronts[c].front().p;
      base_t[s] += count[c] * r.fronts[c].front().t;
    }
    for (std::size_t i = 0; i < ninc; ++i) {
      cp[i + 1] = cp[i] + count[r.incs[i].cls] * r.incs[i].dp;
      ct[i + 1] = ct[i] + count[r.incs[i].cls] * r.incs[i].dt;
    }
  }
  const auto suffix_bound = [&](std::size_t s, double budget) {
    const double room = budget - base_p[s];
    const double* cp = &cum_p[s * (ninc + 1)];
    const double* ct = &cum_t[s * (ninc + 1)];
    const std::size_t k = static_cast<std::size_t>(std::upper_bound(cp, cp + ninc + 1, room) - cp) - 1;
    double t = base_t[s] + ct[k];
    if (k < ninc) t += (room - cp[k]) / (cp[k + 1] - cp[k]) * (ct[k + 1] - ct[k]);
    return t;
  };
  struct State {
    double p, t;
    int parent, item;
  };
  // The front of the stage being extended holds p and t; earlier stages keep only how each state was
  // reached (8 bytes a state), which is all the way back to the best selection needs.
  struct Link {
    std::int32_t parent, item;
  };
  std::vector<std::vector<Link>> history(ngroups + 1);
  std::vector<State> prev{{0, 0, -1, -1}}, next;
  history[0].push_back({-1, -1});
  std::size_t kept = 1;
  const double cut = just_below(ub);
  std::vector<State> cand;
  std::vector<std::size_t> runs;
  const auto by_p_then_t = [](const State& a, const State& b) { return a.p != b.p ? a.p < b.p : a.t < b.t; };
  for (std::size_t g = 0; g < ngroups; ++g) {
    if ((g & 255) == 255 && std::chrono::steady_clock::now() > deadline) {
      out_of_states = true;  // out of time: as out of states
      return false;
    }
    cand.clear();
    runs.assign(1, 0);
    // The previous front is sorted by p, so adding one item keeps it sorted: one run per item,
    // merged pairwise (n log c instead of sorting n c states).
    for (const auto& q : r.fronts[r.cls[ord[g]]]) {
      for (int si = 0; si < static_cast<int>(prev.size()); ++si) {
        const State& st = prev[si];
        const double p = st.p + q.p;
        if (p + base_p[g + 1] > r.budget) break;  // p only grows along the run
        const double t = st.t + q.t;
        const double bound = t + suffix_bound(g + 1, r.budget - p);
        if (bound >= cut) continue;
        cand.push_back({p, t, si, q.item});
      }
      if (cand.size() > runs.back()) runs.push_back(cand.size());
    }
    states += static_cast<std::int64_t>(cand.size());
    if (cand.empty()) return false;
    while (runs.size() > 2) {
      std::vector<std::size_t> merged{0};
      for (std::size_t i = 0; i + 1 < runs.size(); i += 2) {
        const std::size_t end = i + 2 < runs.size() ? runs[i + 2] : runs[i + 1];
        if (i + 2 < runs.size())
          std::inplace_merge(cand.begin() + static_cast<std::ptrdiff_t>(runs[i]),
                             cand.begin() + static_cast<std::ptrdiff_t>(runs[i + 1]),
                             cand.begin() + static_cast<std::ptrdiff_t>(end), by_p_then_t);
        merged.push_back(end);
      }
      runs = std::move(merged);
    }
    next.clear();
    for (const auto& c : cand)
      if (next.empty() || c.t < next.back().t) next.push_back(c);
    auto& links = history[g + 1];
    links.reserve(next.size());
    for (const auto& c : next) links.push_back({c.parent, c.item});
    kept += next.size();
    if (kept > max_states) {
      out_of_states = true;  // the caller keeps the best selection found so far and says so
      return false;
    }
    std::swap(prev, next);
  }
  int bi = -1;
  for (int i = 0; i < static_cast<int>(prev.size()); ++i)
    if (bi < 0 || prev[i].t < prev[bi].t) bi = i;
  if (bi < 0 || prev[bi].t >= cut) return false;
  best_t = prev[bi].t;
  best_sel.assign(ngroups, 0);
  int idx = bi;
  for (std::size_t g = ngroups; g-- > 0;) {
    const Link& l = history[g + 1][static_cast<std::size_t>(idx)];
    best_sel[ord[g]] = l.item;
    idx = l.parent;
  }
  return true;
}

}  // namespace

double quick_lower_bound_time(const Instance& inst) {
  // Every selection's largest transient is at least the largest over groups of the smallest
  // transient a group offers (t_floor), so its persistent bytes fit in capacity - M0 - t_floor; the
  // LP over all items under that budget is at most the LP of any threshold, whose items are fewer
  // and whose budget is smaller.
  const Classes classes(inst);
  double floor = 0, all = 0;  // all: a threshold at least every transient, so every item is allowed
  for (const int g : classes.rep) {
    double least = kInf;
    for (const auto& it : inst.groups[g].items) {
      least = std::min(least, it.transient_bytes);
      all = std::max(all, it.transient_bytes);
    }
    floor = std::max(floor, least);
  }
  Restricted r;
  if (!restrict_to(inst, classes, all, r, inst.capacity_bytes - inst.fixed_memory_bytes - floor)) return kInf;
  return inst.fixed_time_s + r.lb;
}

double lower_bound_time(const Instance& inst) {
  double best = kInf;
  const Classes classes(inst);
  Restricted r;
  for (double t : candidate_thresholds(inst, classes))
    if (restrict_to(inst, classes, t, r)) best = std::min(best, inst.fixed_time_s + r.lb);
  return best;
}

Solution solve_exact(const Instance& inst, double time_cutoff_s, std::size_t max_states,
                     std::chrono::steady_clock::time_point deadline) {
  const Classes classes(inst);
  std::vector<Restricted> rs;  // the thresholds that admit a selection, ascending
  for (double t : candidate_thresholds(inst, classes)) {
    Restricted r;
    if (restrict_to(inst, classes, t, r)) rs.push_back(std::move(r));
  }
  double best_t = time_cutoff_s - inst.fixed_time_s;  // times exclude T0 below
  std::vector<int> best_sel;
  std::int64_t states = 0;
  bool out_of_states = false;
  bool ladder = true;
  const auto improve = [&](double t, std::vector<int> sel) {
    best_t = t;
    best_sel = std::move(sel);
  };
  // One threshold: its greedy, then DPs. The DP keeps every state that could still end below its cut,
  // so the cut decides its size (nd-96x1024 with the multi-node choices on 16 x 8: 444,608 states at
  // the greedy's time, 11,418 at the optimum's). The optimum usually lies just above the LP bound: cut
  // at lb + gap/256 and double the fraction until a DP finds a selection, which is then the best below
  // that cut and so the optimum; the last cut is the incumbent itself, as a single DP would have used.
  // When two doublings in a row did not grow the DP (one alone can be a coincidence of where a
  // small DP dies), its states are those the LP bound alone keeps and the cut is not what limits
  // it: go to the incumbent at once. Once a threshold's doublings found nothing better than the
  // incumbent (its DPs below it were spent in vain), the later thresholds take one DP each.
  const auto solve_one = [&](const Restricted& r) {
    if (r.lb >= just_below(best_t)) return;
    if (r.greedy_time < best_t) improve(r.greedy_time, r.greedy);
    if (std::chrono::steady_clock::now() > deadline) {
      out_of_states = true;  // out of time: the greedy selection, no DP
      return;
    }
    std::vector<int> sel;
    double t = kInf;
    bool out = false;
    std::int64_t last = -1;
    int flat = 0;  // doublings in a row that did not grow the DP
    for (double frac = std::isfinite(best_t) && ladder ? 1.0 / 256 : 1.0;;) {
      const double cut = frac >= 1 ? best_t : std::min(best_t, r.lb + frac * (best_t - r.lb));
      const std::int64_t before = states;
      if (pareto_dp(r, cut, sel, t, states, max_states, out, deadline)) {
        improve(t, std::move(sel));
        break;
      }
      if (out || frac >= 1) {
        if (frac >= 1 && last >= 0) ladder = false;
        break;
      }
      const std::int64_t used = states - before;
      flat = last >= 0 && used <= last + last / 8 ? flat + 1 : 0;
      frac = flat >= 2 ? 1.0 : 2 * frac;
      last = used;
    }
    out_of_states = out_of_states || out;
  };
  // The threshold with the smallest LP bound first: its optimum is the incumbent for the rest.
  std::vector<char> done(rs.size(), 0);
  if (!rs.empty()) {
    const auto first = std::min_element(rs.begin(), rs.end(),
                                        [](const Restricted& a, const Restricted& b) { return a.lb < b.lb; });
    solve_one(*first);
    done[static_cast<std::size_t>(first - rs.begin())] = 1;
  }
  // The rest as runs of consecutive thresholds lo..hi. Every selection of a threshold in the run uses
  // items allowed at hi's and its persistent bytes fit the budget lo's leaves, so one DP over that
  // union, finding nothing below the incumbent, proves the whole run; a selection it finds that also
  // fits for real is the best of the run. When the union's LP bound is much looser than its
  // thresholds' (its gap to the incumbent over a quarter larger than theirs), or its DP finds only
  // selections that do not fit, the run is halved, the half with the smaller bound first.
  Restricted run;
  const std::function<void(std::size_t, std::size_t)> solve_run = [&](std::size_t lo, std::size_t hi) {
    std::vector<std::size_t> open;
    double least = kInf;
    for (std::size_t i = lo; i <= hi; ++i)
      if (!done[i] && rs[i].lb < just_below(best_t)) {
        open.push_back(i);
        least = std::min(least, rs[i].lb);
      }
    if (open.empty()) return;
    if (open.size() == 1) {
      solve_one(rs[open[0]]);
      done[open[0]] = 1;
      return;
    }
    lo = open.front();
    hi = open.back();
    const bool fits = restrict_to(inst, classes, rs[hi].threshold, run,
                                  inst.capacity_bytes - inst.fixed_memory_bytes - rs[lo].threshold);
    assert(fits);  // lo's selections are among the union's
    (void)fits;
    if (run.lb >= just_below(best_t)) return;
    if (best_t - run.lb <= 1.25 * (best_t - least)) {
      if (run.greedy_time < best_t && evaluate(inst, run.greedy).feasible)
        improve(run.greedy_time, run.greedy);
      std::vector<int> sel;
      double t = kInf;
      bool out = false;  // a union too large for the DP is halved, not given up
      const bool found = pareto_dp(run, best_t, sel, t, states, max_states, out, deadline);
      if (!found && !out) return;
      if (found && evaluate(inst, sel).feasible) {
        improve(t, std::move(sel));
        return;
      }
    }
    const std::size_t mid = lo + (hi - lo) / 2;
    double left = kInf, right = kInf;
    for (const std::size_t i : open) (i <= mid ? left : right) = std::min(i <= mid ? left : right, rs[i].lb);
    if (left <= right) {
      solve_run(lo, mid);
      solve_run(mid + 1, hi);
    } else {
      solve_run(mid + 1, hi);
      solve_run(lo, mid);
    }
  };
  if (!rs.empty()) solve_run(0, rs.size() - 1);
  if (best_sel.empty()) {
    Solution s;
    s.nodes = states;
    s.bounded = !rs.empty() && !out_of_states;  // selections fit, but none beats the cutoff
    s.complete = !out_of_states;
    return s;
  }
  Solution s = evaluate(inst, best_sel);
  s.nodes = states;
  s.complete = !out_of_states;
  assert(s.feasible);
  return s;
}

}  // namespace osdp::search
