// osdp export --to fsdp2 (issue 15): the name mapping (the gpt family's default on every bundled model,
// user rules with groups, and the four errors), and each kind of choice in FSDP2's words.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"
#include "validate/torch/fsdp2_export.hpp"

using Catch::Matchers::Contains;
using namespace osdp;
using namespace osdp::validate;

namespace {

std::vector<std::string> names_of(const costmodel::Workload& w) {
  std::vector<std::string> names;
  for (const auto& op : w.operators) names.push_back(op.name);
  return names;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/osdp-" + name;
  std::ofstream(path) << text;
  return path;
}

// val-ic-256-512 on lab-2x2 (2 nodes x 2): embedding, layer0-1 at hidden 256, stage1.projection,
// layer2-3 at 512, head (untied). One choice of each kind.
costmodel::Plan sample_plan() {
  costmodel::Plan p;
  p.tool_version = "test";
  p.strategy = "exact";
  p.model = costmodel::load_model("val-ic-256-512");
  p.cluster = costmodel::load_cluster("lab-2x2");
  p.batch_size = 3;
  p.predicted_iteration_time_s = 0.5;
  p.predicted_peak_memory_bytes = 1e8;
  p.predicted_throughput_samples_per_s = 24;
  const costmodel::Workload w = costmodel::lower(p.model);
  REQUIRE(names_of(w) == std::vector<std::string>{"embedding", "layer0.attention", "layer0.mlp",
                                                  "layer1.attention", "layer1.mlp", "stage1.projection",
                                                  "layer2.attention", "layer2.mlp", "layer3.attention",
                                                  "layer3.mlp", "head"});
  std::vector<costmodel::Choice> c(w.operators.size());
  c[0] = {true, 1, 0, false};                // REPLICATE
  c[1] = {false, 1, 1, false};               // ZDP
  c[2] = {false, 1, 0, true};                // DP, checkpointed
  c[3] = {false, 4, 1, false};               // split 4, 1 ZDP slice
  c[4] = {false, 1, 1, false, true, false};  // ZDP in the node (HSDP)
  c[5] = {false, 1, 1, false, false, true};  // ZDP, two-level collectives
  c[6] = {false, 2, 0, true, true, false};   // split 2, DP, node group, checkpointed
  for (std::size_t i = 7; i < c.size(); ++i) c[i] = {false, 1, 1, false};
  costmodel::set_data_parallel(p, w, c);
  return p;
}

}  // namespace

TEST_CASE("the default mapping puts every operator of every bundled model on its own module", "[torch]") {
  const NameMapping m = default_name_mapping();
  for (const auto& entry : costmodel::list_catalog("models")) {
    const costmodel::Workload w = costmodel::lower(costmodel::load_model(entry.name));
    INFO(entry.name);
    const std::vector<std::string> paths = map_operators(m, names_of(w));
    REQUIRE(paths.size() == w.operators.size());
    for (std::size_t i = 0; i < paths.size(); ++i) {
      const std::string& op = w.operators[i].name;
      if (op == "embedding" || op == "head") CHECK(paths[i] == op);
      if (w.operators[i].kind == costmodel::OperatorKind::kAttention)
        CHECK(paths[i] == "layers." + std::to_string(w.operators[i].layer) + ".attention");
      if (w.operators[i].kind == costmodel::OperatorKind::kMlp)
        CHECK(paths[i] == "layers." + std::to_string(w.operators[i].layer) + ".mlp");
    }
  }
  CHECK(map_operators(m, {"stage2.projection"}) == std::vector<std::string>{"projections.2"});
}

TEST_CASE("a name mapping file: groups, and each error names the operator", "[torch]") {
  const std::string good = write_temp("map-good.json", R"J({"schema_version": 1, "rules": [
      {"operator": "embedding", "module": "tok_emb"},
      {"operator": "layer(\\d+)\\.(attention|mlp)", "module": "blocks.$1.$2"},
      {"operator": "head", "module": "lm"}]})J");
  const NameMapping m = load_name_mapping(good);
  CHECK(map_operators(m, {"embedding", "layer0.attention", "layer12.mlp", "head"}) ==
        std::vector<std::string>{"tok_emb", "blocks.0.attention", "blocks.12.mlp", "lm"});
  // A rule matches the whole name: "head" does not match "header".
  CHECK_THROWS_WITH(map_operators(m, {"header"}),
                    Contains("operator header is not mapped") && Contains(good));
  const NameMapping twice =
      load_name_mapping(write_temp("map-twice.json", R"J({"schema_version": 1, "rules": [
      {"operator": "layer.*", "module": "a"}, {"operator": "layer0\\..*", "module": "b"}]})J"));
  CHECK_THROWS_WITH(map_operators(twice, {"layer0.mlp"}), Contains("operator layer0.mlp is mapped twice") &&
                                                              Contains("rules 0") && Contains("and 1"));
  const NameMapping same = load_name_mapping(write_temp("map-same.json", R"J({"schema_version": 1, "rules": [
      {"operator": "layer(\\d+)\\..*", "module": "blocks.$1"}]})J"));
  CHECK_THROWS_WITH(map_operators(same, {"layer0.attention", "layer0.mlp"}),
                    Contains("operators layer0.attention and layer0.mlp both map to module blocks.0"));
  const NameMapping nested =
      load_name_mapping(write_temp("map-nested.json", R"J({"schema_version": 1, "rules": [
      {"operator": "embedding", "module": "blocks"}, {"operator": "layer(\\d+)\\.mlp", "module": "blocks.$1"}]})J"));
  CHECK_THROWS_WITH(map_operators(nested, {"embedding", "layer0.mlp"}), Contains("one inside the other"));
  CHECK_THROWS_WITH(load_name_mapping(write_temp("map-bad-regex.json", R"J({"schema_version": 1, "rules": [
      {"operator": "layer(", "module": "x"}]})J")),
                    Contains("/rules/0/operator") && Contains("not a regular expression"));
  CHECK_THROWS_WITH(load_name_mapping(write_temp("map-typo.json", R"J({"schema_version": 1, "rules": [
      {"operator": "x", "modul": "x"}]})J")),
                    Contains("/rules/0"));
  // The default mapping on a model it does not fit says how to map.
  CHECK_THROWS_AS(map_operators(default_name_mapping(), {"encoder.0"}), UsageError);
  CHECK_THROWS_WITH(map_operators(default_name_mapping(), {"encoder.0"}), Contains("--map"));
}

