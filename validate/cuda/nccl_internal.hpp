// Internal to the nccl backend (nccl_backend.cpp: the world communicator, its collectives and
// watchdog; nccl_views.cpp: the communicators of some ranks and point to point).
#pragma once

#include <mutex>
#include <string>

#include <fmt/format.h>

#include "validate/cuda/cuda_errors.hpp"
#include "validate/cuda/nccl_backend.hpp"

namespace osdp::validate {

// NCCL's last error message (process-wide; ncclGetLastError ignores its argument), trimmed.
std::string last_nccl_error();

// Launches `nccl_call` on NCCL communicator c and the stream under the lock, waits out a nonblocking
// launch in progress (to the timeout, then aborts), and records an event the watchdog tracks. Here
// because the collectives and point to point, in the two files, both instantiate it.
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

}  // namespace osdp::validate
