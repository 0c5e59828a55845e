// The nccl backend as a module (osdp_backend_nccl.so, loaded by validate/backends.cpp with dlopen):
// the backend session (one GPU per rank, NCCL collectives), whether it can run here, and the CUDA
// and NCCL versions `osdp --version` prints. Its one exported symbol is osdp_backend_module; the
// static code it links (the CUDA device, the communicators, the caching allocator, MPI's checks) is
// its own copy, kept local to it.
#include <mpi.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/backends.hpp"
#include "validate/cuda/cuda_device.hpp"
#include "validate/cuda/cuda_errors.hpp"
#include "validate/cuda/nccl_backend.hpp"

#ifndef OSDP_BACKEND_ABI
#error "OSDP_BACKEND_ABI must be defined (validate/CMakeLists.txt): the program checks it on loading"
#endif
#ifndef OSDP_CUDA_TOOLKIT_VERSION
#define OSDP_CUDA_TOOLKIT_VERSION "?"
#endif

namespace osdp::validate {
namespace {

// The GPU: the rank's index on its node, made current before NCCL is set up on it. NCCL cannot put
// two ranks on one GPU, so more ranks on a node than it has GPUs is refused on every rank at once
// (before any rank starts NCCL and waits for the others).
int pick_gpu() {
  const int local = local_rank_of_world();
  const int gpus = cuda_device_count();
  int rank = 0, over = local >= gpus ? 1 : 0, any_over = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Allreduce(&over, &any_over, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_over != 0)
    throw UsageError(
        fmt::format("--backend nccl: one rank per GPU: a node has more ranks than GPUs (rank {} "
                    "is number {} on its node, which has {} GPU(s)); start fewer ranks per node",
                    rank, local + 1, gpus));
  check_cuda(cudaSetDevice(local), "cudaSetDevice", fmt::format("choosing GPU {} for this rank", local),
             rank);
  return local;
}

class NcclBackend final : public BackendSession {
 public:
  explicit NcclBackend(const BackendOptions& o)
      : options_(o), gpu_(pick_gpu()), comm_(gpu_, NcclOptions{o.timeout_s, {}}) {}
  Communicator& comm() override { return comm_; }
  std::unique_ptr<Device> make_device(bool comm_stream) override {
    CudaDeviceOptions d;
    d.device = gpu_;
    d.comm_stream = comm_stream;
    d.rank = comm_.rank();
    d.timeout_s = options_.timeout_s;
    auto dev = std::make_unique<CudaDevice>(d);
    dev->set_watchdog(&comm_);  // NCCL's asynchronous errors and hangs surface in the device's waits
    return dev;
  }
  std::string device_name() const override {
    CudaDeviceOptions d;
    d.device = gpu_;
    d.rank = comm_.rank();
    return CudaDevice(d).name();
  }
  bool plans_one_at_a_time() const override { return true; }

 private:
  BackendOptions options_;
  int gpu_;
  NcclCommunicator comm_;
};

class NcclModule final : public BackendModule {
 public:
  std::string unavailable_reason() const override {
    const std::string why = cuda_unavailable_reason();
    return why.empty() ? "" : fmt::format("the nccl backend needs a GPU: {}", why);
  }

  // What is compiled in, and what this machine has at run time (the libraries found, the driver, the
  // GPUs), so that a cluster's `osdp --version` says whether --backend nccl can run.
  std::vector<std::pair<std::string, std::string>> versions() const override {
    const CudaVersions v = cuda_versions();
    const std::string why = cuda_unavailable_reason();
    const std::string cuda = fmt::format("compiled in (toolkit {}); runtime {}, cuBLAS {}, driver {}; {}",
                                         OSDP_CUDA_TOOLKIT_VERSION, format_cuda_version(v.runtime),
                                         format_cublas_version(v.cublas),
                                         v.driver == 0 ? std::string("none") : format_cuda_version(v.driver),
                                         why.empty() ? fmt::format("{} GPU(s)", cuda_device_count()) : why);
    int nccl_runtime = 0;
    if (ncclGetVersion(&nccl_runtime) != ncclSuccess) nccl_runtime = 0;
    const std::string nccl =
        fmt::format("compiled in ({}); library {}", format_nccl_version(NCCL_VERSION_CODE),
                    nccl_runtime == 0 ? std::string("?") : format_nccl_version(nccl_runtime));
    return {{"CUDA", cuda}, {"NCCL", nccl}};
  }

  std::unique_ptr<BackendSession> open(const BackendOptions& options) const override {
    if (const std::string why = unavailable_reason(); !why.empty()) throw UsageError(why);
    return std::make_unique<NcclBackend>(options);
  }
};

}  // namespace
}  // namespace osdp::validate

extern "C" __attribute__((visibility("default"))) const osdp::validate::BackendModule* osdp_backend_module(
    const char* program_abi, const char** module_abi) {
  static const osdp::validate::NcclModule module;
  if (module_abi != nullptr) *module_abi = OSDP_BACKEND_ABI;
  if (program_abi == nullptr || std::strcmp(program_abi, OSDP_BACKEND_ABI) != 0) return nullptr;
  return &module;
}
