// The search's answer to its own error (search/request.hpp): --objective robust (costmodel::at_quantile),
// the exact search under the prices at their 95th percentile against brute force and a request's
// robust plan against its default one; and the simpler plan a gain from splitting is weighed against.
#include <algorithm>
#include <cmath>
#include <random>

#include <catch2/catch.hpp>

#include "../costmodel/cost_fixtures.hpp"
#include "costmodel/calibration.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/uncertainty.hpp"
#include "recorded_request.hpp"
#include "search/hybrid.hpp"
#include "search/request.hpp"

namespace osdp {
namespace {

using costmodel::Calibration;
using costmodel::ModelSpec;
using costmodel::PlanCostModel;

ModelSpec small_gpt(int layers, int hidden, int seq) {
  ModelSpec m;
  m.name = "small";
  m.stages = {costmodel::StageSpec{layers, hidden, 4, 4 * hidden}};
  m.seq = seq;
  m.vocab = 256;
  return m;
}

// A calibration of the synthetic cluster's figures whose fits record errors: every collective a
// 10-40% residual, GEMMs measured at a few shapes, drifts and an optimizer residual.
Calibration erring(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0.1, 0.4);
  Calibration c;
  c.name = "erring";
  const double beta = 1.0 / costmodel::cost_fixtures::kBandwidth;
  c.allgather = {{65536, costmodel::cost_fixtures::kAlpha, beta, u(rng)},
                 {costmodel::kInf, costmodel::cost_fixtures::kAlpha, beta, u(rng)}};
  c.reducescatter = {{costmodel::kInf, costmodel::cost_fixtures::kAlpha, beta, u(rng)}};
  c.allreduce = {{costmodel::kInf, costmodel::cost_fixtures::kAlpha, beta, u(rng)}};
  c.gemm_times = {{64, 64, 64, 1, 2e-6}, {128, 64, 64, 1, 5e-6}, {64, 256, 64, 1, 9e-6}};
  c.provenance = {{"fit",
                   {{"adam", {{"residual_rms", u(rng)}}},
                    {"elementwise", {{"residual_rms", u(rng)}}},
                    {"repeat_spread", {{"compute", u(rng)}, {"communication", u(rng)}}}}}};
  return c;
}

}  // namespace

TEST_CASE("the exact search under the 95th-percentile prices equals brute force", "[robust][brute]") {
  std::mt19937 rng(20261128);
  int compared = 0;
  for (int trial = 0; trial < 10; ++trial) {
    const ModelSpec model = small_gpt(1, 64, 16);  // brute force grows as choices ^ operators
    costmodel::ClusterSpec cluster = costmodel::cost_fixtures::synthetic_cluster(1, 4);
    cluster.overlap.enabled = rng() % 2 == 0;
    cluster.overlap.interference = 1.1;
    costmodel::CostOptions opts;
    opts.prefetch = cluster.overlap.enabled ? 1 : 0;
    const Calibration nominal = erring(rng);
    const Calibration robust = costmodel::at_quantile(nominal, costmodel::kRobustZ);
    PlanCostModel at95(cluster, &robust, model.precision, opts);
    const PlanCostModel at50(cluster, &nominal, model.precision, opts);
    search::HybridSearchOptions so;
    so.space.split_max = 2;
    so.space.checkpoint = search::CheckpointPolicy::kOff;
    so.space.replicate = true;
    const int pp = 1 << (rng() % 2);
    const search::HybridLayout layout{pp, 1 + static_cast<int>(rng() % 2), 1 + static_cast<int>(rng() % 2),
                                      costmodel::PipelineSchedule::k1F1B, false};
    const auto hw = costmodel::lower(model, pp);
    at95.set_capacity(1e18);
    const auto brute = search::brute_force_layout(at95, hw, layout, so);
    const auto exact = search::solve_layout_exact(at95, hw, layout, so);
    INFO("trial " << trial);
    REQUIRE(brute);
    REQUIRE(exact);
    ++compared;
    const double tb = at95.evaluate(hw, *brute).time_s, te = at95.evaluate(hw, *exact).time_s;
    CHECK(std::abs(te - tb) <= 1e-9 * tb);
    // Every price at its 95th percentile is dearer than at the fit: the objective is not the default.
    CHECK(tb > at50.evaluate(hw, *brute).time_s);
  }
  CHECK(compared == 10);
}

