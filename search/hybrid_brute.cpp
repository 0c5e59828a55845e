// brute_force_layout (search/hybrid.hpp): every plan of one layout, every stage split x every TP
// degree per unit x every choice per operator, each priced by the model; for the tests that hold the
// exact hybrid search to it.
#include <functional>
#include <optional>

#include "search/hybrid.hpp"
#include "search/internal/hybrid_context.hpp"
#include "search/internal/hybrid_layout.hpp"

namespace osdp::search {

using costmodel::Choice;
using costmodel::Plan;
using costmodel::PlanCostModel;
using costmodel::Workload;

std::optional<Plan> brute_force_layout(const PlanCostModel& model, const Workload& hw,
                                       const HybridLayout& layout, const HybridSearchOptions& options) {
  using namespace detail;
  const LayoutContext ctx(model, hw, layout, options, ItemRules{}, nullptr);
  const int U = static_cast<int>(hw.units.size()), pp = layout.pp;
  if (U < pp) return std::nullopt;
  std::optional<Plan> best;
  double best_t = kInf;
  Plan plan = empty_plan(hw, layout);
  // Every split: choose pp - 1 boundaries among units 1..U-1.
  std::function<void(int, int)> splits = [&](int s, int from) {
    if (s == pp) {
      std::function<void(int)> units = [&](int u) {
        if (u == U) {
          // Every choice of every operator.
          std::function<void(std::size_t)> ops = [&](std::size_t k) {
            if (k == hw.operators.size()) {
              const auto ev = model.evaluate(hw, plan);
              if (ev.fits && ev.time_s < best_t) {
                best_t = ev.time_s;
                best = plan;
              }
              return;
            }
            const int t = plan.unit_tp[static_cast<std::size_t>(ctx.unit_of(static_cast<int>(k)))];
            const Operator sliced = costmodel::tp_slice(hw.operators[k], t, layout.sequence_parallel, hw);
            const int group = model.world_size() / pp / t;
            for (const Choice& c : choices_for(sliced, options.space, group)) {
              plan.choices[k] = c;
              ops(k + 1);
            }
          };
          ops(0);
          return;
        }
        for (int t : ctx.allowed(u)) {
          plan.unit_tp[static_cast<std::size_t>(u)] = t;
          units(u + 1);
        }
      };
      units(0);
      return;
    }
    for (int i = from; i <= U - (pp - s); ++i) {
      plan.stage_first_unit[static_cast<std::size_t>(s)] = i;
      splits(s + 1, i + 1);
    }
  };
  plan.stage_first_unit[0] = 0;
  splits(1, 1);
  return best;
}

}  // namespace osdp::search
