// osdp calibrate's console summary of a fitted run: each collective's segments, the compute fits,
// overlap and the REPLICATE copies, and a warning for fits too noisy to trust.
#pragma once

#include <string>

#include "costmodel/calibration_fit.hpp"

namespace osdp::cli {

// Where a calibration file's raw points go: <file without .json>.measurements.csv.
std::string csv_path(const std::string& json_path);
// The summary of `run`, written to `path`.
void print_summary(const costmodel::CalibrationRun& run, const std::string& path);

}  // namespace osdp::cli
