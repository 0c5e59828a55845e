// A calibration's uncertainty and the intervals drawn from it (costmodel/uncertainty.hpp): the
// quantiles, the variates, which prices share a draw's error and which do not, the GEMMs'
// leave-one-out error written out, and a plan's draws.
#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "cost_fixtures.hpp"
#include "costmodel/calibration.hpp"
#include "costmodel/calibration_fit.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/gemm_price.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/uncertainty.hpp"

using namespace osdp::costmodel;
using namespace osdp::costmodel::cost_fixtures;

namespace {

// Pearson's correlation of two samples.
double correlation(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mx += x[i] / n, my += y[i] / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxy / std::sqrt(sxx * syy);
}

double sd(const std::vector<double>& x) {
  const double n = static_cast<double>(x.size());
  double m = 0, v = 0;
  for (double a : x) m += a / n;
  for (double a : x) v += (a - m) * (a - m) / (n - 1);
  return std::sqrt(v);
}

}  // namespace

TEST_CASE("the central interval interpolates between order statistics", "[cost][uncertainty]") {
  std::vector<double> hundred;
  for (int i = 100; i >= 0; --i) hundred.push_back(i);  // 101 samples, given in reverse
  const Interval a = central_interval(hundred, 0.9);
  CHECK(a.low == Approx(5.0));
  CHECK(a.high == Approx(95.0));
  // 10 samples 0..9: the 5% quantile sits at position 0.05 x 9 = 0.45, the 95% at 8.55.
  const Interval b = central_interval({9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, 0.9);
  CHECK(b.low == Approx(0.45));
  CHECK(b.high == Approx(8.55));
  CHECK(b.contains(0.45));
  CHECK_FALSE(b.contains(8.56));
  CHECK_FALSE(central_interval({1.0}).known());
  CHECK(to_json(Interval{}).is_null());
}

TEST_CASE("the variates are standard normal, and the same for the same draw and point",
          "[cost][uncertainty]") {
  const int n = 20000;
  double mean = 0, second = 0;
  int inside = 0;
  for (int d = 1; d <= n; ++d) {
    const double z = standard_normal(static_cast<std::uint64_t>(d), {7, 3});
    mean += z / n;
    second += z * z / n;
    inside += std::fabs(z) <= 1.6448536;
  }
  // Five standard errors: 1/sqrt(n) for the mean, sqrt(2/n) for the variance, sqrt(0.09/n) for the
  // fraction within the 90% quantiles.
  CHECK(std::fabs(mean) < 5 / std::sqrt(n));
  CHECK(std::fabs(second - 1) < 5 * std::sqrt(2.0 / n));
  CHECK(std::fabs(inside / double(n) - 0.9) < 5 * std::sqrt(0.09 / n));
  CHECK(standard_normal(5, {1, 2}) == standard_normal(5, {1, 2}));
  CHECK(standard_normal(5, {1, 2}) != standard_normal(5, {2, 1}));
  CHECK(draw_factor(5, 0.0, {1}) == 1.0);
}

TEST_CASE("a collective segment's draw: its residual per octave of buffer size", "[cost][uncertainty]") {
  const ClusterSpec cluster = synthetic_cluster();
  Calibration cal;
  cal.allgather = {{kInf, 20e-6, 1e-10, 0.2}};  // one segment, 20% residual
  const CostModel nominal(cluster, &cal, Precision::kFp32, CostOptions{});
  const double mib = 1048576.0;
  std::vector<double> at1, at3, at35, at4;  // ln(drawn / nominal) at 1, 3, 3.5 and 4 MiB
  for (int d = 1; d <= 4000; ++d) {
    const Calibration c = drawn(cal, static_cast<std::uint64_t>(d));
    const CostModel m(cluster, &c, Precision::kFp32, CostOptions{});
    const auto ln = [&](double bytes) {
      return std::log(m.collective_s(Collective::kAllGather, bytes) /
                      nominal.collective_s(Collective::kAllGather, bytes));
    };
    at1.push_back(ln(1 * mib));
    at3.push_back(ln(3 * mib));
    at35.push_back(ln(3.5 * mib));
    at4.push_back(ln(4 * mib));
  }
  CHECK(sd(at1) == Approx(0.2).epsilon(0.06));  // 5 standard errors of an sd over 4000: 0.2 x 5/sqrt(8000)
  for (std::size_t d = 0; d < at3.size(); ++d)  // one octave, one point of the fit: one error
    REQUIRE(at3[d] == Approx(at35[d]).margin(1e-12));
  CHECK(std::fabs(correlation(at1, at4)) < 5 / std::sqrt(4000.0));  // other octaves: independent
  // A segment without a residual, and a collective the calibration does not price, have no error.
  Calibration exact = cal;
  exact.allgather[0].residual = 0;
  const Calibration e = drawn(exact, 3);
  CHECK(CostModel(cluster, &e, Precision::kFp32, CostOptions{}).collective_s(Collective::kAllGather, mib) ==
        nominal.collective_s(Collective::kAllGather, mib));
  const Calibration c = drawn(cal, 3);
  CHECK(
      CostModel(cluster, &c, Precision::kFp32, CostOptions{}).collective_s(Collective::kReduceScatter, mib) ==
      nominal.collective_s(Collective::kReduceScatter, mib));
}

TEST_CASE("the GEMMs' error is the leave-one-out error of the measured shapes", "[cost][uncertainty]") {
  // A flat roofline of 1 ms, two shapes one octave apart measured 3 ms and 2 ms: log ratios ln 3 and
  // ln 2. From the other alone (weight w = (2 - 1) / (2 x 1) = 1/2, squared 1/4, beside the roofline's
  // 1): A is predicted (1/4) ln 2 / (5/4) = ln 2 / 5, B ln 3 / 5.
  const GemmPrice price([](const GemmPrice::Shape&) { return 1e-3; },
                        {{512, 512, 512, 1, 3e-3}, {1024, 512, 512, 1, 2e-3}});
  const double ea = std::log(3.0) - std::log(2.0) / 5, eb = std::log(2.0) - std::log(3.0) / 5;
  CHECK(price.leave_one_out_error() == Approx(std::sqrt((ea * ea + eb * eb) / 2)));
  CHECK(GemmPrice([](const GemmPrice::Shape&) { return 1e-3; }, {{512, 512, 512, 1, 3e-3}})
            .leave_one_out_error() == 0.0);
}

// A runtime's REPLICATE copies (ComputeSpec::replicate_*) carry their fit's residual (provenance
// "fit"/"replicate"): drawn like an elementwise point, one error per octave of weight bytes, sd 0.25.
TEST_CASE("a REPLICATE operator's runtime copies: their fit's residual per octave of weights",
          "[cost][uncertainty]") {
  Calibration cal;
  ComputeSpec cs = synthetic_cluster().compute;
  cs.replicate_overhead_s = 1e-3;
  cs.replicate_bandwidth_bytes_per_s = 4e9;
  cal.compute = cs;
  cal.provenance = {{"fit", {{"replicate", {{"residual_rms", 0.25}}}}}};
  CHECK(fit_errors(cal).replicate == 0.25);
  CHECK(has_uncertainty(cal));
  const ClusterSpec cluster = synthetic_cluster();
  const CostModel nominal(cluster, &cal, Precision::kFp32, CostOptions{});
  const double mib = 1048576.0;
  CHECK(nominal.replicate_s(3 * mib) == Approx(1e-3 + 3 * mib / 4e9).epsilon(1e-12));
  std::vector<double> at1, at3, at35;
  for (int d = 1; d <= 4000; ++d) {
    const Calibration c = drawn(cal, static_cast<std::uint64_t>(d));
    const CostModel m(cluster, &c, Precision::kFp32, CostOptions{});
    at1.push_back(std::log(m.replicate_s(mib) / nominal.replicate_s(mib)));
    at3.push_back(std::log(m.replicate_s(3 * mib) / nominal.replicate_s(3 * mib)));
    at35.push_back(std::log(m.replicate_s(3.5 * mib) / nominal.replicate_s(3.5 * mib)));
  }
  CHECK(sd(at1) == Approx(0.25).epsilon(0.06));
  for (std::size_t d = 0; d < at3.size(); ++d) REQUIRE(at3[d] == Approx(at35[d]).margin(1e-12));
  CHECK(std::fabs(correlation(at1, at3)) < 5 / std::sqrt(4000.0));
}

TEST_CASE("a calibration's fit errors come from its provenance", "[cost][uncertainty]") {
  Calibration cal;
  CHECK_FALSE(has_uncertainty(cal));
  cal.provenance = {{"fit",
                     {{"gemm", {{"residual_rms", 0.15}}},
                      {"elementwise", {{"residual_rms", 0.05}}},
                      {"adam", {{"residual_rms", 0.1}}},
                      {"interference_samples", {1.1, 1.2, 1.3}}}}};
  const FitErrors e = fit_errors(cal);
  CHECK(e.gemm_formula == 0.15);
  CHECK(e.elementwise == 0.05);
  CHECK(e.optimizer == 0.1);
  const double l1 = std::log(1.1), l2 = std::log(1.2), l3 = std::log(1.3), m = (l1 + l2 + l3) / 3;
  CHECK(e.interference ==
        Approx(std::sqrt(((l1 - m) * (l1 - m) + (l2 - m) * (l2 - m) + (l3 - m) * (l3 - m)) / 2)));
  CHECK(has_uncertainty(cal));
}

TEST_CASE("a plan's draws: its calibration drawn once per draw", "[cost][uncertainty]") {
  Plan plan;
  plan.cluster = synthetic_cluster();
  const auto optimizer_s = [](const Plan& p) {
    const CostModel m(p.cluster, p.calibration ? &*p.calibration : nullptr, Precision::kFp32, CostOptions{});
    return m.optimizer_s(1e6, precision_bytes(Precision::kFp32));
  };
  CHECK(drawn_predictions(plan, 100, optimizer_s).empty());  // no calibration
  plan.calibration = Calibration{};
  CHECK(drawn_predictions(plan, 100, optimizer_s).empty());  // one without errors
  plan.calibration->provenance = {{"fit", {{"adam", {{"residual_rms", 0.3}}}}}};
  CHECK(drawn_predictions(plan, 0, optimizer_s).empty());
  // The optimizer is one point: its price in a draw is nominal x exp(0.3 z - 0.3^2 / 2) (mean 1), so
  // the 90% interval of 4000 draws is nominal x exp(-0.045 -+ 0.3 x 1.645) (to the quantiles'
  // sampling error, about 1% here).
  const double nominal = optimizer_s(plan);
  const std::vector<double> draws = drawn_predictions(plan, 4000, optimizer_s);
  const Interval i = central_interval(draws);
  CHECK(i.low / nominal == Approx(std::exp(-0.045 - 0.3 * 1.6448536)).epsilon(0.03));
  CHECK(i.high / nominal == Approx(std::exp(-0.045 + 0.3 * 1.6448536)).epsilon(0.03));
  double mean = 0;
  for (double t : draws) mean += t / nominal / 4000;
  CHECK(mean == Approx(1.0).margin(5 * 0.31 / std::sqrt(4000.0)));  // mean 1 (sd 0.31), to 5 standard errors
}

TEST_CASE("the machine's drift: the spread of each point's repeats, one factor per kind in a draw",
          "[cost][uncertainty]") {
  // Tippett's d2: 2 / sqrt(pi) for two samples; 2.326 for five and 2.704 for seven (tabulated).
  CHECK(expected_normal_range(2) == Approx(2 / std::sqrt(M_PI)).epsilon(1e-4));
  CHECK(expected_normal_range(5) == Approx(2.3259).epsilon(1e-3));
  CHECK(expected_normal_range(7) == Approx(2.7044).epsilon(1e-3));
  // A GEMM point over 7 repeats spanning 20% of its median and an elementwise point over 5 spanning
  // 40%: sigmas 0.2 / d2(7) and 0.4 / d2(5), the compute drift their median (the mean of the two);
  // one all-gather point over 7 spanning 10%: the communication drift 0.1 / d2(7). Overlap points and
  // single repeats do not count.
  std::vector<Measurement> ms(5);
  ms[0].sweep = "gemm", ms[0].seconds = 2, ms[0].min_s = 1.8, ms[0].max_s = 2.2, ms[0].repeats = 7;
  ms[1].sweep = "elementwise", ms[1].seconds = 1, ms[1].min_s = 0.8, ms[1].max_s = 1.2, ms[1].repeats = 5;
  ms[2].sweep = "all-gather", ms[2].seconds = 1, ms[2].min_s = 0.95, ms[2].max_s = 1.05, ms[2].repeats = 7;
  ms[3].sweep = "overlap", ms[3].seconds = 1, ms[3].min_s = 0.1, ms[3].max_s = 9, ms[3].repeats = 7;
  ms[4].sweep = "gemm", ms[4].seconds = 1, ms[4].min_s = 0.1, ms[4].max_s = 9, ms[4].repeats = 1;
  const nlohmann::json spread = repeat_spread_json(ms);
  const double d5 = expected_normal_range(5), d7 = expected_normal_range(7);
  CHECK(spread["compute"].get<double>() == Approx((0.2 / d7 + 0.4 / d5) / 2));
  CHECK(spread["communication"].get<double>() == Approx(0.1 / d7));

  // In a draw every compute price moves by the same drift factor (no other error here), calibrated
  // collectives by none (communication drift 0).
  const ClusterSpec cluster = synthetic_cluster();
  Calibration cal;
  cal.allgather = {{kInf, 20e-6, 1e-10, 0.0}};
  cal.provenance = {{"fit", {{"repeat_spread", {{"compute", 0.1}, {"communication", 0.0}}}}}};
  CHECK(fit_errors(cal).compute_drift == 0.1);
  CHECK(has_uncertainty(cal));
  const CostModel nominal(cluster, &cal, Precision::kFp32, CostOptions{});
  Kernel g;
  g.kind = KernelKind::kGemm;
  g.m = g.n = g.k = 256;
  Kernel e;
  e.kind = KernelKind::kElementwise;
  e.bytes_per_sample = 1 << 20;
  std::vector<double> ln;
  for (int d = 1; d <= 4000; ++d) {
    const Calibration c = drawn(cal, static_cast<std::uint64_t>(d));
    const CostModel m(cluster, &c, Precision::kFp32, CostOptions{});
    const double f = m.kernel_s(g, 1) / nominal.kernel_s(g, 1);
    REQUIRE(m.kernel_s(e, 1) / nominal.kernel_s(e, 1) == Approx(f));
    REQUIRE(m.optimizer_s(1e6, precision_bytes(Precision::kFp32)) /
                nominal.optimizer_s(1e6, precision_bytes(Precision::kFp32)) ==
            Approx(f));
    REQUIRE(m.collective_s(Collective::kAllGather, 1e6) == nominal.collective_s(Collective::kAllGather, 1e6));
    ln.push_back(std::log(f));
  }
  CHECK(sd(ln) == Approx(0.1).epsilon(0.06));
}

TEST_CASE("the step's level: every calibrated price scaled by it, its spread one factor for the step",
          "[cost][uncertainty]") {
  // A calibration whose probes fitted a level of 1.1 with a spread of 0.05, beside a repeats' drift:
  // the level replaces the drift. Nominally every compute price and every calibrated collective is
  // 1.1 times its price without the level; a datasheet link is not scaled. In a draw, compute and
  // calibrated collectives move by one common factor 1.1 exp(0.05 z - 0.05^2 / 2).
  const ClusterSpec cluster = synthetic_cluster();
  Calibration bare;
  bare.allgather = {{kInf, 20e-6, 1e-10, 0.0}};
  Calibration cal = bare;
  cal.provenance = {{"fit",
                     {{"repeat_spread", {{"compute", 0.3}, {"communication", 0.2}}},
                      {"composition", {{"sigma", 0.0}, {"level", 1.1}, {"level_sigma", 0.05}}}}}};
  const FitErrors e = fit_errors(cal);
  REQUIRE(e.level);
  CHECK(*e.level == 1.1);
  CHECK(e.level_sigma == 0.05);
  CHECK(e.compute_drift == 0);
  CHECK(e.communication_drift == 0);
  CHECK(step_level(cal) == 1.1);
  CHECK(step_level(bare) == 1.0);
  CHECK_FALSE(fitted_level(bare));
  CHECK_FALSE(fit_errors(bare).level);

  Kernel g;
  g.kind = KernelKind::kGemm;
  g.m = g.n = g.k = 256;
  const PrecisionBytes b = precision_bytes(Precision::kFp32);
  const CostModel without(cluster, &bare, Precision::kFp32, CostOptions{});
  const CostModel with(cluster, &cal, Precision::kFp32, CostOptions{});
  CHECK(with.kernel_s(g, 1) == Approx(1.1 * without.kernel_s(g, 1)));
  CHECK(with.optimizer_s(1e6, b) == Approx(1.1 * without.optimizer_s(1e6, b)));
  CHECK(with.collective_s(Collective::kAllGather, 1e6) ==
        Approx(1.1 * without.collective_s(Collective::kAllGather, 1e6)));
  // No calibrated reduce-scatter: the cluster's link prices it, unscaled.
  CHECK(with.collective_s(Collective::kReduceScatter, 1e6) ==
        without.collective_s(Collective::kReduceScatter, 1e6));

  std::vector<double> ln;
  for (int d = 1; d <= 4000; ++d) {
    const Calibration c = drawn(cal, static_cast<std::uint64_t>(d));
    const CostModel m(cluster, &c, Precision::kFp32, CostOptions{});
    const double f = m.kernel_s(g, 1) / with.kernel_s(g, 1);
    REQUIRE(m.optimizer_s(1e6, b) / with.optimizer_s(1e6, b) == Approx(f));
    REQUIRE(m.collective_s(Collective::kAllGather, 1e6) / with.collective_s(Collective::kAllGather, 1e6) ==
            Approx(f));
    ln.push_back(std::log(f));
  }
  CHECK(sd(ln) == Approx(0.05).epsilon(0.06));  // the drift's 0.3 is not drawn
  // At the robust quantile every price is at exp(1.645 x 0.05 - 0.05^2 / 2) over its level's price.
  const Calibration q = at_quantile(cal, kRobustZ);
  const CostModel robust(cluster, &q, Precision::kFp32, CostOptions{});
  CHECK(robust.collective_s(Collective::kAllGather, 1e6) / with.collective_s(Collective::kAllGather, 1e6) ==
        Approx(std::exp(kRobustZ * 0.05 - 0.05 * 0.05 / 2)));
}

TEST_CASE("the step's level to 2 degrees of freedom: drawn as Student's t, at its quantile",
          "[cost][uncertainty]") {
  // level_dof 2: the factor is exp(0.05 t - 0.05^2 / 2) with t a Student t of 2 degrees of freedom,
  // whose distribution function is 1/2 + t / (2 sqrt(2 + t^2)): |t| <= 1.645 with probability
  // 1.645 / sqrt(2 + 1.645^2) = 0.758 (a normal: 0.90), and its quantile at p is
  // (2p - 1) / sqrt(2 p (1 - p)).
  const ClusterSpec cluster = synthetic_cluster();
  Calibration cal;
  cal.provenance = {
      {"fit", {{"composition", {{"sigma", 0.0}, {"level", 1.1}, {"level_sigma", 0.05}, {"level_dof", 2}}}}}};
  REQUIRE(fit_errors(cal).level_dof == 2);
  Kernel g;
  g.kind = KernelKind::kGemm;
  g.m = g.n = g.k = 256;
  const CostModel nominal(cluster, &cal, Precision::kFp32, CostOptions{});
  const int n = 4000;
  int within_z = 0, within_t = 0;
  const double t90 = 0.9 / std::sqrt(2 * 0.95 * 0.05);  // its 0.95 quantile, 2.920
  for (int d = 1; d <= n; ++d) {
    const Calibration c = drawn(cal, static_cast<std::uint64_t>(d));
    const CostModel m(cluster, &c, Precision::kFp32, CostOptions{});
    const double t = (std::log(m.kernel_s(g, 1) / nominal.kernel_s(g, 1)) + 0.05 * 0.05 / 2) / 0.05;
    within_z += std::abs(t) <= 1.645;
    within_t += std::abs(t) <= t90;
  }
  CHECK(within_z / double(n) == Approx(1.645 / std::sqrt(2 + 1.645 * 1.645)).margin(0.03));
  CHECK(within_t / double(n) == Approx(0.90).margin(0.03));
  const double p = 0.5 * std::erfc(-kRobustZ / std::sqrt(2.0));
  const Calibration q = at_quantile(cal, kRobustZ);
  const CostModel robust(cluster, &q, Precision::kFp32, CostOptions{});
  CHECK(robust.kernel_s(g, 1) / nominal.kernel_s(g, 1) ==
        Approx(std::exp(0.05 * (2 * p - 1) / std::sqrt(2 * p * (1 - p)) - 0.05 * 0.05 / 2)));
  CHECK(student_t_at(0, kRobustZ) == kRobustZ);
}

TEST_CASE("a model the probes ran is priced at its own level, with its own spread", "[cost][uncertainty]") {
  // Probes across models: level 1.1, spread 0.05 to 2 degrees of freedom; model m's own level 0.97,
  // spread 0.02 to 6. Plans of m are priced at 0.97 (0.97 / 1.1 of the level across models) and drawn
  // with m's spread; plans of another model, or a calibration without own levels, are as before.
  const ClusterSpec cluster = synthetic_cluster();
  Calibration cal;
  cal.allgather = {{kInf, 20e-6, 1e-10, 0.0}};
  cal.provenance = {
      {"fit",
       {{"composition",
         {{"sigma", 0.0},
          {"level", 1.1},
          {"level_sigma", 0.05},
          {"level_dof", 2},
          {"level_models",
           {{"m", {{"level", 0.97}, {"level_sigma", 0.02}, {"level_dof", 6}, {"groups", 2}}}}}}}}}};
  const Calibration own = for_model(cal, "m");
  CHECK(step_level(own) == 0.97);
  CHECK(level_of(own) == "m");
  const FitErrors e = fit_errors(own);
  CHECK(e.level_sigma == 0.02);
  CHECK(e.level_dof == 6);
  const Calibration other = for_model(cal, "another");
  CHECK(step_level(other) == 1.1);
  CHECK(level_of(other).empty());
  CHECK(fit_errors(other).level_dof == 2);
  Calibration bare = cal;
  bare.provenance.erase("fit");
  CHECK_FALSE(fitted_level(for_model(bare, "m")));

  Kernel g;
  g.kind = KernelKind::kGemm;
  g.m = g.n = g.k = 256;
  const CostModel across(cluster, &cal, Precision::kFp32, CostOptions{});
  const CostModel mine(cluster, &own, Precision::kFp32, CostOptions{});
  CHECK(mine.kernel_s(g, 1) == Approx(0.97 / 1.1 * across.kernel_s(g, 1)));
  CHECK(mine.collective_s(Collective::kAllGather, 1e6) ==
        Approx(0.97 / 1.1 * across.collective_s(Collective::kAllGather, 1e6)));
  // At the robust quantile: 0.97 exp(0.02 t6 - 0.02^2 / 2), t6 the Student t of 6 degrees of freedom
  // at the normal's probability of kRobustZ (boost's quantile, as the cost model takes it).
  const Calibration q = at_quantile(own, kRobustZ);
  const CostModel robust(cluster, &q, Precision::kFp32, CostOptions{});
  CHECK(robust.kernel_s(g, 1) / mine.kernel_s(g, 1) ==
        Approx(std::exp(0.02 * student_t_at(6, kRobustZ) - 0.02 * 0.02 / 2)));
  CHECK(student_t_at(6, kRobustZ) > kRobustZ);
  CHECK(student_t_at(6, kRobustZ) < student_t_at(2, kRobustZ));
}
