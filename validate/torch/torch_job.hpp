// The torch backend (issue 15): plans and calibration sweeps run in real PyTorch, FSDP2 on gloo (CPU
// ranks) or NCCL (GPUs), by ranks that torchrun starts. osdp writes a job file, runs
//   PYTHON -m torch.distributed.run --standalone --nproc_per_node N -m osdp.torch.measure JOB OUT
// (python/osdp/torch/measure.py says what the ranks do) and reads OUT, which rank 0 writes when every
// rank has finished. The interpreter is, in this order: the caller's (--python), $OSDP_PYTHON, the
// virtual environment this osdp was configured with (OSDP_VENV: build/venv from .ci/setup.sh) when it
// has a python, else python3 on PATH. When this osdp's source tree is still where it was built, its
// python/ folder goes first on PYTHONPATH, so that the ranks run the osdp.torch of this osdp; else the
// interpreter's installed osdp package is used.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace osdp::validate {

struct TorchJobOptions {
  std::string python;      // empty: default_torch_python()
  int nproc = 1;           // ranks
  double timeout_s = 120;  // a collective not done by then fails (gloo's and NCCL's process-group timeout)
  bool progress = false;   // rank 0 prints what it is doing
  bool check = true;  // validate: also the numerics check of each fp32 plan (experiments/torch_measured.hpp)
};

std::string default_torch_python();

// A fresh directory under the system's temporary one (mkdtemp), removed with everything in it when
// this goes out of scope.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// "" when `python` imports torch and osdp.torch; else why not, with what to do about it. Runs the
// interpreter once (a second or two).
std::string torch_unavailable_reason(const std::string& python);

// Runs `job` (its "kind": "validate" or "calibrate"; see measure.py) on o.nproc ranks and returns what
// rank 0 wrote. Throws BackendFailure naming the exit status and what the ranks last said when the job
// fails, osdp::Error when it cannot be started.
nlohmann::json run_torch_job(nlohmann::json job, const TorchJobOptions& o);

}  // namespace osdp::validate
