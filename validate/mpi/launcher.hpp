// Starting the job: `osdp validate --np N` run outside mpirun relaunches its own executable under
// mpirun with N ranks and waits for it (the ranks find themselves launched_by_mpirun()).
#pragma once

#include <string>
#include <vector>

#include "validate/job_status.hpp"

namespace osdp::validate {

// The mpirun to start: $OSDP_MPIRUN when set, else the MPIEXEC_EXECUTABLE that CMake found, else
// "mpirun" (looked up on PATH).
std::string mpirun_path();

// This process's executable, resolved from /proc/self/exe (throws osdp::Error if it cannot be).
std::string self_executable();

// Runs `<mpirun> -np <np> <mpirun_args...> <self_executable()> <args...>` as a child with this
// process's stdio and environment, waits for it, and returns its exit status (128 + the signal when a
// signal ended it). SIGINT and SIGTERM sent to this process while it waits are forwarded to mpirun
// (which passes them to the ranks); those typed at the terminal are not, since the terminal already
// delivered them to mpirun, which shares this process's group. Throws osdp::Error naming the path
// when mpirun cannot be started, UsageError when np < 1. The ranks get OSDP_JOB_STATUS_DIR (through
// mpirun's -x) naming a fresh directory for their status files; when `statuses` is given it receives
// what they last said (job_status.hpp), and the directory is removed either way.
int relaunch_under_mpirun(int np, const std::vector<std::string>& args,
                          const std::vector<std::string>& mpirun_args = {},
                          std::vector<RankStatus>* statuses = nullptr);

// Runs `words` (the program, looked up on PATH when it has no '/', then its arguments) as a child with
// this process's stdio and environment, forwarding SIGINT and SIGTERM to it and taking it down when this
// process dies, as relaunch_under_mpirun does, and returns its exit status (128 + the signal when a
// signal ended it). Throws osdp::Error naming `what` and the program (with `hint` appended) when it
// cannot be started.
int run_child(std::vector<std::string> words, const std::string& what, const std::string& hint = "");

// The last SIGINT or SIGTERM relaunch_under_mpirun forwarded to mpirun (0: none): the job then ended
// because it was asked to, whatever mpirun's status says.
int forwarded_signal();

}  // namespace osdp::validate
