// The nccl backend's communicator: nonblocking NCCL communicators (created from MPI-broadcast unique
// ids), collectives launched on CUDA streams and tracked by an event each, and the watchdog the
// CudaDevice polls while the host waits, so that a dead or hung peer ends as a BackendFailure naming
// the rank and the operation, after every NCCL communicator was aborted. The communicators of some
// ranks (node rings, splits) and point to point are in nccl_views.cpp.
#include "validate/cuda/nccl_backend.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "validate/cuda/cuda_errors.hpp"
#include "validate/cuda/nccl_internal.hpp"
#include "validate/mpi/mpi_check.hpp"

namespace osdp::validate {

namespace {

using Clock = std::chrono::steady_clock;

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

// A sub-communicator of MPI_COMM_WORLD, freed on scope exit unless a request is still pending on it.
struct GroupComm {
  MPI_Comm comm = MPI_COMM_NULL;
  bool request_pending = false;
  GroupComm() = default;
  GroupComm(const GroupComm&) = delete;
  GroupComm& operator=(const GroupComm&) = delete;
  ~GroupComm() {
    if (comm != MPI_COMM_NULL && !request_pending && mpi_running()) MPI_Comm_free(&comm);
  }
};

}  // namespace

std::string last_nccl_error() {
  const char* text = ncclGetLastError(nullptr);
  std::string s = text != nullptr ? text : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// ---- local rank ------------------------------------------------------------------------------

int local_rank_of_world() {
  if (!mpi_running()) throw Error("local_rank_of_world: MPI is not running (create an MpiSession first)");
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  GroupComm node;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node.comm),
            "MPI_Comm_split_type", "finding the ranks of this node", world_rank);
  int local = 0;
  check_mpi(MPI_Comm_rank(node.comm, &local), "MPI_Comm_rank", "finding the ranks of this node", world_rank);
  return local;
}

// ---- the communicator ------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(int cuda_device, NcclOptions options)
    : options_(std::move(options)),
      host_(MpiCommunicatorOptions{options_.timeout_s, options_.fault}),
      cuda_device_(cuda_device) {
  options_.fault = host_.fault();  // the given fault, or the one OSDP_INJECT_FAULT set (read there)
  rank_ = host_.rank();
  size_ = host_.size();
  int current = -1;
  check_cuda(cudaGetDevice(&current), "cudaGetDevice", "creating the NCCL communicators", rank_);
  if (current != cuda_device_) {
    throw UsageError(fmt::format(
        "rank {}: creating the NCCL communicators for CUDA device {}, but device {} is current (call "
        "cudaSetDevice({}) first)",
        rank_, cuda_device_, current, cuda_device_));
  }
  // Every rank is there (within the timeout) before the blocking MPI communicator splits.
  host_.barrier("creating the NCCL communicators");
  try {
    create_groups();
  } catch (...) {
    std::lock_guard lock(mutex_);
    abort_locked("creating the NCCL communicators failed");
    release_events();
    throw;
  }
}

void NcclCommunicator::create_groups() {
  const std::string what = "creating the NCCL communicators";
  GroupComm world, node, across;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &world.comm), "MPI_Comm_dup", what, rank_);
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node.comm),
            "MPI_Comm_split_type", what, rank_);
  check_mpi(MPI_Comm_rank(node.comm, &local_rank_), "MPI_Comm_rank", what, rank_);
  check_mpi(MPI_Comm_size(node.comm, &local_size_), "MPI_Comm_size", what, rank_);
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, local_rank_, rank_, &across.comm), "MPI_Comm_split", what, rank_);
  for (GroupComm* g : {&world, &node, &across}) {
    check_mpi(MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", what, rank_);
  }
  nodes_ = static_cast<int>(host_.sum_over_ranks(local_rank_ == 0 ? 1.0 : 0.0));
  // The same order on every rank: each creation is collective over its group.
  comms_[0] = create_comm(world.comm, kGroupNames[0], world.request_pending);
  comms_[1] = create_comm(node.comm, kGroupNames[1], node.request_pending);
  comms_[2] = create_comm(across.comm, kGroupNames[2], across.request_pending);
}

