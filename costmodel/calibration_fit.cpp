// Relative-error least squares with non-negative coefficients, and the optimal partition of a
// collective's sizes into segments (see calibration_fit.hpp for the models).
//
// Every fit here has two coefficients c0, c1 >= 0 and minimises sum_i (c0 X_i0 + c1 X_i1 - y_i)^2 on
// rows already divided by the measured time. The non-negative optimum of a convex quadratic in two
// variables is the unconstrained optimum when that is feasible, else the better of the two edge optima
// (one coefficient at 0, the other's one-variable optimum clamped at 0): nnls2 below tries exactly these.
//
// Segmentation (fit_collective): cost(i, j) = the smallest summed squared relative error of one pair on
// the sorted points [i, j), infinite where that pair is not one a calibration file holds (holdable);
// best_k(j) = min over i of best_{k-1}(i) + cost(i, j). O(n^2) range fits of O(n) each, so O(n^3) for n
// points (a sweep gives a few dozen per collective).
//
// From measurements to a calibration file (fit_measurements and the files): calibration_run.cpp.
#include "costmodel/calibration_fit.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <Eigen/Core>

#include "costmodel/bounds.hpp"
#include "costmodel/error.hpp"

namespace osdp::costmodel {
namespace {

using costmodel::Collective;

// The least-squares systems live on the stack (at most kMaxRows points per fit): no Eigen heap
// allocation here. cpu_device.cpp is built with -march=native, and Eigen's allocator is an inline
// function the linker keeps one copy of for the whole program; a copy from this file (16-byte
// alignment, malloc/free) would then serve cpu_device.cpp's AVX-512 GEMM buffers (64-byte alignment).
constexpr Eigen::Index kMaxRows = 1024;
using Rows2 = Eigen::Matrix<double, Eigen::Dynamic, 2, Eigen::ColMajor, kMaxRows, 2>;
using Column = Eigen::Matrix<double, Eigen::Dynamic, 1, Eigen::ColMajor, kMaxRows, 1>;

Eigen::Index checked_rows(std::size_t n) {
  if (n > static_cast<std::size_t>(kMaxRows))
    throw Error(fmt::format("calibration fit: {} points in one fit; at most {}", n, kMaxRows));
  return static_cast<Eigen::Index>(n);
}

struct Fit2 {
  double c0 = 0, c1 = 0;
  double sse = kInf;
};

double sse_of(const Rows2& x, const Column& y, double c0, double c1) {
  return (x.col(0) * c0 + x.col(1) * c1 - y).squaredNorm();
}

// One coefficient alone (the other at 0), clamped at 0.
double one_coefficient(const Column& col, const Column& y) {
  const double den = col.squaredNorm();
  return den > 0 ? std::max(0.0, col.dot(y) / den) : 0.0;
}

// The unconstrained least-squares solution of [x0 x1] c = y by a thin QR of the two columns (modified
// Gram-Schmidt, orthogonalised twice, on columns scaled to unit norm: the sizes make them differ by
// orders of magnitude); false when the columns are (numerically) collinear.
bool solve2(const Rows2& x, const Column& y, double& c0, double& c1) {
  const double n0 = x.col(0).norm(), n1 = x.col(1).norm();
  if (!(n0 > 0) || !(n1 > 0)) return false;
  const Column q0 = x.col(0) / n0;
  Column v = x.col(1) / n1;
  const double r01a = q0.dot(v);
  v -= r01a * q0;
  const double r01b = q0.dot(v);
  v -= r01b * q0;
  const double r01 = r01a + r01b, r11 = v.norm();
  if (!(r11 > 1e-12)) return false;
  const double s1 = v.dot(y) / (r11 * r11);  // R c = Q^T y, back substitution (r00 = 1)
  const double s0 = q0.dot(y) - r01 * s1;
  c0 = s0 / n0;
  c1 = s1 / n1;
  return std::isfinite(c0) && std::isfinite(c1);
}

// min ||c0 x0 + c1 x1 - y||^2 subject to c0, c1 >= 0 (with `c0_first`, the c0 = 0 edge is not
// taken: the fit of a peak rate, whose inverse is c0, keeps c0 and drops c1 instead).
Fit2 nnls2(const Rows2& x, const Column& y, bool c0_first = false) {
  double c0 = 0, c1 = 0;
  if (solve2(x, y, c0, c1) && c0 >= 0 && c1 >= 0) return {c0, c1, sse_of(x, y, c0, c1)};
  const double only0 = one_coefficient(x.col(0), y);
  const double only1 = one_coefficient(x.col(1), y);
  const double sse0 = sse_of(x, y, only0, 0.0), sse1 = sse_of(x, y, 0.0, only1);
  if (sse0 <= sse1 || c0_first) return {only0, 0.0, sse0};
  return {0.0, only1, sse1};
}

double rms(double sse, int points) {
  return points > 0 ? std::sqrt(sse / points) : 0.0;
}

void check_points(const std::vector<SizePoint>& points, const char* what) {
  if (points.size() < 2)
    throw Error(fmt::format("{}: {} measured point(s); a fit of two coefficients needs at least 2", what,
                            points.size()));
  for (const SizePoint& p : points)
    if (!(p.bytes > 0) || !(p.seconds > 0) || !std::isfinite(p.bytes) || !std::isfinite(p.seconds))
      throw Error(fmt::format("{}: a point has {} bytes in {} s; both must be positive and finite", what,
                              p.bytes, p.seconds));
}

// The relative-error system of one collective on points [i, j): t = K alpha + F S beta with K the
// ring steps A(N-1) and F the bus bandwidth factor A(N-1)/N (costmodel/collective.hpp); rows
// (K/t, F S/t), rhs 1.
struct CollectiveSystem {
  Collective c;
  int world;
  const std::vector<SizePoint>& pts;

