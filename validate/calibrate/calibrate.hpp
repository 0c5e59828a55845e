// Calibration microbenchmarks (DESIGN.md section 7): collective sweeps over message sizes (all-gather,
// reduce-scatter, all-reduce), GEMM and elementwise sweeps, the Adam kernel, and the slowdown of compute
// while a collective runs, measured on a backend and fitted (validate/calibration_fit.hpp) to a
// costmodel::Calibration.
//
// Measurement habit (nccl-tests): warm-up, then timed repetitions; each repetition is a batch of
// identical operations between two events on the stream they run on (a batch lasts at least
// batch_target_s; the stream is held until the whole batch is enqueued, so the host's hand-off is not
// timed), after a barrier; a repetition's time is the max over ranks, a point's time the median of
// its repetitions. The repetitions of a sweep's points are interleaved, one of each point a pass
// (sweeper.hpp), so that a slow spell of a shared machine does not bias the points measured in it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/calibration_fit.hpp"
#include "costmodel/model.hpp"
#include "validate/executor/backend.hpp"

namespace osdp::validate {

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0, count = 1;
  std::string source;  // "square", "skinny", or the model and kernel it comes from
  // Timed again adding into C (C += A B, the "gemm-accumulate" sweep): a split's partial sums do, and
  // the cost model prices what that adds (ComputeSpec::accumulate_bandwidth_bytes_per_s).
  bool accumulates = false;
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
           static_cast<double>(count);
  }
};

// A generic range: squares 32 .. 2048 (quick: .. 256) and skinny [1024 x 1024 x k] (quick: 256).
std::vector<GemmShape> generic_gemm_shapes(bool quick);

// The provenance's "gemm_operands": how the timed GEMM calls rotated their operands (over a pool of
// rotation_bytes, twice the last-level cache and at least 64 MiB), written alike for every backend.
nlohmann::json gemm_operands_provenance(double rotation_bytes, double last_level_cache_bytes);

// The values the timed GEMMs' A and B hold: `n` floats uniform in [-1, 1) from a splitmix64 stream of
// `seed`, repeated over the operand pool (kPatternFloats at most, 4 MiB). A GPU's power, so its clock,
// depends on the bits its multipliers toggle: constant operands time faster than a step's data.
inline constexpr std::size_t kPatternFloats = std::size_t{1} << 20;
std::vector<float> operand_pattern(std::size_t n, std::uint64_t seed);
// The distinct GEMM kernels of the models' IR (forward and backward) at the given micro-batch sizes, at
// most `max_flops` each (osdp calibrate: 8 GFLOP on CPU ranks, where larger ones take seconds; 1 TFLOP
// on GPUs).
std::vector<GemmShape> model_gemm_shapes(const std::vector<costmodel::ModelSpec>& models,
                                         const std::vector<int>& batches, double max_flops);

struct CalibrateOptions {
  std::string name;                        // the calibration's name
  double min_bytes = 1024;                 // collectives: the full buffer S, from ...
  double max_bytes = 256.0 * 1024 * 1024;  // ... to
  int steps_per_doubling = 2;              // sizes per factor 2 (1 = powers of two)
  int warmup = 1;                          // untimed batches before each fast point
  int repeats = 7;               // timed batches per point (costmodel::median of the max over ranks)
  double large_s = 0.02;         // points whose one operation takes at least this long ...
  int large_repeats = 5;         // ... are timed this many times, with no warm-up batch
  double batch_target_s = 2e-3;  // a timed batch lasts at least this long (up to 1000 ops)
  double elementwise_min_bytes = 64.0 * 1024;  // bytes moved by a touch (8 per element)
  double elementwise_max_bytes = 256.0 * 1024 * 1024;
  std::vector<GemmShape> gemm_shapes;         // empty: generic_gemm_shapes(quick)
  std::vector<GemmShape> overlap_shapes;      // GEMMs timed alone and beside all-gathers; empty: default
  double overlap_bytes = 64.0 * 1024 * 1024;  // the all-gathers' buffer S
  bool quick = false;                         // set by quick_options(): small sizes, few repeats
  // > 0: also sweep the collectives on the rings of nodes of this many ranks (ranks numbered node by
  // node; Communicator::ring): within every node at once, then across nodes at every local index at
  // once, as a two-level collective runs them. Rings of one rank are left out.
  int per_node = 0;
  GemmMath gemm_math = GemmMath::kFp32;  // how the GEMM sweeps multiply (validate --gemm alike)
  // Only the collectives (osdp calibrate --compute emulate): no GEMM, elementwise, Adam or overlap
  // sweep; the calibration has no compute figures (the cluster's, or another calibration's, price it).
  bool collectives_only = false;
  costmodel::SegmentOptions segments;
  std::string tool_version;                                    // recorded in the provenance
  nlohmann::json extra_provenance = nlohmann::json::object();  // merged into the provenance

  nlohmann::json to_json() const;
};

// A few seconds in all: S up to 1 MiB at powers of two, 3 repeats, small GEMMs, touches up to 4 MiB.
CalibrateOptions quick_options();

// Progress of a sweep: point `index` of `total` (1-based) took `seconds` (per operation).
struct CalibrationProgress {
  // "all-gather", "reduce-scatter", "all-reduce", "elementwise", "adam", "gemm" or "overlap"
  std::string sweep;
  std::string label;  // "4 MiB", "1024x1024x1024"
  int index = 0, total = 0;
  double seconds = 0;
  // A sweep's points are timed in passes, one repetition of each a pass (calibrate.cpp says why):
  // each pass but the last is reported as it ends (pass = its number, label says which,
  // index = points done so far, seconds = the pass's wall time); a point (pass = 0) as its last
  // repetition is timed.
  int pass = 0;
};
using ProgressFn = std::function<void(const CalibrationProgress&)>;

// Called on rank 0 with every measured point, before the fit (which may fail): a caller keeps them.
using MeasuredFn = std::function<void(const costmodel::CalibrationRun&)>;

// Runs every sweep on every rank (all ranks must call it with the same options) and fits. `progress`
// and `measured` are called on rank 0 only. Device memory comes from Device::allocate and is freed
// before it returns. Throws BackendFailure when the backend fails, osdp::Error when a fit is impossible.
costmodel::CalibrationRun run_calibration(Device& device, Communicator& comm, const CalibrateOptions& options,
                                          const ProgressFn& progress = {}, const MeasuredFn& measured = {});

}  // namespace osdp::validate
