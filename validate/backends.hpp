// The backends `osdp calibrate` and `osdp validate` run on, by name, for ranks started by mpirun:
//   mpi   CPU devices (Eigen) and Open MPI collectives (validate/cpu, validate/mpi);
//   nccl  one GPU per rank (CUDA, cuBLAS; the rank's index on its node picks the GPU) and NCCL
//         collectives (validate/cuda), when built with CUDA, NCCL and MPI.
// Both drive the same executor and calibration code through validate/executor/backend.hpp.
//
// The nccl backend is a module, osdp_backend_nccl.so, loaded with dlopen the first time something
// asks for it (open_backend, backend_unavailable_reason, module_versions), so that the osdp program
// and everything else linking osdp::validate load no CUDA, cuBLAS or NCCL library until a GPU job (or
// `osdp --version`) needs them. The module is looked for, in this order:
//   1. in $OSDP_BACKEND_DIR, when that is set (and only there);
//   2. next to the executable (the directory of /proc/self/exe: build/cli/ beside build/cli/osdp);
//   3. for a program inside the build tree it was built in (the tests), in that tree's module
//      directory (build/cli/);
//   4. in <executable's directory>/../lib/osdp (an installed tree that was moved);
//   5. in the installed library directory (CMAKE_INSTALL_FULL_LIBDIR/osdp, compiled in).
// A file that exists but does not load (a missing CUDA library, a module built for another osdp) is
// an error naming its path and dlerror(), not a reason to try the next place.
#pragma once

#include <memory>
#include <string>
#include <utility>
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
  // Whether a job's plans must run one at a time, each device released before the next is made (a
  // GPU's memory holds one plan at the cap, not a group of them); false lets them interleave.
  virtual bool plans_one_at_a_time() const { return false; }
};

// The backends compiled into this osdp ("mpi", "nccl"), in that order.
std::vector<std::string> compiled_backends();

// "" when `name` can run here; else why not ("the nccl backend is not built into this osdp ...", "no
// GPU: ...", "the nccl backend module ... cannot be loaded: ..."). Checked by the command before it
// launches ranks.
std::string backend_unavailable_reason(const std::string& name);

// Inside a rank (MPI initialised by an MpiSession): opens the backend; collective. Throws UsageError
// for an unknown or unavailable backend.
std::unique_ptr<BackendSession> open_backend(const std::string& name, const BackendOptions& options);

// What `osdp --version` says of the libraries behind the modules, as (key, text) in order:
// ("CUDA", "compiled in (toolkit 13.0.88); runtime 13.0, cuBLAS 13.1.0, driver none; no CUDA driver
// (...)"), ("NCCL", "compiled in (2.28.9); library 2.28.9"); "not compiled in" when the build had
// no CUDA. Loads the nccl module; when it cannot be loaded, the lines say why. Never throws.
std::vector<std::pair<std::string, std::string>> module_versions();

// ---- the module interface ----------------------------------------------------------------------

// What a backend module provides; one object that lives as long as the process (modules are never
// unloaded). Its calls may throw the osdp errors (UsageError, BackendFailure, OutOfMemory): they are
// caught by type in the program (GCC's type_info compares by name across shared objects).
class BackendModule {
 public:
  virtual ~BackendModule() = default;
  virtual std::string unavailable_reason() const = 0;  // "" when it can run here; never throws
  virtual std::vector<std::pair<std::string, std::string>> versions() const = 0;  // never throws
  virtual std::unique_ptr<BackendSession> open(const BackendOptions& options) const = 0;
};

// The module's one entry point, `extern "C"` and found with dlsym by this name: it sets
// `*module_abi` to the build key it was compiled with and returns its BackendModule when that equals
// `program_abi`, nullptr otherwise (a module of another build: its classes may differ).
inline constexpr const char* kBackendModuleEntry = "osdp_backend_module";
using BackendModuleEntry = const BackendModule* (*)(const char* program_abi, const char** module_abi);

// The build key of this program (osdp version, compiler, sanitizers, a hash of the headers that declare
// the classes crossing the boundary), compared with the module's.
const char* backend_module_abi();

// The module of backend `name` (osdp_backend_<name>.so, looked for as above), loaded once per process
// and thread-safe (a failure is remembered too); nullptr when it cannot be loaded, with `why` naming
// the paths tried, or the file and dlerror().
const BackendModule* load_backend_module(const std::string& name, std::string& why);

}  // namespace osdp::validate