TEST_CASE("a robust request: its plan is the best at the 95th percentile and no better at the fit",
          "[robust][request]") {
  // A real calibration with errors (a 2-rank shared-memory run of osdp calibrate, committed).
  const std::string cal =
      std::string(OSDP_TEST_DATA_DIR) + "/results/lab/xeon-shm-intervals-a/calibration.json";
  search::PlanRequest r;
  r.model = "val-4x384";
  r.cluster = "cpu-2";
  r.calibration = cal;
  r.memory = "130MiB";
  r.batch = "2";
  r.baselines = {"none"};
  r.selective = false;
  const search::PlanReport plain = search::run_request(r);
  r.objective = "robust";
  const search::PlanReport robust = search::run_request(r);
  REQUIRE(plain.outcome.feasible);
  REQUIRE(robust.outcome.feasible);
  // Both plans priced both ways, each with the calibration it is stamped with (the nominal one).
  const Calibration nominal = *robust.outcome.plan.calibration;
  CHECK_FALSE(nominal.quantile_z);
  const auto at = [&](costmodel::Plan p, bool pessimistic) {
    p.calibration = pessimistic ? costmodel::at_quantile(nominal, costmodel::kRobustZ) : nominal;
    return costmodel::plan_cost_model(p).evaluate(*robust.outcome.workload, p).throughput;
  };
  CHECK(robust.outcome.robust_throughput == Approx(at(robust.outcome.plan, true)).epsilon(1e-12));
  CHECK(robust.outcome.evaluation.throughput == Approx(at(robust.outcome.plan, false)).epsilon(1e-12));
  CHECK(at(robust.outcome.plan, true) >= at(plain.outcome.plan, true) * (1 - 1e-12));
  CHECK(at(plain.outcome.plan, false) >= at(robust.outcome.plan, false) * (1 - 1e-12));
  CHECK(plain.outcome.robust_throughput == 0);
  // Without a calibration that records errors there is nothing to be robust against.
  r.calibration.clear();
  CHECK_THROWS_WITH(search::run_request(r), Catch::Contains("--objective robust: needs a calibration"));
  r.objective = "median";
  r.calibration = cal;
  CHECK_THROWS_WITH(search::run_request(r), Catch::Contains("expected throughput or robust"));
}

namespace {
// val-4x384 on 2 CPU ranks at batch 2 under fsdp (every operator ZDP), with a calibration that records
// its errors.
search::PlanRequest fsdp_request() {
  return testing::recorded_request("fsdp");
}
}  // namespace

