// The nccl backend's communicator: nonblocking NCCL communicators (created from MPI-broadcast unique
// ids), collectives launched on CUDA streams and tracked by an event each, and the watchdog the
// CudaDevice polls while the host waits, so that a dead or hung peer ends as a BackendFailure naming
// the rank and the operation, after every NCCL communicator was aborted.
#include "validate/cuda/nccl_backend.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "validate/cuda/cuda_errors.hpp"
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

// NCCL's last error message (process-wide; ncclGetLastError ignores its argument), trimmed.
std::string last_nccl_error() {
  const char* text = ncclGetLastError(nullptr);
  std::string s = text != nullptr ? text : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
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

template <typename Launch>
void NcclCommunicator::launch(std::size_t c, cudaStream_t stream, const std::string& what, const char* call,
                              Launch&& nccl_call) {
  if (!begin(what)) return;  // outside the lock: kind=delay sleeps
  std::lock_guard lock(mutex_);
  if (!aborted_.empty())
    throw BackendFailure(
        fmt::format("rank {}: {}: the NCCL communicators were aborted: {}", rank_, what, aborted_));
  prune_locked();
  check_cuda(cudaSetDevice(cuda_device_), "cudaSetDevice", what, rank_);  // the event is made on it
  ncclComm_t comm = comms_[c];
  ncclResult_t r = nccl_call(comm, stream);
  // Nonblocking: the launch may still be in progress (connections made at the first collective);
  // nothing else may be issued on the stream before it is not.
  if (r == ncclInProgress) r = wait_ready(comm, deadline());
  if (r == ncclInProgress) {
    const std::string message =
        fmt::format("rank {}: launching {} ({}) did not finish within {:g} s: a peer rank died or hung",
                    rank_, what, call, options_.timeout_s);
    abort_locked(message);
    throw BackendFailure(message);
  }
  if (r != ncclSuccess) fail_locked(r, call, what);

  cudaEvent_t done = nullptr;
  if (spare_events_.empty()) {
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags", what,
               rank_);
  } else {
    done = spare_events_.back();
    spare_events_.pop_back();
  }
  const cudaError_t recorded = cudaEventRecord(done, stream);
  if (recorded != cudaSuccess) {
    spare_events_.push_back(done);
    check_cuda(recorded, "cudaEventRecord", what, rank_);
  }
  in_flight_.push_back(InFlight{what, ++sequence_, done});
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

// ---- views: node rings and splits ----------------------------------------------------------

// A communicator of some of the job's ranks: collectives and point to point on the parent's NCCL
// communicator comms_[index], host-side operations on `host`, the MPI communicator of the same ranks.
class NcclView final : public Communicator {
 public:
  NcclView(NcclCommunicator& parent, std::size_t index, Communicator& host)
      : parent_(parent), index_(index), host_(host) {}
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string backend() const override { return "nccl"; }
  std::string version() const override { return parent_.version(); }
  void all_gather(Stream& s, const float* shard, float* full, std::size_t n,
                  const std::string& what) override {
    parent_.all_gather_on(index_, s, shard, full, n, what);
  }
  void reduce_scatter(Stream& s, const float* full, float* shard, std::size_t n,
                      const std::string& what) override {
    parent_.reduce_scatter_on(index_, s, full, shard, n, what);
  }
  void all_reduce(Stream& s, float* buf, std::size_t n, const std::string& what) override {
    parent_.all_reduce_on(index_, s, buf, n, what);
  }
  Communicator& split(int color, int key, const std::string& what) override {
    return parent_.split_of(index_, host_, color, key, what);
  }
  void send(Stream& s, const float* buf, std::size_t elems, int peer, int /*tag*/,
            const std::string& what) override {
    parent_.send_on(index_, rank(), size(), s, buf, elems, peer, what);
  }
  void recv(Stream& s, float* buf, std::size_t elems, int peer, int /*tag*/,
            const std::string& what) override {
    parent_.recv_on(index_, rank(), size(), s, buf, elems, peer, what);
  }
  void flush_sends(Stream& s, const std::string& what) override { parent_.flush_on(index_, s, what); }
  void barrier(const std::string& what) override { host_.barrier(what); }
  double max_over_ranks(double x) override { return host_.max_over_ranks(x); }
  double sum_over_ranks(double x) override { return host_.sum_over_ranks(x); }
  std::vector<double> all_values(double x) override { return host_.all_values(x); }

 private:
  NcclCommunicator& parent_;
  std::size_t index_;
  Communicator& host_;
};

Communicator& NcclCommunicator::ring(costmodel::RingLevel level, int per_node) {
  if (level == costmodel::RingLevel::kWorld) return *this;
  const bool intra = level == costmodel::RingLevel::kIntra;
  auto& slot = rings_[intra ? 0 : 1];
  if (slot) {
    if (per_node != local_size_)
      throw UsageError(fmt::format("rank {}: node rings of {} ranks asked for, the machines' have {}", rank_,
                                   per_node, local_size_));
    return *slot;
  }
  // Collective the first time: every rank learns whether every rank's machine matches the plan's node.
  const bool matches = per_node == local_size_ && local_rank_ == rank_ % local_size_;
  if (host_.sum_over_ranks(matches ? 0.0 : 1.0) > 0)
    throw UsageError(fmt::format(
        "rank {}: the plan's nodes of {} ranks are not this job's machines ({} machines, {} GPUs on this "
        "one, rank {} of it): the nccl backend runs node rings on the machines' own nodes",
        rank_, per_node, nodes_, local_size_, local_rank_));
  slot = std::make_unique<NcclView>(
      *this, static_cast<std::size_t>(intra ? CommGroup::kIntraNode : CommGroup::kInterNode),
      host_.ring(level, per_node));
  return *slot;
}

Communicator& NcclCommunicator::split(int color, int key, const std::string& what) {
  return split_of(0, host_, color, key, what);
}

std::size_t NcclCommunicator::split_comm_locked(std::size_t c, int color, int key, const std::string& name,
                                                const std::string& what) {
  if (!aborted_.empty())
    throw BackendFailure(
        fmt::format("rank {}: {}: the NCCL communicators were aborted: {}", rank_, what, aborted_));
  check_cuda(cudaSetDevice(cuda_device_), "cudaSetDevice", what, rank_);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  // With a nonblocking parent the split runs like a collective of the parent: the parent stays
  // ncclInProgress until it is done, and only then is the new handle written (NCCL 2.23; NVIDIA/nccl
  // issue 1472), by NCCL's own thread. So the handle lives on the heap, left to NCCL when the wait
  // times out; the parent is waited for first (nothing else may be issued on it before), the new
  // communicator next.
  auto slot = std::make_unique<ncclComm_t>(nullptr);
  const auto until = deadline();
  ncclResult_t r = ncclCommSplit(comms_[c], color, key, slot.get(), &config);
  if (r == ncclSuccess || r == ncclInProgress) r = wait_ready(comms_[c], until);
  ncclComm_t comm = __atomic_load_n(slot.get(), __ATOMIC_ACQUIRE);
  if (r == ncclInProgress && comm == nullptr) (void)slot.release();  // NCCL may still write it
  if (r == ncclSuccess && comm != nullptr) r = wait_ready(comm, until);
  if (r == ncclSuccess && comm != nullptr) {
    comms_.push_back(comm);
    comm_names_.push_back(name);
    return comms_.size() - 1;
  }
  const std::string last = last_nccl_error();
  if (comm != nullptr) ncclCommAbort(comm);
  const std::string message =
      r == ncclInProgress
          ? fmt::format(
                "rank {}: {} (ncclCommSplit of the {} communicator) did not finish within {:g} s: a "
                "peer rank died or hung",
                rank_, what, comm_names_[c], options_.timeout_s)
      : r == ncclSuccess ? fmt::format("rank {}: {}: ncclCommSplit gave no communicator", rank_, what)
                         : nccl_failure_message(r, "ncclCommSplit", what, rank_, last);
  abort_locked(message);
  check_nccl(r, "ncclCommSplit", what, rank_, last);
  throw BackendFailure(message);
}

Communicator& NcclCommunicator::split_of(std::size_t c, Communicator& host, int color, int key,
                                         const std::string& what) {
  if (color < 0) throw UsageError(fmt::format("rank {}: {}: split color {} is negative", rank_, what, color));
  // The host side first (MPI, blocking): every rank is then here for the NCCL split too.
  Communicator& host_split = host.split(color, key, what);
  std::lock_guard lock(mutex_);
  const std::size_t index =
      split_comm_locked(c, color, key, fmt::format("split {} of {}", color, comm_names_[c]), what);
  int nccl_rank = -1, nccl_size = 0;
  ncclCommUserRank(comms_[index], &nccl_rank);
  ncclCommCount(comms_[index], &nccl_size);
  if (nccl_rank != host_split.rank() || nccl_size != host_split.size())
    throw BackendFailure(
        fmt::format("rank {}: {}: ncclCommSplit made rank {} of {}, MPI_Comm_split rank {} of {} (the same "
                    "color and key)",
                    rank_, what, nccl_rank, nccl_size, host_split.rank(), host_split.size()));
  splits_.push_back(std::make_unique<NcclView>(*this, index, host_split));
  return *splits_.back();
}

// ---- point to point --------------------------------------------------------------------------

NcclCommunicator::PointToPoint NcclCommunicator::point_to_point(std::size_t c, int comm_rank,
                                                                const std::string& what) {
  std::lock_guard lock(mutex_);
  if (const auto it = point_to_point_.find(c); it != point_to_point_.end()) return it->second;
  // Collective over comms_[c]: every rank makes its first send or recv on it in the same order.
  PointToPoint p;
  p.up = split_comm_locked(c, 0, comm_rank, fmt::format("{} to higher ranks", comm_names_[c]), what);
  p.down = split_comm_locked(c, 0, comm_rank, fmt::format("{} to lower ranks", comm_names_[c]), what);
  for (cudaStream_t* st : {&p.up_stream, &p.down_stream}) {
    const cudaError_t e = cudaStreamCreateWithFlags(st, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      for (cudaStream_t made : {p.up_stream, p.down_stream})
        if (made != nullptr) (void)cudaStreamDestroy(made);
      check_cuda(e, "cudaStreamCreateWithFlags", what, rank_);
    }
  }
  point_to_point_[c] = p;
  return p;
}

namespace {

// Later work on `waiter` waits for the work enqueued on `from` so far (an event, released once done).
void stream_waits(cudaStream_t waiter, cudaStream_t from, const std::string& what, int rank) {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags", what, rank);
  const cudaError_t recorded = cudaEventRecord(e, from);
  const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(waiter, e, 0) : recorded;
  (void)cudaEventDestroy(e);
  check_cuda(waited, recorded == cudaSuccess ? "cudaStreamWaitEvent" : "cudaEventRecord", what, rank);
}

void check_peer(int peer, int comm_rank, int comm_size, int rank, const std::string& what) {
  if (peer < 0 || peer >= comm_size || peer == comm_rank)
    throw UsageError(
        fmt::format("rank {}: {}: peer {} is not another rank of this communicator (rank {} of {})", rank,
                    what, peer, comm_rank, comm_size));
}

}  // namespace

void NcclCommunicator::send_on(std::size_t c, int comm_rank, int comm_size, Stream& s, const float* buf,
                               std::size_t elems, int peer, const std::string& what) {
  const cudaStream_t stream = cuda_stream(s, what).handle();
  check_peer(peer, comm_rank, comm_size, rank_, what);
  if (elems == 0) return;
  const PointToPoint p = point_to_point(c, comm_rank, what);
  const bool up = peer > comm_rank;
  const cudaStream_t lane = up ? p.up_stream : p.down_stream;
  const std::size_t bytes = elems * sizeof(float);
  check_cuda(cudaSetDevice(cuda_device_), "cudaSetDevice", what, rank_);
  // A copy on the caller's stream, so that later work there may overwrite `buf` at once.
  void* staging = nullptr;
  check_cuda(cudaMallocAsync(&staging, bytes, stream), "cudaMallocAsync", what, rank_);
  try {
    check_cuda(cudaMemcpyAsync(staging, buf, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync",
               what, rank_);
    stream_waits(lane, stream, what, rank_);
    launch(up ? p.up : p.down, lane, what, "ncclSend", [&](ncclComm_t comm, cudaStream_t st) {
      return ncclSend(staging, elems, ncclFloat32, peer, comm, st);
    });
  } catch (...) {
    (void)cudaFreeAsync(staging, lane);
    throw;
  }
  check_cuda(cudaFreeAsync(staging, lane), "cudaFreeAsync", what, rank_);
}

void NcclCommunicator::recv_on(std::size_t c, int comm_rank, int comm_size, Stream& s, float* buf,
                               std::size_t elems, int peer, const std::string& what) {
  const cudaStream_t stream = cuda_stream(s, what).handle();
  check_peer(peer, comm_rank, comm_size, rank_, what);
  if (elems == 0) return;
  const PointToPoint p = point_to_point(c, comm_rank, what);
  // A lower rank sends up, a higher one down.
  launch(peer < comm_rank ? p.up : p.down, stream, what, "ncclRecv",
         [&](ncclComm_t comm, cudaStream_t st) { return ncclRecv(buf, elems, ncclFloat32, peer, comm, st); });
}

void NcclCommunicator::flush_on(std::size_t c, Stream& s, const std::string& what) {
  const cudaStream_t stream = cuda_stream(s, what).handle();
  PointToPoint p;
  {
    std::lock_guard lock(mutex_);
    const auto it = point_to_point_.find(c);
    if (it == point_to_point_.end()) return;  // nothing was ever sent
    p = it->second;
  }
  check_cuda(cudaSetDevice(cuda_device_), "cudaSetDevice", what, rank_);
  for (const cudaStream_t lane : {p.up_stream, p.down_stream}) stream_waits(stream, lane, what, rank_);
}

void NcclCommunicator::send(Stream& s, const float* buf, std::size_t elems, int peer, int /*tag*/,
                            const std::string& what) {
  send_on(0, rank_, size_, s, buf, elems, peer, what);
}

void NcclCommunicator::recv(Stream& s, float* buf, std::size_t elems, int peer, int /*tag*/,
                            const std::string& what) {
  recv_on(0, rank_, size_, s, buf, elems, peer, what);
}

void NcclCommunicator::flush_sends(Stream& s, const std::string& what) {
  flush_on(0, s, what);
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
