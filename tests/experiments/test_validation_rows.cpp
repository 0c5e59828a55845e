// osdp validate's rows and verdict: a measured row's JSON round trip, and the check of the
// measured order of plans (experiments/validation_outputs.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/workload.hpp"
#include "experiments/measured.hpp"
#include "experiments/run.hpp"
#include "unit_rows.hpp"

using namespace osdp::experiments;
using osdp::experiments::testing::ev;
using osdp::experiments::testing::result;

TEST_CASE("a measured row reads back as written", "[experiments][validate]") {
  UnitResult r =
      result(3, "exact", {ev("analytic", true, 10), ev("sim", true, 11), ev("measured", true, 12)});
  Measurement m;
  m.group = R"({"batch":1})";
  m.prefetch = 1;
  m.steps_s = {0.5, 0.25, 0.75};
  m.min_s = 0.25;
  m.max_s = 0.75;
  m.predicted_peak_bytes = 1024;
  m.peak_bytes = 2048;
  m.baseline_bytes = 7;
  m.padding_bytes = 8;
  m.time_error = 0.125;
  m.memory_error = 1;
  m.loss = 6.5;
  m.state_bytes = 4096;
  m.predicted_state_bytes = 4000;
  r.measurement = m;
  const UnitResult back = unit_result_from_json(nlohmann::json::parse(to_json(r).dump()));
  REQUIRE(back.measurement);
  CHECK(to_json(back) == to_json(r));
  CHECK(back.measurement->steps_s == m.steps_s);
  CHECK(back.measurement->state_bytes == 4096);
  CHECK(back.measurement->predicted_state_bytes == 4000);
  // Rows written before the torch backend have no states: they read back as 0.
  nlohmann::json old = to_json(r);
  old["measurement"].erase("state_bytes");
  old["measurement"].erase("predicted_state_bytes");
  CHECK(unit_result_from_json(old).measurement->state_bytes == 0);
  REQUIRE(back.evaluation(EvaluatorKind::kMeasured) != nullptr);
  CHECK(back.evaluation(EvaluatorKind::kMeasured)->time_s == r.evaluation(EvaluatorKind::kMeasured)->time_s);
  CHECK(result(9, "s", {ev("analytic", true, 1)}).evaluation(EvaluatorKind::kMeasured) == nullptr);
  // A sweep row has no measurement, and reads back without one.
  UnitResult plain = result(1, "fsdp", {ev("analytic", true, 10)});
  CHECK_FALSE(unit_result_from_json(to_json(plain)).measurement);
  // A timing run on the nccl backend leaves the loss NaN, which JSON writes as null: the row reads
  // back (osdp validate --resume keeps it) with the loss NaN and everything else as written.
  m.loss = std::numeric_limits<double>::quiet_NaN();
  r.measurement = m;
  const nlohmann::json written = nlohmann::json::parse(to_json(r).dump());
  CHECK(written["measurement"]["loss"].is_null());
  const UnitResult nan_back = unit_result_from_json(written);
  REQUIRE(nan_back.measurement);
  CHECK(std::isnan(nan_back.measurement->loss));
  CHECK(nan_back.measurement->steps_s == m.steps_s);
  CHECK(nan_back.measurement->time_error == 0.125);
}

namespace {

// A measured row of configuration `group`: predicted (sim) `pred` s, timed steps `steps` (the
// median is the measured time).
UnitResult measured_row(int index, const std::string& group, const std::string& strategy, double pred,
                        std::vector<double> steps) {
  std::vector<double> sorted = steps;
  std::sort(sorted.begin(), sorted.end());
  const double med = sorted[sorted.size() / 2];
  UnitResult r =
      result(index, strategy,
             {ev("analytic", true, 8 / pred), ev("sim", true, 8 / pred), ev("measured", true, 8 / med)});
  Measurement m;
  m.group = group;
  m.steps_s = steps;
  m.min_s = sorted.front();
  m.max_s = sorted.back();
  m.time_error = med / pred - 1;
  r.measurement = m;
  return r;
}

}  // namespace

