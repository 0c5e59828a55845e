// Plan files (plan): to_json followed by read_plan gives the same plan; the operators must be the model's
// lowering, with modes, splits and checkpoints the operators allow; errors inside the embedded model,
// cluster and calibration carry their JSON pointer prefix.
// Byte counts are derived in comments: Ki = 1024, Mi = 2^20 = 1048576, Gi = 2^30 = 1073741824.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/model.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"
#include "json_fixtures.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using nlohmann::json;
using namespace osdp::costmodel;
using namespace osdp::costmodel::json_fixtures;

namespace {

// Stage 0 at hidden 64 and stage 1 at hidden 128, untied: the lowering is
//   0 embedding, 1 layer0.attention, 2 layer0.mlp, 3 stage1.projection, 4 layer1.attention,
//   5 layer1.mlp, 6 head.
Plan sample_plan() {
  Plan p;
  p.tool_version = "abc1234";
  p.strategy = "exact";
  p.model.name = "plan-model";
  p.model.stages = {{1, 64, 4, 256}, {1, 128, 8, 512}};
  p.model.seq = 32;
  p.model.vocab = 512;
  p.model.tied_embeddings = false;
  p.cluster = read_cluster(cluster_doc(), "c.json");
  p.calibration = read_calibration(calibration_doc(), "k.json", p.cluster.compute);
  p.cost_options.tier = Tier::kPaper;
  p.cost_options.checkpoint_regather = true;
  p.memory_limit_bytes = 15.0 * kGi;
  p.batch_size = 4;
  p.prefetch = 2;
  const Workload w = lower(p.model);
  const std::vector<Choice> choices = {
      {true, 1, 0, false},   // embedding: REPLICATE
      {false, 1, 1, false},  // layer0.attention: ZDP
      {false, 2, 1, true},   // layer0.mlp: split 2, 1 ZDP slice, checkpointed
      {false, 1, 0, false},  // stage1.projection: DP
      {false, 4, 4, true},   // layer1.attention: split 4, all ZDP, checkpointed
      {false, 1, 0, true},   // layer1.mlp: DP, checkpointed
      {false, 2, 0, false},  // head: split 2, DP
  };
  REQUIRE(w.operators.size() == choices.size());
  set_data_parallel(p, w, choices);
  p.predicted_iteration_time_s = 0.125;
  p.predicted_peak_memory_bytes = 3.5 * kGi;
  p.predicted_throughput_samples_per_s = 256.0;
  return p;
}

}  // namespace

TEST_CASE("the sample plan's operators are the model's lowering", "[json]") {
  const Plan p = sample_plan();
  const std::vector<std::string> names = {
      "embedding",        "layer0.attention", "layer0.mlp", "stage1.projection",
      "layer1.attention", "layer1.mlp",       "head"};
  const Workload w = lower(p.model);
  REQUIRE(p.choices.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) CHECK(w.operators[i].name == names[i]);
  const json j = to_json(p);
  for (std::size_t i = 0; i < names.size(); ++i) CHECK(j.at("operators").at(i).at("name") == names[i]);
}

TEST_CASE("round trip: a plan", "[json]") {
  const Plan p = sample_plan();
  const json j = to_json(p);
  CHECK(j.at("kind") == "osdp-plan");
  CHECK(j.at("operators").at(2).at("mode") == "mixed");
  CHECK(j.at("operators").at(0).at("mode") == "replicate");
  CHECK(j.at("operators").at(4).at("mode") == "zdp");
  const Plan back = read_plan(through_text(j), "plan.json");
  CHECK(back.tool_version == p.tool_version);
  CHECK(back.strategy == p.strategy);
  check_same(back.model, p.model);
  check_same(back.cluster, p.cluster);
  REQUIRE(back.calibration.has_value());
  check_same(*back.calibration, *p.calibration);
  CHECK(back.cost_options.tier == Tier::kPaper);
  CHECK(back.cost_options.checkpoint_regather);
  CHECK(back.memory_limit_bytes == 16106127360.0);  // 15 * 2^30
  CHECK(back.batch_size == 4);
  CHECK(back.prefetch == 2);
  REQUIRE(back.choices.size() == p.choices.size());
  for (std::size_t i = 0; i < p.choices.size(); ++i) {
    INFO("operator " << i);
    CHECK(back.choices[i] == p.choices[i]);
  }
  CHECK(back.data_parallel());
  CHECK(back.unit_tp == p.unit_tp);
  CHECK(back.stage_first_unit == p.stage_first_unit);
  CHECK(back.predicted_iteration_time_s == 0.125);
  CHECK(back.predicted_peak_memory_bytes == 3758096384.0);  // 3.5 * 2^30
  CHECK(back.predicted_throughput_samples_per_s == 256.0);
}

