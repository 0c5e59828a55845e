#include "cli/mpi_args.hpp"

#include <csignal>
#include <cstring>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/mpi/launcher.hpp"
#ifdef OSDP_HAVE_MPI_BACKEND
#include "validate/backends.hpp"
#include "validate/mpi/mpi_backend.hpp"
#endif

namespace osdp::cli {

validate::GemmMath gemm_math(const std::string& name) {
  if (name == "fp32") return validate::GemmMath::kFp32;
  if (name == "bf16") return validate::GemmMath::kBf16;
  throw UsageError(fmt::format("--gemm {}: expected fp32 or bf16", name));
}

void check_backend(const std::string& name) {
#ifdef OSDP_HAVE_MPI_BACKEND
  const std::string why = validate::backend_unavailable_reason(name);
#else
  const std::string why = name == "mpi" || name == "nccl"
                              ? "this osdp was built without MPI: no backend is available"
                              : "expected mpi or nccl";
#endif
  if (!why.empty()) throw UsageError(fmt::format("--backend {}: {}", name, why));
}

int parse_np(const std::vector<std::string>& v) {
  std::string text;
  if (v.size() == 1)
    text = v[0].size() > 1 && v[0][0] == 'p' ? v[0].substr(1) : v[0];
  else if (v.size() == 2 && v[0] == "p")
    text = v[1];
  else if (!v.empty())
    throw UsageError("-np: expected one number of ranks, e.g. -np 2");
  if (text.empty()) return 0;
  std::size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || n < 1 || n > 4096)
    throw UsageError(fmt::format("-np: \"{}\" is not a number of ranks from 1 to 4096", text));
  return n;
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

int launch_or_run(const std::string& command, int np, const std::vector<std::string>& child_args,
                  const std::string& mpirun_args, const std::function<int()>& ranks) {
#ifdef OSDP_HAVE_MPI_BACKEND
  if (!validate::launched_by_mpirun()) {
    if (np == 0)
      throw UsageError(
          fmt::format("give the number of ranks with -np N (or start osdp {} under mpirun)", command));
    std::vector<validate::RankStatus> statuses;
    const int rc = validate::relaunch_under_mpirun(np, child_args, split_words(mpirun_args), &statuses);
    if (const int sig = validate::forwarded_signal(); sig != 0) {
      std::cerr << fmt::format(
          "osdp {}: interrupted ({}); {}\n", command, sig == SIGINT ? "SIGINT" : "SIGTERM",
          command == "validate" ? "the finished rows are kept: the same command with --resume continues"
                                : "nothing was written");
      return 128 + sig;
    }
    // A job that ended normally may carry the ranks' answer (a validation's verdict), which they
    // exited 0 for so that mpirun printed no abort banner over it.
    if (rc == 0) return validate::job_answer(statuses);
    // osdp's own codes pass through (a failing rank aborts the job with 4 and its message); anything
    // else means a rank ended without osdp's word (a signal, an exit from a library): say so.
    if (rc <= 6) return rc;
    const std::string how = rc > 128 ? fmt::format("a process of the job was ended by signal {} ({})",
                                                   rc - 128, ::strsignal(rc - 128))
                                     : fmt::format("a rank exited with status {} without osdp's message", rc);
    // The ranks' status files say which rank ended first and what it was doing.
    const std::string where = validate::describe_job_end(statuses);
    std::cerr << fmt::format("osdp {}: error: the job ended with mpirun's exit status {}: {}; {} (exit 4)\n",
                             command, rc, how,
                             where.empty() ? std::string("Open MPI's report above names the rank") : where);
    return 4;
  }
  const int rc = ranks();
  validate::job_status_finished();
  // Under osdp's launcher the answer goes through the rank's status file and the rank exits 0: a
  // non-zero exit would have mpirun end the job as aborted, with its banner, after osdp's summary.
  if (rc != 0 && validate::job_status_answer(rc)) return 0;
  return rc;
#else
  (void)command, (void)np, (void)child_args, (void)mpirun_args, (void)ranks;
  throw UsageError("this osdp was built without MPI: the mpi backend is not available");
#endif
}

}  // namespace osdp::cli
