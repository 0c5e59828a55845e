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
  for (std::size_t i = 0; i < choices.size(); ++i) p.operators.push_back({w.operators[i].name, choices[i]});
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
  REQUIRE(p.operators.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) CHECK(p.operators[i].name == names[i]);
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
  REQUIRE(back.operators.size() == p.operators.size());
  for (std::size_t i = 0; i < p.operators.size(); ++i) {
    INFO("operator " << i);
    CHECK(back.operators[i].name == p.operators[i].name);
    CHECK(back.operators[i].choice == p.operators[i].choice);
  }
  CHECK(back.predicted_iteration_time_s == 0.125);
  CHECK(back.predicted_peak_memory_bytes == 3758096384.0);  // 3.5 * 2^30
  CHECK(back.predicted_throughput_samples_per_s == 256.0);
}

// Issue 14: a sharded operator's group and communication are written only when not the default
// (world, flat), so that single-level plans read and write as before, and read back as written.
TEST_CASE("round trip: node groups and two-level collectives", "[json][groups]") {
  Plan p = sample_plan();
  p.operators[1].choice.node_group = true;  // layer0.attention: ZDP within the node
  p.operators[2].choice.two_level = true;   // layer0.mlp: mixed, two-level
  p.operators[3].choice.node_group = true;  // stage1.projection: DP within the node
  const json j = to_json(p);
  CHECK(j.at("operators").at(1).at("group") == "node");
  CHECK_FALSE(j.at("operators").at(1).contains("comm"));
  CHECK(j.at("operators").at(2).at("comm") == "two-level");
  CHECK_FALSE(j.at("operators").at(2).contains("group"));
  CHECK_FALSE(j.at("operators").at(4).contains("group"));
  CHECK_FALSE(j.at("operators").at(4).contains("comm"));
  const Plan back = read_plan(through_text(j), "plan.json");
  for (std::size_t i = 0; i < p.operators.size(); ++i) {
    INFO("operator " << i);
    CHECK(back.operators[i].choice == p.operators[i].choice);
  }
  // Spelled out, the defaults read the same as left out.
  json explicit_defaults = j;
  explicit_defaults["operators"][4]["group"] = "world";
  explicit_defaults["operators"][4]["comm"] = "flat";
  CHECK(read_plan(explicit_defaults, "plan.json").operators[4].choice == p.operators[4].choice);
}

TEST_CASE("round trip: a plan without calibration", "[json]") {
  Plan p = sample_plan();
  p.calibration.reset();
  const Plan back = read_plan(through_text(to_json(p)), "plan.json");
  CHECK_FALSE(back.calibration.has_value());
  CHECK(back.operators.size() == 7);
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
    doc["model"]["stages"][0]["heads"] = 5;  // 64 % 5 = 4
    pointer = "/model/stages/0/heads";
    expected = "hidden size 64 is not divisible by 5 heads";
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
