// The evaluators: how a unit's plan is scored. Each is a descriptor (its name in experiment files,
// rows and tables; whether it runs plans on ranks; what it does), chosen by kind, never by comparing
// names at call sites:
//   analytic  the plan cost model's prediction (costmodel/plan_cost.hpp)
//   sim       the discrete-event simulator's (sim/replay.hpp)
//   measured  the plan run for real on ranks (`osdp validate`, experiments/measured.hpp)
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace osdp::experiments {

enum class EvaluatorKind { kAnalytic, kSim, kMeasured };

struct EvaluatorInfo {
  EvaluatorKind kind;
  const char* name;
  bool needs_ranks;  // runs plans on the job's ranks: `osdp validate`, not `osdp sweep`
  const char* summary;
};

// Every evaluator, in the order rows list them.
const std::vector<EvaluatorInfo>& evaluators();
const EvaluatorInfo& info(EvaluatorKind k);
const char* to_string(EvaluatorKind k);
std::optional<EvaluatorKind> evaluator_named(std::string_view name);

}  // namespace osdp::experiments