// Issue 14: a sharded operator's group and communication are written only when not the default
// (world, flat), so that single-level plans read and write as before, and read back as written.
TEST_CASE("round trip: node groups and two-level collectives", "[json][groups]") {
  Plan p = sample_plan();
  p.choices[1].node_group = true;  // layer0.attention: ZDP within the node
  p.choices[2].two_level = true;   // layer0.mlp: mixed, two-level
  p.choices[3].node_group = true;  // stage1.projection: DP within the node
  const json j = to_json(p);
  CHECK(j.at("operators").at(1).at("group") == "node");
  CHECK_FALSE(j.at("operators").at(1).contains("comm"));
  CHECK(j.at("operators").at(2).at("comm") == "two-level");
  CHECK_FALSE(j.at("operators").at(2).contains("group"));
  CHECK_FALSE(j.at("operators").at(4).contains("group"));
  CHECK_FALSE(j.at("operators").at(4).contains("comm"));
  const Plan back = read_plan(through_text(j), "plan.json");
  for (std::size_t i = 0; i < p.choices.size(); ++i) {
    INFO("operator " << i);
    CHECK(back.choices[i] == p.choices[i]);
  }
  // Spelled out, the defaults read the same as left out.
  json explicit_defaults = j;
  explicit_defaults["operators"][4]["group"] = "world";
  explicit_defaults["operators"][4]["comm"] = "flat";
  CHECK(read_plan(explicit_defaults, "plan.json").choices[4] == p.choices[4]);
}

TEST_CASE("round trip: a plan without calibration", "[json]") {
  Plan p = sample_plan();
  p.calibration.reset();
  const Plan back = read_plan(through_text(to_json(p)), "plan.json");
  CHECK_FALSE(back.calibration.has_value());
  CHECK(back.choices.size() == 7);
}

