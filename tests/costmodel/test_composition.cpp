// The model's composition error (costmodel/composition.hpp): its fit from probe steps, written out in
// closed form, and its draws per strategy.
#include <cmath>
#include <numbers>
#include <vector>

#include <catch2/catch.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/composition.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/uncertainty.hpp"

using namespace osdp::costmodel;

namespace {

// Steps of a plan predicted at p whose step time is p e^delta times the machine's pace at each step.
ProbeStep probe(const char* group, double p, double delta, const std::vector<double>& pace,
                const char* workload = "") {
  ProbeStep s{group, p, {}, {}, workload};
  for (double x : pace) s.steps_s.push_back(p * std::exp(delta) * x);
  return s;
}

Plan uniform_plan(int operators, Choice c) {
  Plan plan;
  plan.unit_tp = {1};
  plan.choices.assign(static_cast<std::size_t>(operators), c);
  return plan;
}

double sd(const std::vector<double>& x) {
  double m = 0, v = 0;
  for (double a : x) m += a / static_cast<double>(x.size());
  for (double a : x) v += (a - m) * (a - m) / static_cast<double>(x.size() - 1);
  return std::sqrt(v);
}

}  // namespace

TEST_CASE("composition fit: the residuals about each group's mean, the pace of each step taken out",
          "[cost][composition]") {
  // Group a: three plans predicted 1, 2 and 4 s, running e^0.1, e^-0.05 and e^0 times their
  // predictions, at a pace that moves from step to step; group b: two plans at e^0.2 and e^0, at
  // another pace. No step noise: each plan's steps over the pace are constant. The residuals about
  // each group's mean are the deltas about theirs, over 2 + 1 degrees of freedom.
  const std::vector<double> pace_a{1.0, 1.3, 0.9, 1.1}, pace_b{2.0, 2.2, 1.8, 2.1};
  std::vector<ProbeStep> probes{probe("a", 1, 0.1, pace_a), probe("a", 2, -0.05, pace_a),
                                probe("a", 4, 0.0, pace_a), probe("b", 1, 0.2, pace_b),
                                probe("b", 1, 0.0, pace_b)};
  probes.push_back(probe("alone", 1, 0.5, pace_a));  // a group of one plan: no degree of freedom
  probes.push_back({"a", 1, {}, {}, ""});            // no steps: left out
  const double ma = (0.1 - 0.05 + 0.0) / 3;
  const double ss = (0.1 - ma) * (0.1 - ma) + (-0.05 - ma) * (-0.05 - ma) + ma * ma + 0.1 * 0.1 + 0.1 * 0.1;
  const nlohmann::json f = composition_fit(probes);
  CHECK(f["dof"] == 3);
  CHECK(f["plans"] == 5);
  CHECK(f["groups"] == 2);
  CHECK(f["variance"].get<double>() == Approx(ss / 3));
  CHECK(f["noise"].get<double>() == Approx(0).margin(1e-15));
  CHECK(f["drawn"].get<double>() == 0);
  CHECK(f["sigma"].get<double>() == Approx(std::sqrt(ss / 3)));
  REQUIRE(f["residuals"].size() == 5);
  CHECK(f["residuals"][0].get<double>() == Approx(0.1 - ma));
  CHECK(f["residuals"][3].get<double>() == Approx(0.1));
}

TEST_CASE("the step's level: the mean of the groups' levels, and their predictive spread",
          "[cost][composition]") {
  // Each probe's level is ln(median step / prediction): its delta plus the log of its pace's median
  // (pace a: the median of 0.9, 1.0, 1.1, 1.3 is 1.05; pace b: 2.05). A group's level is the mean over
  // its plans; every group counts, one plan or more. Level = exp(mean of the group levels); its spread
  // sqrt(var (1 + 1 / G)), the predictive spread of one more group's level: groups without a workload
  // stand each for one, to G - 1 degrees of freedom.
  const std::vector<double> pace_a{1.0, 1.3, 0.9, 1.1}, pace_b{2.0, 2.2, 1.8, 2.1};
  const std::vector<ProbeStep> probes{probe("a", 1, 0.1, pace_a), probe("a", 2, -0.05, pace_a),
                                      probe("a", 4, 0.0, pace_a), probe("b", 1, 0.2, pace_b),
                                      probe("b", 1, 0.0, pace_b), probe("c", 3, 0.5, pace_a)};
  const std::vector<double> g{(0.1 - 0.05 + 0.0) / 3 + std::log(1.05), 0.1 + std::log(2.05),
                              0.5 + std::log(1.05)};
  const double mean = (g[0] + g[1] + g[2]) / 3;
  const nlohmann::json f = composition_fit(probes);
  CHECK(f["level"].get<double>() == Approx(std::exp(mean)));
  CHECK(f["level_sigma"].get<double>() == Approx(sd(g) * std::sqrt(1 + 1.0 / 3)));
  CHECK(f["level_dof"] == 2);  // groups without a workload stand each for one
  REQUIRE(f["level_groups"].size() == 3);
  CHECK(f["level_groups"]["b"].get<double>() == Approx(std::exp(g[1])));
  // One group: no level, no spread (the repeats' drift stays).
  const nlohmann::json one = composition_fit({probes[0], probes[1]});
  CHECK(one["level"].is_null());
  CHECK(one["level_sigma"].is_null());
  CHECK(one["level_dof"].is_null());
}

