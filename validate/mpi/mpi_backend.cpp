// The mpi backend's communicator: nonblocking MPI collectives polled with MPI_Test (and
// sched_yield) until done or until the timeout, so a dead or hung peer becomes a BackendFailure
// naming the rank and the operation instead of a job that hangs.
#include "validate/mpi/mpi_backend.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "costmodel/units.hpp"
#include "validate/job_status.hpp"
#include "validate/mpi/mpi_check.hpp"

namespace osdp::validate {

namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "an unknown thread level";
  }
}

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

[[noreturn]] void bad_fault_spec(std::string_view text, const std::string& problem) {
  throw Error(fmt::format(
      "OSDP_INJECT_FAULT=\"{}\": {}; expected rank=R,op=SUBSTRING,kind=hang|exit|delay[,seconds=S]", text,
      problem));
}

}  // namespace

// ---- session, abort, fault spec --------------------------------------------------------------

MpiSession::MpiSession() : MpiSession(nullptr, nullptr) {}

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized != 0) {
    MPI_Query_thread(&provided_);
  } else {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided_) != MPI_SUCCESS) {
      throw Error("MPI_Init_thread failed");
    }
    initialised_here_ = true;
  }
  if (provided_ < MPI_THREAD_SERIALIZED) {
    if (initialised_here_) MPI_Finalize();
    throw Error(fmt::format(
        "the MPI library provides {} but the mpi backend needs at least MPI_THREAD_SERIALIZED (its "
        "collectives run on the comm stream's thread)",
        thread_level_name(provided_)));
  }
}

MpiSession::~MpiSession() {
  if (initialised_here_ && mpi_running()) MPI_Finalize();
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

void abort_job(const std::string& message) {
  std::fprintf(stderr, "osdp: error: %s\n", message.c_str());
  std::fflush(stderr);
  if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, 4);
  std::_Exit(4);
}

FaultSpec parse_fault_spec(std::string_view text) {
  FaultSpec spec;
  bool have_rank = false, have_op = false, have_kind = false, have_seconds = false;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) bad_fault_spec(text, fmt::format("\"{}\" is not key=value", item));
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    const char* const end = value.data() + value.size();
    auto seen = [&](bool& flag) {
      if (flag) bad_fault_spec(text, fmt::format("{} given twice", key));
      flag = true;
    };
    if (key == "rank") {
      seen(have_rank);
      const auto r = std::from_chars(value.data(), end, spec.rank);
      if (r.ec != std::errc{} || r.ptr != end || spec.rank < 0) {
        bad_fault_spec(text, fmt::format("rank \"{}\" is not a rank number", value));
      }
    } else if (key == "op") {
      seen(have_op);
      if (value.empty()) bad_fault_spec(text, "op is empty");
      spec.op = std::string(value);
    } else if (key == "kind") {
      seen(have_kind);
      if (value == "hang") {
        spec.kind = FaultKind::kHang;
      } else if (value == "exit") {
        spec.kind = FaultKind::kExit;
      } else if (value == "delay") {
        spec.kind = FaultKind::kDelay;
      } else if (value == "kill") {
        spec.kind = FaultKind::kKill;
      } else {
        bad_fault_spec(text, fmt::format("kind \"{}\" is not hang, exit, kill or delay", value));
      }
    } else if (key == "seconds") {
      seen(have_seconds);
      const auto r = std::from_chars(value.data(), end, spec.seconds);
      if (r.ec != std::errc{} || r.ptr != end || !(spec.seconds >= 0.0)) {
        bad_fault_spec(text, fmt::format("seconds \"{}\" is not a non-negative number", value));
      }
    } else {
      bad_fault_spec(text, fmt::format("unknown key \"{}\"", key));
    }
  }
  if (!have_rank || !have_op || !have_kind) bad_fault_spec(text, "rank, op and kind are required");
  if (have_seconds && spec.kind != FaultKind::kDelay)
    bad_fault_spec(text, "seconds applies to kind=delay only");
  return spec;
}

// ---- communicator ----------------------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MpiCommunicatorOptions options) : options_(std::move(options)) {
  if (!mpi_running()) throw Error("MpiCommunicator: MPI is not running (create an MpiSession first)");
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  job_rank_ = rank_;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup", "creating the communicator", job_rank_);
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
            "creating the communicator", job_rank_);
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", "creating the communicator", job_rank_);
  job_status_open(rank_);
  if (!options_.fault) {
    const char* env = std::getenv("OSDP_INJECT_FAULT");
    if (env != nullptr && *env != '\0') options_.fault = parse_fault_spec(env);
  }
}

MpiCommunicator::MpiCommunicator(const MpiCommunicator& parent, MPI_Comm comm)
    : options_(parent.options_), comm_(comm), job_rank_(parent.job_rank_), mutex_(parent.mutex_) {
  const std::string what = "making a ring of the communicator";
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", what, job_rank_);
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", what, job_rank_);
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", what, job_rank_);
}

