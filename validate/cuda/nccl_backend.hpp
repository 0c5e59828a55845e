// The communicator of the `nccl` backend: NCCL collectives (fp32, sum) on the CUDA streams of a
// CudaDevice, over the ranks of MPI_COMM_WORLD, one GPU per rank. MPI hands out NCCL's unique ids and
// carries the host-side operations (barrier, reductions of doubles).
//
// Every NCCL communicator is nonblocking (ncclConfig_t.blocking = 0): creation, each collective and
// finalization may return ncclInProgress, and are polled with ncclCommGetAsyncError to a deadline, so
// a dead or hung peer becomes a BackendFailure naming the rank and the operation, never a hang:
// - creating the communicators and launching a collective: polled here, to NcclOptions::timeout_s;
// - the collectives themselves run on the GPU: the host waits for them through the CudaDevice, which
//   polls this communicator as its CudaWatchdog (check(): NCCL's asynchronous errors) and calls
//   timed_out() past its own timeout (CudaDeviceOptions::timeout_s): both abort every NCCL
//   communicator and throw. The caller installs it: device.set_watchdog(&communicator).
//
// Splits (split()) are ncclCommSplit of the communicator split, beside an MPI split of the same ranks
// for the host-side operations. Point to point (send, recv, flush_sends) runs on two more
// communicators of the same ranks, made by the first send or recv on a communicator (collective over
// it: in a pipeline every rank sends or receives): one carries the messages to higher ranks, the
// other those to lower ranks. A rank's recv from a lower rank and its send to a higher one are then
// never serialised behind each other on one NCCL communicator, so two stages exchanging activations
// and gradients at once cannot deadlock. A send copies its buffer to a staging buffer (cudaMallocAsync,
// outside the device's tracked memory, as the mpi backend's host copies are) on the caller's stream,
// then sends it from a stream of its direction; a recv runs on the caller's stream. NCCL has no tags:
// messages between two ranks in one direction are matched in the order they are issued.
//
// Fault injection (tests): NcclOptions::fault, or OSDP_INJECT_FAULT when unset (the syntax of
// mpi_backend.hpp, parsed there once). On the matching rank, for every collective whose `what` contains the
// substring: kind=hang skips launching it (the peers hang inside NCCL until their watchdog's timeout aborts
// them), kind=exit prints a line and _Exit(17), kind=delay sleeps and then launches it. Host-side
// operations (barrier, reductions) go through an MpiCommunicator holding the same fault.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "validate/cuda/cuda_device.hpp"
#include "validate/executor/backend.hpp"
#include "validate/mpi/mpi_backend.hpp"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error \
    "the nccl backend needs NCCL 2.18 or later (nonblocking communicators, ncclCommFinalize, ncclCommSplit)"
#endif

namespace osdp::validate {

// ---- error mapping (pure: no GPU needed) ------------------------------------------------------

// The enumerator's name ("ncclRemoteError"); "ncclResult_t(N)" for a value NCCL does not define.
std::string nccl_result_name(ncclResult_t r);

// "rank R: <call> failed during <what>: <name>: <ncclGetErrorString(r)>[ (last NCCL error: <last_error>)]"
std::string nccl_failure_message(ncclResult_t r, std::string_view call, std::string_view what, int rank,
                                 std::string_view last_error);

// No-op on ncclSuccess. ncclInvalidArgument and ncclInvalidUsage throw osdp::UsageError (a bug in the
// call), every other result BackendFailure, both with nccl_failure_message. ncclInProgress is not
// success: a nonblocking call is polled to completion before its result is checked.
void check_nccl(ncclResult_t r, std::string_view call, std::string_view what, int rank,
                std::string_view last_error = {});

// An NCCL version code as "major.minor.patch", following nccl.h's NCCL_VERSION: X*10000 + Y*100 + Z
// from 2.9 on (22803 -> "2.28.3"), X*1000 + Y*100 + Z before (2804 -> "2.8.4").
std::string format_nccl_version(int code);

// ---- the communicator -------------------------------------------------------------------------

struct NcclOptions {
  double timeout_s = 120.0;  // creating the communicators, launching a collective, finalizing; host-side ops
  // When unset: the host communicator's, which reads OSDP_INJECT_FAULT (MpiCommunicatorOptions).
  std::optional<FaultSpec> fault;
};

enum class CommGroup { kWorld, kIntraNode, kInterNode };

// This rank's index among the ranks of its node (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED).
// Collective over MPI_COMM_WORLD; MPI must be running. Choose the GPU with it:
// local_rank_of_world() % cuda_device_count().
int local_rank_of_world();

// Collective over MPI_COMM_WORLD (an MpiSession must be alive); every rank constructs it with the CUDA
// device it has made current (cudaSetDevice; checked: the communicator picks nothing itself). Creates
// three NCCL communicators, each from a unique id made by the group's rank 0 and broadcast over MPI:
// the world, the ranks of this node, and the ranks of the same local rank across nodes.
//
// all_gather, reduce_scatter and all_reduce launch on the world communicator, on the CudaStream given
// (another backend's Stream is a UsageError), from work running on it (CudaStream::enqueue makes the
// device current), and return once launched: the host waits through the stream or an event. Buffers
// may be in place as NCCL allows (shard == full + rank * shard_elems). Zero-element collectives launch
// nothing (sizes are equal on every rank). After a failure (an error, a timeout, abort()) every NCCL
// communicator is aborted and later collectives throw BackendFailure at once. Calls are serialised by
// a mutex; check() and timed_out() may come from another thread. A device polling it as its watchdog
// must be destroyed first (or given set_watchdog(nullptr)).
class NcclCommunicator final : public Communicator, public CudaWatchdog {
 public:
  explicit NcclCommunicator(int cuda_device, NcclOptions options = {});
  // ncclCommFinalize (polled to the timeout) and ncclCommDestroy; ncclCommAbort where that failed or
  // after a failure. Never throws: problems are printed to stderr.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  // "NCCL 2.28.9 (built against 2.28.9), Open MPI v4.1.4 on the host"
  std::string version() const override;

