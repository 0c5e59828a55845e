// The GEMMs' one price (costmodel/gemm_price.hpp) through CostModel::kernel_s and kernels_s: a
// measured shape at its time, the roofline beyond the correction's reach, the correction between
// (Franke-Little weights, written out here), and the property the search relies on: a split is never
// priced below its whole unless the calibration measured both so.
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "cost_fixtures.hpp"
#include "costmodel/calibration.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"

using namespace osdp::costmodel;
using namespace osdp::costmodel::cost_fixtures;

namespace {

Kernel gemm(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count = 1) {
  Kernel g;
  g.kind = KernelKind::kGemm;
  g.m = m, g.n = n, g.k = k, g.count = count;
  return g;
}

Calibration measuring(const std::vector<GemmTime>& times) {
  Calibration c;
  c.name = "gemms";
  c.gemm_times = times;
  return c;
}

}  // namespace

TEST_CASE("a measured GEMM shape is priced at its time, one beyond the reach at the roofline",
          "[cost][gemm]") {
  const ClusterSpec cluster = synthetic_cluster();
  const CostModel roof(cluster, nullptr, Precision::kFp32, CostOptions{});
  const double t = 3 * roof.kernel_s(gemm(512, 512, 512), 1);  // measured 3x slower than the roofline
  const Calibration cal = measuring({{512, 512, 512, 1, t}});
  const CostModel model(cluster, &cal, Precision::kFp32, CostOptions{});
  CHECK(model.kernel_s(gemm(512, 512, 512), 1) == t);
  Kernel half = gemm(512, 512, 512);
  half.density = 0.5;  // a causal fused kernel computes half the blocks: half the measured time
  CHECK(model.kernel_s(half, 1) == 0.5 * t);
  // (4096, 4096, 4096) is 3 octaves from (512, 512, 512) in each size: sqrt(27) > 2 octaves.
  CHECK(model.kernel_s(gemm(4096, 4096, 4096), 1) == roof.kernel_s(gemm(4096, 4096, 4096), 1));
  // 2 octaves along m alone is the reach itself: the weight is 0 there.
  CHECK(model.kernel_s(gemm(2048, 512, 512), 1) == roof.kernel_s(gemm(2048, 512, 512), 1));
}

TEST_CASE("near measured shapes the correction is the Franke-Little mean of their log ratios",
          "[cost][gemm]") {
  const ClusterSpec cluster = synthetic_cluster();
  const CostModel roof(cluster, nullptr, Precision::kFp32, CostOptions{});
  const double r = std::log(2.0);  // measured twice the roofline
  const double t = 2 * roof.kernel_s(gemm(512, 512, 512), 1);
  const Calibration one = measuring({{512, 512, 512, 1, t}});
  const CostModel model(cluster, &one, Precision::kFp32, CostOptions{});
  // One octave away (m doubled): w = (R - d) / (R d) = (2 - 1) / 2 = 0.5; c = w^2 r / (1 + w^2) = r / 5.
  CHECK(model.kernel_s(gemm(1024, 512, 512), 1) ==
        Approx(roof.kernel_s(gemm(1024, 512, 512), 1) * std::exp(r / 5)).epsilon(1e-12));
  // About half an octave along m and along n (724 = 512 sqrt 2, rounded): d = sqrt(2) log2(724 / 512).
  const std::int64_t m = 724;
  const double dm = std::log2(724.0 / 512.0), d2 = std::sqrt(2 * dm * dm), w2 = (2 - d2) / (2 * d2);
  CHECK(model.kernel_s(gemm(m, m, 512), 1) ==
        Approx(roof.kernel_s(gemm(m, m, 512), 1) * std::exp(w2 * w2 * r / (1 + w2 * w2))).epsilon(1e-12));

  // Two measured shapes on either side, one slower and one faster than the roofline by the same
  // factor, at the same distance: their corrections cancel, the roofline prices the middle (which
  // lies between their times: 1.2 x 38.5 us and 125.8 us / 1.2 around 65.4 us).
  const Calibration two = measuring({{256, 512, 512, 1, 1.2 * roof.kernel_s(gemm(256, 512, 512), 1)},
                                     {1024, 512, 512, 1, roof.kernel_s(gemm(1024, 512, 512), 1) / 1.2}});
  const CostModel both(cluster, &two, Precision::kFp32, CostOptions{});
  CHECK(both.kernel_s(gemm(512, 512, 512), 1) ==
        Approx(roof.kernel_s(gemm(512, 512, 512), 1)).epsilon(1e-12));
  // Twice and half: the measurements say the smaller shape (77 us) is slower than the larger (63 us).
  // The middle is held monotone against both; where they disagree, at the slower bound.
  const double slow = 2 * roof.kernel_s(gemm(256, 512, 512), 1);
  const Calibration crossed = measuring(
      {{256, 512, 512, 1, slow}, {1024, 512, 512, 1, 0.5 * roof.kernel_s(gemm(1024, 512, 512), 1)}});
  const CostModel held(cluster, &crossed, Precision::kFp32, CostOptions{});
  CHECK(held.kernel_s(gemm(512, 512, 512), 1) == slow);
}

