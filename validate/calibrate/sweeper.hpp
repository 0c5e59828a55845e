// How `osdp calibrate` times a point (calibrate.hpp states the measurement habit): batches of one
// operation between two events, after a barrier, the max over ranks; and a sweep's points timed in
// passes, one repetition of each point a pass, so that a slow spell of the machine spreads over
// every point instead of biasing the run of points measured during it.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "costmodel/calibration_fit.hpp"
#include "validate/calibrate/calibrate.hpp"
#include "validate/executor/backend.hpp"

namespace osdp::validate {

class Sweeper {
 public:
  using Op = std::function<void()>;

  Sweeper(Device& d, Communicator& c, const CalibrateOptions& o, const ProgressFn& p, int total)
      : dev_(d), comm_(c), o_(o), progress_(p), total_(total) {}

  // `iters` operations between two events on `s`, after a barrier: seconds per operation, max over
  // ranks. The batch is enqueued behind a StreamGate (Device::hold) and then runs back to back, so
  // the time between its events is the work's, not the host's hand-off to the stream.
  double batch(Stream& s, const Op& op, int iters);

  // The points of one sweep, timed interleaved: every op is prepared (its batch size and warm-up),
  // then the repetitions run in passes over all the ops, one timed batch of each op a pass, and a
  // point's time is the median of its passes. A slow spell of the machine then lands on every point
  // alike, not on the run of points measured during it: on the 2-core development VM a spell of
  // several seconds at 60% speed once made 20 GEMM shapes in a row, and so every plan using them,
  // 15-20% slow. Each point is reported (as `label(i)`) when its last repetition is timed, each
  // pass before the last when it ends; no `label`, no reports.
  std::vector<costmodel::Measurement> points(Stream& s, const std::vector<Op>& ops, const std::string& sweep,
                                             const std::function<std::string(std::size_t)>& label);

  // One point on its own (its repetitions back to back), not reported.
  costmodel::Measurement point(Stream& s, const Op& op) { return points(s, {op}, "", {}).front(); }

  // Reports a point measured some other way (the overlap sweep).
  void report(const std::string& sweep, const std::string& label, double seconds);

  Device& dev_;
  Communicator& comm_;
  const CalibrateOptions& o_;

 private:
  // One op's batch size and repetition count: single operations first (the first one warms up; a
  // fast one is timed again, and that time, the same on every rank, sets the batch size), then
  // warm-up batches for fast points; slow points get fewer repetitions.
  costmodel::Measurement prepare(Stream& s, const Op& op);

  const ProgressFn& progress_;
  int total_ = 0, done_ = 0;
};

}  // namespace osdp::validate