TEST_CASE("without intervals, the measured order is checked where the predicted gap exceeds the spread",
          "[experiments][validate]") {
  // Configuration g1: a predicted 1.00 s, b 1.10 s, c 1.02 s; the steps of a and c spread 4%
  // ((max - min) / median), b's 0.05 / 1.05 = 4.8%. a-b: gap 10% > 4.8%, measured 1.00 < 1.05: as
  // predicted. a-c: gap 2% < 4%: not checked (c measures faster than a, within the noise). c-b:
  // gap 1.10 / 1.02 - 1 = 7.8% > 4.8%, measured 0.90 < 1.05: as predicted.
  // Configuration g2: d predicted 1.0 s, e 1.5 s (gap 50%), measured 2.0 and 1.0 with no spread:
  // the wrong way round, a failure naming both.
  const std::vector<UnitResult> rows{measured_row(0, "g1", "a", 1.00, {0.98, 1.00, 1.02}),
                                     measured_row(1, "g1", "b", 1.10, {1.03, 1.05, 1.08}),
                                     measured_row(2, "g1", "c", 1.02, {0.882, 0.90, 0.918}),
                                     measured_row(3, "g2", "d", 1.0, {2.0, 2.0, 2.0}),
                                     measured_row(4, "g2", "e", 1.5, {1.0, 1.0, 1.0})};
  ValidationSpec spec;
  spec.time_max = 10;  // only the order is under test
  spec.time_median = 10;
  const ValidationSummary s = summarize(rows, spec);
  CHECK(s.order_pairs == 4);  // three in g1, one in g2
  REQUIRE(s.orders.size() == 3);
  int as_predicted = 0;
  for (const auto& o : s.orders) {
    as_predicted += o.ok;
    CHECK(o.predicted_gap > o.spread);
    if (o.group == "g2") {
      CHECK(o.a == "d");
      CHECK(o.b == "e");
      CHECK(o.predicted_gap == Approx(0.5));
      CHECK(o.spread == 0.0);
      CHECK_FALSE(o.ok);
    } else if (o.a == "a") {
      CHECK(o.b == "b");
      CHECK(o.predicted_gap == Approx(0.10));
      CHECK(o.spread == Approx(0.05 / 1.05));  // b's spread, the larger
    }
  }
  CHECK(as_predicted == 2);
  // A reversal of plans predicted apart fails whatever the time tolerance (no forgiveness up to twice
  // it): one failure naming both.
  int order_failures = 0;
  for (const auto& f : s.failures) {
    if (f.rfind("order:", 0) != 0) continue;
    ++order_failures;
    CHECK(f.find("order: d predicted 50.0% faster than e") != std::string::npos);
  }
  CHECK(order_failures == 1);
  CHECK_FALSE(s.ok());
  CHECK(s.with_interval == 0);  // no row has an interval
  CHECK_FALSE(s.covered_about_level);
  // "order": false reports the same checks, the reversal among them, and fails on none of them.
  spec.order = false;
  const ValidationSummary lax = summarize(rows, spec);
  REQUIRE(lax.orders.size() == 3);
  CHECK(std::count_if(lax.orders.begin(), lax.orders.end(), [](const auto& o) { return o.ok; }) == 2);
  CHECK(lax.failures.empty());
  CHECK(lax.ok());
}

