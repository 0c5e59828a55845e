// Where and when something ran, and which osdp ran it, recorded with its results.
#pragma once

#include <array>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace osdp::costmodel {

// This osdp's version and commit, as every plan and result records it: "0.1.0+1dce72d33146".
std::string tool_version();
std::string utc_now();  // "2026-11-22T09:42:04Z"
// The run queue's load over 1, 5 and 15 minutes (getloadavg); nullopt where the system does not say.
std::optional<std::array<double, 3>> load_average();
// hostname, nproc, os, load_average (at the call: the noise a measurement started in), and how the
// sweep was divided (MPI ranks, threads per rank).
nlohmann::json machine(int ranks, int jobs);

}  // namespace osdp::costmodel
