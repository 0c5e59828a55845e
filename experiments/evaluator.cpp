#include "experiments/evaluator.hpp"

namespace osdp::experiments {

const std::vector<EvaluatorInfo>& evaluators() {
  static const std::vector<EvaluatorInfo> all{
      {EvaluatorKind::kAnalytic, "analytic", false, "the plan cost model's prediction"},
      {EvaluatorKind::kSim, "sim", false, "the discrete-event simulator's prediction"},
      {EvaluatorKind::kMeasured, "measured", true,
       "the plan run for real on the job's ranks (osdp validate)"}};
  return all;
}

const EvaluatorInfo& info(EvaluatorKind k) {
  return evaluators()[static_cast<std::size_t>(k)];
}

const char* to_string(EvaluatorKind k) {
  return info(k).name;
}

std::optional<EvaluatorKind> evaluator_named(std::string_view name) {
  for (const auto& e : evaluators())
    if (name == e.name) return e.kind;
  return std::nullopt;
}

}  // namespace osdp::experiments