Communicator& MpiCommunicator::ring(costmodel::RingLevel level, int per_node) {
  if (level == costmodel::RingLevel::kWorld) return *this;
  if (per_node < 1 || size_ % per_node != 0)
    throw UsageError(fmt::format("rank {}: nodes of {} ranks do not divide the job's {} ranks", job_rank_,
                                 per_node, size_));
  auto& slot = rings_[{static_cast<int>(level), per_node}];
  if (slot) return *slot;
  const std::string what =
      fmt::format("making the {} rings of nodes of {} ranks", costmodel::to_string(level), per_node);
  const int node = rank_ / per_node, local = rank_ % per_node;
  const bool intra = level == costmodel::RingLevel::kIntra;
  MPI_Comm comm = MPI_COMM_NULL;
  {
    std::lock_guard lock(*mutex_);
    begin(what);
    // Blocking, but every rank is here: the ring is asked for by all of them, in the same order.
    check_mpi(MPI_Comm_split(comm_, intra ? node : local, intra ? local : node, &comm), "MPI_Comm_split",
              what, job_rank_);
  }
  slot.reset(new MpiCommunicator(*this, comm));
  return *slot;
}

Communicator& MpiCommunicator::split(int color, int key, const std::string& what) {
  if (color < 0)
    throw UsageError(fmt::format("rank {}: {}: split color {} is negative", job_rank_, what, color));
  MPI_Comm comm = MPI_COMM_NULL;
  {
    std::lock_guard lock(*mutex_);
    begin(what);
    // Blocking, but every rank is here (the split is collective, asked for in the same order).
    check_mpi(MPI_Comm_split(comm_, color, key, &comm), "MPI_Comm_split", what, job_rank_);
  }
  splits_.emplace_back(new MpiCommunicator(*this, comm));
  return *splits_.back();
}