ncclComm_t NcclCommunicator::create_comm(MPI_Comm group_comm, const char* name, bool& request_pending) {
  const std::string what = fmt::format("creating the NCCL communicator ({})", name);
  int group_rank = 0, group_size = 1;
  check_mpi(MPI_Comm_rank(group_comm, &group_rank), "MPI_Comm_rank", what, rank_);
  check_mpi(MPI_Comm_size(group_comm, &group_size), "MPI_Comm_size", what, rank_);

  // The unique id's bytes and a last byte saying whether rank 0 could make it. On the heap, and left
  // to MPI when the broadcast times out: the pending request may still write into it.
  auto message = std::make_unique<std::array<char, sizeof(ncclUniqueId) + 1>>();
  std::string id_failure;
  if (group_rank == 0) {
    ncclUniqueId id{};
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r == ncclSuccess) {
      std::memcpy(message->data(), &id, sizeof id);
      message->back() = 1;
    } else {
      id_failure = nccl_failure_message(r, "ncclGetUniqueId", what, rank_, last_nccl_error());
    }
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibcast(message->data(), static_cast<int>(message->size()), MPI_BYTE, 0, group_comm, &request),
            "MPI_Ibcast", what, rank_);
  if (!mpi_wait(request, options_.timeout_s, what, rank_)) {
    request_pending = true;
    (void)message.release();
    throw BackendFailure(fmt::format(
        "rank {}: {}: the group's rank 0 sent no unique id within {:g} s: a peer rank died or hung", rank_,
        what, options_.timeout_s));
  }
  if (!id_failure.empty()) throw BackendFailure(id_failure);
  if (message->back() != 1)
    throw BackendFailure(
        fmt::format("rank {}: {}: the group's rank 0 could not make an NCCL unique id", rank_, what));
  ncclUniqueId id{};
  std::memcpy(&id, message->data(), sizeof id);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, group_size, id, group_rank, &config);
  if ((r == ncclSuccess || r == ncclInProgress) && comm != nullptr) r = wait_ready(comm, deadline());
  if (r == ncclSuccess) return comm;
  const std::string last = last_nccl_error();
  if (comm != nullptr) ncclCommAbort(comm);
  if (r == ncclInProgress)
    throw BackendFailure(
        fmt::format("rank {}: {} did not finish within {:g} s", rank_, what, options_.timeout_s));
  check_nccl(r, "ncclCommInitRankConfig", what, rank_, last);
  throw BackendFailure(fmt::format("rank {}: {}: no communicator", rank_, what));  // r == success, comm null
}

NcclCommunicator::~NcclCommunicator() {
  try {
    std::lock_guard lock(mutex_);
    if (aborted_.empty()) {
      // ncclCommFinalize every communicator, wait until each is quiescent, then ncclCommDestroy (which no
      // longer blocks). Any failure, or the timeout, aborts them all instead.
      std::string problem;
      const auto until = deadline();
      // The splits and point-to-point pairs before the groups they came from.
      for (std::size_t g = comms_.size(); g-- > 0 && problem.empty();) {
        if (comms_[g] == nullptr) continue;
        const std::string what = fmt::format("finalizing the NCCL communicator ({})", comm_names_[g]);
        ncclResult_t r = ncclCommFinalize(comms_[g]);
        if (r == ncclSuccess || r == ncclInProgress) r = wait_ready(comms_[g], until);
        if (r == ncclInProgress) {
          problem = fmt::format("rank {}: {} did not finish within {:g} s", rank_, what, options_.timeout_s);
        } else if (r != ncclSuccess) {
          problem = nccl_failure_message(r, "ncclCommFinalize", what, rank_, last_nccl_error());
        }
      }
      if (problem.empty()) {
        for (std::size_t g = comms_.size(); g-- > 0;) {
          if (comms_[g] == nullptr) continue;
          const ncclResult_t r = ncclCommDestroy(comms_[g]);
          comms_[g] = nullptr;
          if (r != ncclSuccess && r != ncclInProgress) {  // in progress: freed in the background
            const std::string what = fmt::format("destroying the NCCL communicator ({})", comm_names_[g]);
            std::fprintf(stderr, "%s\n",
                         nccl_failure_message(r, "ncclCommDestroy", what, rank_, last_nccl_error()).c_str());
          }
        }
      } else {
        std::fprintf(stderr, "%s; aborting the NCCL communicators\n", problem.c_str());
        abort_locked(problem);
      }
    }
    release_events();
    // Their work has ended (finalized) or been aborted; pending frees complete on their own.
    for (auto& [c, p] : point_to_point_) {
      for (cudaStream_t st : {p.up_stream, p.down_stream})
        if (st != nullptr) (void)cudaStreamDestroy(st);
    }
    point_to_point_.clear();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: destroying the NCCL communicators: %s\n", rank_, e.what());
  } catch (...) {
    std::fprintf(stderr, "rank %d: destroying the NCCL communicators failed\n", rank_);
  }
}