  Fit2 fit(std::size_t i, std::size_t j) const {
    const Eigen::Index rows = checked_rows(j - i);
    Rows2 x(rows, 2);
    const double steps = ring_steps(c, world);
    const double bus = bus_bandwidth_factor(c, world);
    for (Eigen::Index r = 0; r < rows; ++r) {
      const SizePoint& p = pts[i + static_cast<std::size_t>(r)];
      x(r, 0) = steps / p.seconds;
      x(r, 1) = bus * p.bytes / p.seconds;
    }
    return nnls2(x, Column::Ones(rows));
  }
};

// Whether a range's pair is one a calibration file can hold: a latency of at most a second per ring
// step and a bandwidth of at least 1 MB/s (costmodel/bounds.hpp). A steep pair on a few small sizes
// (a rank descheduled for a few milliseconds while the others wait) is neither a link nor a file's.
bool holdable(const Fit2& f) {
  return f.c0 <= bounds::kLatency.max && f.c1 * bounds::kLinkBandwidth.min <= 1.0;
}

// The optimal partition of the sorted points into k = 1..max_k contiguous ranges.
class Partitioner {
 public:
  Partitioner(const CollectiveSystem& sys, std::size_t n, int min_points, int max_k)
      : n_(n), max_k_(max_k), cost_((n + 1) * (n + 1), kInf) {
    const auto& p = sys.pts;
    auto cut_ok = [&](std::size_t j) { return j == 0 || j == n || p[j - 1].bytes < p[j].bytes; };
    const std::size_t min_len = static_cast<std::size_t>(std::max(1, min_points));
    for (std::size_t i = 0; i < n; ++i) {
      if (!cut_ok(i)) continue;
      for (std::size_t j = i + min_len; j <= n; ++j)
        if (cut_ok(j)) {
          const Fit2 f = sys.fit(i, j);
          if (holdable(f)) cost_[i * (n + 1) + j] = f.sse;
        }
    }
    // best_[k][j]: the first j points in k ranges; from_[k][j]: where the last range starts.
    best_.assign(static_cast<std::size_t>(max_k + 1), std::vector<double>(n + 1, kInf));
    from_.assign(static_cast<std::size_t>(max_k + 1), std::vector<std::size_t>(n + 1, 0));
    best_[0][0] = 0;
    for (int k = 1; k <= max_k; ++k) {
      const auto ku = static_cast<std::size_t>(k);
      for (std::size_t j = 1; j <= n; ++j)
        for (std::size_t i = 0; i < j; ++i) {
          const double v = best_[ku - 1][i] + cost_[i * (n + 1) + j];
          if (v < best_[ku][j]) {
            best_[ku][j] = v;
            from_[ku][j] = i;
          }
        }
    }
  }

  double total(int k) const { return k <= max_k_ ? best_[static_cast<std::size_t>(k)][n_] : kInf; }

  // The range starts of the optimal k-partition, in increasing order, with n appended.
  std::vector<std::size_t> cuts(int k) const {
    std::vector<std::size_t> c{n_};
    std::size_t j = n_;
    for (int kk = k; kk >= 1; --kk) {
      j = from_[static_cast<std::size_t>(kk)][j];
      c.push_back(j);
    }
    std::reverse(c.begin(), c.end());
    return c;
  }

