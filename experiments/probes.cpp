// osdp calibrate's probes (probes.hpp).
#include "experiments/probes.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "costmodel/composition.hpp"

namespace osdp::experiments {

namespace {

const nlohmann::json kUniform = {{{"label", "fsdp"}, {"strategy", "fsdp"}},
                                 {{"label", "zero2"}, {"strategy", "zero2"}},
                                 {{"label", "ddp"}, {"strategy", "ddp"}},
                                 {{"label", "fsdp+ckpt"}, {"strategy", "fsdp"}, {"checkpoint", "on"}}};

// The probes' experiment document: `models` at `batches` under `memory`, `strategies` each.
nlohmann::json probe_doc(const std::string& name, const std::string& description, const ProbeSet& set,
                         const nlohmann::json& models, const nlohmann::json& batches,
                         const nlohmann::json& memory, const nlohmann::json& strategies) {
  return {{"schema_version", 2},
          {"name", name},
          {"description", description},
          {"base",
           {{"model", models.front()},
            {"cluster", set.cluster},
            {"world_size", set.world_size},
            {"memory", kProbeMemory.front()},
            {"split_max", 1},
            {"checkpoint", "off"},
            {"prefetch", 0},
            {"tier", "extended"},
            {"batch", batches.front()},
            {"pp", 1},
            {"tp", 1},
            {"micro_batches", 1}}},
          {"axes", {{"model", models}, {"batch", batches}, {"memory", memory}}},
          {"strategies", strategies},
          {"evaluators", {"analytic", "sim"}},
          {"output", set.output},
          {"validation",
           {{"warmup", set.quick ? 1 : 2},
            {"iterations", set.quick ? 5 : 9},
            {"tolerance", {{"time_median", 1.0}, {"time_max", 1.0}, {"memory_max", 1.0}}}}}};
}

}  // namespace

Experiment probe_experiment(const ProbeSet& set) {
  nlohmann::json strategies = kUniform;
  strategies.push_back({{"label", "exact"}, {"strategy", "exact"}, {"checkpoint", "auto"}});
  strategies.push_back(
      {{"label", "exact+split"}, {"strategy", "exact"}, {"checkpoint", "auto"}, {"split_max", 4}});
  return read_experiment(
      probe_doc(
          "calibration-probes",
          "osdp calibrate's probes of the step's level and the model's composition error "
          "(costmodel/composition.hpp): probe-3x320 at micro-batches 1, 2 and 4, four uniform strategies "
          "and the exact search without and with splitting under two memory caps, and probe-8x192's and "
          "probe-2x448's uniform strategies (probe_job keeps those units), run side by side per model "
          "and micro-batch and predicted by the simulator from the calibration just fitted.",
          set, kProbeModels, set.quick ? nlohmann::json::array({2}) : nlohmann::json::array({1, 2, 4}),
          kProbeMemory, strategies),
      "(osdp calibrate's probes)");
}

std::optional<Experiment> planned_probe_experiment(const ProbeSet& set) {
  if (set.models.empty() || set.batches.empty()) return std::nullopt;
  return read_experiment(
      probe_doc("calibration-probes-planned",
                "osdp calibrate's probes of the models to be planned (--model, at --probe-batch): their "
                "four uniform strategies, run side by side per model and micro-batch, for each model's own "
                "level (costmodel/composition.hpp).",
                set, set.models, set.batches, nlohmann::json::array({kProbeMemory.front()}), kUniform),
      "(osdp calibrate's probes of the planned models)");
}

MeasuredJob probe_job(const ProbeSet& set) {
  MeasuredJob job = measured_job(probe_experiment(set));
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
    items.push_back(std::move(it));
  }
  if (const auto planned = planned_probe_experiment(set)) {
    MeasuredJob more = measured_job(*planned);
    for (MeasuredItem& it : more.items) items.push_back(std::move(it));
    job.source = nlohmann::json{{"probes", job.source}, {"planned", more.source}};
  }
  for (MeasuredItem& it : items)
    it.group = nlohmann::json{{"model", it.unit->config.model}, {"batch", *it.unit->config.batch}}.dump();
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