std::string NcclCommunicator::version() const {
  int runtime = 0;
  const std::string nccl = ncclGetVersion(&runtime) == ncclSuccess ? format_nccl_version(runtime) : "unknown";
  const std::string mpi = host_.version().substr(0, host_.version().find(','));  // "Open MPI v4.1.4"
  return fmt::format("NCCL {} (built against {}), {} on the host", nccl,
                     format_nccl_version(NCCL_VERSION_CODE), mpi);
}

ncclComm_t NcclCommunicator::group(CommGroup g) const {
  std::lock_guard lock(mutex_);
  return comms_[static_cast<std::size_t>(g)];
}

std::size_t NcclCommunicator::communicators() const {
  std::lock_guard lock(mutex_);
  return comms_.size();
}

Clock::time_point NcclCommunicator::deadline() const {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
}

// Short waits yield: recent NCCLs return ncclInProgress from every collective of a nonblocking comm.
ncclResult_t NcclCommunicator::wait_ready(ncclComm_t comm, Clock::time_point until) {
  const auto start = Clock::now();
  for (;;) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= until) return ncclInProgress;
    poll_pause(seconds_since(start));
  }
}

// ---- collectives -----------------------------------------------------------------------------

bool NcclCommunicator::begin(const std::string& what) {
  if (!injected_hang(options_.fault, rank_, what)) return true;
  std::fprintf(stderr, "rank %d: injected fault: skipping %s (its peers hang in NCCL)\n", rank_,
               what.c_str());
  return false;
}

CudaStream& NcclCommunicator::cuda_stream(Stream& s, const std::string& what) const {
  auto* cs = dynamic_cast<CudaStream*>(&s);
  if (cs == nullptr)
    throw UsageError(
        fmt::format("rank {}: {}: the nccl communicator needs a stream of a CudaDevice", rank_, what));
  return *cs;
}

void NcclCommunicator::all_gather_on(std::size_t c, Stream& s, const float* shard, float* full,
                                     std::size_t shard_elems, const std::string& what) {
  if (shard_elems == 0) return;
  launch(c, cuda_stream(s, what).handle(), what, "ncclAllGather", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(shard, full, shard_elems, ncclFloat32, comm, stream);
  });
}

void NcclCommunicator::reduce_scatter_on(std::size_t c, Stream& s, const float* full, float* shard,
                                         std::size_t shard_elems, const std::string& what) {
  if (shard_elems == 0) return;
  launch(c, cuda_stream(s, what).handle(), what, "ncclReduceScatter",
         [&](ncclComm_t comm, cudaStream_t stream) {
           return ncclReduceScatter(full, shard, shard_elems, ncclFloat32, ncclSum, comm, stream);
         });
}

void NcclCommunicator::all_reduce_on(std::size_t c, Stream& s, float* buf, std::size_t elems,
                                     const std::string& what) {
  if (elems == 0) return;
  launch(c, cuda_stream(s, what).handle(), what, "ncclAllReduce", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(buf, buf, elems, ncclFloat32, ncclSum, comm, stream);
  });
}

void NcclCommunicator::all_to_all_on(std::size_t c, Stream& s, const float* send,
                                     const std::vector<std::size_t>& send_counts, float* recv,
                                     const std::vector<std::size_t>& recv_counts, const std::string& what) {
  const int n = static_cast<int>(send_counts.size());
  launch(c, cuda_stream(s, what).handle(), what, "ncclSend/ncclRecv",
         [&](ncclComm_t comm, cudaStream_t stream) {
           ncclResult_t r = ncclGroupStart();
           if (r != ncclSuccess) return r;
           std::size_t sent = 0, received = 0;
           for (int p = 0; p < n && r == ncclSuccess; ++p) {
             const auto i = static_cast<std::size_t>(p);
             if (send_counts[i] > 0) r = ncclSend(send + sent, send_counts[i], ncclFloat32, p, comm, stream);
             if (r == ncclSuccess && recv_counts[i] > 0)
               r = ncclRecv(recv + received, recv_counts[i], ncclFloat32, p, comm, stream);
             sent += send_counts[i];
             received += recv_counts[i];
           }
           const ncclResult_t ended = ncclGroupEnd();
           return r != ncclSuccess ? r : ended;
         });
}

void NcclCommunicator::all_to_all(Stream& s, const float* send, const std::vector<std::size_t>& send_counts,
                                  float* recv, const std::vector<std::size_t>& recv_counts,
                                  const std::string& what) {
  check_all_to_all_counts(*this, send_counts, recv_counts, what);
  all_to_all_on(0, s, send, send_counts, recv, recv_counts, what);
}