TEST_CASE("with intervals: coverage, and the order checked where the intervals are apart",
          "[experiments][validate]") {
  // g1: a predicted 1.00 s in [0.95, 1.05], b 1.10 s in [1.04, 1.16] (overlapping: not checked though
  // the gap 10% exceeds the spread), c 1.30 s in [1.20, 1.40] (apart from both). Measured a 1.06 (outside
  // its interval), b 1.05 (inside), c 1.25 (inside): coverage 2 of 3; a-c and b-c checked, in order.
  // g2: d predicted 1.0 s in [0.9, 1.1], e 1.5 s in [1.4, 1.6], measured 1.5 and 1.45 (d outside, e
  // inside): d-e checked and reversed, a failure.
  std::vector<UnitResult> rows{measured_row(0, "g1", "a", 1.00, {1.05, 1.06, 1.07}),
                               measured_row(1, "g1", "b", 1.10, {1.04, 1.05, 1.06}),
                               measured_row(2, "g1", "c", 1.30, {1.24, 1.25, 1.26}),
                               measured_row(3, "g2", "d", 1.0, {1.5, 1.5, 1.5}),
                               measured_row(4, "g2", "e", 1.5, {1.45, 1.45, 1.45})};
  const std::vector<osdp::costmodel::Interval> intervals{
      {0.95, 1.05}, {1.04, 1.16}, {1.20, 1.40}, {0.9, 1.1}, {1.4, 1.6}};
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (auto& e : rows[i].evaluations)
      if (e.evaluator == EvaluatorKind::kSim) e.interval = intervals[i];
  ValidationSpec spec;
  spec.time_max = 10;
  spec.time_median = 10;
  const ValidationSummary s = summarize(rows, spec);
  CHECK(s.with_interval == 5);
  CHECK(s.covered == 3);  // b, c, e
  CHECK(s.coverage() == Approx(0.6));
  // About the run's own level: the mean over the two configurations of their mean ln(measured /
  // predicted), g1 (ln 1.06 + ln(1.05 / 1.10) + ln(1.25 / 1.30)) / 3, g2 (ln 1.5 + ln(1.45 / 1.5)) / 2;
  // L = e^((g1 + g2) / 2) = 1.0923. Divided by it, a 1.06 -> 0.970 is inside [0.95, 1.05]; b 0.961, c
  // 1.144, d 1.373 and e 1.327 are outside: 1 of 5.
  const double g1 = (std::log(1.06) + std::log(1.05 / 1.10) + std::log(1.25 / 1.30)) / 3;
  const double g2 = (std::log(1.5) + std::log(1.45 / 1.5)) / 2;
  REQUIRE(s.composition["level"].is_number());
  CHECK(s.composition["level"].get<double>() == Approx(std::exp((g1 + g2) / 2)));
  REQUIRE(s.covered_about_level);
  CHECK(*s.covered_about_level == 1);
  // The intervals' reach around their predictions, the median over the five: below -5%, -5.45%,
  // -7.69%, -10% and -6.67%, above the same in magnitude; e's (1.4 and 1.6 around 1.5) is the median.
  CHECK(s.interval_low == Approx(1.4 / 1.5 - 1));
  CHECK(s.interval_high == Approx(1.6 / 1.5 - 1));
  REQUIRE(s.orders.size() == 3);  // a-c, b-c, d-e
  for (const auto& o : s.orders) {
    CHECK(o.by_interval);
    CHECK(o.b != "b");  // a-b overlap
    CHECK(o.ok == (o.group == "g1"));
  }
  REQUIRE(s.failures.size() == 1);
  CHECK(s.failures[0].find("order: d predicted 50.0% faster than e (90% intervals 900.0-1100.0 and "
                           "1400.0-1600.0 ms apart)") != std::string::npos);
}

TEST_CASE("with draws: two plans are compared draw by draw", "[experiments][validate]") {
  // Both plans priced on the same 100 draws of a machine that moves by up to +-30%: a's step 1.0 x f_d,
  // b's 1.05 x f_d. Their own 90% intervals overlap widely, but in every draw b is 5% slower than a:
  // predicted apart. Measured b faster than a: a reversal, a failure. c, drawn 1.01 x f_d on draws
  // 1-50 and 0.99 x f_d on 51-100, is not apart from a, and is apart from b (b / c 1.040 or 1.061):
  // measured faster than b, as predicted.
  std::vector<UnitResult> rows{measured_row(0, "g", "a", 1.00, {1.10, 1.10, 1.10}),
                               measured_row(1, "g", "b", 1.05, {1.08, 1.08, 1.08}),
                               measured_row(2, "g", "c", 1.00, {1.00, 1.00, 1.00})};
  const std::vector<double> scale{1.0, 1.05, 1.0};
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (auto& e : rows[i].evaluations) {
      if (e.evaluator != EvaluatorKind::kSim) continue;
      for (int d = 0; d < 100; ++d) {
        const double f = 0.7 + 0.6 * d / 99.0;
        e.drawn_s.push_back(scale[i] * f * (i == 2 ? (d < 50 ? 1.01 : 0.99) : 1.0));
      }
      e.interval = osdp::costmodel::central_interval(e.drawn_s);
    }
  ValidationSpec spec;
  spec.time_max = 10;
  spec.time_median = 10;
  const ValidationSummary s = summarize(rows, spec);
  REQUIRE(s.orders.size() == 2);
  for (const auto& o : s.orders) {
    CHECK(o.by_interval);
    CHECK(o.b == "b");
    CHECK(o.ok == (o.a == "c"));
  }
  REQUIRE(s.failures.size() == 1);
  CHECK(s.failures[0].find("b / a in 90% of draws 1.050-1.050") != std::string::npos);
  // The draws survive the row's JSON.
  const UnitResult back = unit_result_from_json(nlohmann::json::parse(to_json(rows[1]).dump()));
  CHECK(back.evaluation(EvaluatorKind::kSim)->drawn_s == rows[1].evaluation(EvaluatorKind::kSim)->drawn_s);
}