TEST_CASE("plan: operators must match the model's lowering", "[json]") {
  const json good = to_json(sample_plan());
  json doc = good;
  std::string pointer, expected;
  SECTION("a wrong name") {
    doc["operators"][3]["name"] = "layer1.attention";
    pointer = "/operators/3/name";
    expected = "expected operator \"stage1.projection\" here, got \"layer1.attention\"";
  }
  SECTION("two operators swapped") {
    std::swap(doc["operators"][1], doc["operators"][2]);
    pointer = "/operators/1/name";
    expected = "expected operator \"layer0.attention\" here, got \"layer0.mlp\"";
  }
  SECTION("one operator missing") {
    doc["operators"].erase(6);
    pointer = "/operators";
    expected = "the model has 7 operators, the plan lists 6";
  }
  SECTION("one operator too many") {
    doc["operators"].push_back(good["operators"][6]);
    pointer = "/operators";
    expected = "the model has 7 operators, the plan lists 8";
  }
  SECTION("a model that lowers differently") {
    doc["model"]["stages"][1]["hidden"] = 64;  // same hidden in both stages: no projection
    pointer = "/operators";
    expected = "the model has 6 operators, the plan lists 7";
  }
  SECTION("a mode that contradicts the slices") {
    doc["operators"][2]["mode"] = "zdp";  // split 2 with 1 ZDP slice is "mixed"
    pointer = "/operators/2/mode";
    expected = "\"zdp\" contradicts split 2 with 1 ZDP slices";
  }
  SECTION("an unknown mode") {
    doc["operators"][1]["mode"] = "fsdp";
    pointer = "/operators/1/mode";
    expected = "expected one of \"dp\", \"zdp\", \"mixed\", \"replicate\", got \"fsdp\"";
  }
  SECTION("a split the weights do not allow") {
    doc["operators"][4]["split"] = 3;
    doc["operators"][4]["zdp_slices"] = 3;
    pointer = "/operators/4/split";
    expected = "operator \"layer1.attention\" cannot be split 3 ways";
  }
  SECTION("splitting an operator with no splittable weight") {
    doc["operators"][0] = {{"name", "embedding"}, {"mode", "dp"}, {"split", 2}};  // untied: wte not split
    pointer = "/operators/0/split";
    expected = "operator \"embedding\" cannot be split 2 ways";
  }
  SECTION("checkpointing an operator that cannot be") {
    doc["operators"][3]["checkpoint"] = true;
    pointer = "/operators/3/checkpoint";
    expected = "operator \"stage1.projection\" cannot be checkpointed";
  }
  SECTION("more ZDP slices than slices") {
    doc["operators"][2]["zdp_slices"] = 3;
    pointer = "/operators/2/zdp_slices";
    expected = "expected an integer in [0, 2], got 3";
  }
  SECTION("a sharding group on a REPLICATE operator") {
    doc["operators"][0]["group"] = "node";
    pointer = "/operators/0/group";
    expected = "a REPLICATE operator is not sharded";
  }
  SECTION("a node group with two-level collectives") {
    doc["operators"][1]["group"] = "node";
    doc["operators"][1]["comm"] = "two-level";
    pointer = "/operators/1/comm";
    expected = "two-level applies to world shards";
  }
  SECTION("an unknown group") {
    doc["operators"][1]["group"] = "rack";
    pointer = "/operators/1/group";
    expected = "expected one of \"world\", \"node\", got \"rack\"";
  }
  SECTION("a node group on a cluster of one node") {
    doc["cluster"]["nodes"] = 1;
    doc["operators"][1]["group"] = "node";
    pointer = "/operators/1/group";
    expected =
        "needs a cluster of several nodes with several devices each and an inter-node link (this one has 1 x "
        "4)";
  }
  SECTION("an unknown key in an operator") {
    doc["operators"][5]["prefetch"] = 1;
    pointer = "/operators/5/prefetch";
    expected = "unknown key \"prefetch\"";
  }
  const auto e = input_error([&] { read_plan(doc, "plan.json"); });
  CHECK(e.file == "plan.json");
  CHECK(e.pointer == pointer);
  CHECK_THAT(e.what, StartsWith("plan.json:" + pointer + ": ") && Contains(expected));
}

TEST_CASE("plan: errors inside the embedded descriptions carry their prefix", "[json]") {
  json doc = to_json(sample_plan());
  std::string pointer, expected;
  SECTION("kind") {
    doc["kind"] = "plan";
    pointer = "/kind";
    expected = "expected one of \"osdp-plan\", got \"plan\"";
  }
  SECTION("model") {
    doc["model"]["stages"][0]["heads"] = 5;  // not a multiple of the 4 key/value heads written
    pointer = "/model/stages/0/kv_heads";
    expected = "5 query heads cannot be grouped over 4 key/value heads";
  }
  SECTION("cluster") {
    doc["cluster"]["links"].erase("inter");
    pointer = "/cluster/links/inter";
    expected = "required when \"nodes\" > 1";
  }
  SECTION("calibration") {
    doc["calibration"]["collectives"]["allgather"][1]["up_to"] = 1024;
    pointer = "/calibration/collectives/allgather/1/up_to";
    expected = "segments must be sorted";
  }
  SECTION("cost model tier") {
    doc["cost_model"]["tier"] = "fast";
    pointer = "/cost_model/tier";
    expected = "expected one of \"paper\", \"extended\", got \"fast\"";
  }
  SECTION("predicted") {
    doc["predicted"]["step_time_s"] = 1.0;
    pointer = "/predicted/step_time_s";
    expected = "unknown key";
  }
  SECTION("batch size") {
    doc["batch_size"] = 0;
    pointer = "/batch_size";
    expected = "expected an integer in [1, 16777216], got 0";  // 2^24
  }
  SECTION("schema version") {
    doc["schema_version"] = 3;
    pointer = "/schema_version";
    expected = "unsupported schema_version 3";
  }
  const auto e = input_error([&] { read_plan(doc, "plan.json"); });
  CHECK(e.file == "plan.json");
  CHECK(e.pointer == pointer);
  CHECK_THAT(e.what, StartsWith("plan.json:" + pointer + ": ") && Contains(expected));
}

