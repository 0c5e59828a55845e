// A plan of stages (a pipeline's stages, each unit's tensor-parallel degree) in its plan file: read
// back as written, a unit handed to the next stage read as such, and a file whose units are out of
// order, whose unit takes a degree it cannot (3 of 8 ranks), or whose first stage holds no unit,
// refused at the JSON pointer of the offending field.
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cost_fixtures.hpp"
#include "costmodel/error.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/workload.hpp"

using namespace osdp::costmodel;

namespace {

TEST_CASE("a plan of stages reads back from its file as written", "[hybrid]") {
  ModelSpec model;  // 4 layers at hidden 64, 4 heads, seq 16, vocabulary 128, untied
  model.name = "small";
  model.stages = {StageSpec{4, 64, 4, 256}};
  model.seq = 16;
  model.vocab = 128;
  model.tied_embeddings = false;
  ClusterSpec cluster = cost_fixtures::synthetic_cluster(1, 8);
  cluster.device_name = "synthetic";
  Plan plan;
  plan.pp = 2;
  plan.micro_batches = 3;
  plan.batch_size = 2;
  plan.schedule = PipelineSchedule::kGpipe;
  const Workload hw = lower(model, plan.pp);
  const int units = static_cast<int>(hw.units.size());
  plan.stage_first_unit = {0, 2};
  for (int u = 0; u < units; ++u) plan.unit_tp.push_back(hw.units[static_cast<std::size_t>(u)].layer ? 2 : 1);
  for (std::size_t o = 0; o < hw.operators.size(); ++o)
    plan.choices.push_back(o % 2 == 0 ? Choice{false, 1, 1, hw.operators[o].checkpointable}
                                      : Choice{true, 1, 0, false});
  const PlanCostModel cost(cluster, nullptr, model.precision, CostOptions{});
  const auto ev = cost.evaluate(hw, plan);
  Plan written = plan;
  written.tool_version = "test";
  written.strategy = "exact";
  written.model = model;
  written.cluster = cluster;
  written.cost_options.tier = Tier::kPaper;
  written.cost_options.checkpoint_regather = true;
  written.memory_limit_bytes = 64e9;
  written.predicted_iteration_time_s = ev.time_s;
  const nlohmann::json doc = to_json(written, &ev);
  const Plan f = read_plan(doc, "plan.json");
  CHECK(f.pp == 2);
  CHECK(f.micro_batches == 3);
  CHECK(f.batch_size == 2);
  CHECK(f.schedule == PipelineSchedule::kGpipe);
  CHECK(f.stage_first_unit == plan.stage_first_unit);
  CHECK(f.unit_tp == plan.unit_tp);
  CHECK(f.choices == plan.choices);
  CHECK(f.predicted_iteration_time_s == ev.time_s);
  CHECK(f.model.name == model.name);
  CHECK(f.cost_options.tier == Tier::kPaper);
  CHECK(f.cost_options.checkpoint_regather);
  CHECK(!f.calibration);

  const auto refused = [&](const nlohmann::json& d, const std::string& pointer) {
    try {
      (void)read_plan(d, "plan.json");
    } catch (const osdp::Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(pointer) != std::string::npos);
      return true;
    }
    return false;
  };
  nlohmann::json moved = doc;  // the first stage's last unit handed to the second stage
  moved["units"][1]["stage"] = 1;
  CHECK(read_plan(moved, "plan.json").stage_first_unit == std::vector<int>{0, 1});
  nlohmann::json swapped = doc;
  std::swap(swapped["units"][2], swapped["units"][3]);
  CHECK(refused(swapped, "/units/2/name"));
  nlohmann::json bad_tp = doc;
  bad_tp["units"][1]["tp"] = 3;
  CHECK(refused(bad_tp, "/units/1/tp"));
  nlohmann::json empty = doc;  // every unit in the second stage: the first holds none
  for (auto& u : empty["units"]) u["stage"] = 1;
  CHECK(refused(empty, "/units/0/stage"));
}

}  // namespace