TEST_CASE("plans the draws set apart by less than their steps' spread are not judged",
          "[experiments][validate]") {
  // In every draw b is 2% slower than a (b / a = 1.02 in all 100 draws: the model is sure), but a's
  // steps spread over (1.03 - 1.00) / 1.01 = 2.97% and b's over (1.015 - 0.995) / 1.00 = 2%: a 2% gap
  // is within what the run resolves, so b measured faster is no reversal. c, 4% slower than a in every
  // draw (beyond 2.97%), measured slower than a: judged, in order. b-c (2% / 1.02 = 1.96% apart) not.
  std::vector<UnitResult> rows{measured_row(0, "g", "a", 1.00, {1.00, 1.01, 1.03}),
                               measured_row(1, "g", "b", 1.02, {0.995, 1.00, 1.015}),
                               measured_row(2, "g", "c", 1.04, {1.05, 1.05, 1.05})};
  const std::vector<double> scale{1.0, 1.02, 1.04};
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (auto& e : rows[i].evaluations) {
      if (e.evaluator != EvaluatorKind::kSim) continue;
      for (int d = 0; d < 100; ++d) e.drawn_s.push_back(scale[i] * (0.9 + 0.2 * d / 99.0));
      e.interval = osdp::costmodel::central_interval(e.drawn_s);
    }
  ValidationSpec spec;
  spec.time_max = 10;
  spec.time_median = 10;
  const ValidationSummary s = summarize(rows, spec);
  CHECK(s.order_pairs == 3);
  REQUIRE(s.orders.size() == 1);
  CHECK(s.orders[0].a == "a");
  CHECK(s.orders[0].b == "c");
  CHECK(s.orders[0].predicted_gap == Approx(0.04));
  CHECK(s.orders[0].spread == Approx(0.03 / 1.01));
  CHECK(s.orders[0].ok);
  CHECK(s.failures.empty());
}

TEST_CASE("the states at rest the torch backend is held to, derived per operator",
          "[experiments][validate]") {
  // 2 nodes x 2 ranks: world shards hold ceil(P/4), node groups ceil(P/2), REPLICATE all P; each
  // parameter costs w + g + o = 4 + 4 + 8 bytes in fp32 with Adam.
  osdp::costmodel::Plan plan;
  plan.model = osdp::costmodel::load_model("val-nd-8x256");
  plan.cluster = osdp::costmodel::load_cluster("cpu-2");
  plan.cluster.nodes = 2;
  plan.cluster.devices_per_node = 2;
  const osdp::costmodel::Workload w = osdp::costmodel::lower(plan.model);
  REQUIRE(w.operators.size() >= 4);
  osdp::costmodel::set_data_parallel(plan, w, std::vector<osdp::costmodel::Choice>(w.operators.size()));
  auto share = [](std::int64_t p, std::int64_t n) { return static_cast<double>((p + n - 1) / n); };
  double all_world = 0;
  for (const auto& op : w.operators) all_world += 16 * share(op.parameters(), 4);
  CHECK(states_at_rest_bytes(plan, w) == all_world);  // DP (the default choice): world shards
  plan.choices[0].zdp_slices = 1;                     // ZDP: the same at rest
  CHECK(states_at_rest_bytes(plan, w) == all_world);
  plan.choices[1].replicate = true;
  plan.choices[2].node_group = true;
  plan.choices[3].two_level = true;  // two-level collectives: world shards still
  const double p1 = static_cast<double>(w.operators[1].parameters());
  const auto p2 = w.operators[2].parameters();
  const double expected = all_world - 16 * share(w.operators[1].parameters(), 4) + 16 * p1 -
                          16 * share(p2, 4) + 16 * share(p2, 2);
  CHECK(states_at_rest_bytes(plan, w) == expected);
  CHECK(expected > all_world);
}

namespace {
// Gives row r's simulated evaluation the draws `drawn` and the interval [low, high].
void set_draws(UnitResult& r, std::vector<double> drawn, double low, double high) {
  for (auto& e : r.evaluations)
    if (e.evaluator == EvaluatorKind::kSim) {
      e.drawn_s = std::move(drawn);
      e.interval = {low, high};
    }
}
// The same with the draws' own central interval.
void set_draws(UnitResult& r, std::vector<double> drawn) {
  const osdp::costmodel::Interval i = osdp::costmodel::central_interval(drawn);
  set_draws(r, std::move(drawn), i.low, i.high);
}
std::vector<double> constant(double x) {
  return std::vector<double>(100, x);
}
}  // namespace

