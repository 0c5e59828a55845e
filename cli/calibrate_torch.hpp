// osdp calibrate --backend torch: the torch job's result (python/osdp/torch/measure.py's "calibrate"
// job) read back into the points and provenance the other backends' calibrations have.
#pragma once

#include <array>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/calibration_fit.hpp"
#include "validate/calibrate/calibrate.hpp"
#include "validate/torch/torch_job.hpp"

namespace osdp::cli {

// The job's measured points, one per point of its sweeps, on `world` ranks. Throws
// nlohmann::json::exception where the result lacks a field or has one of another type.
costmodel::CalibrationRun torch_measurements(const nlohmann::json& result, int world);

// What a torch calibration records of where it ran: the machine and its load at the start, torch's
// process group backend, version and device, the GEMM operands' rotation against the last-level cache,
// the interpreter, the options and the wall time; `measurements_file` names the points' CSV.
void set_torch_provenance(costmodel::CalibrationRun& run, const nlohmann::json& result,
                          const validate::TorchJobOptions& torch, const validate::CalibrateOptions& options,
                          const std::optional<std::array<double, 3>>& load_at_start,
                          const std::string& measurements_file);

}  // namespace osdp::cli
