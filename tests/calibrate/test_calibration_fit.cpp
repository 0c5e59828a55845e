// Tests of the calibration fits (validate/calibration_fit.hpp) on synthetic points made from known
// coefficients; the expected numbers are derived here, independently of the fitting code:
//   collective (ring): t = A (N-1) alpha + A (N-1)/N S beta, A = 2 for all-reduce, else 1;
//   elementwise:       t = overhead + bytes / bandwidth;
//   GEMM:              t = overhead + flops / (peak d / (d + d_half)), d = min(m, n, k);
//   interference:      median of t_with / t_alone, at least 1.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "costmodel/calibration_fit.hpp"
#include "costmodel/error.hpp"

using osdp::costmodel::Collective;
using namespace osdp;

namespace {

constexpr double kExact = 1e-9;  // noise-free data: recovered to this relative error
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Truth {
  double up_to, alpha, beta;
};

double ring(Collective c, int n, double alpha, double beta, double s) {
  const double a = c == Collective::kAllReduce ? 2.0 : 1.0;
  return a * ((n - 1) * alpha + (n - 1) / static_cast<double>(n) * s * beta);
}

// Sizes 1 KiB .. 256 MiB, `steps` per doubling; times from the piecewise truth (first segment whose
// up_to covers the size).
std::vector<costmodel::SizePoint> synthetic(Collective c, int n, const std::vector<Truth>& truth,
                                            int steps = 2) {
  std::vector<costmodel::SizePoint> pts;
  for (int i = 0; i <= 18 * steps; ++i) {
    const double s = std::round(1024.0 * std::pow(2.0, static_cast<double>(i) / steps));
    for (const Truth& t : truth)
      if (s <= t.up_to) {
        pts.push_back({s, ring(c, n, t.alpha, t.beta, s)});
        break;
      }
  }
  return pts;
}

}  // namespace

TEST_CASE("one alpha-beta pair is recovered exactly from noise-free points", "[calibrate][fit]") {
  for (const Collective c : {Collective::kAllGather, Collective::kReduceScatter, Collective::kAllReduce}) {
    for (const int n : {2, 3, 8}) {
      CAPTURE(osdp::costmodel::to_string(c), n);
      const auto segs = costmodel::fit_collective(c, n, synthetic(c, n, {{kInf, 12e-6, 1.0 / 7e9}}));
      REQUIRE(segs.size() == 1);
      CHECK(segs[0].alpha_s == Approx(12e-6).epsilon(kExact));
      CHECK(segs[0].beta_s_per_byte == Approx(1.0 / 7e9).epsilon(kExact));
      CHECK(segs[0].residual_rms < kExact);
      CHECK(segs[0].points == 37);
      CHECK(segs[0].up_to_bytes == kInf);
      CHECK(segs[0].from_bytes == 1024.0);
    }
  }
}

// Three regimes like a shared-memory transport's: latency-bound small messages, cache-resident middle
// sizes, memory-bound large ones. Each is 30% to 10x off the others, so one pair cannot fit.
TEST_CASE("piecewise alpha-beta is recovered with its boundaries", "[calibrate][fit]") {
  const std::vector<Truth> truth{
      {16384, 4e-6, 1.0 / 1e9}, {1048576, 20e-6, 1.0 / 8e9}, {kInf, 300e-6, 1.0 / 1.5e9}};
  for (const Collective c : {Collective::kAllGather, Collective::kAllReduce}) {
    CAPTURE(osdp::costmodel::to_string(c));
    const auto pts = synthetic(c, 2, truth);
    const auto segs = costmodel::fit_collective(c, 2, pts);
    REQUIRE(segs.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(segs[i].alpha_s == Approx(truth[i].alpha).epsilon(kExact));
      CHECK(segs[i].beta_s_per_byte == Approx(truth[i].beta).epsilon(kExact));
      CHECK(segs[i].residual_rms < kExact);
    }
    // The boundaries are the largest measured size of each regime: 16 KiB and 1 MiB are sampled.
    CHECK(segs[0].up_to_bytes == 16384.0);
    CHECK(segs[1].up_to_bytes == 1048576.0);
    CHECK(segs[2].up_to_bytes == kInf);
    CHECK(segs[1].from_bytes == std::round(16384 * std::sqrt(2.0)));
    CHECK(segs[0].points + segs[1].points + segs[2].points == static_cast<int>(pts.size()));
    // And the file form keeps them.
    const auto file = costmodel::to_segments(segs);
    REQUIRE(file.size() == 3);
    CHECK(file[0].up_to_bytes == 16384.0);
    CHECK(file[2].up_to_bytes == kInf);
    CHECK(file[1].alpha_s == segs[1].alpha_s);
  }
}

