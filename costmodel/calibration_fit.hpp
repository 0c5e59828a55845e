// Least-squares fits of calibration measurements to the cost model's coefficients, and the
// calibration file made from them (pure math and JSON: no backend, no MPI).
//
// Collectives (the ring formula of costmodel/collective.hpp, as collective_s prices it), S the full
// gathered/reduced buffer: t = K alpha + F S beta, K the ring steps A (N-1) and F the bus bandwidth
// factor A (N-1)/N, A the ring passes (2 for all-reduce, 1 for all-gather and reduce-scatter).
// Compute (costmodel/cluster.hpp ComputeSpec, gemm_efficiency = 1), d = min(m, n, k):
//   elementwise  t = overhead + bytes / bandwidth
//   GEMM         t = overhead + flops / (peak d / (d + d_half)) = overhead + flops / peak + flops d_half /
//   (peak d)
// Every fit minimises the relative error, sum ((model - t) / t)^2, because sizes span five orders of
// magnitude and an absolute fit would see only the largest points; coefficients are constrained to be
// >= 0 (an exact two-variable non-negative least squares: the unconstrained solution where it is
// feasible, else the better of the two one-coefficient fits). Residuals are relative RMS:
//   sqrt(mean(((model - t) / t)^2)).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/cost_model.hpp"