  void all_gather(Stream& s, const float* shard, float* full, std::size_t shard_elems,
                  const std::string& what) override;
  void reduce_scatter(Stream& s, const float* full, float* shard, std::size_t shard_elems,
                      const std::string& what) override;
  void all_reduce(Stream& s, float* buf, std::size_t elems, const std::string& what) override;
  void all_to_all(Stream& s, const float* send, const std::vector<std::size_t>& send_counts, float* recv,
                  const std::vector<std::size_t>& recv_counts, const std::string& what) override;

  // The node rings are this communicator's intra-node and inter-node NCCL communicators, whose nodes
  // are the machines': a plan's nodes of `per_node` ranks must be them (per_node GPUs on every
  // machine, ranks numbered machine by machine), else a UsageError says so. Host-side operations of a
  // ring go through the MPI ring of the same ranks.
  Communicator& ring(costmodel::RingLevel level, int per_node) override;
  // ncclCommSplit of the world communicator (see the opening comment); its ranks are checked to be the
  // MPI split's.
  Communicator& split(int color, int key, const std::string& what) override;
  void send(Stream& s, const float* buf, std::size_t elems, int peer, int tag,
            const std::string& what) override;
  void recv(Stream& s, float* buf, std::size_t elems, int peer, int tag, const std::string& what) override;
  // Later work on `s` waits for every send issued so far.
  void flush_sends(Stream& s, const std::string& what) override;

  // Host side, through MPI.
  void barrier(const std::string& what) override { host_.barrier(what); }
  double max_over_ranks(double x) override { return host_.max_over_ranks(x); }
  double sum_over_ranks(double x) override { return host_.sum_over_ranks(x); }
  std::vector<double> all_values(double x) override { return host_.all_values(x); }

  // The NCCL communicators made so far: the three groups, then the splits and the point-to-point
  // pairs, in the order made.
  std::size_t communicators() const;
  // The NCCL communicator of a group (nullptr once aborted). Callers launching on it themselves
  // follow the nonblocking protocol (poll ncclCommGetAsyncError while ncclInProgress).
  ncclComm_t group(CommGroup g) const;
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int nodes() const { return nodes_; }
  int cuda_device() const { return cuda_device_; }
  double timeout() const { return options_.timeout_s; }
  const std::optional<FaultSpec>& fault() const { return options_.fault; }

  // Collectives launched whose completion event has not been seen yet (prunes completed ones first).
  std::size_t collectives_in_flight();
  // Aborts every NCCL communicator (a peer failed, the job is going down): in-flight collectives stop,
  // later ones throw. Idempotent.
  void abort() noexcept;
  bool aborted() const;

  // CudaWatchdog. check(): prunes completed collectives; on an asynchronous NCCL error aborts every
  // communicator and throws BackendFailure naming the oldest unfinished collective. timed_out(): aborts
  // every communicator and throws BackendFailure naming the oldest unfinished collective (or, with
  // none in flight, what the host waited for).
  void check() override;
  [[noreturn]] void timed_out(double waited_s, const std::string& waiting_for) override;