TEST_CASE("speedups: a measured ratio against its drawn interval, with and without its own spread",
          "[experiments][validate]") {
  // g1: b / a drawn 1 + d / 99 over draws d = 0..99, whose central 90% (linear interpolation at
  // positions 4.95 and 94.05) is 1.05-1.95; the steps are constant, so the measured ratio (1.5) has no
  // spread of its own: inside both. g2: the same draws, measured 2.5: outside both.
  std::vector<UnitResult> rows{measured_row(0, "g1", "a", 1.0, std::vector<double>(5, 1.0)),
                               measured_row(1, "g1", "b", 1.5, std::vector<double>(5, 1.5)),
                               measured_row(2, "g2", "a", 1.0, std::vector<double>(5, 1.0)),
                               measured_row(3, "g2", "c", 1.5, std::vector<double>(5, 2.5))};
  std::vector<double> grid;
  for (int d = 0; d < 100; ++d) grid.push_back(1.0 + d / 99.0);
  for (int i : {0, 2}) set_draws(rows[i], constant(1.0));
  for (int i : {1, 3}) set_draws(rows[i], grid);
  ValidationSpec spec;
  spec.time_max = 10;
  spec.time_median = 10;
  const ValidationSummary s = summarize(rows, spec);
  REQUIRE(s.ratios.size() == 2);
  const RatioCoverage& in = s.ratios[0].group == "g1" ? s.ratios[0] : s.ratios[1];
  const RatioCoverage& out = s.ratios[0].group == "g1" ? s.ratios[1] : s.ratios[0];
  CHECK(in.a == "a");
  CHECK(in.b == "b");
  CHECK(in.measured == Approx(1.5));
  CHECK(in.predicted == Approx(1.5));
  CHECK(in.low == Approx(1.05));
  CHECK(in.high == Approx(1.95));
  // Without a spread of its own the widened interval is the drawn one (quantiles taken in logs).
  CHECK(in.noise_low == Approx(1.05).epsilon(1e-3));
  CHECK(in.noise_high == Approx(1.95).epsilon(1e-3));
  CHECK((in.inside && in.inside_drawn));
  CHECK(out.measured == Approx(2.5));
  CHECK((!out.inside && !out.inside_drawn));
  CHECK(s.ratios_inside() == 1);
  CHECK(s.ratio_reach() == Approx(std::sqrt(1.95 / 1.05) - 1));
}

TEST_CASE("speedups: the measured ratio's own spread, from its steps resampled in pairs",
          "[experiments][validate]") {
  // b's nine steps 1.8, 1.9, ..., 2.6 (median 2.2) over a's constant 1.0: measured 2.2. A resample's
  // median is at most 1.9 with probability P(Bin(9, 2/9) >= 5) = 1.4% and at least 2.4 with
  // P(Bin(9, 1/3) >= 5) = 14.5%, so its 5th percentile is at most 2.0 and its 95th at least 2.4.
  // Drawn 2.1 in every draw: the drawn interval [2.1, 2.1] excludes 2.2, the widened one reaches from
  // at most 2.1 x 2.0 / 2.2 = 1.91 to at least 2.1 x 2.4 / 2.2 = 2.29: inside. Drawn 1.8: the widened
  // interval ends below 1.8 x 2.6 / 2.2 = 2.13 (the largest step): outside.
  const std::vector<double> spread{1.8, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6};
  std::vector<UnitResult> rows{
      measured_row(0, "g1", "a", 1.0, std::vector<double>(9, 1.0)), measured_row(1, "g1", "b", 2.1, spread),
      measured_row(2, "g2", "a", 1.0, std::vector<double>(9, 1.0)), measured_row(3, "g2", "b", 1.8, spread)};
  set_draws(rows[0], constant(1.0));
  set_draws(rows[1], constant(2.1));
  set_draws(rows[2], constant(1.0));
  set_draws(rows[3], constant(1.8));
  const auto in = ratio_coverage(rows[0], rows[1]);
  const auto out = ratio_coverage(rows[2], rows[3]);
  REQUIRE(in);
  REQUIRE(out);
  CHECK(in->measured == Approx(2.2));
  CHECK(!in->inside_drawn);
  CHECK(in->noise_low <= 2.1 * 2.0 / 2.2 + 1e-9);
  CHECK(in->noise_high >= 2.1 * 2.4 / 2.2 - 1e-9);
  CHECK(in->inside);
  CHECK(out->noise_high <= 1.8 * 2.6 / 2.2 + 1e-9);
  CHECK((!out->inside && !out->inside_drawn));

  // Steps that move together (the machine's pace, shared by the plans run side by side): b's step i
  // is twice a's, so every paired resample gives exactly 2 (an unpaired one would not). Drawn 2.05:
  // outside, with no spread of the ratio's own to excuse it.
  const std::vector<double> pace{1.0, 1.2, 0.9, 1.1, 1.3};
  std::vector<double> twice;
  for (double x : pace) twice.push_back(2 * x);
  UnitResult p = measured_row(4, "g3", "a", 1.0, pace), q = measured_row(5, "g3", "b", 2.05, twice);
  set_draws(p, constant(1.0));
  set_draws(q, constant(2.05));
  const auto paired = ratio_coverage(p, q);
  REQUIRE(paired);
  CHECK(paired->measured == Approx(2.0));
  CHECK(paired->noise_low == Approx(2.05));
  CHECK(paired->noise_high == Approx(2.05));
  CHECK(!paired->inside);
  // Rows without draws have no such check.
  UnitResult bare = measured_row(6, "g3", "c", 1.0, pace);
  CHECK(!ratio_coverage(p, bare));
}