TEST_CASE("a segment boundary is found where the truth changes", "[calibrate][fit]") {
  // One change at 256 KiB (alpha 5 us -> 60 us, 6 GB/s -> 1.2 GB/s), powers of two only.
  const std::vector<Truth> truth{{262144, 5e-6, 1.0 / 6e9}, {kInf, 60e-6, 1.0 / 1.2e9}};
  const auto segs = costmodel::fit_collective(Collective::kReduceScatter, 4,
                                              synthetic(Collective::kReduceScatter, 4, truth, 1));
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].up_to_bytes == 262144.0);
  CHECK(segs[0].points == 9);   // 1 KiB .. 256 KiB
  CHECK(segs[1].points == 10);  // 512 KiB .. 256 MiB
  CHECK(segs[1].from_bytes == 524288.0);
}

// A lab's link on 4 ranks (100 us a step, 25 MB/s), 1 KiB .. 256 MiB by doublings, with the three
// smallest sizes stretched to 1, 2 and 4 ms (a rank descheduled while the others wait: 4 ranks on 2
// CPUs). Alone those three are one exact pair of 0.77 MB/s, below the 1 MB/s a calibration file holds,
// so the unconstrained best partition (that range plus the truth) would fail the calibration. The fit
// keeps to partitions whose every pair is holdable, and among those with as many segments as it
// returns it is the best: brute force over every partition into ranges of at least 3 points, each
// range's pair from a one-segment fit.
TEST_CASE("segments a calibration file cannot hold are not chosen", "[calibrate][fit]") {
  const Collective c = Collective::kReduceScatter;
  auto pts = synthetic(c, 4, {{kInf, 100e-6, 1.0 / 25e6}}, 1);
  REQUIRE(pts.size() == 19);
  pts[0].seconds = 1e-3;
  pts[1].seconds = 2e-3;
  pts[2].seconds = 4e-3;
  costmodel::SegmentOptions one;
  one.max_segments = 1;
  struct Range {
    double sse;
    bool holdable;
  };
  auto range = [&](std::size_t i, std::size_t j) {
    const auto f = costmodel::fit_collective(c, 4, {pts.begin() + i, pts.begin() + j}, one);
    return Range{f[0].residual_rms * f[0].residual_rms * f[0].points,
                 f[0].alpha_s <= 1.0 && f[0].beta_s_per_byte * 1e6 <= 1.0};
  };
  // The three stretched sizes alone: 0.77 MB/s.
  const auto small = costmodel::fit_collective(c, 4, {pts.begin(), pts.begin() + 3}, one);
  CHECK(1.0 / small[0].beta_s_per_byte == Approx(0.75 * 1024 / 1e-3).epsilon(1e-6));
  // best[k] (any ranges) and held[k] (holdable ranges only): the least summed error in k ranges.
  const std::size_t n = pts.size();
  std::vector<double> best(7, kInf), held(7, kInf);
  std::vector<std::size_t> cuts{0};
  auto walk = [&](auto&& self, double sse, bool ok) -> void {
    const std::size_t i = cuts.back();
    if (i == n) {
      const std::size_t k = cuts.size() - 1;
      if (k > 6) return;
      best[k] = std::min(best[k], sse);
      if (ok) held[k] = std::min(held[k], sse);
      return;
    }
    for (std::size_t j = i + 3; j <= n; ++j) {
      const Range r = range(i, j);
      cuts.push_back(j);
      self(self, sse + r.sse, ok && r.holdable);
      cuts.pop_back();
    }
  };
  walk(walk, 0.0, true);
  const auto segs = costmodel::fit_collective(c, 4, pts);
  const std::size_t k = segs.size();
  REQUIRE(k >= 2);
  double sse = 0;
  int points = 0;
  for (const auto& s : segs) {
    CAPTURE(s.from_bytes);
    CHECK(s.alpha_s <= 1.0);
    CHECK(s.beta_s_per_byte * 1e6 <= 1.0);
    sse += s.residual_rms * s.residual_rms * s.points;
    points += s.points;
  }
  CHECK(points == 19);
  CHECK(sse == Approx(held[k]).epsilon(1e-9));
  CHECK(best[k] < 0.5 * held[k]);  // the constraint costs: the unconstrained optimum is not holdable
}

