// The nccl backend's communicators of some ranks (nccl_backend.hpp): node rings and splits, views
// whose collectives and point to point run on one of the parent's NCCL communicators, and point to
// point itself (grouped sends and receives on their own streams). The world communicator, its
// collectives and the watchdog are in nccl_backend.cpp.
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "validate/cuda/cuda_errors.hpp"
#include "validate/cuda/nccl_backend.hpp"
#include "validate/cuda/nccl_internal.hpp"
#include "validate/mpi/mpi_check.hpp"

namespace osdp::validate {

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
  void all_to_all(Stream& s, const float* send, const std::vector<std::size_t>& send_counts, float* recv,
                  const std::vector<std::size_t>& recv_counts, const std::string& what) override {
    check_all_to_all_counts(*this, send_counts, recv_counts, what);
    parent_.all_to_all_on(index_, s, send, send_counts, recv, recv_counts, what);
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

}  // namespace osdp::validate