// Schema version 2: a plan of two stages with TP degrees per unit and micro-batches reads back as
// written. The sample model at pp = 2 has the units 0 embedding, 1 layer0, 2 stage1.projection,
// 3 layer1, 4 head; the cluster (c.json) 2 nodes x 4 devices, so a stage holds 4 ranks and a unit's
// TP degree is 1, 2 or 4 where its weights allow it (layer0 has 4 heads, layer1 8; the untied
// embedding's table and the projection do not split).
TEST_CASE("round trip: a plan of two stages with TP degrees and micro-batches", "[json][layout]") {
  Plan p = sample_plan();
  p.pp = 2;
  p.micro_batches = 3;
  p.schedule = PipelineSchedule::kGpipe;
  p.stage_first_unit = {0, 2};
  p.unit_tp = {1, 2, 1, 4, 2};
  const Workload w = lower(p.model, 2);
  REQUIRE(w.units.size() == 5);
  CHECK(w.units[2].name == "stage1.projection");
  CHECK_NOTHROW(check_layout(p, w, p.cluster));
  const json j = to_json(p);
  CHECK(j.at("schema_version") == 2);
  CHECK(j.at("pipeline").at("stages") == 2);
  CHECK(j.at("pipeline").at("micro_batches") == 3);
  CHECK(j.at("pipeline").at("schedule") == "gpipe");
  CHECK(j.at("units").at(3).at("name") == "layer1");
  CHECK(j.at("units").at(3).at("stage") == 1);
  CHECK(j.at("units").at(3).at("tp") == 4);
  CHECK(j.at("predicted").at("global_batch") == 4 * 3 * 8 / 2);  // b0 m N / pp
  const Plan back = read_plan(through_text(j), "plan.json");
  CHECK(back.pp == 2);
  CHECK(back.micro_batches == 3);
  CHECK(back.schedule == PipelineSchedule::kGpipe);
  CHECK(back.stage_first_unit == p.stage_first_unit);
  CHECK(back.unit_tp == p.unit_tp);
  CHECK(back.choices == p.choices);
  CHECK_FALSE(back.data_parallel());
  CHECK(back.stage_of_unit(1) == 0);
  CHECK(back.stage_of_unit(2) == 1);
}

TEST_CASE("plan: a layout the model or the cluster does not allow", "[json][layout]") {
  Plan p = sample_plan();
  p.pp = 2;
  p.stage_first_unit = {0, 2};
  p.unit_tp = {1, 2, 1, 4, 2};
  json doc = to_json(p);
  std::string pointer, expected;
  SECTION("a stage before the one of the unit before") {
    doc["units"][3]["stage"] = 0;
    pointer = "/units/3/stage";
    expected = "unit layer1 in stage 0 after a unit of stage 1";
  }
  SECTION("an empty stage") {
    for (auto& u : doc["units"]) u["stage"] = 0;
    pointer = "/units";
    expected = "the units fill 1 of the 2 stages";
  }
  SECTION("a TP degree the weights do not allow") {
    doc["units"][0]["tp"] = 2;  // the untied embedding's table does not split
    pointer = "/units/0/tp";
    expected = "operator embedding cannot run at TP degree 2";
  }
  SECTION("a TP degree larger than a node") {
    doc["units"][1]["tp"] = 8;
    pointer = "/units/1/tp";
    expected = "expected an integer in [1, 4], got 8";  // a stage's 4 ranks
  }
  SECTION("a pipeline degree that does not divide the devices") {
    doc["pipeline"]["stages"] = 3;
    pointer = "/pipeline/stages";
    expected = "pipeline degree 3 is not a power of two dividing the cluster's 8 devices";
  }
  SECTION("the units of another pipeline degree") {
    doc["pipeline"]["stages"] = 1;
    pointer = "/units/2/stage";  // the first unit of the second stage
    expected = "expected an integer in [0, 0], got 1";
  }
  const auto e = input_error([&] { read_plan(doc, "plan.json"); });
  CHECK(e.pointer == pointer);
  CHECK_THAT(e.what, StartsWith("plan.json:" + pointer + ": ") && Contains(expected));
}

