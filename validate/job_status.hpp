// Where each rank of a job last was, so that a job ending without osdp's own message (a rank killed
// by a signal, or exiting from inside a library) is reported by rank and operation rather than by
// mpirun's bare exit status.
//
// The launcher (relaunch_under_mpirun) makes a directory and passes it to the ranks as
// OSDP_JOB_STATUS_DIR. Each rank keeps one file there, rank.R, of fixed size, overwritten in place:
// a state byte, the context (which plan and step, set by the driver) and the operation (set by the
// communicator before and after every collective). The rank maps its file shared, so what it last
// wrote is in the file even after kill -9, at the cost of a memcpy. A rank stopped by SIGTERM (what mpirun
// sends the other ranks once one has died) marks its file so before it dies; the rank that ended first is
// then the one whose file is neither marked nor finished. The launcher reads the files when the job ends and
// removes the directory.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace osdp::validate {

// The environment variable that carries the directory to the ranks.
inline constexpr const char* kJobStatusEnv = "OSDP_JOB_STATUS_DIR";

// ---- the rank's side (every call is a no-op when OSDP_JOB_STATUS_DIR is unset) -------------------

// Opens (creates) this rank's file and installs the SIGTERM marker. Idempotent for one rank.
void job_status_open(int rank);
// What the rank is working on, e.g. "plan 2 of 4 (exact), timed step 3 of 5".
void job_status_context(std::string_view context);
// The operation it is in or has just finished, as "<verb><operation>": ("in ", "forward all-gather of
// layer 3") or ("after ", ...). Two parts, so that the communicator's hot path formats nothing.
void job_status_operation(std::string_view verb, std::string_view operation);
// The rank's work is done (a later exit is not an abnormal end).
void job_status_finished();
// The rank's answer, osdp's exit status for the job (a validation's verdict: over tolerance,
// inconclusive), passed to the launcher in the file. True when it was (the launcher's job): the
// rank then exits 0, so that mpirun ends the job normally and prints no abort banner for what is
// osdp's answer, not a failure. False outside the launcher (a job started by mpirun directly).
bool job_status_answer(int code);

// ---- the launcher's side ----------------------------------------------------------------------

enum class RankState { kMissing, kRunning, kStopped, kFinished };

struct RankStatus {
  int rank = 0;
  RankState state = RankState::kMissing;  // kMissing: no file (the rank never reached MPI)
  std::string context, operation;
  int answer = 0;  // job_status_answer's code (0: none)
};

// Makes a fresh directory for a job's status files, $TMPDIR/osdp-job-<this pid>-XXXXXX (else under
// /tmp), after removing those whose launcher no longer runs; throws osdp::Error.
std::string make_job_status_dir();
// The statuses of ranks 0..np-1 in `dir` (kMissing where a file is absent or unreadable).
std::vector<RankStatus> read_job_status(const std::string& dir, int np);
// Removes the directory and its files (errors ignored).
void remove_job_status_dir(const std::string& dir);
// The job's answer: the largest code the ranks gave job_status_answer (0: none).
int job_answer(const std::vector<RankStatus>& statuses);

// One sentence on how the job ended, from the statuses: the rank(s) that ended first (neither stopped
// by mpirun nor finished), with their operation and context, then the ranks mpirun stopped after
// them. Empty when the statuses say nothing useful (no file, or every rank finished).
std::string describe_job_end(const std::vector<RankStatus>& statuses);

}  // namespace osdp::validate