TEST_CASE("the step's level over workloads: a further model's group, to K - 1 degrees of freedom",
          "[cost][composition]") {
  // Six groups of three models: x at micro-batches 1, 2 and 4 (levels 0.1, 0.2, 0.3), y at 1 and 2
  // (-0.1, 0.1), z at 1 (0.05). Model means 0.2, 0, 0.05; the level is their mean, each model one
  // vote: 0.25 / 3. The groups' pooled variance about their model's mean: (0.02 + 0.02 + 0) / (2 + 1 +
  // 0); n = 6 / 3 = 2 groups per model. The predictive spread of a further model's group:
  // var(0.2, 0, 0.05) (1 + 1 / 3) + 0.04 / 3 x (1 - 1 / 2), known to K - 1 = 2 degrees of freedom.
  const std::vector<double> steady{1, 1, 1};
  const std::vector<ProbeStep> probes{probe("x1", 1, 0.1, steady, "x"), probe("x2", 2, 0.2, steady, "x"),
                                      probe("x4", 4, 0.3, steady, "x"), probe("y1", 1, -0.1, steady, "y"),
                                      probe("y2", 2, 0.1, steady, "y"), probe("z1", 1, 0.05, steady, "z")};
  const nlohmann::json f = composition_fit(probes);
  CHECK(f["level"].get<double>() == Approx(std::exp(0.25 / 3)));
  const double var_means = std::pow(sd({0.2, 0.0, 0.05}), 2);
  CHECK(f["level_sigma"].get<double>() ==
        Approx(std::sqrt(var_means * (1 + 1.0 / 3) + 0.04 / 3 * (1 - 1.0 / 2))));
  CHECK(f["level_dof"] == 2);
  CHECK(f["level_workloads"] == 3);
  CHECK(f["level_groups"].size() == 6);
  // Each model's own level (for its plans): its groups' mean, and the spread of a further micro-batch
  // of it, the pooled within-model variance 0.04 / 3 times (1 + 1 / n_w), to 3 degrees of freedom.
  const nlohmann::json& own = f["level_models"];
  REQUIRE(own.size() == 3);
  CHECK(own["x"]["level"].get<double>() == Approx(std::exp(0.2)));
  CHECK(own["y"]["level"].get<double>() == Approx(std::exp(0.0)));
  CHECK(own["z"]["level"].get<double>() == Approx(std::exp(0.05)));
  CHECK(own["x"]["level_sigma"].get<double>() == Approx(std::sqrt(0.04 / 3 * (1 + 1.0 / 3))));
  CHECK(own["z"]["level_sigma"].get<double>() == Approx(std::sqrt(0.04 / 3 * 2)));
  CHECK(own["x"]["level_dof"] == 3);
  CHECK(own["y"]["groups"] == 2);
  // One group a model: nothing within a model to spread a further micro-batch by, so no own levels.
  CHECK_FALSE(composition_fit({probes[0], probes[3], probes[5]}).contains("level_models"));
  // All of one model: each group stands for a workload, as without one (six, five degrees of freedom).
  std::vector<ProbeStep> one_model = probes;
  for (ProbeStep& p : one_model) p.workload = "x";
  const nlohmann::json o = composition_fit(one_model);
  const std::vector<double> g{0.1, 0.2, 0.3, -0.1, 0.1, 0.05};
  CHECK(o["level"].get<double>() == Approx(std::exp(0.65 / 6)));
  CHECK(o["level_sigma"].get<double>() == Approx(sd(g) * std::sqrt(1 + 1.0 / 6)));
  CHECK(o["level_dof"] == 5);
  CHECK_FALSE(o.contains("level_models"));
}

