// The exact solver of one hybrid layout and the pieces the strategies of search/hybrid.cpp share
// with it (search/hybrid.hpp's opening comment has the algorithm; hybrid_layout.cpp holds it: the
// priced items, the chain DP along a stage's units, the LP bound, the incumbent and the split).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "costmodel/hybrid.hpp"
#include "search/hybrid.hpp"

namespace osdp::search::detail {

// How a strategy restricts and prices the per-operator items.
struct ItemRules {
  bool galvatron = false;  // REPLICATE or ZDP only, memory rounded up to whole MiB
  double overlap = 0;      // galvatron's overlap coefficient for choosing (0: osdp's time)
};

// A plan of the layout with every unit at degree 1, every choice the default, one stage at unit 0.
costmodel::HybridPlan empty_plan(const costmodel::HybridWorkload& hw, const HybridLayout& layout);

// Stage s's first unit for even stages: layers divided equally (the remainder to the first stages);
// the embedding with the first stage, a projection with the layer after it, the head with the last.
// Empty when there are fewer layers than stages.
std::vector<int> even_stage_starts(const costmodel::HybridWorkload& hw, int pp);

// The best plan of one layout under `rules` (even: the stages of even_stage_starts only) whose step
// is shorter than `bound`; none when nothing fits or nothing beats the bound (`bounded` then says
// whether the bound cut something, so that a larger b0 may still be worth solving).
std::optional<costmodel::HybridPlan> solve_layout(const costmodel::HybridCostModel& model,
                                                  const costmodel::HybridWorkload& hw,
                                                  const HybridLayout& layout,
                                                  const HybridSearchOptions& options, ItemRules rules,
                                                  bool even, double bound, std::int64_t* labels,
                                                  bool* bounded = nullptr);

}  // namespace osdp::search::detail