 private:
  struct InFlight {
    std::string what;
    std::uint64_t sequence = 0;
    cudaEvent_t done = nullptr;  // recorded on the stream after the collective
  };
  // The communicators carrying a communicator's point-to-point messages, by direction, and the streams
  // its sends run on.
  struct PointToPoint {
    std::size_t up = 0, down = 0;  // indices into comms_: to higher ranks, to lower ranks
    cudaStream_t up_stream = nullptr, down_stream = nullptr;
  };
  static constexpr std::array<const char*, 3> kGroupNames = {"world", "intra-node", "inter-node"};

  void create_groups();
  // One group's communicator: rank 0 of `group_comm` makes the unique id, MPI_Ibcast hands it out.
  // Sets `request_pending` when the broadcast timed out (then `group_comm` must not be freed).
  ncclComm_t create_comm(MPI_Comm group_comm, const char* name, bool& request_pending);
  // Runs the fault injection; false when the collective must be skipped (kind=hang).
  bool begin(const std::string& what);
  friend class NcclView;
  CudaStream& cuda_stream(Stream& s, const std::string& what) const;
  template <typename Launch>
  void launch(std::size_t c, cudaStream_t stream, const std::string& what, const char* call,
              Launch&& nccl_call);
  void all_gather_on(std::size_t c, Stream& s, const float* shard, float* full, std::size_t shard_elems,
                     const std::string& what);
  void reduce_scatter_on(std::size_t c, Stream& s, const float* full, float* shard, std::size_t shard_elems,
                         const std::string& what);
  void all_reduce_on(std::size_t c, Stream& s, float* buf, std::size_t elems, const std::string& what);
  // A group of ncclSend/ncclRecv, one pair per peer (itself included), on comms_[c].
  void all_to_all_on(std::size_t c, Stream& s, const float* send, const std::vector<std::size_t>& send_counts,
                     float* recv, const std::vector<std::size_t>& recv_counts, const std::string& what);
  // ncclCommSplit of comms_[c], polled to the deadline; appended to comms_ under `name`. Returns its
  // index. After a failure every communicator is aborted.
  std::size_t split_comm_locked(std::size_t c, int color, int key, const std::string& name,
                                const std::string& what);
  // The split of comms_[c], whose host-side operations run on `host` (the MPI communicator of the same
  // ranks).
  Communicator& split_of(std::size_t c, Communicator& host, int color, int key, const std::string& what);
  // The point-to-point communicators of comms_[c], made at the first call (collective over comms_[c]).
  PointToPoint point_to_point(std::size_t c, int comm_rank, const std::string& what);
  void send_on(std::size_t c, int comm_rank, int comm_size, Stream& s, const float* buf, std::size_t elems,
               int peer, const std::string& what);
  void recv_on(std::size_t c, int comm_rank, int comm_size, Stream& s, float* buf, std::size_t elems,
               int peer, const std::string& what);
  void flush_on(std::size_t c, Stream& s, const std::string& what);
  // Polls `comm` while ncclInProgress, to the deadline; returns its state, or ncclInProgress past it.
  static ncclResult_t wait_ready(ncclComm_t comm, std::chrono::steady_clock::time_point deadline);
  std::chrono::steady_clock::time_point deadline() const;
  void prune_locked();
  void abort_locked(const std::string& reason) noexcept;
  [[noreturn]] void fail_locked(ncclResult_t r, const char* call, const std::string& what);
  void release_events() noexcept;

  NcclOptions options_;
  MpiCommunicator host_;  // the host-side operations (destroyed after the NCCL communicators)
  int cuda_device_ = 0;
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 1, nodes_ = 1;
  // 0..2: the groups (indexed by CommGroup); then the splits and point-to-point pairs, in the order made.
  std::vector<ncclComm_t> comms_ = {nullptr, nullptr, nullptr};
  std::vector<std::string> comm_names_ = {kGroupNames[0], kGroupNames[1], kGroupNames[2]};
  std::array<std::unique_ptr<Communicator>, 2> rings_;  // intra-node, inter-node views
  std::vector<std::unique_ptr<Communicator>> splits_;   // views of the splits, in the order made
  std::map<std::size_t, PointToPoint> point_to_point_;  // by the index of the communicator they serve
  mutable std::mutex mutex_;
  std::deque<InFlight> in_flight_;
  std::vector<cudaEvent_t> spare_events_;
  std::uint64_t sequence_ = 0;
  std::string aborted_;  // why the communicators were aborted; empty while they are usable
};

}  // namespace osdp::validate