TEST_CASE("each kind of choice in FSDP2's words", "[torch]") {
  const costmodel::Plan p = sample_plan();
  const nlohmann::json j = export_fsdp2(p, "p.json", default_name_mapping());
  CHECK(j["kind"] == "osdp-fsdp2");
  CHECK(j["schema_version"] == 1);
  CHECK(j["micro_batch_size"] == 3);
  CHECK(j["world_size"] == 4);
  CHECK(j["nodes"] == 2);
  CHECK(j["per_node"] == 2);
  CHECK(j["mixed_precision"].is_null());  // val-ic-256-512 is fp32
  CHECK(j["source"]["plan"] == "p.json");
  CHECK(j["source"]["model"] == "val-ic-256-512");
  CHECK(j["source"]["cluster"] == "lab-2x2");
  CHECK(j["model"]["name"] == "val-ic-256-512");
  const auto& m = j["modules"];
  const costmodel::Workload w = costmodel::lower(p.model);
  REQUIRE(m.size() == p.choices.size());
  for (std::size_t i = 0; i < m.size(); ++i) {
    CHECK(m[i]["operator"] == w.operators[i].name);
    CHECK(m[i]["parameters"] == w.operators[i].parameters());
  }
  struct Expect {
    const char* path;
    const char* mesh;
    bool reshard, checkpoint;
    int slices, resharded;  // 0: not split
    bool note;
  };
  const std::vector<Expect> expect = {
      {"embedding", "replicate", false, false, 0, 0, false},
      {"layers.0.attention", "world", true, false, 0, 0, false},
      {"layers.0.mlp", "world", false, true, 0, 0, false},
      {"layers.1.attention", "world", true, false, 4, 1, false},
      {"layers.1.mlp", "node", true, false, 0, 0, false},
      {"projections.1", "world", true, false, 0, 0, true},
      {"layers.2.attention", "node", false, true, 2, 0, false},
  };
  for (std::size_t i = 0; i < expect.size(); ++i) {
    INFO(w.operators[i].name);
    CHECK(m[i]["path"] == expect[i].path);
    CHECK(m[i]["mesh"] == expect[i].mesh);
    CHECK(m[i]["reshard_after_forward"] == expect[i].reshard);
    CHECK(m[i]["checkpoint"] == expect[i].checkpoint);
    if (expect[i].slices == 0) {
      CHECK(m[i]["split"].is_null());
    } else {
      CHECK(m[i]["split"]["slices"] == expect[i].slices);
      CHECK(m[i]["split"]["resharded"] == expect[i].resharded);
    }
    CHECK(m[i].contains("note") == expect[i].note);
  }
  // The Python module: the header names the plan, model and cluster; PLAN is the same export.
  const std::string py = fsdp2_python(j);
  CHECK_THAT(py, Contains("# FSDP2 plan exported by osdp test from p.json"));
  CHECK_THAT(py, Contains("# model val-ic-256-512, cluster lab-2x2 (4 ranks: 2 node(s) x 2)"));
  CHECK_THAT(py, Contains("\"reshard_after_forward\": True"));
  CHECK_THAT(py, Contains("\"mixed_precision\": None"));
  CHECK_THAT(py, Contains("def apply(model, mesh=None):"));
}

TEST_CASE("the notes name only what the plan has", "[torch]") {
  costmodel::Plan p = sample_plan();  // a split operator and a two-level one: both notes
  CHECK(export_fsdp2(p, "p.json", default_name_mapping())["notes"].size() == 2);
  for (auto& choice : p.choices) choice = {false, 1, 1, false};  // all ZDP over the world
  CHECK(export_fsdp2(p, "p.json", default_name_mapping())["notes"].empty());
}

TEST_CASE("a mixed-precision model exports a bf16 policy", "[torch]") {
  costmodel::Plan p = sample_plan();
  p.model.precision = costmodel::Precision::kMixed;
  const nlohmann::json j = export_fsdp2(p, "p.json", default_name_mapping());
  CHECK(j["mixed_precision"]["param_dtype"] == "bfloat16");
  CHECK(j["mixed_precision"]["reduce_dtype"] == "float32");
}
