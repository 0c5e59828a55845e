// The chains of the exact hybrid search (search/hybrid.hpp's opening comment, step 1): one stage's
// dynamic program along its units, forward from a stage start or backward from the model's end,
// each label bounded by the LP of what the stage and the other stages still need, the choices a
// chain's best label stands for, and the plan of the priced stages around one stage (an
// incumbent's). hybrid_chains.cpp holds the chains, hybrid_picks.cpp the plan read back from them;
// hybrid_layout.cpp runs them for a layout. Internal to search/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "costmodel/plan_cost.hpp"
#include "search/internal/hybrid_bounds.hpp"
#include "search/internal/hybrid_pareto.hpp"

namespace osdp::search::detail {

// The chains of one stage from one end, every other end recorded: forward from a stage start i,
// best[j] = c*(s, i, j); backward from the model's end (the last stage), best[i] = c*(s, i, U).
// A chain's arena comes from a pool of the thread's earlier arenas and goes back to it: a layout's
// chains, and the layouts after it, reuse its pages rather than fault in and copy fresh ones as the
// arena grows (a few percent of a 405B search). release_chain_arenas() frees the pool.
struct Chain {
  std::vector<Label> arena;
  std::vector<double> best;     // per unit boundary, infinity where nothing fits
  std::vector<int> best_label;  // the label it ends at

  Chain();
  ~Chain();
  Chain(Chain&&) noexcept = default;
  Chain& operator=(Chain&&) noexcept = default;
  Chain(const Chain&) = delete;
  Chain& operator=(const Chain&) = delete;
};
void release_chain_arenas();

// A test cheap enough to ask of every label before the Pareto filter sorts them (in step_unit),
// refusing only labels the chain's keep refuses. Keep takes a label (persistent P, largest transient
// X, time tau) when some end e of the stage (a stage end j of a forward chain, a start i of the last
// stage's) passes: own = tau + fixed + LP < need, with LP = lp->least(k, budget - P, X), or 0 for the
// end next to the label (an `empty` end, lp none). need is step_need of the others' bounds; fixed is
// what the end adds (its exit or entry, the least over degrees). The LP is convex in its budget, so for
// every lambda >= 0 it is at least lp->conjugate(k, lambda) - lambda (budget - P - max(X, x)), x the
// least transient any end's LP forces. Every end fails, and keep refuses the label, when
//   tau >= need - fixed of the empty end (if there is one), and
//   tau + lambda (P + max(X, x)) >= max over the other ends of need - fixed - conjugate(lambda)
//                                   + lambda budget
// for some lambda: one multiplication per label and lambda. The lambdas are 0 and the slopes of the
// LP of the end that passes most easily at lambda 0, where the parents' (`current`) budgets are:
// their least, median and most. With one end, the line of each is the LP's tangent there, as tight
// as the LP itself at those budgets. A margin of 1e-9 of the bound keeps rounding from refusing what
// keep would take.
class Cut {
 public:
  struct End {
    double need, fixed;
    const SuffixBound* lp;  // none: the empty end
    int k;                  // the LP's first position
  };
  Cut() = default;  // takes every label
  Cut(const Chain& ch, const std::vector<int>& current, const std::vector<End>& ends, double budget,
      double bound);
  struct Line {
    double lambda, limit;  // refuse when tau + lambda (P + max(X, x)) >= limit
  };
  // The line of the parents' median budget (else the last): the one step_unit prices items on. None
  // when the cut takes every label.
  const Line* primary() const { return active_ && !lines_.empty() ? &lines_[primary_] : nullptr; }
  // A label takes the empty end's test when its time is under this (-infinity: no empty end).
  double empty() const { return empty_; }
  double least_transient() const { return x_; }
  bool pass(const Label& n) const {
    if (!active_ || n.time < empty_) return true;
    const double used = n.persistent + std::max(n.transient, x_);
    for (const Line& l : lines_)
      if (n.time + l.lambda * used >= l.limit) return false;
    return true;
  }

 private:
  bool active_ = false;
  std::size_t primary_ = 0;
  double empty_ = -kInf;  // with no empty end, tau >= -infinity always holds
  double x_ = 0;
  std::vector<Line> lines_;
};

// The chain of stage s < pp - 1 from unit i forward, recording c*(s, i, j) for every j <= j_max. A
// label in unit u with persistent P, largest transient X and time tau is dropped when it cannot be
// part of a plan beating `bound` whatever the stage's end j:
//   T >= step_bound(own, before[s][i], after[s + 1][j]) for every j > u, own = tau + the LP of
//   units u+1..j-1 within what the stage has left (budget - P, X already held) + the stage's exit
//   after unit j - 1 (the label's own for j = u + 1, else the least over that unit's degrees),
// or when no end fits. Partway through unit u, the label counts the unit's other operators at the
// least each adds at its degree.
// With `memo` (search/internal/hybrid_memo.hpp), without the cut: its steps taken from chains that
// took them before, and its own recorded for those after. With `wanted` (per end j, size units + 1),
// only the ends it marks are priced: a label only the others could take is dropped.
class SumMemo;
Chain run_forward(const LayoutContext& ctx, int s, int i, int j_max, double bound, std::int64_t* labels,
                  const PipelineBounds& pb, SumMemo* memo = nullptr,
                  const std::vector<char>* wanted = nullptr);

// The chain of the last stage from the model's end backward, recording c*(pp - 1, i, U) for every
// i >= i_min (the re-layout from 1 into unit i added there when pp > 1). A label in unit u (units
// u..U-1) is dropped when, for every start i <= u of the stage, step_bound(own, before[s][i], 0)
// reaches `bound` (own = tau + the LP of units i..u-1 within what the stage has left + its entry into
// unit i: the label's own for i = u, else the least over unit i's degrees) or nothing fits;
// with pp = 1, when m (tau + least(units 0..u-1 within budget - P - max(X, their least transient)))
// does. Only items whose transient is at most `cap` are taken, and every label starts at transient
// `floor` (`prefix` is then the LP of those items). With `beam` > 0 (one stage only) the chain is a
// heuristic's: at each unit it keeps only the `beam` labels of least time plus that LP. With `wanted`
// (per start i), only the starts it marks are priced.
Chain run_backward(const LayoutContext& ctx, int i_min, double bound, std::int64_t* labels,
                   const std::function<const SuffixBound&(int)>& prefix, const PipelineBounds* pb,
                   double cap = kInf, double floor = 0, std::size_t beam = 0,
                   const std::vector<char>* wanted = nullptr);

// The choices of units i..j-1 a chain's label stands for: (operator, item, degree) per operator.
struct Pick {
  int op, item, t;
};
std::vector<Pick> picks_of(const Chain& ch, int label);

// Fills the plan's degrees and choices from a stage's picks.
void rebuild(const LayoutContext& ctx, const std::vector<Pick>& picks, costmodel::Plan& plan);

// What each priced stage chose, by (s, i, j): stage s holding units i..j-1.
using StagePicks = std::map<std::tuple<int, int, int>, std::vector<Pick>>;

// With every stage but s priced (their costs in c, pb's before and after replaced by the least sums
// of those costs): the stages around stage s's units i..j-1 that the least priced sums go through
// (after j: the least of c + after, stage by stage; before i: of before + c), their first units and
// choices set in `plan`. False when some stage on the way has no priced plan.
bool priced_around(const LayoutContext& ctx, const StageTable& c, const PipelineBounds& pb,
                   const StagePicks& picks, int s, int i, int j, costmodel::Plan& plan);

}  // namespace osdp::search::detail
