// osdp calibrate's probes (probes.hpp).
#include "experiments/probes.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "costmodel/composition.hpp"

namespace osdp::experiments {

Experiment probe_experiment(const std::string& cluster, int world_size, const std::string& output,
                            bool quick) {
  const nlohmann::json doc = {
      {"schema_version", 2},
      {"name", "calibration-probes"},
      {"description",
       "osdp calibrate's probes of the step's level and the model's composition error "
       "(costmodel/composition.hpp): probe-3x320 at micro-batches 1, 2 and 4, four uniform strategies "
       "and the exact search without and with splitting under two memory caps, and probe-8x192's and "
       "probe-2x448's uniform strategies (probe_job keeps those units), run side by side per model and "
       "micro-batch and predicted by the simulator from the calibration just fitted."},
      {"base",
       {{"model", kProbeModel},
        {"cluster", cluster},
        {"world_size", world_size},
        {"memory", kProbeMemory.front()},
        {"split_max", 1},
        {"checkpoint", "off"},
        {"prefetch", 0},
        {"tier", "extended"},
        {"batch", 1},
        {"pp", 1},
        {"tp", 1},
        {"micro_batches", 1}}},
      {"axes",
       {{"model", kProbeModels},
        {"batch", quick ? nlohmann::json::array({2}) : nlohmann::json::array({1, 2, 4})},
        {"memory", kProbeMemory}}},
      {"strategies",
       {{{"label", "fsdp"}, {"strategy", "fsdp"}},
        {{"label", "zero2"}, {"strategy", "zero2"}},
        {{"label", "ddp"}, {"strategy", "ddp"}},
        {{"label", "fsdp+ckpt"}, {"strategy", "fsdp"}, {"checkpoint", "on"}},
        {{"label", "exact"}, {"strategy", "exact"}, {"checkpoint", "auto"}},
        {{"label", "exact+split"}, {"strategy", "exact"}, {"checkpoint", "auto"}, {"split_max", 4}}}},
      {"evaluators", {"analytic", "sim"}},
      {"output", output},
      {"validation",
       {{"warmup", quick ? 1 : 2},
        {"iterations", quick ? 5 : 9},
        {"tolerance", {{"time_median", 1.0}, {"time_max", 1.0}, {"memory_max", 1.0}}}}}};
  return read_experiment(doc, "(osdp calibrate's probes)");
}

MeasuredJob probe_job(const std::string& cluster, int world_size, const std::string& output, bool quick) {
  MeasuredJob job = measured_job(probe_experiment(cluster, world_size, output, quick));
  std::vector<MeasuredItem> items;
  for (MeasuredItem& it : job.items) {
    const bool searched = it.unit->strategy.strategy == "exact";
    const bool capped = it.unit->config.memory != kProbeMemory.front();
    if (searched != capped) continue;  // the uniform strategies unconstrained, the searches under the caps
    const std::string model = it.unit->config.model;
    if (model != kProbeModel && searched) continue;  // the caps are the first model's
    if (capped) {
      it.label += "@" + it.unit->config.memory;
      it.unit->strategy.label = it.label;
    }
    it.group = nlohmann::json{{"model", model}, {"batch", *it.unit->config.batch}}.dump();
    items.push_back(std::move(it));
  }
  std::stable_sort(items.begin(), items.end(), [](const MeasuredItem& a, const MeasuredItem& b) {
    return std::pair(a.unit->config.model, *a.unit->config.batch) <
           std::pair(b.unit->config.model, *b.unit->config.batch);
  });
  for (std::size_t i = 0; i < items.size(); ++i) {
    items[i].index = static_cast<int>(i);
    items[i].unit->index = static_cast<int>(i);
  }
  job.items = std::move(items);
  return job;
}

nlohmann::json composition_fit(const std::vector<UnitResult>& rows) {
  std::vector<costmodel::ProbeStep> probes;
  std::set<std::pair<std::string, std::string>> seen;  // (group, plan): a search may find a uniform plan
  nlohmann::json used = nlohmann::json::array();
  for (const UnitResult& r : rows) {
    const Evaluation* sim = r.evaluation(EvaluatorKind::kSim);
    if (!r.feasible || !r.measurement || !sim || !sim->feasible || r.measurement->steps_s.empty()) continue;
    if (!r.plan_summary.empty() && !seen.insert({r.measurement->group, r.plan_summary}).second) continue;
    probes.push_back({r.measurement->group, sim->time_s, sim->drawn_s, r.measurement->steps_s, r.model});
    used.push_back(r.index);
  }
  nlohmann::json fit = costmodel::composition_fit(probes);
  fit["row_indices"] = used;
  return fit;
}

}  // namespace osdp::experiments
