// osdp calibrate's probes: whole steps of a few plans, timed by the calibration itself, from which the
// model's composition error between strategies is fitted (costmodel/composition.hpp). The plans are
// of probe-3x320, a model no validation set holds, at micro-batches 1, 2 and 4: four strategies uniform
// (fsdp, zero2, ddp, fsdp with every layer checkpointed) and the exact search without and with
// splitting (checkpointing searched) under memory caps of 70 and 95 MiB, where all-DP does not fit at
// every micro-batch and the search mixes, checkpoints and splits (what the uniform strategies never
// run), all of a micro-batch run side by side as osdp validate runs a configuration
// (experiments/measured.hpp) and predicted by the simulator from the calibration just fitted. Nothing
// of a validation's steps goes into it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/experiment.hpp"
#include "experiments/measured.hpp"
#include "experiments/run.hpp"

namespace osdp::experiments {

// The probes' models: the first runs every strategy (uniform, and searched under kProbeMemory's caps,
// which are its own); the others, a deep and narrow one and a wide and shallow one, the uniform
// strategies, so that the step's level is seen across models' shapes as well as micro-batches.
inline constexpr const char* kProbeModel = "probe-3x320";
inline const std::vector<std::string> kProbeModels{kProbeModel, "probe-8x192", "probe-2x448"};
// The uniform strategies' memory (no limit to speak of), then the searches' caps.
inline const std::vector<std::string> kProbeMemory{"4GiB", "70MiB", "95MiB"};

// What the probes run: on `world_size` ranks of `cluster` (its figures replaced by the calibration's
// where the calibration has them), results under `output`; `quick` (osdp calibrate --quick, for
// tests): micro-batch 2 only, 1 warm-up step and 5 timed. `models` at `batches` (osdp calibrate's
// --model and --probe-batch): the models to be planned, their uniform strategies at micro-batches
// their plans will not use, for each one's own level (costmodel/composition.hpp); none without both.
struct ProbeSet {
  std::string cluster;
  int world_size = 0;
  std::string output;
  bool quick = false;
  std::vector<std::string> models;
  std::vector<int> batches;
};

// The experiment the probes come from: every strategy at every probe model, micro-batch and memory.
Experiment probe_experiment(const ProbeSet& set);
// The planned models' experiment (their uniform strategies at set.batches), if set names any.
std::optional<Experiment> planned_probe_experiment(const ProbeSet& set);
// The probes: the uniform strategies without a cap, the first model's searches under the caps
// (labelled "exact@70MiB", ...), then the planned models' uniform strategies; grouped by model and
// micro-batch (a group's plans run side by side).
MeasuredJob probe_job(const ProbeSet& set);

// costmodel::composition_fit over measured rows (the probes', or a validation's own: osdp validate
// reports it beside the calibration's): each row's group, its simulated step and draws, its timed
// steps. Infeasible or unmeasured rows are left out, and a plan a group already has (a search that
// found a uniform plan; rows without a plan summary are all kept): the same plan is one strategy.
// "row_indices" names the rows used.
nlohmann::json composition_fit(const std::vector<UnitResult>& rows);

}  // namespace osdp::experiments