// World 2, all-gather (A = 1): t = alpha + (S/2) beta. Points (S, t) = (2, 1), (4, 2), (6, 2).
// Weighted by 1/t, rows (1/t, (S/2)/t) = (1, 1), (1/2, 1), (1/2, 3/2), right-hand side 1.
// Normal equations [[3/2, 9/4], [9/4, 17/4]] (alpha, beta) = (2, 7/2), determinant 21/16:
//   alpha = (2 17/4 - 9/4 7/2) / (21/16) = 10/21,  beta = (3/2 7/2 - 9/4 2) / (21/16) = 4/7.
// Relative residuals 10/21 + 12/21 - 1 = 1/21, 5/21 + 12/21 - 1 = -4/21, 5/21 + 18/21 - 1 = 2/21;
// RMS = sqrt((1 + 16 + 4) / 441 / 3) = sqrt(1/63) ~ 12.6%: above the 4% threshold, but three points
// cannot be split into segments of at least three.
TEST_CASE("the reported residual is the relative RMS of the fit", "[calibrate][fit]") {
  const auto segs = costmodel::fit_collective(Collective::kAllGather, 2, {{2, 1}, {4, 2}, {6, 2}});
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].alpha_s == Approx(10.0 / 21).epsilon(1e-12));
  CHECK(segs[0].beta_s_per_byte == Approx(4.0 / 7).epsilon(1e-12));
  CHECK(segs[0].residual_rms == Approx(std::sqrt(1.0 / 63)).epsilon(1e-12));
  CHECK(segs[0].points == 3);
  // The order of the points does not matter.
  const auto shuffled = costmodel::fit_collective(Collective::kAllGather, 2, {{6, 2}, {2, 1}, {4, 2}});
  CHECK(shuffled[0].alpha_s == Approx(10.0 / 21).epsilon(1e-12));
}

// Multiplicative noise, uniform within +-5% (seed 20261122), on one pair (10 us, 5 GB/s), 37 sizes.
// A relative fit of 37 points with noise of standard deviation 5%/sqrt(3) = 2.9% estimates beta (fixed
// by the ~25 bandwidth-bound sizes) to about 2.9%/sqrt(25) ~ 0.6% and alpha (the ~10 latency-bound
// sizes) to about 1%; the bounds below are 5x those. The residual is about the noise's 2.9%, under the
// 4% threshold (checked below), so no split.
TEST_CASE("noise keeps the fit within a stated bound", "[calibrate][fit]") {
  std::mt19937 gen(20261122);
  std::uniform_real_distribution<double> u(-0.05, 0.05);
  auto pts = synthetic(Collective::kAllGather, 2, {{kInf, 10e-6, 1.0 / 5e9}});
  for (auto& p : pts) p.seconds *= 1.0 + u(gen);
  const auto segs = costmodel::fit_collective(Collective::kAllGather, 2, pts);
  REQUIRE(segs.size() == 1);
  CHECK(std::abs(segs[0].alpha_s / 10e-6 - 1) < 0.05);
  CHECK(std::abs(segs[0].beta_s_per_byte * 5e9 - 1) < 0.03);
  CHECK(segs[0].residual_rms > 0.015);
  CHECK(segs[0].residual_rms < 0.04);
}