TEST_CASE("the composition estimator over a run's own rows", "[experiments][validate]") {
  // Configuration g1: a runs e^0.1 times its prediction and b exactly its own, both at the same pace
  // (1, 1.2, 0.9 from step to step: taken out), no draws: the residuals 0.1 and 0 about their mean,
  // over one degree of freedom, 0.005, and no noise. Configuration g2 has one plan: no degree of
  // freedom. A run of single plans has no estimate.
  const std::vector<double> pace{1.0, 1.2, 0.9};
  std::vector<double> sa, sb;
  for (double p : pace) sa.push_back(std::exp(0.1) * p), sb.push_back(2.0 * p);
  const std::vector<UnitResult> rows{measured_row(0, "g1", "a", 1.0, sa), measured_row(1, "g1", "b", 2.0, sb),
                                     measured_row(2, "g2", "a", 1.0, {1.3, 1.3, 1.3})};
  const ValidationSummary s = summarize(rows, ValidationSpec{});
  REQUIRE(s.composition.is_object());
  CHECK(s.composition["dof"] == 1);
  CHECK(s.composition["plans"] == 2);
  CHECK(s.composition["variance"].get<double>() == Approx(0.005));
  CHECK(s.composition["noise"].get<double>() == Approx(0).margin(1e-15));
  CHECK(s.composition["sigma"].get<double>() == Approx(std::sqrt(0.005)));
  CHECK(summarize({rows[2]}, ValidationSpec{}).composition.is_null());
}

