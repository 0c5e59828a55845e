#include "search/hybrid.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <queue>
#include <tuple>

#include <fmt/format.h>

#include "costmodel/bounds.hpp"
#include "costmodel/error.hpp"
#include "search/internal/hybrid_chains.hpp"
#include "search/internal/hybrid_layout.hpp"

namespace osdp::search {

using costmodel::Choice;
using costmodel::Plan;
using costmodel::PlanCostModel;
using costmodel::Workload;
using detail::empty_plan;
using detail::even_stage_starts;
using detail::ItemRules;
using detail::solve_layout;

namespace {
using costmodel::kInf;
}  // namespace

HybridResult search_hybrid(const costmodel::ModelSpec& model, const PlanCostModel& cost, LayoutSearch search,
                           const HybridSearchOptions& options, std::shared_ptr<const Workload> one_stage) {
  const auto start = std::chrono::steady_clock::now();
  // The chains' arenas are reused from layout to layout and freed when the search ends, however it
  // ends (a budget's stop included).
  struct ReleaseArenas {
    ~ReleaseArenas() { detail::release_chain_arenas(); }
  } release_arenas;
  HybridResult res;
  const int N = cost.world_size();
  HybridSearchOptions opts = options;
  opts.deadline = std::min(options.deadline,
                           start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       std::chrono::duration<double>(std::max(0.0, options.time_budget_s))));
  std::vector<int> pps;
  for (int pp = 1; pp <= N; pp *= 2)
    if (N % pp == 0 && (opts.pp.empty() || std::find(opts.pp.begin(), opts.pp.end(), pp) != opts.pp.end()))
      pps.push_back(pp);
  const bool galvatron = search == LayoutSearch::kGalvatron;
  const bool megatron = search == LayoutSearch::kMegatron3d;
  ItemRules rules;
  if (galvatron) {
    rules.galvatron = true;
    rules.overlap = opts.galvatron_overlap;
  }
  double best_thr = 0;
  std::shared_ptr<const Workload> best_workload;
  auto consider = [&](const std::shared_ptr<const Workload>& hw, const Plan& plan) {
    const auto ev = cost.evaluate(*hw, plan);
    if (!ev.fits) return false;
    if (ev.throughput > best_thr) {
      best_thr = ev.throughput;
      res.feasible = true;
      best_workload = hw;
      res.plan = plan;
      res.evaluation = ev;
    }
    return true;
  };
  // The workload of one stage and the one of a pipeline (a tied table untied), each lowered once;
  // per pipeline degree a pointer to its own (the caches stay per degree: the TP degrees a unit
  // allows depend on it).
  std::map<bool, std::shared_ptr<const Workload>> lowered;
  if (one_stage) lowered[false] = one_stage;
  std::vector<std::shared_ptr<const Workload>> workloads;
  std::deque<detail::PartsCache> caches;  // one per workload (deque: references stay valid)
  // Exact: layouts grouped by (pp, schedule, m), each group's b0 in ranges (see below).
  struct LayoutGroup {
    int pp, m;
    costmodel::PipelineSchedule schedule;
    int workload;  // index into workloads (and caches: one per pipeline degree and CP layout)
    int cp = 1;
    bool cp_all_to_all = false;
    // Only odd b0 (a CP group whose half degree is searched too): at an even b0, CP c is no better than
    // CP c / 2 (CP 1 for c = 2) at b0 / 2, the same global batch and tokens per rank with no more memory
    // and fewer exchange steps. Ranges run over an index i: b0 = 2 i - 1, else b0 = i.
    bool odd = false;
    int b0_of(int i) const { return odd ? 2 * i - 1 : i; }
    HybridLayout at(int i, bool sp) const { return {pp, m, b0_of(i), schedule, sp, cp, cp_all_to_all}; }
  };
  struct Entry {
    double upper;  // the throughput its bound allows
    std::size_t group;
    int lo, hi;    // b0 from lo to hi
    bool tight;    // a single b0 whose lower bound is solve_layout's
    double lower;  // lower bound on the step at hi
  };
  const auto later = [](const Entry& a, const Entry& b) {
    return std::tie(b.upper, a.group, a.lo) > std::tie(a.upper, b.group, b.lo);
  };
  std::vector<LayoutGroup> groups;
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> queue(later);
  // A range's bound: times priced at hi, memory at lo (layout_lower_bound); none when nothing fits.
  auto bound_range = [&](std::size_t g, int lo, int hi) -> std::optional<Entry> {
    detail::check_deadline(opts);
    const LayoutGroup& gr = groups[g];
    ++res.layouts;
    const HybridLayout layout = gr.at(lo, opts.sequence_parallel);
    const double lb =
        detail::layout_lower_bound(cost, *workloads[static_cast<std::size_t>(gr.workload)], layout, opts,
                                   rules, &caches[static_cast<std::size_t>(gr.workload)], gr.b0_of(hi));
    if (lb == kInf) return std::nullopt;
    return Entry{static_cast<double>(gr.b0_of(hi)) * gr.m * N / gr.pp / gr.cp / lb, g, lo, hi, false, lb};
  };
  // Every b0 of a group that fits in the relaxation (memory grows with b0: they are 1..b_max, found
  // by doubling and bisection on memory alone) as one range, split when it comes first; with a global
  // batch, its one b0.
  auto add_group = [&](int pp, costmodel::PipelineSchedule schedule, int m, int workload, int cp,
                       bool cp_all_to_all, bool odd) {
    groups.push_back({pp, m, schedule, workload, cp, cp_all_to_all, odd});
    const LayoutGroup group = groups.back();
    const std::size_t g = groups.size() - 1;
    auto push = [&](int lo, int hi) {
      if (auto e = bound_range(g, lo, hi)) queue.push(*e);
    };
    if (opts.global_batch || opts.b0) {
      const int per_stage = m * N / pp / cp;
      int b0 = opts.b0.value_or(0);
      if (opts.global_batch) {
        if (*opts.global_batch % per_stage != 0 || (b0 > 0 && b0 != *opts.global_batch / per_stage)) return;
        b0 = *opts.global_batch / per_stage;
      }
      if (b0 <= opts.max_b0 && !(odd && b0 % 2 == 0)) push(odd ? (b0 + 1) / 2 : b0, odd ? (b0 + 1) / 2 : b0);
      return;
    }
    auto fits = [&](int i) {
      detail::check_deadline(opts);
      ++res.layouts;
      return detail::layout_fits(cost, *workloads[static_cast<std::size_t>(workload)],
                                 group.at(i, opts.sequence_parallel), opts, rules,
                                 &caches[static_cast<std::size_t>(workload)]);
    };
    if (!fits(1)) return;
    const int top = odd ? (opts.max_b0 + 1) / 2 : opts.max_b0;  // the largest index
    int good = 1, bad = top + 1;
    for (int b = 2; b <= top; b *= 2) {
      if (!fits(b)) {
        bad = b;
        break;
      }
      good = b;
    }
    if (bad == top + 1 && good < top && fits(top)) good = top;
    while (bad - good > 1) {
      const int mid = good + (bad - good) / 2;
      (fits(mid) ? good : bad) = mid;
    }
    push(1, good);
  };
  // A budget that runs out stops the search where it is (detail::BudgetStop): the best plan so far is
  // the result, not proved optimal.
  try {
    for (int pp : pps) {
      // The exact search's stage tables grow as pp U^2: a degree whose tables alone would pass the
      // memory budget is passed over before its workload is even lowered (a 100,000-layer model's is
      // hundreds of MB), and the result is incomplete. U: the one-stage workload's units, plus the
      // pipeline's untied head at most.
      if (pp > 1 && !megatron && !galvatron) {
        if (!lowered[false]) lowered[false] = std::make_shared<const Workload>(costmodel::lower(model, 1));
        const int units = static_cast<int>(lowered[false]->units.size()) + 1;
        const double bytes = 2 * detail::StageTable::max_bytes(pp, units);
        if (bytes > opts.memory_budget_bytes) {
          res.complete = false;
          res.skipped.push_back(
              fmt::format("pipeline degree {}: its stage tables over {} units would take {:.1f} GB, more "
                          "than the search's "
                          "memory budget ({:.0f} MiB)",
                          pp, units, bytes / 1e9, opts.memory_budget_bytes / 1048576.0));
          continue;
        }
      }
      std::shared_ptr<const Workload>& shared = lowered[pp > 1];
      if (!shared) shared = std::make_shared<const Workload>(costmodel::lower(model, pp));
      const Workload& hw = *shared;
      detail::PartsCache& cache = caches.emplace_back();
      workloads.push_back(shared);
      const int workload_index = static_cast<int>(workloads.size()) - 1;
      // The context-parallel layouts of this degree (the exact search only), each with its own cache.
      std::vector<std::tuple<int, bool, int>> cp_layouts{{1, false, workload_index}};
      if (!megatron && !galvatron)
        for (int c = 2; c <= std::min(opts.max_cp, N / pp); c *= 2) {
          if ((N / pp) % c != 0 || hw.seq % (2 * c) != 0) continue;
          if (!opts.cp.empty() && std::find(opts.cp.begin(), opts.cp.end(), c) == opts.cp.end()) continue;
          for (const bool all_to_all : opts.cp_variants) {
            caches.emplace_back();
            workloads.push_back(shared);
            cp_layouts.emplace_back(c, all_to_all, static_cast<int>(workloads.size()) - 1);
          }
        }
      if (!opts.cp.empty() && std::find(opts.cp.begin(), opts.cp.end(), 1) == opts.cp.end())
        cp_layouts.erase(cp_layouts.begin());
      const int U = static_cast<int>(hw.units.size());
      if (U < pp) continue;
      // A unit none of whose operators' weights split to any degree asked for (an untied embedding's
      // table, a projection) leaves the layout no plan: say so rather than search for none. Megatron's
      // grid keeps such a unit at TP 1 by its own rule.
      if (!opts.tp.empty() && !megatron) {
        std::string blocked;
        for (const auto& unit : hw.units) {
          bool any = false;
          for (const int t : opts.tp) {
            bool ok = true;
            for (const int oi : unit.ops)
              ok = ok && costmodel::tp_allowed(hw.operators[static_cast<std::size_t>(oi)], t);
            any = any || ok;
          }
          if (!any) {
            blocked = unit.name;
            break;
          }
        }
        if (!blocked.empty()) {
          res.skipped.push_back(fmt::format(
              "pipeline degree {}: unit {} can take none of the TP degrees {} (its weights do not split that "
              "way); allow TP 1 with --tp 1 ...",
              pp, blocked, fmt::join(opts.tp, ", ")));
          continue;
        }
      }
      for (auto schedule : opts.schedules) {
        std::vector<int> ms;
        if (opts.micro_batches)
          ms = {*opts.micro_batches};
        else
          for (int m = 1; m <= opts.max_micro_batches; ++m) ms.push_back(m);
        if (galvatron) {
          // Global batch sizes in steps of 8; micro-batches by its heuristic.
          for (int B = 8;; B += 8) {
            if (opts.global_batch && B != *opts.global_batch) {
              if (B > *opts.global_batch) break;
              continue;
            }
            const int dp = N / pp;
            const int m = pp == 1 ? 1 : std::min(8, std::max(pp, (B / dp + 3) / 4));
            if (B % (dp * m) != 0) {
              if (B / (dp * m) > opts.max_b0) break;
              continue;
            }
            HybridLayout layout{pp, m, B / (dp * m), schedule, opts.sequence_parallel};
            detail::check_deadline(opts);
            if (layout.b0 > opts.max_b0 || (opts.b0 && layout.b0 > *opts.b0)) break;
            if (opts.b0 && layout.b0 != *opts.b0) continue;
            ++res.layouts;
            std::optional<Plan> plan;
            try {
              plan = solve_layout(cost, hw, layout, opts, rules, true, kInf, &res.labels, &cache);
            } catch (const detail::BudgetStop& stop) {
              if (!stop.memory) throw;
              res.complete = false;
              break;
            }
            if (!plan) break;
            consider(shared, *plan);
          }
          continue;
        }
        for (int m : ms) {
          if (!megatron) {
            for (const auto& [cp, all_to_all, index] : cp_layouts) {
              const int half = cp / 2;
              const bool variant = all_to_all;  // a structured binding no lambda captures (clang)
              const bool odd =
                  cp > 1 && std::any_of(cp_layouts.begin(), cp_layouts.end(), [&](const auto& other) {
                    return std::get<0>(other) == half && (half == 1 || std::get<1>(other) == variant);
                  });
              add_group(pp, schedule, m, index, cp, all_to_all, odd);
            }
            continue;
          }
          for (int b0 = opts.b0.value_or(1); b0 <= opts.b0.value_or(opts.max_b0); ++b0) {
            if (opts.global_batch) {
              const int B = b0 * m * N / pp;
              if (B < *opts.global_batch) continue;
              if (B > *opts.global_batch) break;
            }
            const HybridLayout layout{pp, m, b0, schedule, opts.sequence_parallel};
            detail::check_deadline(opts);
            ++res.layouts;
            bool any = false;
            if (megatron) {
              const auto starts = even_stage_starts(hw, pp);
              if (starts.empty()) break;
              for (int t = 1; t <= cost.node_size(); t *= 2) {
                if (!cost.valid(pp, t)) continue;
                if (!opts.tp.empty() && std::find(opts.tp.begin(), opts.tp.end(), t) == opts.tp.end())
                  continue;
                // Uniform recompute: each kind the policy offers (none, full, selective).
                for (const costmodel::Recompute r : recompute_policy(opts.space)) {
                  Choice variant{true, 1, 0};
                  variant.set_recompute(r);
                  Plan plan = empty_plan(hw, layout);
                  plan.stage_first_unit = starts;
                  for (std::size_t u = 0; u < hw.units.size(); ++u) {
                    int tu = t;
                    for (int oi : hw.units[u].ops)
                      if (!costmodel::tp_allowed(hw.operators[static_cast<std::size_t>(oi)], tu)) tu = 1;
                    plan.unit_tp[u] = tu;
                    for (int oi : hw.units[u].ops) {
                      const auto& op = hw.operators[static_cast<std::size_t>(oi)];
                      Choice c{true, 1, 0};
                      c.set_recompute(op.recompute(variant));
                      plan.choices[static_cast<std::size_t>(oi)] = c;
                    }
                  }
                  if (consider(shared, plan)) any = true;
                }
              }
            }
            if (!any && !opts.global_batch) break;  // a larger b0 fits no better
          }
        }
      }
      if (opts.progress && (megatron || galvatron))
        opts.progress(pp, best_thr, res.layouts,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    // Exact: the layouts in the order of the throughput their bound allows, highest first (ties in the
    // order enumerated), each solved only while that bound beats the best plan so far; the rest cannot.
    // A range of b0 that comes first is split in two, each half bounded again; a single b0's first
    // bound is the cheap one of layout_lower_bound, and when it comes first solve_layout tightens it
    // (the best split of its stages' own LP bounds) and it goes back in line with that.
    while (!queue.empty()) {
      const Entry e = queue.top();
      queue.pop();
      if (e.upper <= best_thr) break;
      if (e.lo < e.hi) {
        const int mid = e.lo + (e.hi - e.lo) / 2;
        for (const auto& [lo, hi] : {std::pair{e.lo, mid}, std::pair{mid + 1, e.hi}})
          if (auto half = bound_range(e.group, lo, hi)) queue.push(*half);
        continue;
      }
      const LayoutGroup& gr = groups[e.group];
      const HybridLayout layout = gr.at(e.lo, opts.sequence_parallel);
      const std::shared_ptr<const Workload>& shared = workloads[static_cast<std::size_t>(gr.workload)];
      const Workload& hw = *shared;
      detail::PartsCache& cache = caches[static_cast<std::size_t>(gr.workload)];
      const double B = static_cast<double>(layout.b0) * layout.m * N / layout.pp / layout.cp;
      if (!e.tight) {
        double lower = kInf;
        try {
          solve_layout(cost, hw, layout, opts, rules, false, 0.0, nullptr, &cache, &lower);
        } catch (const detail::BudgetStop& stop) {
          if (!stop.memory) throw;
          res.complete = false;  // a layout too large for the memory budget is passed over
          continue;
        }
        if (lower < kInf) queue.push({B / lower, e.group, e.lo, e.hi, true, lower});
        continue;
      }
      // Only a step faster than B / (the best throughput so far) can win. The layout is first solved
      // for a step within 0.2% of its lower bound (the fewer labels the closer): solve_layout finds the
      // best plan faster than the bound it is given, so a plan found then is the layout's optimum; when
      // none is, the bound is widened to 1%, 5%, then the full one. An incumbent under the full bound
      // and within the widening of the bound (a solve under either costs about the same) is taken as
      // the bound at once (Pricing::stretch).
      const double full = best_thr > 0 ? B / best_thr : kInf;
      ++res.solved;
      std::optional<Plan> plan;
      try {
        for (const double widen : {2e-3, 1e-2, 5e-2, kInf}) {
          const double bound = std::min(full, e.lower * (1 + widen));
          plan = solve_layout(cost, hw, layout, opts, rules, false, bound, &res.labels, &cache, nullptr,
                              {detail::Pricing::Order::kAuto, true, full, widen});
          if (plan || bound >= full) break;
        }
      } catch (const detail::BudgetStop& stop) {
        if (!stop.memory) throw;
        res.complete = false;  // its labels would pass the memory budget: passed over
      }
      if (plan) consider(shared, *plan);
      if (opts.progress)
        opts.progress(layout.pp, best_thr, res.solved,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  } catch (const detail::BudgetStop&) {
    res.complete = false;
  }
  res.workload = std::move(best_workload);
  res.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace osdp::search