TEST_CASE("noise above the threshold does not split a single regime", "[calibrate][fit]") {
  // +-30% noise: residual ~17% > 4%, but no partition cuts the error by 20%.
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-0.3, 0.3);
  auto pts = synthetic(Collective::kAllReduce, 2, {{kInf, 10e-6, 1.0 / 5e9}});
  for (auto& p : pts) p.seconds *= 1.0 + u(gen);
  const auto segs = costmodel::fit_collective(Collective::kAllReduce, 2, pts);
  CHECK(segs.size() == 1);
  CHECK(segs[0].residual_rms > 0.1);
}

// Times that grow faster than linearly in S (t = S^1.1 ns) have a negative best intercept; with
// alpha held at 0 the relative fit of t = (S/2) beta is beta = sum(u) / sum(u^2), u = (S/2) / t.
TEST_CASE("a negative intercept is clamped: alpha = 0 and beta refitted", "[calibrate][fit]") {
  std::vector<costmodel::SizePoint> pts;
  for (const double s : {1e3, 2e3, 4e3, 8e3}) pts.push_back({s, 1e-9 * std::pow(s, 1.1)});
  costmodel::SegmentOptions one;
  one.max_segments = 1;
  const auto segs = costmodel::fit_collective(Collective::kAllGather, 2, pts, one);
  REQUIRE(segs.size() == 1);
  double su = 0, su2 = 0;
  for (const auto& p : pts) {
    const double u = p.bytes / 2 / p.seconds;
    su += u;
    su2 += u * u;
  }
  CHECK(segs[0].alpha_s == 0.0);
  CHECK(segs[0].beta_s_per_byte == Approx(su / su2).epsilon(1e-12));
  CHECK(segs[0].residual_rms > 0);
}

TEST_CASE("a fit limited to one segment, or with too few points, keeps one pair", "[calibrate][fit]") {
  const std::vector<Truth> truth{{262144, 5e-6, 1.0 / 6e9}, {kInf, 60e-6, 1.0 / 1.2e9}};
  costmodel::SegmentOptions one;
  one.max_segments = 1;
  const auto segs =
      costmodel::fit_collective(Collective::kAllGather, 2, synthetic(Collective::kAllGather, 2, truth), one);
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].residual_rms > 0.1);
  const auto five = costmodel::fit_collective(
      Collective::kAllGather, 2, {{1e3, 1e-5}, {1e4, 2e-5}, {1e5, 9e-5}, {1e6, 2e-3}, {1e7, 2e-2}});
  CHECK(five.size() == 1);  // 5 < 2 x 3 points
}

TEST_CASE("bad collective inputs are errors", "[calibrate][fit]") {
  CHECK_THROWS_AS(costmodel::fit_collective(Collective::kAllGather, 1, {{1e3, 1e-5}, {1e4, 2e-5}}),
                  osdp::Error);
  CHECK_THROWS_AS(costmodel::fit_collective(Collective::kAllGather, 2, {{1e3, 1e-5}}), osdp::Error);
  CHECK_THROWS_AS(costmodel::fit_collective(Collective::kAllGather, 2, {{1e3, 1e-5}, {1e4, 0}}), osdp::Error);
}

TEST_CASE("costmodel::collective_model_s is the ring formula", "[calibrate][fit]") {
  // N = 4, alpha 10 us, 1 GB/s, S = 4 MB: 3 x 10 us + 3/4 x 4e6 / 1e9 s = 3.03 ms; all-reduce 6.06 ms.
  CHECK(costmodel::collective_model_s(Collective::kAllGather, 4, 10e-6, 1e-9, 4e6) ==
        Approx(3.03e-3).epsilon(1e-12));
  CHECK(costmodel::collective_model_s(Collective::kAllReduce, 4, 10e-6, 1e-9, 4e6) ==
        Approx(6.06e-3).epsilon(1e-12));
  CHECK(costmodel::collective_model_s(Collective::kAllReduce, 1, 10e-6, 1e-9, 4e6) == 0.0);
}

