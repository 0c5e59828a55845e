// osdp calibrate's probes (probes.hpp).
#include "experiments/probes.hpp"

#include "costmodel/composition.hpp"

namespace osdp::experiments {

Experiment probe_experiment(const std::string& cluster, int world_size, const std::string& output) {
  const nlohmann::json doc = {
      {"schema_version", 2},
      {"name", "calibration-probes"},
      {"description",
       "osdp calibrate's probes of the model's composition error (costmodel/composition.hpp): probe-3x320 "
       "at micro-batches 1, 2 and 4, each strategy uniform, run side by side per micro-batch and "
       "predicted by the simulator from the calibration just fitted."},
      {"base",
       {{"model", kProbeModel},
        {"cluster", cluster},
        {"world_size", world_size},
        {"memory", "4GiB"},
        {"split_max", 1},
        {"checkpoint", "off"},
        {"prefetch", 0},
        {"tier", "extended"},
        {"batch", 1},
        {"pp", 1},
        {"tp", 1},
        {"micro_batches", 1}}},
      {"axes", {{"batch", {1, 2, 4}}}},
      {"strategies",
       {{{"label", "fsdp"}, {"strategy", "fsdp"}},
        {{"label", "zero2"}, {"strategy", "zero2"}},
        {{"label", "ddp"}, {"strategy", "ddp"}},
        {{"label", "fsdp+ckpt"}, {"strategy", "fsdp"}, {"checkpoint", "on"}}}},
      {"evaluators", {"analytic", "sim"}},
      {"output", output},
      {"validation",
       {{"warmup", 2},
        {"iterations", 9},
        {"tolerance", {{"time_median", 1.0}, {"time_max", 1.0}, {"memory_max", 1.0}}}}}};
  return read_experiment(doc, "(osdp calibrate's probes)");
}

nlohmann::json probe_fit(const std::vector<UnitResult>& rows) {
  std::vector<costmodel::ProbeStep> probes;
  for (const UnitResult& r : rows) {
    const Evaluation* sim = r.evaluation(EvaluatorKind::kSim);
    if (!r.feasible || !r.measurement || !sim || !sim->feasible || r.measurement->steps_s.empty()) continue;
    probes.push_back({r.measurement->group, sim->time_s, sim->drawn_s, r.measurement->steps_s});
  }
  return costmodel::composition_fit(probes);
}

}  // namespace osdp::experiments
