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
  const auto cost = [&](int r, int from, int to) { return c(r, from, to); };
  auto& first = plan.stage_first_unit;
  first.assign(static_cast<std::size_t>(pp), 0);
  first[static_cast<std::size_t>(s)] = i;
  for (int r = s + 1, from = j; r < pp; ++r) {
    int to = U;
    if (r + 1 < pp) {
      double least = kInf;
      for (int e = from + 1; e < U; ++e)
        if (const double x = cost(r, from, e) + pb.after_at(r + 1, e); x < least) {
          least = x;
          to = e;
        }
    }
    if (cost(r, from, to) == kInf) return false;
    first[static_cast<std::size_t>(r)] = from;
    rebuild(ctx, picks.at({r, from, to}), plan);
    from = to;
  }
  for (int r = s - 1, to = i; r >= 0; --r) {
    int from = 0;
    if (r > 0) {
      double least = kInf;
      for (int b = 1; b < to; ++b)
        if (const double x = pb.before_at(r, b) + cost(r, b, to); x < least) {
          least = x;
          from = b;
        }
    }
    if (cost(r, from, to) == kInf) return false;
    first[static_cast<std::size_t>(r)] = from;
    rebuild(ctx, picks.at({r, from, to}), plan);
    to = from;
  }
  return true;
}

}  // namespace osdp::search::detail