// Files written before plans had layouts read unchanged: a data-parallel plan of schema version 1 (no
// "pipeline", no "units") is one stage at TP 1, and a hybrid plan file of version 1 (kind "hybrid",
// its layout and the operators' choices inside a "hybrid" block) is the same plan as version 2 writes.
TEST_CASE("plan: version 1 files read as they were written", "[json][layout]") {
  SECTION("data-parallel") {
    const Plan p = sample_plan();
    json v1 = to_json(p);
    v1["schema_version"] = 1;
    v1.erase("pipeline");
    v1.erase("units");
    v1["predicted"].erase("global_batch");
    const Plan back = read_plan(through_text(v1), "old.json");
    CHECK(back.data_parallel());
    CHECK(back.unit_tp == std::vector<int>(5, 1));
    CHECK(back.choices == p.choices);
    CHECK(back.batch_size == 4);
  }
  SECTION("hybrid") {
    Plan p = sample_plan();
    p.pp = 2;
    p.micro_batches = 2;
    p.stage_first_unit = {0, 2};
    p.unit_tp = {1, 2, 1, 4, 2};
    const Workload w = lower(p.model, 2);
    // Version 1's writer: the origin, then {"hybrid": {pp, micro_batches, micro_batch_per_device,
    // schedule, sequence_parallel, the predictions, stages: [{stage, units: [{name, tp, operators:
    // [{name, choice, mode, ...}]}], per-stage figures}]}}.
    json v1 = to_json(p);
    for (const char* k : {"pipeline", "units", "operators", "predicted", "batch_size", "prefetch", "precision"})
      v1.erase(k);
    v1["schema_version"] = 1;
    v1["kind"] = "hybrid";
    json stages = json::array();
    for (int s = 0; s < 2; ++s) {
      json units = json::array();
      for (int u = p.stage_first_unit[static_cast<std::size_t>(s)]; u < (s == 0 ? 2 : 5); ++u) {
        json ops = json::array();
        for (const int o : w.units[static_cast<std::size_t>(u)].ops) {
          json op = {{"name", w.operators[static_cast<std::size_t>(o)].name},
                     {"choice", p.choices[static_cast<std::size_t>(o)].label()}};
          op.update(choice_json(p.choices[static_cast<std::size_t>(o)]));
          ops.push_back(op);
        }
        units.push_back({{"name", w.units[static_cast<std::size_t>(u)].name},
                         {"tp", p.unit_tp[static_cast<std::size_t>(u)]},
                         {"operators", ops}});
      }
      stages.push_back({{"stage", s}, {"units", units}, {"time_per_micro_batch_s", 0.1}, {"p2p_s", 0.0}});
    }
    v1["hybrid"] = {{"pp", 2},
                    {"micro_batches", 2},
                    {"micro_batch_per_device", 4},
                    {"global_batch", 16},
                    {"schedule", "1f1b"},
                    {"sequence_parallel", false},
                    {"predicted_iteration_time_s", 0.5},
                    {"predicted_peak_memory_bytes", 1e9},
                    {"predicted_throughput_samples_per_s", 32.0},
                    {"bubble_fraction", 0.2},
                    {"stages", stages}};
    const Plan back = read_plan(through_text(v1), "old-hybrid.json");
    CHECK(back.pp == 2);
    CHECK(back.micro_batches == 2);
    CHECK(back.batch_size == 4);
    CHECK(back.stage_first_unit == p.stage_first_unit);
    CHECK(back.unit_tp == p.unit_tp);
    CHECK(back.choices == p.choices);
    CHECK(back.predicted_iteration_time_s == 0.5);
    // And it writes as version 2, which reads back the same.
    const Plan again = read_plan(through_text(to_json(back)), "new.json");
    CHECK(again.unit_tp == back.unit_tp);
    CHECK(again.choices == back.choices);
  }
}
