// Command-line pieces shared by the subcommands that start MPI ranks (calibrate, validate).
#pragma once

#include <string>
#include <vector>

namespace osdp::cli {

// The rank count of -np N, -n N, --np N or -npN (CLI11 hands "-np N" over as {"p", "N"}); 0 when
// not given. Throws UsageError for anything else.
int parse_np(const std::vector<std::string>& v);

// Whitespace-separated words (the --mpirun-args string).
std::vector<std::string> split_words(const std::string& s);

}  // namespace osdp::cli