 private:
  std::size_t n_;
  int max_k_;
  std::vector<double> cost_;
  std::vector<std::vector<double>> best_;
  std::vector<std::vector<std::size_t>> from_;
};

std::vector<FitSegment> segments_for(const CollectiveSystem& sys, const std::vector<std::size_t>& cuts) {
  std::vector<FitSegment> out;
  for (std::size_t s = 0; s + 1 < cuts.size(); ++s) {
    const std::size_t i = cuts[s], j = cuts[s + 1];
    const Fit2 f = sys.fit(i, j);
    FitSegment seg;
    seg.from_bytes = sys.pts[i].bytes;
    seg.up_to_bytes = j == sys.pts.size() ? kInf : sys.pts[j - 1].bytes;
    seg.alpha_s = f.c0;
    seg.beta_s_per_byte = f.c1;
    seg.points = static_cast<int>(j - i);
    seg.residual_rms = rms(f.sse, seg.points);
    out.push_back(seg);
  }
  return out;
}

double max_residual(const std::vector<FitSegment>& segs) {
  double m = 0;
  for (const auto& s : segs) m = std::max(m, s.residual_rms);
  return m;
}

bool holdable(const std::vector<FitSegment>& segs) {
  return std::all_of(segs.begin(), segs.end(), [](const FitSegment& s) {
    return holdable(Fit2{s.alpha_s, s.beta_s_per_byte, 0});
  });
}

}  // namespace

double collective_model_s(Collective c, int world, double alpha_s, double beta_s_per_byte, double bytes) {
  return CollectiveOp{c, bytes, world}.ring_s(alpha_s, beta_s_per_byte);
}

std::vector<FitSegment> fit_collective(Collective c, int world, std::vector<SizePoint> points,
                                       const SegmentOptions& options) {
  const std::string what = fmt::format("fit of {} on {} ranks", costmodel::to_string(c), world);
  if (world < 2) throw Error(what + ": a collective needs at least 2 ranks");
  check_points(points, what.c_str());
  std::stable_sort(points.begin(), points.end(),
                   [](const SizePoint& a, const SizePoint& b) { return a.bytes < b.bytes; });
  const CollectiveSystem sys{c, world, points};
  const std::size_t n = points.size();
  const int min_points = std::max(2, options.min_points);
  const int max_k = std::max(1, std::min(options.max_segments, static_cast<int>(n) / min_points));
  if (max_k == 1) return segments_for(sys, {0, n});

  const Partitioner part(sys, n, min_points, max_k);
  int k = 1;
  std::vector<FitSegment> segs = segments_for(sys, {0, n});
  double sse = sys.fit(0, n).sse;
  // One pair a file cannot hold is split further whatever the improvement; a split never makes one.
  while (k < max_k && (max_residual(segs) > options.max_residual || !holdable(segs))) {
    const double next = part.total(k + 1);
    if (!std::isfinite(next) || (holdable(segs) && next > (1.0 - options.min_improvement) * sse)) break;
    ++k;
    sse = next;
    segs = segments_for(sys, part.cuts(k));
  }
  return segs;
}

std::vector<costmodel::Segment> to_segments(const std::vector<FitSegment>& fit) {
  std::vector<costmodel::Segment> out;
  for (const FitSegment& f : fit)
    out.push_back({f.up_to_bytes, f.alpha_s, f.beta_s_per_byte, f.residual_rms});
  return out;
}

ElementwiseFit fit_elementwise(const std::vector<SizePoint>& points) {
  check_points(points, "elementwise fit");
  const Eigen::Index rows = checked_rows(points.size());
  Rows2 x(rows, 2);
  for (Eigen::Index r = 0; r < rows; ++r) {
    const SizePoint& p = points[static_cast<std::size_t>(r)];
    x(r, 0) = 1.0 / p.seconds;
    x(r, 1) = p.bytes / p.seconds;
  }
  const Fit2 f = nnls2(x, Column::Ones(rows));
  ElementwiseFit out;
  out.overhead_s = f.c0;
  out.bandwidth_bytes_per_s = f.c1 > 0 ? 1.0 / f.c1 : kInf;
  out.points = static_cast<int>(rows);
  out.residual_rms = rms(f.sse, out.points);
  return out;
}

AccumulateFit fit_accumulate(const std::vector<AccumulatePoint>& points) {
  AccumulateFit out;
  double xx = 0, xd = 0;
  for (const AccumulatePoint& p : points) {
    if (!(p.c_bytes > 0) || !(p.written_s > 0) || !(p.accumulated_s > 0))
      throw Error(
          fmt::format("accumulate fit: a point of {} B timed {} s written and {} s added is not a "
                      "positive measurement",
                      p.c_bytes, p.written_s, p.accumulated_s));
    const double w = 1.0 / p.accumulated_s;
    xx += p.c_bytes * p.c_bytes * w * w;
    xd += p.c_bytes * (p.accumulated_s - p.written_s) * w * w;
    ++out.points;
  }
  if (out.points == 0) return out;
  const double s_per_byte = xd / xx;
  if (!(s_per_byte > 1.0 / kMaxBandwidth)) {
    out.bandwidth_bytes_per_s = kMaxBandwidth;
    return out;
  }
  out.bandwidth_bytes_per_s = 1.0 / s_per_byte;
  double sse = 0;
  for (const AccumulatePoint& p : points) {
    const double fitted = p.c_bytes * s_per_byte;
    const double e = (p.accumulated_s - p.written_s - fitted) / fitted;
    sse += e * e;
  }
  out.residual_rms = std::min(1.0, std::sqrt(sse / out.points));
  return out;
}

double GemmPoint::flops() const {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
         static_cast<double>(count);
}

double GemmPoint::bytes() const {
  const double md = static_cast<double>(m), nd = static_cast<double>(n), kd = static_cast<double>(k);
  return 4.0 * static_cast<double>(count) * (md * kd + kd * nd + md * nd);
}

std::int64_t GemmPoint::min_dim() const {
  return std::min({m, n, k});
}

GemmFit fit_gemm(const std::vector<GemmPoint>& points, double overhead_s, double memory_bandwidth) {
  if (points.size() < 2)
    throw Error(fmt::format("GEMM fit: {} measured point(s); it needs at least 2", points.size()));
  for (const GemmPoint& p : points)
    if (!(p.seconds > 0) || p.min_dim() < 1 || p.count < 1)
      throw Error(fmt::format("GEMM fit: a point [{} x {} x {}] x {} in {} s is not a positive measurement",
                              p.m, p.n, p.k, p.count, p.seconds));
  for (const GemmPoint& p : points) overhead_s = std::min(overhead_s, p.seconds);
  auto solve = [&](const std::vector<std::size_t>& used) {
    const Eigen::Index rows = checked_rows(used.size());
    Rows2 x(rows, 2);
    Column y(rows);
    for (Eigen::Index r = 0; r < rows; ++r) {
      const GemmPoint& p = points[used[static_cast<std::size_t>(r)]];
      x(r, 0) = p.flops() / p.seconds;
      x(r, 1) = p.flops() / static_cast<double>(p.min_dim()) / p.seconds;
      y(r) = (p.seconds - overhead_s) / p.seconds;
    }
    return nnls2(x, y, true);
  };
  // First the points clearly not memory-bound (measured time above twice the memory term), so that
  // memory-bound ones do not bend the first fit; then the model decides, over all points.
  const bool can_drop = memory_bandwidth > 0 && std::isfinite(memory_bandwidth);
  std::vector<std::size_t> used;
  for (std::size_t i = 0; i < points.size(); ++i)
    if (!can_drop || points[i].bytes() / memory_bandwidth < 0.5 * (points[i].seconds - overhead_s))
      used.push_back(i);
  if (used.size() < 2) {
    used.resize(points.size());
    for (std::size_t i = 0; i < used.size(); ++i) used[i] = i;
  }
  Fit2 f = solve(used);
  for (int round = 0; can_drop && round < 4; ++round) {
    std::vector<std::size_t> next;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const GemmPoint& p = points[i];
      const double compute = f.c0 * p.flops() + f.c1 * p.flops() / static_cast<double>(p.min_dim());
      if (p.bytes() / memory_bandwidth <= compute) next.push_back(i);
    }
    if (next == used || next.size() < 2) break;
    used = next;
    f = solve(used);
  }
  if (!(f.c0 > 0))
    throw Error(
        "GEMM fit: the times do not grow with the flops (no positive peak rate fits); "
        "are the timed GEMMs dominated by overhead?");
  GemmFit out;
  out.peak_flops_per_s = 1.0 / f.c0;
  out.half_efficiency_dim = f.c1 / f.c0;
  out.points_used = static_cast<int>(used.size());
  out.points_memory_bound = static_cast<int>(points.size() - used.size());
  out.residual_rms = rms(f.sse, out.points_used);
  out.overhead_s = overhead_s;
  return out;
}

double fit_interference(const std::vector<OverlapPoint>& points) {
  if (points.empty()) throw Error("interference fit: no measured point");
  std::vector<double> r;
  for (const OverlapPoint& p : points) {
    if (!(p.alone_s > 0) || !(p.with_comm_s > 0))
      throw Error(
          fmt::format("interference fit: times {} s alone and {} s with communication must be positive",
                      p.alone_s, p.with_comm_s));
    r.push_back(p.with_comm_s / p.alone_s);
  }
  return std::clamp(median(r), 1.0, 100.0);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace osdp::costmodel