// Elementwise: overhead 3 us, 12 GB/s over 64 KiB .. 256 MiB.
TEST_CASE("the elementwise fit recovers overhead and bandwidth", "[calibrate][fit]") {
  std::vector<costmodel::SizePoint> pts;
  for (double b = 65536; b <= 268435456; b *= 2) pts.push_back({b, 3e-6 + b / 12e9});
  const costmodel::ElementwiseFit f = costmodel::fit_elementwise(pts);
  CHECK(f.overhead_s == Approx(3e-6).epsilon(kExact));
  CHECK(f.bandwidth_bytes_per_s == Approx(12e9).epsilon(kExact));
  CHECK(f.residual_rms < kExact);
  CHECK(f.points == 13);
  CHECK_THROWS_AS(costmodel::fit_elementwise({{1e3, 1e-6}}), osdp::Error);
}

// Adding into C costs c_bytes / 4 GB/s beyond writing it, on GEMMs of 1-40 ms. Noise-free: the
// bandwidth exactly, no residual. With the differences off by +10% and -10% on two points of equal
// C and equal accumulating times, the weighted least squares through the origin is their mean: the bandwidth
// again, and each point 10% off its fitted cost.
TEST_CASE("the accumulate fit recovers what adding into C costs", "[calibrate][fit]") {
  std::vector<costmodel::AccumulatePoint> pts;
  for (const double c : {1e6, 4e6, 16e6, 64e6}) pts.push_back({c, c * 6e-10, c * 6e-10 + c / 4e9});
  costmodel::AccumulateFit f = costmodel::fit_accumulate(pts);
  CHECK(f.points == 4);
  CHECK(f.bandwidth_bytes_per_s == Approx(4e9).epsilon(kExact));
  CHECK(f.residual_rms < kExact);

  const double c = 8e6, extra = c / 4e9, t0 = 1e-2;
  f = costmodel::fit_accumulate(
      {{c, t0, t0 + 1.1 * extra}, {c, t0 + 0.2 * extra, t0 + 0.2 * extra + 0.9 * extra}});
  // Both accumulating GEMMs took t0 + 1.1 extra: equal weights, the mean of 1.1 and 0.9 extra.
  CHECK(f.bandwidth_bytes_per_s == Approx(4e9).epsilon(kExact));
  CHECK(f.residual_rms == Approx(0.1).epsilon(1e-9));

  // Adding in place no slower than writing: no cost (the file's largest bandwidth), no residual.
  f = costmodel::fit_accumulate({{c, 2e-3, 1.9e-3}, {2 * c, 4e-3, 4e-3}});
  CHECK(f.bandwidth_bytes_per_s == costmodel::kMaxBandwidth);
  CHECK(f.residual_rms == 0);
  // Wildly off points: the residual is capped at 1.
  f = costmodel::fit_accumulate({{c, t0, t0 + 10 * extra}, {c, t0, t0 + 0.01 * extra}});
  CHECK(f.residual_rms == 1.0);
  CHECK(costmodel::fit_accumulate({}).points == 0);
  CHECK(costmodel::fit_accumulate({}).bandwidth_bytes_per_s == 0);
  CHECK_THROWS_AS(costmodel::fit_accumulate({{c, 0.0, 1e-3}}), osdp::Error);
}

namespace {

// t = overhead + flops / (peak d / (d + d_half)).
costmodel::GemmPoint gemm_point(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count,
                                double overhead, double peak, double d_half) {
  costmodel::GemmPoint p{m, n, k, count, 0.0};
  const double d = static_cast<double>(std::min({m, n, k}));
  p.seconds = overhead + 2.0 * m * n * k * count / (peak * d / (d + d_half));
  return p;
}

}  // namespace

