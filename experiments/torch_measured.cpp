#include "experiments/torch_measured.hpp"

#include <fmt/format.h>

#include "validate/executor/backend.hpp"
#include "validate/torch/fsdp2_export.hpp"

namespace osdp::experiments {

GroupRunner torch_group_runner(const validate::TorchJobOptions& options) {
  return [options](const std::vector<ExternalPlan>& plans, const ValidationSpec& spec) {
    const validate::NameMapping mapping = validate::default_name_mapping();
    nlohmann::json list = nlohmann::json::array();
    for (const ExternalPlan& p : plans)
      list.push_back({{"label", p.label}, {"export", validate::export_fsdp2(*p.plan, p.origin, mapping)}});
    const nlohmann::json job = {{"kind", "validate"},
                                {"warmup", spec.warmup},
                                {"iterations", spec.iterations},
                                {"seed", 0},
                                {"plans", list}};
    validate::TorchJobOptions o = options;
    o.nproc = plans.front().plan->cluster.world_size();
    const nlohmann::json out = validate::run_torch_job(job, o);
    std::vector<ExternalResult> results;
    try {
      for (const auto& r : out.at("plans")) {
        ExternalResult x;
        x.steps_s = r.at("steps_s").get<std::vector<double>>();
        x.loss = r.at("loss").get<double>();
        x.param_bytes = r.at("param_bytes").get<double>();
        x.grad_bytes = r.at("grad_bytes").get<double>();
        x.optimizer_bytes = r.at("optimizer_bytes").get<double>();
        results.push_back(std::move(x));
      }
    } catch (const nlohmann::json::exception& e) {
      throw validate::BackendFailure(fmt::format("the torch job's result is not what osdp expects: {}", e.what()));
    }
    return results;
  };
}

}  // namespace osdp::experiments
