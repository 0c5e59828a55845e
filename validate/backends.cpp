#include "validate/backends.hpp"

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/cpu/cpu_device.hpp"
#include "validate/mpi/mpi_backend.hpp"
#ifdef OSDP_HAVE_NCCL_BACKEND
#include <cuda_runtime_api.h>

#include "validate/cuda/cuda_device.hpp"
#include "validate/cuda/cuda_errors.hpp"
#include "validate/cuda/nccl_backend.hpp"
#endif

namespace osdp::validate {
namespace {

class MpiBackend final : public BackendSession {
 public:
  explicit MpiBackend(const BackendOptions& o)
      : options_(o), comm_(MpiCommunicatorOptions{o.timeout_s, {}}) {}
  Communicator& comm() override { return comm_; }
  std::unique_ptr<Device> make_device(bool comm_stream) override {
    auto dev = std::make_unique<CpuDevice>(CpuDeviceOptions{0, comm_stream, comm_.rank()});
    // Longer than the collectives' own timeout, so that a stuck collective is reported by name.
    dev->set_timeout(2 * options_.timeout_s + 5);
    return dev;
  }
  std::string device_name() const override {
    return CpuDevice(CpuDeviceOptions{0, false, comm_.rank()}).name();
  }

 private:
  BackendOptions options_;
  MpiCommunicator comm_;
};

#ifdef OSDP_HAVE_NCCL_BACKEND
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

 private:
  BackendOptions options_;
  int gpu_;
  NcclCommunicator comm_;
};
#endif

}  // namespace

std::vector<std::string> compiled_backends() {
  std::vector<std::string> r{"mpi"};
#ifdef OSDP_HAVE_NCCL_BACKEND
  r.push_back("nccl");
#endif
  return r;
}

std::string backend_unavailable_reason(const std::string& name) {
  if (name == "mpi") return "";
  if (name != "nccl") return fmt::format("unknown backend \"{}\"; expected mpi or nccl", name);
#ifdef OSDP_HAVE_NCCL_BACKEND
  const std::string why = cuda_unavailable_reason();
  return why.empty() ? "" : fmt::format("the nccl backend needs a GPU: {}", why);
#else
  return "the nccl backend is not built into this osdp (it needs CUDA, NCCL and MPI at build time; see `osdp "
         "--version`)";
#endif
}

std::unique_ptr<BackendSession> open_backend(const std::string& name, const BackendOptions& options) {
  if (const std::string why = backend_unavailable_reason(name); !why.empty()) throw UsageError(why);
  if (name == "mpi") return std::make_unique<MpiBackend>(options);
#ifdef OSDP_HAVE_NCCL_BACKEND
  return std::make_unique<NcclBackend>(options);
#else
  throw UsageError(backend_unavailable_reason(name));
#endif
}

}  // namespace osdp::validate
