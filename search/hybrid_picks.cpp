// The plan a layout's chains stand for (hybrid_chains.hpp): the choices a chain's label stands
// for, read back along its parents, and the priced stages around one stage.
#include <cstddef>
#include <vector>

#include "search/internal/hybrid_chains.hpp"

namespace osdp::search::detail {

using costmodel::Plan;

std::vector<Pick> picks_of(const Chain& ch, int label) {
  std::vector<Pick> out;
  for (int li = label; li >= 0; li = ch.arena[static_cast<std::size_t>(li)].parent) {
    const Label& l = ch.arena[static_cast<std::size_t>(li)];
    if (l.op >= 0) out.push_back({l.op, l.item, l.t});
  }
  return out;
}

void rebuild(const LayoutContext& ctx, const std::vector<Pick>& picks, Plan& plan) {
  for (const Pick& k : picks) {
    plan.choices[static_cast<std::size_t>(k.op)] =
        ctx.items(k.op, k.t)[static_cast<std::size_t>(k.item)].choice;
    plan.unit_tp[static_cast<std::size_t>(ctx.unit_of(k.op))] = k.t;
  }
}

bool priced_around(const LayoutContext& ctx, const StageTable& c, const PipelineBounds& pb,
                   const StagePicks& picks, int s, int i, int j, Plan& plan) {
  const int pp = ctx.layout().pp, U = static_cast<int>(ctx.workload().units.size());
  // The unit in lo..hi-1 where f is least (the first of equals), `none` where f is infinite throughout.
  const auto least_at = [](int lo, int hi, int none, auto f) {
    double least = kInf;
    for (int e = lo; e < hi; ++e)
      if (const double x = f(e); x < least) {
        least = x;
        none = e;
      }
    return none;
  };
  auto& first = plan.stage_first_unit;
  first.assign(static_cast<std::size_t>(pp), 0);
  first[static_cast<std::size_t>(s)] = i;
  // Stage r on units from..to-1, from its priced picks; false where it has none.
  const auto take = [&](int r, int from, int to) {
    if (c(r, from, to) == kInf) return false;
    first[static_cast<std::size_t>(r)] = from;
    rebuild(ctx, picks.at({r, from, to}), plan);
    return true;
  };
  for (int r = s + 1, from = j; r < pp; ++r) {
    const int to =
        r + 1 < pp ? least_at(from + 1, U, U, [&](int e) { return c(r, from, e) + pb.after_at(r + 1, e); })
                   : U;
    if (!take(r, from, to)) return false;
    from = to;
  }
  for (int r = s - 1, to = i; r >= 0; --r) {
    const int from = r > 0 ? least_at(1, to, 0, [&](int b) { return pb.before_at(r, b) + c(r, b, to); }) : 0;
    if (!take(r, from, to)) return false;
    to = from;
  }
  return true;
}

}  // namespace osdp::search::detail