TEST_CASE("composition fit: the steps' noise and the calibration's draws are taken off",
          "[cost][composition]") {
  // Two plans predicted alike and running alike, one alternating e^a and e^-a, the other steady: the
  // pace at each step is their mean log (+-a/2), so each plan's steps over the pace alternate +-a/2
  // (median 0: no residual), with the sample variance a^2 / 3 over 4 steps. The noise is
  // pi / 2 x a^2 / 3 / 4 per plan, and sigma is 0, not negative.
  const double a = 0.2;
  const ProbeStep moving{"g", 1.0, {}, {std::exp(a), std::exp(-a), std::exp(a), std::exp(-a)}, ""};
  const ProbeStep steady{"g", 1.0, {}, {1, 1, 1, 1}, ""};
  const nlohmann::json n = composition_fit({moving, steady});
  CHECK(n["variance"].get<double>() == Approx(0).margin(1e-15));
  CHECK(n["noise"].get<double>() == Approx(std::numbers::pi / 2 * a * a / 3 / 4));
  CHECK(n["sigma"].get<double>() == 0);
  // Two plans e^0.2 and e^0 over their predictions (variance 0.02 over one degree of freedom), whose
  // draws move the first by e^+-0.1 and the second not at all: the draws alone spread them by
  // (0.1^2 + 0.1^2) / 2 / 2 = 0.005 per draw, averaged over both draws.
  ProbeStep x = probe("g", 3, 0.2, {1, 1, 1}), y = probe("g", 5, 0.0, {1, 1, 1});
  x.drawn_s = {3 * std::exp(0.1), 3 * std::exp(-0.1)};
  y.drawn_s = {5, 5};
  const nlohmann::json d = composition_fit({x, y});
  CHECK(d["variance"].get<double>() == Approx(0.02));
  CHECK(d["drawn"].get<double>() == Approx(0.005));
  CHECK(d["sigma"].get<double>() == Approx(std::sqrt(0.02 - 0.005)));
  // No two plans in a group: nothing fitted.
  const nlohmann::json none = composition_fit({x});
  CHECK(none["dof"] == 0);
  CHECK(none["sigma"].get<double>() == 0);
}

TEST_CASE("composition draws: one factor per strategy, shared by the operators that choose it",
          "[cost][composition]") {
  const double sigma = 0.1;
  Choice zdp;
  zdp.zdp_slices = 1;
  Choice replicate;
  replicate.replicate = true;
  const Plan a = uniform_plan(4, zdp), b = uniform_plan(4, replicate);
  Plan mixed = a;
  mixed.choices[2] = replicate;
  const std::vector<std::int64_t> ka = composition_keys(a), kb = composition_keys(b),
                                  km = composition_keys(mixed);
  CHECK(composition_factor(ka, 1, 0) == 1);
  CHECK(composition_factor({}, 1, sigma) == 1);
  CHECK(composition_keys(a) == ka);  // deterministic
  Plan staged = a;
  staged.pp = 2;
  CHECK(composition_keys(staged) != ka);  // another layout: another strategy
  // A uniform plan moves by its one factor exp(sigma z - sigma^2 / 2): over 4000 draws its log has
  // the standard deviation sigma (to the estimate's sampling error, about 1.1% here) and the factor
  // the mean 1; two uniform plans of different strategies move apart by sqrt(2) sigma; a plan with
  // one operator of four replicated is (3 f_zdp + f_replicate) / 4 in every draw.
  std::vector<double> la, lratio;
  double mean = 0;
  for (std::uint64_t d = 1; d <= 4000; ++d) {
    const double fa = composition_factor(ka, d, sigma), fb = composition_factor(kb, d, sigma);
    la.push_back(std::log(fa));
    lratio.push_back(std::log(fa / fb));
    mean += fa / 4000;
    CHECK(composition_factor(km, d, sigma) == Approx((3 * fa + fb) / 4));
  }
  CHECK(sd(la) == Approx(sigma).epsilon(0.05));
  CHECK(sd(lratio) == Approx(std::sqrt(2.0) * sigma).epsilon(0.05));
  CHECK(mean == Approx(1.0).margin(5 * 0.1 / std::sqrt(4000.0)));
}

TEST_CASE("a plan's draws take its composition factor", "[cost][composition]") {
  Choice zdp;
  zdp.zdp_slices = 1;
  Plan plan = uniform_plan(3, zdp);
  plan.calibration = Calibration{};
  plan.calibration->provenance = {{"fit", {{"composition", {{"sigma", 0.08}}}}}};
  CHECK(fit_errors(*plan.calibration).composition == 0.08);
  CHECK(has_uncertainty(*plan.calibration));  // the composition error alone is an error to draw
  const std::vector<double> draws = drawn_predictions(plan, 50, [](const Plan&) { return 2.0; });
  REQUIRE(draws.size() == 50);
  for (std::uint64_t d = 1; d <= 50; ++d)
    CHECK(draws[d - 1] == Approx(2.0 * composition_factor(composition_keys(plan), d, 0.08)));
}