void NcclCommunicator::all_gather(Stream& s, const float* shard, float* full, std::size_t shard_elems,
                                  const std::string& what) {
  all_gather_on(0, s, shard, full, shard_elems, what);
}

void NcclCommunicator::reduce_scatter(Stream& s, const float* full, float* shard, std::size_t shard_elems,
                                      const std::string& what) {
  reduce_scatter_on(0, s, full, shard, shard_elems, what);
}

void NcclCommunicator::all_reduce(Stream& s, float* buf, std::size_t elems, const std::string& what) {
  all_reduce_on(0, s, buf, elems, what);
}

// ---- watchdog, failures ----------------------------------------------------------------------

void NcclCommunicator::prune_locked() {
  while (!in_flight_.empty()) {
    const cudaError_t e = cudaEventQuery(in_flight_.front().done);
    if (e == cudaErrorNotReady) return (void)cudaGetLastError();  // "not ready" may stay as the last error
    if (e != cudaSuccess) {
      const std::string what = in_flight_.front().what;
      abort_locked(fmt::format("rank {}: a CUDA error during {}", rank_, what));
      check_cuda(e, "cudaEventQuery", what, rank_);
      throw BackendFailure(fmt::format("rank {}: cudaEventQuery failed during {}", rank_, what));
    }
    spare_events_.push_back(in_flight_.front().done);
    in_flight_.pop_front();
  }
}

std::size_t NcclCommunicator::collectives_in_flight() {
  std::lock_guard lock(mutex_);
  if (aborted_.empty()) prune_locked();
  return in_flight_.size();
}

bool NcclCommunicator::aborted() const {
  std::lock_guard lock(mutex_);
  return !aborted_.empty();
}

void NcclCommunicator::abort() noexcept {
  std::lock_guard lock(mutex_);
  abort_locked("abort() was called");
}

void NcclCommunicator::check() {
  std::lock_guard lock(mutex_);
  if (!aborted_.empty()) return;  // reported when it happened; the handles are gone
  prune_locked();
  for (std::size_t g = 0; g < comms_.size(); ++g) {
    if (comms_[g] == nullptr) continue;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comms_[g], &state);
    const ncclResult_t error = r != ncclSuccess ? r : state;
    if (error == ncclSuccess || error == ncclInProgress) continue;
    const std::string what = in_flight_.empty() ? fmt::format("the {} communicator's work", comm_names_[g])
                                                : in_flight_.front().what;
    fail_locked(error, "NCCL", what);
  }
}

void NcclCommunicator::timed_out(double waited_s, const std::string& waiting_for) {
  std::lock_guard lock(mutex_);
  std::string message;
  if (!aborted_.empty()) {
    message = fmt::format(
        "rank {}: {} did not complete within {:.3g} s (the NCCL communicators had been aborted: {})", rank_,
        waiting_for, waited_s, aborted_);
  } else {
    prune_locked();
    if (in_flight_.empty()) {
      message = fmt::format("rank {}: {} did not complete within {:.3g} s (no NCCL collective was in flight)",
                            rank_, waiting_for, waited_s);
    } else {
      message = fmt::format(
          "rank {}: {} did not complete within {:.3g} s (the host waited for {}); a peer died or hung", rank_,
          in_flight_.front().what, waited_s, waiting_for);
    }
    abort_locked(message);
  }
  throw BackendFailure(message);
}

void NcclCommunicator::fail_locked(ncclResult_t r, const char* call, const std::string& what) {
  const std::string last = last_nccl_error();
  const std::string message = nccl_failure_message(r, call, what, rank_, last);
  abort_locked(message);
  check_nccl(r, call, what, rank_, last);
  throw BackendFailure(message);  // r was ncclSuccess: not reached by the callers
}

void NcclCommunicator::abort_locked(const std::string& reason) noexcept {
  if (aborted_.empty()) aborted_ = reason.empty() ? std::string("aborted") : reason;
  // The world communicator first: it carries our collectives. The handle is gone whatever the result
  // (ncclInProgress, from NCCLs that do not block in it: freed in the background).
  for (ncclComm_t& comm : comms_) {
    if (comm != nullptr) (void)ncclCommAbort(comm);
    comm = nullptr;
  }
  for (const InFlight& f : in_flight_) cudaEventDestroy(f.done);
  in_flight_.clear();
}

void NcclCommunicator::release_events() noexcept {
  for (const InFlight& f : in_flight_) cudaEventDestroy(f.done);
  in_flight_.clear();
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  spare_events_.clear();
}

}  // namespace osdp::validate