namespace osdp::costmodel {

// One measured size: bytes (for a collective the full buffer S; for an elementwise kernel the bytes
// moved) and its time.
struct SizePoint {
  double bytes = 0;
  double seconds = 0;
};

// One fitted message-size range of a collective.
struct FitSegment {
  double from_bytes = 0;   // the smallest measured size in the segment
  double up_to_bytes = 0;  // the largest measured size in it; +infinity for the last segment
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double residual_rms = 0;  // relative
  int points = 0;
};

struct SegmentOptions {
  // Split while some segment's relative RMS residual exceeds this. 4%: over a shaped link one pair
  // left the large sizes (which a comm-bound step spends its time in) 3.5% fast at a 4.8% residual.
  double max_residual = 0.04;
  int max_segments = 6;
  int min_points = 3;            // per segment
  double min_improvement = 0.2;  // a split must cut the summed squared relative error by this fraction
};

// The cost model's time of collective `c` on `world` ranks for a buffer of `bytes` (as collective_s).
double collective_model_s(costmodel::Collective c, int world, double alpha_s, double beta_s_per_byte,
                          double bytes);

// Fits alpha and beta per contiguous message-size range. One pair first; while some segment's residual
// exceeds options.max_residual, the optimal partition into one more segment (dynamic programming over the
// points sorted by size, equal sizes never separated, at least min_points each) replaces it if it cuts
// the summed squared relative error by at least options.min_improvement, up to max_segments. Only
// partitions whose every pair a calibration file can hold compete (a latency of at most 1 s, a bandwidth
// of at least 1 MB/s); a single pair outside those is split while a holdable partition exists. Needs
// world >= 2 and at least two points, all with bytes > 0 and seconds > 0 (throws osdp::Error).
// Segments are sorted by size; the last one's up_to_bytes is +infinity.
std::vector<FitSegment> fit_collective(costmodel::Collective c, int world, std::vector<SizePoint> points,
                                       const SegmentOptions& options = {});

// The segments as the calibration file holds them.
std::vector<costmodel::Segment> to_segments(const std::vector<FitSegment>& fit);

struct ElementwiseFit {
  double overhead_s = 0;
  double bandwidth_bytes_per_s = 0;  // +infinity if the fit found no size dependence
  double residual_rms = 0;
  int points = 0;
};

// t = overhead + bytes / bandwidth (bytes moved). At least two points (throws osdp::Error).
ElementwiseFit fit_elementwise(const std::vector<SizePoint>& points);

// One timed GEMM kernel: `count` independent [m x k] x [k x n] products (fp32).
struct GemmPoint {
  std::int64_t m = 0, n = 0, k = 0, count = 1;
  double seconds = 0;
  double flops() const;  // 2 m n k count
  double bytes() const;  // 4 count (m k + k n + m n): what the cost model's memory term reads and writes
  std::int64_t min_dim() const;
};

struct GemmFit {
  double peak_flops_per_s = 0;
  double half_efficiency_dim = 0;  // d_half
  double residual_rms = 0;         // over the points used
  int points_used = 0;
  int points_memory_bound = 0;  // left out: the model prices them by its memory term
  double overhead_s = 0;        // the overhead the fit subtracted (see fit_gemm)
};

// Fits peak and d_half with the kernel overhead fixed (the elementwise fit's: ComputeSpec has one
// overhead for every kernel): t - overhead = (1/peak) flops + (d_half/peak) flops/d, linear in the two
// coefficients, relative error weighted by 1/t. Memory-bound points are left out, because the model
// prices a GEMM by max(compute term, bytes / memory_bandwidth) and the compute coefficients cannot
// explain them: the first fit takes the points whose time (less the overhead) is more than twice their
// memory term (all points if fewer than two are), then, at most 4 times, the points whose memory term
// is at most their compute term at the fitted coefficients are refitted (never below two). A negative
// d_half is clamped to 0; peak must come out positive (throws osdp::Error otherwise, as with fewer than
// two points). No kernel takes less than its overhead: where a GEMM was timed faster than overhead_s
// (an elementwise fit's overhead holds its harness's cost, Python's slicing in the torch backend's),
// the fit subtracts the fastest GEMM's time instead.
GemmFit fit_gemm(const std::vector<GemmPoint>& points, double overhead_s,
                 double memory_bandwidth_bytes_per_s);

// One GEMM shape timed writing its output (C = A B) and adding into it (C += A B, as a split's partial
// sums do), with C of c_bytes.
struct AccumulatePoint {
  double c_bytes = 0;
  double written_s = 0, accumulated_s = 0;
};

struct AccumulateFit {
  double bandwidth_bytes_per_s = 0;  // 0: nothing measured; kMaxBandwidth: no cost found
  double residual_rms = 0;           // relative to the fitted cost, at most 1
  int points = 0;
};

// accumulated - written = c_bytes / bandwidth, least squares through the origin weighted by
// 1/accumulated (each point's difference relative to its GEMM's time). A fitted cost of 0 or less
// (adding in place no slower than writing) is kMaxBandwidth. The residual is the RMS of each point's
// error over its fitted cost, at most 1. No points: an empty fit.
AccumulateFit fit_accumulate(const std::vector<AccumulatePoint>& points);

// Compute timed alone and while a collective runs on the other stream.
struct OverlapPoint {
  double alone_s = 0;
  double with_comm_s = 0;
};

// The median over points of with_comm / alone, clamped to >= 1 (and to the calibration file's <= 100).
// At least one point (throws osdp::Error).
double fit_interference(const std::vector<OverlapPoint>& points);

// The median (the mean of the middle two for an even count); v must not be empty.
double median(std::vector<double> v);
// The expected range (max - min) of n standard normal samples, Tippett's d2 (2 / sqrt(pi) for 2,
// 2.326 for 5, 2.704 for 7), by integrating 1 - Phi(x)^n - (1 - Phi(x))^n over x.
double expected_normal_range(int n);

// --- From measurements to a calibration file -------------------------------------------------------

// The Adam kernel moves 28 B per fp32 parameter (reads w, g, m, v; writes w, m, v), as the cost
// model's optimizer_s prices it: 2 (w + o) + g with w = g = 4 and o = 8.
constexpr int kAdamBytesPerParam = 28;
// A fitted beta of 0 (times that do not grow with size) is written as this bandwidth, since files
// hold bandwidths; so is an elementwise bandwidth above it.
constexpr double kMaxBandwidth = 1e15;

// The torch backend's sweep of what a REPLICATE module (FSDP2, a (world x 1) mesh) pays per step
// beyond its unsharded twin's forward and backward and its gradient reduction (timed in place), for S
// bytes of fp32 weights: the unshard on a shard group of one rank, the gradient's copies. Fitted as
// t = overhead + S / bandwidth into ComputeSpec::replicate_overhead_s and replicate_bandwidth.
inline constexpr const char* kReplicateSweep = "replicate-copies";

// One measured point, as the sibling CSV lists it.
struct Measurement {
  // A collective's name (costmodel::name_of: "all-gather", ...), "elementwise", "adam", "gemm",
  // "gemm-accumulate" (the same shapes adding into C), "overlap" or kReplicateSweep
  std::string sweep;
  double bytes =
      0;  // collectives and kReplicateSweep: S; elementwise and adam: bytes moved; gemm: the model's bytes
  std::int64_t m = 0, n = 0, k = 0, count = 0;  // GEMMs (overlap: the GEMM timed)
  double seconds = 0;                           // median over repetitions of the max over ranks
  double min_s = 0, max_s = 0;
  int repeats = 0, batch = 0;  // timed repetitions, operations per timed batch
  double with_comm_s = 0;      // overlap: the GEMM's time beside the all-gathers
  // Each repetition's time, in the order timed (pass 1 first), seconds per operation; empty where not
  // recorded. Repetition r of every point of a sweep ran in pass r, so a pass's times say how the
  // machine's pace moved while the sweep ran.
  std::vector<double> times_s;
};

// The ring levels a calibration fits apart, in the order of CalibrationRun::levels.
inline constexpr std::array<RingLevel, 2> kRingLevels = {RingLevel::kIntra, RingLevel::kInter};
// The sweep name of a collective measured on the rings of one level: "all-gather intra",
// "reduce-scatter inter"; on the world's, the collective's name alone.
std::string level_sweep(const CollectiveKind& k, RingLevel level);

struct CalibrationRun {
  std::vector<Measurement> measurements;
  std::array<std::vector<FitSegment>, kCollectives.size()> collectives;  // indexed by costmodel::Collective
  // Per level (kRingLevels: intra, inter) when the rings of nodes of per_node ranks were measured (per_node >
  // 0).
  int per_node = 0;
  std::array<std::array<std::vector<FitSegment>, kCollectives.size()>, 2> levels;
  ElementwiseFit elementwise, adam;
  ElementwiseFit replicate;  // the kReplicateSweep points (none: points 0)
  GemmFit gemm;
  AccumulateFit accumulate;            // the "gemm-accumulate" sweep against the "gemm" sweep's same shapes
  std::optional<double> interference;  // none without a separate comm stream
  int world = 1;
  double wall_s = 0;
  costmodel::Calibration calibration;
};

// Fits measured points (as run_calibration records them) into `run`'s fits and calibration, named
// `name`; the provenance gets the fit diagnostics under "fit", the rest is left to the caller.
// Separate from the measuring so that it can be tested without a backend.
void fit_measurements(CalibrationRun& run, const std::string& name, const SegmentOptions& segments = {});

// Fits whose relative residual exceeds this were made on a busy machine, or describe their sweep
// badly; `osdp calibrate` warns about them.
inline constexpr double kNoisyResidual = 0.15;
// How much the machine moved between the repeats of one point, as the sigma of a relative normal
// error: per point (max - min) / median / expected_normal_range(repeats), the median over the points;
// {"compute": over the GEMM, elementwise and Adam points, "communication": over the collectives'}.
// The repeats of a point are taken in passes over all points, so this is the machine's drift over the
// calibration's minutes; it is in the provenance's "fit" as "repeat_spread" (costmodel/uncertainty.hpp
// draws it as one factor shared by every price of its kind).
nlohmann::json repeat_spread_json(const std::vector<Measurement>& measurements);

// The fits of `run` over `threshold`, each as "all-gather from 1.00 MiB (23.0%)", in the order the
// summary prints them (collective segments, elementwise, adam, the GEMM formula; not the accumulation,
// whose residual is large by nature).
std::vector<std::string> noisy_fits(const CalibrationRun& run, double threshold = kNoisyResidual);

// The raw points as CSV (one header line, then one line per Measurement). The calibration file is
// costmodel::to_json(run.calibration): its segments carry their fits' "residual_rms".
std::string measurements_csv(const CalibrationRun& run);

}  // namespace osdp::costmodel