// GEMMs: overhead 3 us, peak 90 GFLOP/s, d_half 40, memory 12 GB/s.
TEST_CASE("the GEMM fit recovers peak and d_half", "[calibrate][fit]") {
  std::vector<costmodel::GemmPoint> pts;
  for (const std::int64_t d : {64, 128, 256, 512, 1024})
    pts.push_back(gemm_point(d, d, d, 1, 3e-6, 90e9, 40));
  for (const std::int64_t k : {16, 32, 64}) pts.push_back(gemm_point(1024, 1024, k, 1, 3e-6, 90e9, 40));
  pts.push_back(gemm_point(256, 256, 64, 12, 3e-6, 90e9, 40));  // batched, like attention scores
  const costmodel::GemmFit f = costmodel::fit_gemm(pts, 3e-6, 12e9);
  CHECK(f.peak_flops_per_s == Approx(90e9).epsilon(kExact));
  CHECK(f.half_efficiency_dim == Approx(40).epsilon(kExact));
  CHECK(f.residual_rms < kExact);
  CHECK(f.points_used == 9);
  CHECK(f.points_memory_bound == 0);
}

// A GEMM whose bytes / bandwidth exceeds its compute term is left out. At 3 GB/s the outer product
// [2048 x 2048 x 1] moves 4 (2048 + 2048 + 2048^2) B = 16.8 MB, 5.6 ms, against 8.4 MFLOP at
// 90 GFLOP/s x 1/41, 3.8 ms: memory-bound, its time is the memory term, which the compute
// coefficients cannot explain. The squares are compute-bound (d = 256: 0.26 ms of memory against
// 0.43 ms of compute; larger ones more so).
TEST_CASE("memory-bound GEMMs are left out of the compute fit", "[calibrate][fit]") {
  const double bw = 3e9;
  std::vector<costmodel::GemmPoint> pts;
  for (const std::int64_t d : {256, 512, 1024, 2048}) pts.push_back(gemm_point(d, d, d, 1, 0.0, 90e9, 40));
  costmodel::GemmPoint outer{2048, 2048, 1, 1, 0.0};
  outer.seconds = outer.bytes() / bw;
  pts.push_back(outer);
  const costmodel::GemmFit f = costmodel::fit_gemm(pts, 0.0, bw);
  CHECK(f.points_memory_bound == 1);
  CHECK(f.points_used == 4);
  CHECK(f.peak_flops_per_s == Approx(90e9).epsilon(kExact));
  CHECK(f.half_efficiency_dim == Approx(40).epsilon(kExact));
  // Without a bandwidth nothing is left out, and the fit is off.
  const costmodel::GemmFit g = costmodel::fit_gemm(pts, 0.0, 0.0);
  CHECK(g.points_memory_bound == 0);
  CHECK(g.residual_rms > 0.01);
}

// The torch backend's elementwise overhead (tens of microseconds of Python around a small add) can
// exceed a small GEMM's whole time; subtracted as it is, it leaves that GEMM a negative compute time
// and no positive peak. The fit subtracts at most the fastest GEMM's time: here the 32^3 point's,
// 3 us + 65536 / (90e9 x 32 / 72) s = 4.64 us, which the fit then reports.
TEST_CASE("the GEMM fit subtracts no more overhead than the fastest GEMM took", "[calibrate][fit]") {
  std::vector<costmodel::GemmPoint> pts;
  for (const std::int64_t d : {32, 64, 128, 256}) pts.push_back(gemm_point(d, d, d, 1, 3e-6, 90e9, 40));
  pts.push_back(gemm_point(256, 256, 32, 1, 3e-6, 90e9, 40));
  const double fastest = 3e-6 + 2.0 * 32 * 32 * 32 / (90e9 * 32.0 / 72.0);
  REQUIRE(pts[0].seconds == Approx(fastest).epsilon(1e-12));
  const costmodel::GemmFit f = costmodel::fit_gemm(pts, 25e-6, 0.0);
  const costmodel::GemmFit g = costmodel::fit_gemm(pts, fastest, 0.0);
  CHECK(f.overhead_s == Approx(fastest).epsilon(1e-12));
  CHECK(f.peak_flops_per_s > 0);
  CHECK(f.peak_flops_per_s == Approx(g.peak_flops_per_s).epsilon(1e-12));
  CHECK(f.half_efficiency_dim == Approx(g.half_efficiency_dim).epsilon(1e-12));
  // An overhead below every GEMM's time is subtracted as given.
  CHECK(costmodel::fit_gemm(pts, 3e-6, 0.0).overhead_s == 3e-6);
  CHECK(costmodel::fit_gemm(pts, 3e-6, 0.0).peak_flops_per_s == Approx(90e9).epsilon(1e-9));
}