// Monotone in each size against the measured shapes: for random calibrations of a few shapes (times
// the roofline's with a random factor of sigma 0.5), every unmeasured shape on a grid is priced no
// lower than the slowest measured shape it contains; and no higher than the fastest containing it
// where that one is no faster than any measured shape it contains in turn (the measurements agree).
TEST_CASE("a GEMM's price is monotone against the measured shapes", "[cost][gemm]") {
  const ClusterSpec cluster = synthetic_cluster();
  const CostModel roof(cluster, nullptr, Precision::kFp32, CostOptions{});
  const std::vector<std::int64_t> sizes = {64, 128, 256, 512, 1024, 2048};
  std::mt19937_64 rng(20261129);
  std::uniform_int_distribution<std::size_t> pick(0, sizes.size() - 1);
  std::lognormal_distribution<double> factor(0.0, 0.5);
  int compared = 0;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<GemmTime> times;
    for (int i = 0; i < 6; ++i) {
      const std::int64_t m = sizes[pick(rng)], n = sizes[pick(rng)], k = sizes[pick(rng)];
      times.push_back({m, n, k, 1, roof.kernel_s(gemm(m, n, k), 1) * factor(rng)});
    }
    const Calibration cal = measuring(times);
    const CostModel model(cluster, &cal, Precision::kFp32, CostOptions{});
    const auto contains = [](const GemmTime& big, std::int64_t m, std::int64_t n, std::int64_t k) {
      return big.m >= m && big.n >= n && big.k >= k;
    };
    for (const std::int64_t m : sizes)
      for (const std::int64_t n : sizes)
        for (const std::int64_t k : sizes) {
          bool measured = false;
          double low = 0, high = 1e300;
          for (const GemmTime& t : times) {
            measured = measured || (t.m == m && t.n == n && t.k == k);
            if (contains({m, n, k, 1, 0}, t.m, t.n, t.k)) low = std::max(low, t.seconds);
            if (contains(t, m, n, k)) high = std::min(high, t.seconds);
          }
          if (measured) continue;
          const double price = model.kernel_s(gemm(m, n, k), 1);
          CHECK(price >= low);
          if (low <= high) CHECK(price <= high);
          ++compared;
        }
  }
  CHECK(compared > 4000);
}

// What the search took for a gain on one H100: the whole GEMM priced one way, its slices another.
// For random calibrations of the shapes of real models (some measured, some not, every measured time
// the roofline's times a random factor), every splittable kernel at splits 2 and 4 and batches 1 and
// 2: the split costs at least the whole, unless both shapes were measured and their times say so.
TEST_CASE("a split is never priced below its whole unless the calibration measured both so", "[cost][gemm]") {
  const ClusterSpec cluster = synthetic_cluster();
  const CostModel roof(cluster, nullptr, Precision::kFp32, CostOptions{});
  std::vector<Operator> ops = sample_operators();
  for (const auto& op : lower(load_model("llama3.1-8b")).operators) ops.push_back(op);
  using Shape = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
  const auto shape = [](const Kernel& k, int b) {
    return Shape{k.dim(Dim::kM, b), k.dim(Dim::kN, b), k.dim(Dim::kK, b), k.dim(Dim::kCount, b)};
  };
  std::vector<std::pair<Kernel, int>> kernels;  // (whole, splits)
  for (const auto& op : ops)
    for (const auto* list : {&op.forward, &op.backward})
      for (const Kernel& k : *list)
        if (k.kind == KernelKind::kGemm && k.split_dim != Dim::kNone)
          for (const int s : {2, 4}) kernels.emplace_back(k, s);
  REQUIRE(kernels.size() > 20);
  std::mt19937_64 rng(20261128);
  int below = 0, checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    std::bernoulli_distribution pick(trial % 4 == 0 ? 1.0 : 0.5);  // every fourth: all measured
    std::lognormal_distribution<double> factor(0.0, 0.3);
    std::set<Shape> seen;
    std::vector<GemmTime> times;
    const auto add = [&](const Kernel& k, int b) {
      if (!seen.insert(shape(k, b)).second || !pick(rng)) return;
      const auto [m, n, kk, c] = shape(k, b);
      times.push_back({m, n, kk, c, roof.kernel_s(gemm(m, n, kk, c), 1) * factor(rng)});
    };
    for (const auto& [k, s] : kernels)
      for (const int b : {1, 2}) {
        add(k, b);
        add(k.slice(s), b);
      }
    const Calibration cal = measuring(times);
    const CostModel model(cluster, &cal, Precision::kFp32, CostOptions{});
    std::set<Shape> measured;
    for (const auto& t : times) measured.insert({t.m, t.n, t.k, t.count});
    for (const auto& [k, s] : kernels)
      for (const int b : {1, 2}) {
        const double whole = model.kernels_s({k}, b, 1), split = model.kernels_s({k}, b, s);
        ++checked;
        if (split >= whole) continue;
        ++below;
        INFO(k.name << " split " << s << " batch " << b);
        REQUIRE(measured.count(shape(k, b)) == 1);
        REQUIRE(measured.count(shape(k.slice(s), b)) == 1);
        // Partial sums (a cut along k) add C once more per slice after the first: [m x n] fp32 of the
        // slice at the cluster's memory bandwidth (the calibration measured no accumulate bandwidth).
        const Kernel piece = k.slice(s);
        const double sums = k.split_dim == Dim::kK
                                ? (s - 1) * 4.0 * piece.dim(Dim::kM, b) * piece.dim(Dim::kN, b) *
                                      piece.dim(Dim::kCount, b) / cluster.compute.memory_bandwidth_bytes_per_s
                                : 0.0;
        CHECK(split == Approx(s * model.kernel_s(piece, b) + sums).epsilon(1e-12));
      }
  }
  CHECK(checked > 1000);
  CHECK(below > 0);  // the calibrations did measure some splits faster: those are kept as measured
}