TEST_CASE("without splits: every split operator whole, ZDP where a slice was", "[robust][request]") {
  search::PlanRequest r = fsdp_request();
  const auto p = search::prepare_search(r);
  search::PlanOutcome o = search::run_strategy(*p, *p->strategy);
  REQUIRE(o.feasible);
  CHECK_FALSE(search::without_splits(*p, o));  // fsdp splits nothing
  // Split two operators: one 4 ways with 1 slice ZDP, one 2 ways with none.
  const std::size_t a = 1, b = 2;
  o.plan.choices[a] = {false, 4, 1, false, false, false, false};
  o.plan.choices[b] = {false, 2, 0, false, false, false, false};
  const auto w = search::without_splits(*p, o);
  REQUIRE(w);
  CHECK(w->strategy == "without splits");
  for (std::size_t i = 0; i < w->plan.choices.size(); ++i) {
    const costmodel::Choice& c = w->plan.choices[i];
    CHECK(c.split == 1);
    if (i == a)
      CHECK(c.is_zdp());
    else if (i == b)
      CHECK(c.is_dp());
    else
      CHECK(c == o.plan.choices[i]);
  }
  const costmodel::Evaluation ev = costmodel::plan_cost_model(w->plan).evaluate(*w->workload, w->plan);
  CHECK(w->evaluation.time_s == ev.time_s);
  CHECK(w->drawn_time_s.size() == static_cast<std::size_t>(costmodel::kDefaultDraws));
  CHECK(w->drawn_time_s == costmodel::drawn_step_times(*w->workload, w->plan, costmodel::kDefaultDraws));
  // Under a memory limit the whole plan does not fit: none.
  o.plan.memory_limit_bytes = ev.peak_bytes * 0.999;
  CHECK_FALSE(search::without_splits(*p, o));
}

// val-4x384 under fsdp: every operator ZDP. Give two of the attention operators other choices (DP,
// and a 2-way split with DP slices) and one MLP operator DP: per kind the choice most operators have
// wins (attention: ZDP, held by 2 of 4; MLP: ZDP, 3 of 4), the embedding and head keep theirs.
TEST_CASE("one choice per kind: each operator kind takes the choice most of it has", "[robust][request]") {
  search::PlanRequest r = fsdp_request();
  const auto p = search::prepare_search(r);
  search::PlanOutcome o = search::run_strategy(*p, *p->strategy);
  REQUIRE(o.feasible);
  CHECK_FALSE(search::one_choice_per_kind(*p, o));  // one choice for every operator already
  const auto& ops = o.workload->operators;
  std::vector<std::size_t> attention, mlp;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == costmodel::OperatorKind::kAttention) attention.push_back(i);
    if (ops[i].kind == costmodel::OperatorKind::kMlp) mlp.push_back(i);
  }
  REQUIRE(attention.size() == 4);
  REQUIRE(mlp.size() == 4);
  const costmodel::Choice zdp = o.plan.choices[attention[0]];
  REQUIRE(zdp.is_zdp());
  const costmodel::Choice dp{false, 1, 0, false, false, false, false};
  const costmodel::Choice halves{false, 2, 0, false, false, false, false};
  o.plan.choices[attention[1]] = dp;
  o.plan.choices[attention[2]] = halves;
  o.plan.choices[mlp[3]] = dp;
  const auto u = search::one_choice_per_kind(*p, o);
  REQUIRE(u);
  CHECK(u->strategy == "one choice per kind");
  for (std::size_t i = 0; i < ops.size(); ++i) CHECK(u->plan.choices[i] == zdp);  // fsdp: ZDP everywhere
  const costmodel::Evaluation ev = costmodel::plan_cost_model(u->plan).evaluate(*u->workload, u->plan);
  CHECK(u->evaluation.time_s == ev.time_s);
  CHECK(u->drawn_time_s == costmodel::drawn_step_times(*u->workload, u->plan, costmodel::kDefaultDraws));
  // A tie (2 DP and 2 ZDP attention operators) goes to the choice the kind used first.
  o.plan.choices[attention[2]] = dp;
  o.plan.choices[attention[0]] = dp;
  o.plan.choices[attention[1]] = zdp;
  o.plan.choices[attention[3]] = zdp;
  const auto tie = search::one_choice_per_kind(*p, o);
  REQUIRE(tie);
  for (const std::size_t i : attention) CHECK(tie->plan.choices[i] == dp);
  // The report carries it beside the plan.
  r.strategy = "exact";
  const search::PlanReport rep = search::run_request(r);
  const nlohmann::json j = search::report_json(rep);
  CHECK(j.contains("one_choice_per_kind"));
  CHECK(j["one_choice_per_kind"].is_null() == !rep.uniform.has_value());
}

}  // namespace osdp