TEST_CASE("a GEMM efficiency that does not fall with d gives d_half = 0", "[calibrate][fit]") {
  // Small GEMMs faster than large ones per flop: the best d_half would be negative; held at 0, the
  // peak is the relative fit of t = flops / peak: 1/peak = sum(f/t) / sum((f/t)^2).
  std::vector<costmodel::GemmPoint> pts;
  for (const std::int64_t d : {64, 256, 1024}) pts.push_back(gemm_point(d, d, d, 1, 0.0, 90e9, 0));
  pts[0].seconds *= 0.8;
  const costmodel::GemmFit f = costmodel::fit_gemm(pts, 0.0, 0.0);
  double s1 = 0, s2 = 0;
  for (const auto& p : pts) {
    s1 += p.flops() / p.seconds;
    s2 += (p.flops() / p.seconds) * (p.flops() / p.seconds);
  }
  CHECK(f.half_efficiency_dim == 0.0);
  CHECK(f.peak_flops_per_s == Approx(s2 / s1).epsilon(1e-12));
  CHECK_THROWS_AS(costmodel::fit_gemm({pts[0]}, 0.0, 0.0), osdp::Error);
}

TEST_CASE("interference is the costmodel::median slowdown, at least 1", "[calibrate][fit]") {
  CHECK(costmodel::fit_interference({{1.0, 1.5}, {2.0, 2.2}, {1.0, 3.0}}) == Approx(1.5));
  CHECK(costmodel::fit_interference({{1.0, 1.2}, {1.0, 1.4}}) == Approx(1.3));
  CHECK(costmodel::fit_interference({{1.0, 0.9}}) == 1.0);
  CHECK_THROWS_AS(costmodel::fit_interference({}), osdp::Error);
  CHECK_THROWS_AS(costmodel::fit_interference({{0.0, 1.0}}), osdp::Error);
}

// Which fits `osdp calibrate` warns about: every fit over 15% residual, named with where it starts,
// but the partial sums' accumulation.
TEST_CASE("fits over 15% residual are listed for the calibration's warning", "[calibrate][fit]") {
  costmodel::CalibrationRun run;
  auto& ag = run.collectives[static_cast<std::size_t>(Collective::kAllGather)];
  costmodel::FitSegment quiet, busy;
  quiet.from_bytes = 1024;
  quiet.residual_rms = 0.15;  // at the threshold: not over it
  busy.from_bytes = 1048576;
  busy.residual_rms = 0.4;
  ag = {quiet, busy};
  run.elementwise.residual_rms = 0.151;
  run.adam.residual_rms = 0.05;
  run.gemm.residual_rms = 0.56;
  run.accumulate.residual_rms = 0.9;  // large by nature: never warned about
  const std::vector<std::string> noisy = costmodel::noisy_fits(run);
  REQUIRE(noisy.size() == 3);
  CHECK(noisy[0] == "all-gather from 1.0 MiB (40.0%)");
  CHECK(noisy[1] == "elementwise (15.1%)");
  CHECK(noisy[2] == "the GEMM formula (56.0%; the --model shapes are priced by their measured times)");
  CHECK(costmodel::noisy_fits(run, 0.6).empty());
}

// Points with +-50% noise (a loaded machine) fit with a residual far over 15%: the warning fires on
// what a busy machine produces, not only on hand-made fits.
TEST_CASE("a fit of points with 50% noise is over the warning's threshold", "[calibrate][fit]") {
  std::mt19937 gen(20261125);
  std::uniform_real_distribution<double> u(-0.5, 0.5);
  auto pts = synthetic(Collective::kAllGather, 2, {{kInf, 10e-6, 1.0 / 5e9}});
  for (auto& p : pts) p.seconds *= 1.0 + u(gen);
  costmodel::CalibrationRun run;
  run.collectives[static_cast<std::size_t>(Collective::kAllGather)] =
      costmodel::fit_collective(Collective::kAllGather, 2, pts);
  CHECK_FALSE(costmodel::noisy_fits(run).empty());
}