TEST_CASE("the coverage a run is expected to have, each draw taken as a run", "[experiments][validate]") {
  ValidationSpec spec;
  spec.time_max = 10;
  spec.time_median = 10;
  SECTION("plans that share their whole error: a run is all inside or none") {
    // Four plans (two configurations), each drawn p (0.5 + 0.01 d) over draws d = 0..99, each
    // interval p [0.595, 1.405]: draws 10..90 are inside for every plan at once (81 draws count 4),
    // the other 19 for none (count 0). Constant steps: the medians have no noise. Sorted counts: 19
    // zeros, then fours; the 5th percentile is the 5th smallest (position floor(0.05 * 99) = 4): 0; the
    // median (position 49) and the 95th (position ceil(0.95 * 99) = 95) are 4. No count is within
    // 85-99% of four plans (4 of 4 is 100%).
    const std::vector<double> p{1.0, 1.5, 2.0, 3.0};
    std::vector<UnitResult> rows;
    for (int i = 0; i < 4; ++i) {
      rows.push_back(
          measured_row(i, i < 2 ? "g1" : "g2", "s" + std::to_string(i), p[i], std::vector<double>(5, p[i])));
      std::vector<double> drawn;
      for (int d = 0; d < 100; ++d) drawn.push_back(p[i] * (0.5 + 0.01 * d));
      set_draws(rows.back(), drawn, p[i] * 0.595, p[i] * 1.405);
    }
    const ValidationSummary s = summarize(rows, spec);
    CHECK(s.covered == 4);
    REQUIRE(s.expected_coverage);
    CHECK(s.expected_coverage->draws == 100);
    CHECK(s.expected_coverage->low == 0);
    CHECK(s.expected_coverage->median == 4);
    CHECK(s.expected_coverage->high == 4);
    CHECK(s.expected_coverage->in_band == 0.0);
  }
  SECTION("plans whose errors are apart: the count hardly moves") {
    // Ten plans, plan i drawn 0.5 + 0.01 ((d + 10 i) mod 100) in draw d, every interval [0.595, 1.405]
    // (inside: (d + 10 i) mod 100 in 10..90). In draw d the ten positions are the residues of d mod 10,
    // r, one per decade: r itself (below 10) is always outside, and r + 90 (above 90) is outside when r
    // >= 1. So draws with r = 0 count 9 (10 draws), the others 8 (90 draws): the 5th percentile and the
    // median 8, the 95th 9; 9 of 10 (90%) is within 85-99%, 8 of 10 is not: 10% of the draws.
    std::vector<UnitResult> rows;
    for (int i = 0; i < 10; ++i) {
      rows.push_back(measured_row(i, "g", "s" + std::to_string(i), 1.0, std::vector<double>(3, 1.0)));
      std::vector<double> drawn;
      for (int d = 0; d < 100; ++d) drawn.push_back(0.5 + 0.01 * ((d + 10 * i) % 100));
      set_draws(rows.back(), drawn, 0.595, 1.405);
    }
    const ValidationSummary s = summarize(rows, spec);
    REQUIRE(s.expected_coverage);
    CHECK(s.expected_coverage->low == 8);
    CHECK(s.expected_coverage->median == 8);
    CHECK(s.expected_coverage->high == 9);
    CHECK(s.expected_coverage->in_band == Approx(0.10));
  }
  SECTION("a median's own noise moves the count") {
    // One plan drawn exactly 1.0 in every draw, interval [0.99, 1.01], steps {0.5, 1, 2}: a resample of
    // three steps has median 1 unless two or three of them are the same outer step, with probability
    // 1 - 2 (3 (1/3)^2 (2/3) + (1/3)^3) = 13/27. Over 100 draws the count is 1 in about 48 of them
    // (binomial, sd 5): both counts are far more than 5 draws, so the 5th percentile is 0 and the 95th
    // 1. With constant steps every draw counts 1.
    std::vector<UnitResult> rows{measured_row(0, "g", "a", 1.0, {0.5, 1.0, 2.0})};
    set_draws(rows[0], std::vector<double>(100, 1.0), 0.99, 1.01);
    const ValidationSummary noisy = summarize(rows, spec);
    REQUIRE(noisy.expected_coverage);
    CHECK(noisy.expected_coverage->low == 0);
    CHECK(noisy.expected_coverage->high == 1);
    std::vector<UnitResult> still{measured_row(0, "g", "a", 1.0, {1.0, 1.0, 1.0})};
    set_draws(still[0], std::vector<double>(100, 1.0), 0.99, 1.01);
    const ValidationSummary quiet = summarize(still, spec);
    REQUIRE(quiet.expected_coverage);
    CHECK(quiet.expected_coverage->low == 1);
    CHECK(quiet.expected_coverage->high == 1);
  }
  SECTION("none without the same draws for every plan, at least 20") {
    std::vector<UnitResult> rows{measured_row(0, "g", "a", 1.0, {1.0, 1.0, 1.0}),
                                 measured_row(1, "g", "b", 1.0, {1.0, 1.0, 1.0})};
    set_draws(rows[0], std::vector<double>(100, 1.0), 0.9, 1.1);
    set_draws(rows[1], std::vector<double>(50, 1.0), 0.9, 1.1);
    CHECK_FALSE(summarize(rows, spec).expected_coverage);
    set_draws(rows[1], std::vector<double>(100, 1.0), 0.9, 1.1);
    CHECK(summarize(rows, spec).expected_coverage);
    for (auto& r : rows) set_draws(r, std::vector<double>(19, 1.0), 0.9, 1.1);
    CHECK_FALSE(summarize(rows, spec).expected_coverage);
  }
}
