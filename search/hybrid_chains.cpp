// The chains of the exact hybrid search (hybrid_chains.hpp).
#include "search/internal/hybrid_chains.hpp"

#include "search/internal/hybrid_memo.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace osdp::search::detail {

namespace {

// The arenas of the thread's finished chains, the largest last; at most two are kept (a layout runs
// one chain at a time, and holds one more while it reads its picks).
std::vector<std::vector<Label>>& arena_pool() {
  thread_local std::vector<std::vector<Label>> pool;
  return pool;
}

}  // namespace

Chain::Chain() {
  auto& pool = arena_pool();
  if (pool.empty()) return;
  arena = std::move(pool.back());
  pool.pop_back();
  arena.clear();
}

Chain::~Chain() {
  if (arena.capacity() == 0) return;  // moved from
  auto& pool = arena_pool();
  pool.push_back(std::move(arena));
  std::sort(pool.begin(), pool.end(),
            [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
  if (pool.size() > 2) pool.erase(pool.begin());
}

void release_chain_arenas() {
  std::vector<std::vector<Label>>().swap(arena_pool());
}

namespace {

// The buffers of step_unit and pareto_sum, kept from unit to unit of a chain.
struct StepScratch {
  SumScratch sum;
  Staircases from, parents;
  std::vector<SumRow> rows;
  std::vector<std::size_t> order, takes, most;
  std::vector<double> prices;
  std::vector<int> cur, grown;
  std::vector<double> key;
  std::vector<SumChild> record;
};

// One unit's step of a chain: every degree t of unit u, the re-layout between it and the neighbour
// already in the label (`relayout(label degree, t)`), then its operators' items whose transient is at
// most `cap`; labels that do not fit in the stage are dropped, and those `keep` refuses. Each is one
// pareto_sum over the labels of the step before. `cut` is asked of every child pareto_sum forms, and
// refuses only labels keep refuses. With `memo`, the steps another chain took are taken from it (the
// cut must then take every label). Returns the Pareto labels. `current` holds each degree's labels
// together, each in the filter's order.
template <class Relayout, class Keep>
std::vector<int> step_unit(const LayoutContext& ctx, Chain& ch, const std::vector<int>& current, int u, int f,
                           double budget, double cap, Relayout relayout, Keep keep, const Cut& cut,
                           StepScratch& sc, SumMemo* memo) {
  std::vector<int> next;
  const auto& ops = ctx.workload().units[static_cast<std::size_t>(u)].ops;
  // rest[k]: the least the unit's operators from the k-th on add at degree t, each coordinate apart
  // (no item of theirs adds less time, persistent bytes or transient). A label partway through the
  // unit is held to keep and the cut as if it had them: every completion of it is no better in all three,
  // so one that fails fails all of them.
  struct Rest {
    double time = 0, persistent = 0, transient = 0;
  };
  std::vector<Rest> rest(ops.size() + 1);
  Rest* shift = nullptr;  // the one the current labels still owe
  const auto owed = [&](const Label& n) {
    Label o = n;
    o.time += shift->time;
    o.persistent += shift->persistent;
    o.transient = std::max(o.transient, shift->transient);
    return o;
  };
  const auto keep_u = [&](const Label& n) {
    const Label o = owed(n);
    return o.persistent + o.transient <= budget && keep(o, u);
  };
  // Whether a label fits with the rest of the unit owed (refusing, with one, every label of more bytes
  // and the same transient), and whether the cut takes it.
  const auto fits_u = [&](const Label& n) {
    const Label o = owed(n);
    return o.persistent + o.transient <= budget;
  };
  const auto cut_u = [&](const Label& n) { return cut.pass(owed(n)); };
  auto& rows = sc.rows;
  auto& cur = sc.cur;
  // One Pareto step of `rows` over `ps` into `out`; with the memo, its children taken from a chain
  // that took the same step (else grown without the cut, all those no other beats, and recorded).
  const auto sum = [&](const Staircases& ps, const std::vector<std::size_t>* takes, int t,
                       std::vector<int>& out) {
    if (!memo) {
      pareto_sum(ch.arena, ps, rows, takes, t, budget, fits_u, cut_u, keep_u, sc.sum, out);
      return;
    }
    SumMemo::key_of(ps, rows, t, budget, shift->persistent, shift->transient, sc.key);
    const std::uint64_t h = SumMemo::hash(sc.key);
    if (const SumMemo::Found found = memo->find(sc.key, h); found.found) {
      out.clear();
      for (const SumChild* c = found.first; c != found.last; ++c) {
        Label n;
        n.persistent = c->persistent;
        n.transient = c->transient;
        n.time = c->time;
        n.parent = ps.at[c->p].index;
        n.op = rows[c->row].op;
        n.item = rows[c->row].item;
        n.t = t;
        if (!keep_u(n)) continue;
        ch.arena.push_back(n);
        out.push_back(static_cast<int>(ch.arena.size()) - 1);
      }
      return;
    }
    const auto all = [](const Label&) { return true; };
    if (pareto_sum(ch.arena, ps, rows, nullptr, t, budget, fits_u, all, keep_u, sc.sum, out, &sc.record))
      memo->insert(sc.key, h, sc.record);
  };
  sc.from.assign(ch.arena, current);
  const Staircases& from = sc.from;
  for (int t : ctx.allowed(u)) {
    bool possible = true;
    for (std::size_t k = ops.size(); k-- > 0;) {
      Rest least{kInf, kInf, kInf};
      for (const auto& it : ctx.items(ops[k], t)) {
        if (it.cost.transient_bytes > cap) continue;
        least.time = std::min(least.time, it.time_s);
        least.persistent = std::min(least.persistent, it.cost.states_bytes + f * it.cost.act_bytes);
        least.transient = std::min(least.transient, it.cost.transient_bytes);
      }
      if (least.time == kInf) possible = false;  // no item within cap: nothing of this degree fits
      rest[k] = {rest[k + 1].time + least.time, rest[k + 1].persistent + least.persistent,
                 std::max(rest[k + 1].transient, least.transient)};
    }
    if (!possible) continue;
    // The labels re-laid into t, filtered before any item is added: those that came from other
    // degrees are often beaten once they pay the re-layout. One row per staircase of them (each of
    // one degree: a constant added to its labels' times).
    shift = &rest[0];
    rows.clear();
    for (std::size_t g = 0; g < from.size(); ++g) {
      SumRow r;
      r.stair = g;
      r.time = relayout(from.at[from.first[g]].t, t);
      rows.push_back(r);
    }
    sum(from, nullptr, t, cur);
    for (std::size_t o = 0; o < ops.size(); ++o) {
      const int oi = ops[o];
      const auto& items = ctx.items(oi, t);
      const auto n_items = static_cast<std::int64_t>(items.size());
      shift = &rest[o + 1];
      // The items by their price on the cut's primary line, c = time + lambda bytes, cheapest first. A
      // parent's slack is limit - (its time, its bytes and largest transient with the rest of the unit
      // owed, and the cut's least transient) on that line, and a child of an item priced at or over
      // it fails the line. Each item goes through the parents whose slack is over its price, in
      // their order: most pairs are never formed. Without the line (or where a child may pass by the
      // empty end) every parent takes every item.
      auto& order = sc.order;
      auto& prices = sc.prices;
      order.clear();
      prices.clear();
      for (std::size_t k = 0; k < items.size(); ++k)
        if (items[k].cost.transient_bytes <= cap) order.push_back(k);
      const Cut::Line* line = cut.primary();
      const auto price = [&](std::size_t k) {
        const auto& c = items[k].cost;
        return items[k].time_s + line->lambda * (c.states_bytes + f * c.act_bytes);
      };
      if (line) {
        double least_parent = kInf, least_item = kInf;
        for (int li : cur) least_parent = std::min(least_parent, ch.arena[static_cast<std::size_t>(li)].time);
        for (std::size_t k : order) least_item = std::min(least_item, items[k].time_s);
        if (least_parent + least_item + shift->time < cut.empty()) line = nullptr;
      }
      auto& takes = sc.takes;
      takes.assign(cur.size(), order.size());
      if (line) {
        std::sort(order.begin(), order.end(),
                  [&](std::size_t a, std::size_t b) { return price(a) < price(b); });
        for (std::size_t k : order) prices.push_back(price(k));
        for (std::size_t p = 0; p < cur.size(); ++p) {
          const Label& l = ch.arena[static_cast<std::size_t>(cur[p])];
          const double slack =
              line->limit - l.time - shift->time -
              line->lambda * (l.persistent + shift->persistent +
                              std::max({l.transient, shift->transient, cut.least_transient()}));
          takes[p] = static_cast<std::size_t>(std::lower_bound(prices.begin(), prices.end(), slack) -
                                              prices.begin());
        }
      }
      // One row per item and staircase of parents, those of the staircase that take the item (the
      // most any takes: no row past it).
      sc.parents.assign(ch.arena, cur);
      const Staircases& parents = sc.parents;
      auto& most = sc.most;
      most.assign(parents.size(), 0);
      for (std::size_t g = 0; g < parents.size(); ++g)
        for (std::size_t p = parents.first[g]; p < parents.first[g + 1]; ++p)
          most[g] = std::max(most[g], takes[p]);
      rows.clear();
      for (std::size_t q = 0; q < order.size(); ++q) {
        const std::size_t k = order[q];
        const auto& c = items[k].cost;
        for (std::size_t g = 0; g < parents.size(); ++g) {
          if (most[g] <= q) continue;
          SumRow r;
          r.stair = g;
          r.states = c.states_bytes;
          r.act = c.act_bytes;
          r.f = f;
          r.transient = c.transient_bytes;
          r.time = items[k].time_s;
          r.op = oi;
          r.item = static_cast<int>(k);
          r.rank_scale = n_items;
          r.rank_offset = static_cast<std::int64_t>(k);
          r.q = q;
          rows.push_back(r);
        }
      }
      sum(parents, &takes, t, sc.grown);
      cur.swap(sc.grown);
    }
    next.insert(next.end(), cur.begin(), cur.end());
  }
  // Each degree's labels are already its Pareto set (pareto compares labels of one degree only).
  return next;
}

}  // namespace

Cut::Cut(const Chain& ch, const std::vector<int>& current, const std::vector<End>& ends, double budget,
         double bound) {
  if (bound == kInf || current.empty()) return;
  active_ = true;
  const double margin = 1e-9 * bound;  // rounding: refuse only what keep surely would
  x_ = kInf;
  const End* widest = nullptr;  // the LP end of the highest limit at lambda 0: the one to cut for
  double widest_limit = -kInf;
  for (const End& e : ends) {
    if (!e.lp) {
      empty_ = std::max(empty_, e.need - e.fixed + margin);
      continue;
    }
    x_ = std::min(x_, e.lp->least_transient(e.k));
    const double limit = e.need - e.fixed - e.lp->conjugate(e.k, 0.0);
    if (limit > widest_limit) {
      widest_limit = limit;
      widest = &e;
    }
  }
  if (x_ == kInf) x_ = 0;
  std::vector<double> lambdas{0.0};
  double median = -1;  // the lambda at the parents' median budget
  if (widest) {
    std::vector<double> r;
    r.reserve(current.size());
    for (int li : current) {
      const Label& l = ch.arena[static_cast<std::size_t>(li)];
      r.push_back(budget - l.persistent - std::max(l.transient, widest->lp->least_transient(widest->k)));
    }
    std::sort(r.begin(), r.end());
    median = -widest->lp->slope(widest->k, r[r.size() / 2]);
    for (const double r0 : {r.front(), r[r.size() / 2], r.back()}) {
      const double lambda = -widest->lp->slope(widest->k, r0);
      if (lambda > 0 && std::find(lambdas.begin(), lambdas.end(), lambda) == lambdas.end())
        lambdas.push_back(lambda);
    }
  }
  primary_ = static_cast<std::size_t>(std::find(lambdas.begin(), lambdas.end(), median) - lambdas.begin());
  if (primary_ == lambdas.size()) primary_ = lambdas.size() - 1;
  for (const double lambda : lambdas) {
    double limit = -kInf;  // no LP end: every label past the empty end's test fails
    for (const End& e : ends) {
      if (!e.lp) continue;
      const double h = e.lp->conjugate(e.k, lambda);
      if (h == kInf) continue;  // nothing fits: this end never passes
      limit = std::max(limit, e.need - e.fixed - h + lambda * budget + margin);
    }
    lines_.push_back({lambda, limit});
  }
}

Chain run_forward(const LayoutContext& ctx, int s, int i, int j_max, double bound, std::int64_t* labels,
                  const PipelineBounds& pb, SumMemo* memo, const std::vector<char>* wanted) {
  const auto want = [wanted](int j) { return !wanted || (*wanted)[static_cast<std::size_t>(j)] != 0; };
  const int pp = ctx.layout().pp, m = ctx.layout().m, f = ctx.in_flight(s);
  const double budget = ctx.capacity() - ctx.fixed();
  Chain ch;
  ch.best.assign(ctx.workload().units.size() + 1, kInf);
  ch.best_label.assign(ch.best.size(), -1);
  ch.arena.push_back(Label{0, 0, 0, -1, -1, -1, s == 0 ? -1 : 1});
  std::vector<int> current{0};
  StepScratch scratch;
  const auto relayout = [&](int u) {
    return [&ctx, u](int from, int t) { return ctx.relayout_into(u, from, t); };
  };
  const double before = pb.before_at(s, i);
  // Per end j: the exit after unit j - 1 at each of its degrees, and the least of them.
  std::vector<DegreeCosts> exits(static_cast<std::size_t>(j_max) + 1);
  for (int j = i + 1; j <= j_max; ++j) exits[static_cast<std::size_t>(j)] = ctx.exits(s, j - 1);
  // The LP tables of the units before each end j, resolved once for the chain.
  std::vector<const BandedSuffix*> suffix(static_cast<std::size_t>(j_max) + 1, nullptr);
  for (int j = i + 2; j <= j_max; ++j) suffix[static_cast<std::size_t>(j)] = &pb.suffix(j, f);
  // Whether an end at j passes for label n in unit u (none: nothing from u + 1 to j fits, nor a later
  // end); lp_before is the LP of units u+1..j'-1 for an end j' < j already computed (it only grows
  // with j: more units, no more memory), 0 when none was.
  const auto end_at = [&](const Label& n, int u, int j, double& lp_before) -> std::optional<bool> {
    // The LP of the stage's rest only where an end at j could still pass without it. The exit after
    // unit u is the label's own; after a later unit, the least over that unit's degrees.
    const double after = pb.after_at(s + 1, j);
    const DegreeCosts& exit = exits[static_cast<std::size_t>(j)];
    double own = n.time + (j > u + 1 ? exit.least : exit.at[static_cast<std::size_t>(n.t)]);
    if (!want(j) || after == kInf || step_bound(own + lp_before, before, after, s, m, pp) >= bound)
      return false;
    if (j > u + 1) {
      const double x = suffix[static_cast<std::size_t>(j)]->least(u + 1, budget - n.persistent, n.transient);
      if (x == kInf) return std::nullopt;  // a longer stage fits no better
      lp_before = x;
      own += x;
    }
    return step_bound(own, before, after, s, m, pp) < bound;
  };
  // Some end passes or none does, whatever the order they are tried in: the one that passed last is
  // tried first, as neighbouring labels mostly pass at the same end; then every end in order.
  int passed = -1;
  const auto keep = [&](const Label& n, int u) {
    if (passed > u && passed <= j_max) {
      double none = 0;
      if (end_at(n, u, passed, none).value_or(false)) {
        return true;
      }
    }
    double lp_before = 0;
    for (int j = u + 1; j <= j_max; ++j) {
      const std::optional<bool> pass = end_at(n, u, j, lp_before);
      if (!pass) break;
      if (*pass) {
        passed = j;
        return true;
      }
    }
    return false;
  };
  for (int u = i; u < j_max && !current.empty(); ++u) {
    std::vector<Cut::End> cut_ends;
    for (int j = u + 1; j <= j_max; ++j) {
      const double after = pb.after_at(s + 1, j);
      if (after == kInf || !want(j)) continue;
      cut_ends.push_back({step_need(before, after, s, m, pp, bound), exits[static_cast<std::size_t>(j)].least,
                          j > u + 1 ? &suffix[static_cast<std::size_t>(j)]->all() : nullptr, u + 1});
    }
    // With the memo, no cut: the steps it records must hold every child no other beats.
    const Cut cut = memo ? Cut() : Cut(ch, current, cut_ends, budget, bound);
    current = step_unit(ctx, ch, current, u, f, budget, kInf, relayout(u), keep, cut, scratch, memo);
    ctx.check(static_cast<double>(ch.arena.capacity() * sizeof(Label)));
    if (labels) *labels += static_cast<std::int64_t>(current.size());
    for (int li : current) {
      const Label& l = ch.arena[static_cast<std::size_t>(li)];
      const double c = l.time + exits[static_cast<std::size_t>(u + 1)].at[static_cast<std::size_t>(l.t)];
      if (c < ch.best[static_cast<std::size_t>(u + 1)]) {
        ch.best[static_cast<std::size_t>(u + 1)] = c;
        ch.best_label[static_cast<std::size_t>(u + 1)] = li;
      }
    }
  }
  return ch;
}

Chain run_backward(const LayoutContext& ctx, int i_min, double bound, std::int64_t* labels,
                   const std::function<const SuffixBound&(int)>& prefix, const PipelineBounds* pb, double cap,
                   double floor, std::size_t beam, const std::vector<char>* wanted) {
  const auto want = [wanted](int i) { return !wanted || (*wanted)[static_cast<std::size_t>(i)] != 0; };
  const int pp = ctx.layout().pp, m = ctx.layout().m, s = pp - 1, f = ctx.in_flight(s);
  const int U = static_cast<int>(ctx.workload().units.size());
  const double budget = ctx.capacity() - ctx.fixed();
  Chain ch;
  ch.best.assign(static_cast<std::size_t>(U) + 1, kInf);
  ch.best_label.assign(ch.best.size(), -1);
  ch.arena.push_back(Label{0, floor, 0, -1, -1, -1, -1});
  std::vector<int> current{0};
  StepScratch scratch;
  const SuffixBound* before = nullptr;  // units 0..u-1, set per unit
  // With a pipeline, per start i: the entry into unit i (from degree 1) at each of its degrees, and
  // the least of them.
  std::vector<DegreeCosts> entries(static_cast<std::size_t>(U));
  if (pp > 1)
    for (int i = std::max(i_min, 0); i < U; ++i) entries[static_cast<std::size_t>(i)] = ctx.entries(i);
  // Checked after every operator, the rest of unit u counted at its least (step_unit). Without a pipeline the
  // units before are this stage's own: within its memory (its largest transient set aside once), at weight m.
  // With one, for every start i <= u of the stage: own = tau + the LP of units i..u-1 within what the stage
  // has left, and before[s][i]. start_at says whether a start at i passes (true), fails (false) or fails
  // with every earlier start (none: the LP of its units does not fit); `within` is the LP of the units
  // before u.
  const BandedSuffix* within = nullptr;
  const auto start_at = [&](const Label& l, int u, int i) -> std::optional<bool> {
    // The LP of the stage's rest only where a start at i could still pass without it. The entry
    // into unit u is the label's own; into an earlier unit, the least over its degrees.
    const double earlier = pb->before_at(s, i);
    double own = l.time + (i < u ? entries[static_cast<std::size_t>(i)].least
                                 : entries[static_cast<std::size_t>(u)].at[static_cast<std::size_t>(l.t)]);
    if (!want(i) || earlier == kInf || step_bound(own, earlier, 0.0, s, m, pp) >= bound) return false;
    if (i < u) {
      const double x = within->least(i, budget - l.persistent, l.transient);
      if (x == kInf) return std::nullopt;  // a longer stage fits no better
      own += x;
    }
    return step_bound(own, earlier, 0.0, s, m, pp) < bound;
  };
  // Some start passes or none does, whatever the order they are tried in (each is tried alone, and
  // one whose LP does not fit leaves every earlier one unfit): the one that passed last is tried
  // first, as neighbouring labels mostly pass at the same start.
  int passed = -1;
  const auto keep = [&](const Label& l, int u) {
    if (pp == 1) {
      const double rest = u == 0 ? 0.0 : before->least(0, budget - l.persistent, l.transient);
      if (rest == kInf) return false;
      return m * (l.time + rest) < bound;
    }
    if (passed >= i_min && passed <= u && start_at(l, u, passed).value_or(false)) return true;
    for (int i = u; i >= i_min; --i) {
      const std::optional<bool> pass = start_at(l, u, i);
      if (!pass) break;
      if (*pass) {
        passed = i;
        return true;
      }
    }
    return false;
  };
  for (int u = U - 1; u >= i_min && !current.empty(); --u) {
    // Between unit u (degree t) and unit u + 1 (the label's degree); the last unit ends the stage.
    const auto relayout = [&](int next_t, int t) {
      return next_t < 0 ? ctx.stage_end(s, u, t) : ctx.relayout_into(u + 1, t, next_t);
    };
    if (pp == 1 && u > 0) before = &prefix(u);
    if (pp > 1) within = &pb->suffix(u, f);
    std::vector<Cut::End> cut_ends;
    if (pp == 1) {
      cut_ends.push_back({bound / m, 0.0, u > 0 ? before : nullptr, 0});
    } else {
      for (int i = u; i >= i_min; --i) {
        const double earlier = pb->before_at(s, i);
        if (earlier == kInf || !want(i)) continue;
        cut_ends.push_back({step_need(earlier, 0.0, s, m, pp, bound),
                            entries[static_cast<std::size_t>(i)].least,
                            i < u ? &pb->suffix(u, f).all() : nullptr, i});
      }
    }
    const Cut cut(ch, current, cut_ends, budget, bound);
    current = step_unit(ctx, ch, current, u, f, budget, cap, relayout, keep, cut, scratch, nullptr);
    ctx.check(static_cast<double>(ch.arena.capacity() * sizeof(Label)));
    if (beam > 0 && pp == 1 && current.size() > beam) {
      // A heuristic's chain: only the `beam` labels of least time plus the LP of the units left.
      std::vector<std::pair<double, std::size_t>> score;
      for (std::size_t k = 0; k < current.size(); ++k) {
        const Label& l = ch.arena[static_cast<std::size_t>(current[k])];
        score.emplace_back(l.time + (u == 0 ? 0.0 : before->least(0, budget - l.persistent, l.transient)), k);
      }
      std::nth_element(score.begin(), score.begin() + static_cast<std::ptrdiff_t>(beam), score.end());
      score.resize(beam);
      std::sort(score.begin(), score.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
      std::vector<int> kept;
      for (const auto& sc : score) kept.push_back(current[sc.second]);
      current.swap(kept);
    }
    if (labels) *labels += static_cast<std::int64_t>(current.size());
    for (int li : current) {
      const Label& l = ch.arena[static_cast<std::size_t>(li)];
      const double c =
          l.time + (s > 0 ? entries[static_cast<std::size_t>(u)].at[static_cast<std::size_t>(l.t)] : 0.0);
      if (c < ch.best[static_cast<std::size_t>(u)]) {
        ch.best[static_cast<std::size_t>(u)] = c;
        ch.best_label[static_cast<std::size_t>(u)] = li;
      }
    }
  }
  return ch;
}

}  // namespace osdp::search::detail