void MpiCommunicator::send(Stream& /*s*/, const float* buf, std::size_t elems, int peer, int tag,
                           const std::string& what) {
  std::lock_guard lock(*mutex_);
  begin(what);
  const int n = count(elems, what);
  auto pending = std::make_unique<PendingSend>();
  pending->data.assign(buf, buf + elems);
  pending->what = what;
  check_mpi(MPI_Isend(pending->data.data(), n, MPI_FLOAT, peer, tag, comm_, &pending->request), "MPI_Isend",
            what, job_rank_);
  sends_.push_back(std::move(pending));
  // Forget the sends already delivered.
  std::erase_if(sends_, [](const std::unique_ptr<PendingSend>& p) {
    int done = 0;
    MPI_Test(&p->request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

void MpiCommunicator::recv(Stream& /*s*/, float* buf, std::size_t elems, int peer, int tag,
                           const std::string& what) {
  std::unique_lock lock(*mutex_);
  begin(what);
  const int n = count(elems, what);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Irecv(buf, n, MPI_FLOAT, peer, tag, comm_, &request), "MPI_Irecv", what, job_rank_);
  complete(request, what, elems * sizeof(float), &lock);
}

void MpiCommunicator::flush_sends(Stream& /*s*/, const std::string& what) {
  std::lock_guard lock(*mutex_);
  begin(what);
  for (auto& p : sends_)
    complete(p->request, fmt::format("{} ({})", p->what, what), p->data.size() * sizeof(float));
  sends_.clear();
}

MpiCommunicator::~MpiCommunicator() {
  // A send still pending (the step failed before flush_sends) keeps its buffer: leave it allocated.
  if (!sends_.empty()) {
    for (auto& p : sends_) (void)p.release();
    sends_.clear();
    timed_out_ = timed_out_.empty() ? "a send" : timed_out_;
  }
  // After a timeout a request is still pending on comm_ and MPI would progress it on a freed
  // communicator: leave it allocated (the job is about to be aborted anyway).
  if (comm_ != MPI_COMM_NULL && timed_out_.empty() && mpi_running()) MPI_Comm_free(&comm_);
}

std::string MpiCommunicator::version() const {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string line(text, static_cast<std::size_t>(std::max(len, 0)));
  line = line.substr(0, line.find('\n'));
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\0')) line.pop_back();
  return line;
}

int MpiCommunicator::count(std::size_t elems, const std::string& what) const {
  if (elems > static_cast<std::size_t>(INT_MAX)) {
    throw BackendFailure(fmt::format(
        "rank {}: {}: {} elements per rank exceed MPI's int count limit ({}); split the operation", job_rank_,
        what, elems, INT_MAX));
  }
  return static_cast<int>(elems);
}

void MpiCommunicator::begin(const std::string& what) const {
  job_status_operation("in ", what);
  if (!timed_out_.empty()) {
    throw BackendFailure(fmt::format("rank {}: {}: the communicator is unusable since {} timed out",
                                     job_rank_, what, timed_out_));
  }
  if (!injected_hang(options_.fault, job_rank_, what)) return;
  std::fprintf(stderr, "rank %d: injected fault: hanging in %s\n", job_rank_, what.c_str());
  std::fflush(stderr);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

bool injected_hang(const std::optional<FaultSpec>& fault, int rank, const std::string& what) {
  if (!fault || fault->rank != rank || what.find(fault->op) == std::string::npos) return false;
  switch (fault->kind) {
    case FaultKind::kExit:
      std::fprintf(stderr, "rank %d: injected fault: exiting before %s\n", rank, what.c_str());
      std::fflush(stderr);
      std::_Exit(17);
    case FaultKind::kKill:
      // Says nothing of the operation: where the rank was must come from osdp's report of the job.
      std::fprintf(stderr, "rank %d: injected fault: SIGKILL\n", rank);
      std::fflush(stderr);
      raise(SIGKILL);
      return false;
    case FaultKind::kHang:
      return true;
    case FaultKind::kDelay:
      std::fprintf(stderr, "rank %d: injected fault: delaying %s by %g s\n", rank, what.c_str(),
                   fault->seconds);
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::duration<double>(fault->seconds));
      return false;
  }
  return false;
}

bool mpi_wait(MPI_Request& request, double timeout_s, std::string_view what, int rank,
              std::unique_lock<std::mutex>* lock) {
  using WaitClock = std::chrono::steady_clock;
  const auto deadline = WaitClock::now() + std::chrono::duration_cast<WaitClock::duration>(
                                               std::chrono::duration<double>(timeout_s));
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", what, rank);
    if (done != 0) return true;
    if (WaitClock::now() >= deadline) return false;
    if (lock != nullptr) lock->unlock();  // the other stream's operations (other communicators) go on
    sched_yield();
    if (lock != nullptr) lock->lock();
  }
}

void MpiCommunicator::complete(MPI_Request& request, const std::string& what, std::size_t bytes,
                               std::unique_lock<std::mutex>* lock) {
  if (mpi_wait(request, options_.timeout_s, what, job_rank_, lock)) {
    job_status_operation("after ", what);
    return;
  }
  timed_out_ = what;
  throw BackendFailure(
      fmt::format("rank {}: {} ({}) did not complete within {:g} s: a peer rank died or hung", job_rank_,
                  what, costmodel::format_bytes(static_cast<double>(bytes)), options_.timeout_s));
}

void MpiCommunicator::all_to_all(Stream& /*s*/, const float* send,
                                 const std::vector<std::size_t>& send_counts, float* recv,
                                 const std::vector<std::size_t>& recv_counts, const std::string& what) {
  check_all_to_all_counts(*this, send_counts, recv_counts, what);
  std::unique_lock lock(*mutex_);
  begin(what);
  // MPI counts and displacements are ints: every prefix must fit.
  std::vector<int> sc, sd, rc, rd;
  std::size_t sent = 0, received = 0;
  for (std::size_t p = 0; p < send_counts.size(); ++p) {
    sd.push_back(count(sent, what));
    rd.push_back(count(received, what));
    sc.push_back(count(send_counts[p], what));
    rc.push_back(count(recv_counts[p], what));
    sent += send_counts[p];
    received += recv_counts[p];
  }
  (void)count(sent, what);
  (void)count(received, what);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT,
                           comm_, &request),
            "MPI_Ialltoallv", what, job_rank_);
  complete(request, what, std::max(sent, received) * sizeof(float), &lock);
}

void MpiCommunicator::barrier(const std::string& what) {
  std::unique_lock lock(*mutex_);
  begin(what);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier", what, job_rank_);
  complete(request, what, 0, &lock);
}

double MpiCommunicator::reduce_double(double x, MPI_Op op, const std::string& what) {
  std::unique_lock lock(*mutex_);
  begin(what);
  double result = 0.0;
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(&x, &result, 1, MPI_DOUBLE, op, comm_, &request), "MPI_Iallreduce", what,
            job_rank_);
  complete(request, what, sizeof(double), &lock);
  return result;
}

double MpiCommunicator::max_over_ranks(double x) {
  return reduce_double(x, MPI_MAX, "max over ranks");
}

double MpiCommunicator::sum_over_ranks(double x) {
  return reduce_double(x, MPI_SUM, "sum over ranks");
}

std::vector<double> MpiCommunicator::all_values(double x) {
  const std::string what = "all values over ranks";
  std::unique_lock lock(*mutex_);
  begin(what);
  std::vector<double> values(static_cast<std::size_t>(size_));
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(&x, 1, MPI_DOUBLE, values.data(), 1, MPI_DOUBLE, comm_, &request),
            "MPI_Iallgather", what, job_rank_);
  complete(request, what, values.size() * sizeof(double), &lock);
  return values;
}

}  // namespace osdp::validate
