// osdp calibrate's probes: whole steps of a few plans, timed by the calibration itself, from which the
// model's composition error between strategies is fitted (costmodel/composition.hpp). The plans are
// of probe-3x320, a model no validation set holds, each uniform in one strategy (fsdp, zero2, ddp,
// fsdp with every layer checkpointed) at micro-batches 1, 2 and 4, run side by side per micro-batch
// as osdp validate runs a configuration (experiments/measured.hpp) and predicted by the simulator from
// the calibration just fitted. Nothing of a validation's steps goes into it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/experiment.hpp"
#include "experiments/run.hpp"

namespace osdp::experiments {

inline constexpr const char* kProbeModel = "probe-3x320";

// The probes as an experiment on `world_size` ranks of `cluster` (its figures replaced by the
// calibration's where the calibration has them), results under `output`.
Experiment probe_experiment(const std::string& cluster, int world_size, const std::string& output);

// costmodel::composition_fit over the measured rows: each row's group, its simulated step and draws,
// its timed steps. Infeasible or unmeasured rows are left out.
nlohmann::json probe_fit(const std::vector<UnitResult>& rows);

}  // namespace osdp::experiments
