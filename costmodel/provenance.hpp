// Where and when a sweep ran, recorded with its results.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace osdp::costmodel {

std::string utc_now();  // "2026-11-22T09:42:04Z"
// hostname, nproc, os, and how the sweep was divided (MPI ranks, threads per rank).
nlohmann::json machine(int ranks, int jobs);

}  // namespace osdp::costmodel
