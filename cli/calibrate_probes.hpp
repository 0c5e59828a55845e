// osdp calibrate's probes (experiments/probes.hpp): after the sweeps are fitted and the calibration
// written, a few plans of probe-3x320 are run whole on the same ranks and predicted from it; the
// model's composition error fitted from them (costmodel/composition.hpp) goes into the calibration's
// provenance ("fit"/"composition"), which the intervals then draw.
#pragma once

#include <string>

#include "experiments/probes.hpp"

#include "validate/torch/torch_job.hpp"
#ifdef OSDP_HAVE_MPI_BACKEND
#include "validate/backends.hpp"
#endif

namespace osdp::cli {

struct ProbeRun {
  std::string calibration;  // the file written; its provenance gets the fit
  bool quiet = false;
  // What runs: the probes' cluster (its figures replaced by the calibration's), ranks, --quick, the
  // --model models at --probe-batch; output probes_dir(calibration).
  experiments::ProbeSet set;
};

// Where the probes' rows go: <calibration without .json>.probes/.
std::string probes_dir(const std::string& calibration);

#ifdef OSDP_HAVE_MPI_BACKEND
// Collective: every rank of `comm` runs the probes on `backend`'s devices; rank 0 adds the fit to the
// calibration file and prints it.
void run_probes(const ProbeRun& run, validate::BackendSession& backend, validate::Communicator& comm);
#endif
// The torch backend: the probes' groups run by torchrun (as osdp validate --backend torch runs them).
void run_torch_probes(const ProbeRun& run, validate::TorchJobOptions torch);

}  // namespace osdp::cli
