// The backends `osdp calibrate` and `osdp validate` run on, by name, for ranks started by mpirun:
//   mpi   CPU devices (Eigen) and Open MPI collectives (validate/cpu_device.hpp, mpi_backend.hpp);
//   nccl  one GPU per rank (CUDA, cuBLAS; the rank's index on its node picks the GPU) and NCCL
//         collectives (validate/cuda_device.hpp, nccl_backend.hpp), when built with CUDA.
// Both drive the same executor and calibration code through backend.hpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "validate/executor/backend.hpp"

namespace osdp::validate {

struct BackendOptions {
  double timeout_s = 120;  // a collective or a wait on the device not done by then ends the job
  GemmMath gemm_math = GemmMath::kFp32;
};

// The communicator of the job and the devices of its plans (a fresh device per plan, so that each
// plan's memory is measured from zero).
class BackendSession {
 public:
  virtual ~BackendSession() = default;
  virtual Communicator& comm() = 0;
  // `comm_stream`: a second stream for the collectives (overlap); false runs both on one.
  virtual std::unique_ptr<Device> make_device(bool comm_stream) = 0;
  virtual std::string device_name() const = 0;  // what make_device makes, for provenance
};

// The backends compiled into this osdp ("mpi", "nccl"), in that order.
std::vector<std::string> compiled_backends();

// "" when `name` can run here; else why not ("the nccl backend is not built into this osdp ...", "no
// GPU: ..."). Checked by the command before it launches ranks.
std::string backend_unavailable_reason(const std::string& name);

// Inside a rank (MPI initialised by an MpiSession): opens the backend; collective. Throws UsageError
// for an unknown or unavailable backend.
std::unique_ptr<BackendSession> open_backend(const std::string& name, const BackendOptions& options);

}  // namespace osdp::validate
