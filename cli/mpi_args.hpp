// Command-line pieces shared by the subcommands that start MPI ranks (calibrate, validate).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "validate/executor/backend.hpp"

namespace osdp::cli {

// --gemm fp32|bf16; throws UsageError for anything else.
validate::GemmMath gemm_math(const std::string& name);

// Throws UsageError when --backend NAME cannot run here (unknown, not compiled in, no GPU): before
// any rank starts.
void check_backend(const std::string& name);

// The rank count of -np N, -n N, --np N or -npN (CLI11 hands "-np N" over as {"p", "N"}); 0 when
// not given. Throws UsageError for anything else.
int parse_np(const std::vector<std::string>& v);

// Whitespace-separated words (the --mpirun-args string).
std::vector<std::string> split_words(const std::string& s);

// The shared start of `osdp calibrate` and `osdp validate`: outside mpirun, relaunch this program
// under mpirun with `np` ranks and `child_args` (np 0: a usage error naming `command`) and return
// its exit status; inside mpirun, run `ranks`. Without MPI compiled in: a usage error.
int launch_or_run(const std::string& command, int np, const std::vector<std::string>& child_args,
                  const std::string& mpirun_args, const std::function<int()>& ranks);

}  // namespace osdp::cli
