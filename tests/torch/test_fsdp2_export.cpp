// osdp export --to fsdp2 (issues 15, 33): the name mapping (the default on every bundled model: the gpt
// family's, or transformers' module tree for a Hugging Face config; user rules with groups and lists of
// modules, and the errors), and each kind of choice in FSDP2's words.
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

TEST_CASE("the default mapping puts every operator of every bundled model on modules of its own", "[torch]") {
  int hf = 0;
  for (const auto& entry : costmodel::list_catalog("models")) {
    const costmodel::ModelSpec model = costmodel::load_model(entry.name);
    const costmodel::Workload w = costmodel::lower(model);
    INFO(entry.name);
    const std::string type = transformers_model_type(model);
    // The bundled Hugging Face configs are the llama, mistral, qwen2, mixtral and qwen3_moe ones; osdp's
    // files are gpt.
    CHECK(type == (model.family == "gpt" ? "" : model.hf_model_type));
    CHECK((type.empty() || type == model.family || model.moe.enabled()));
    const NameMapping m = default_name_mapping(model);
    CHECK_FALSE(m.by_model);
    const auto paths = map_operators(m, names_of(w));
    REQUIRE(paths.size() == w.operators.size());
    hf += type.empty() ? 0 : 1;
    for (std::size_t i = 0; i < paths.size(); ++i) {
      const costmodel::Operator& op = w.operators[i];
      const std::string l = std::to_string(op.layer);
      using V = std::vector<std::string>;
      if (type.empty()) {
        if (op.name == "embedding" || op.name == "head") CHECK(paths[i] == V{op.name});
        if (op.kind == costmodel::OperatorKind::kAttention)
          CHECK(paths[i] == V{"layers." + l + ".attention"});
        if (op.kind == costmodel::OperatorKind::kMlp) CHECK(paths[i] == V{"layers." + l + ".mlp"});
        continue;
      }
      CHECK_FALSE(model.tied_embeddings);  // the bundled configs are untied
      if (op.name == "embedding") CHECK(paths[i] == V{"model.embed_tokens"});
      if (op.name == "head") CHECK(paths[i] == V{"model.norm", "lm_head"});
      if (op.kind == costmodel::OperatorKind::kAttention)
        CHECK(paths[i] == V{"model.layers." + l + ".input_layernorm", "model.layers." + l + ".self_attn"});
      if (op.kind == costmodel::OperatorKind::kMlp)
        CHECK(paths[i] == V{"model.layers." + l + ".post_attention_layernorm", "model.layers." + l + ".mlp"});
    }
  }
  CHECK(hf >= 6);
  CHECK(map_operators(default_name_mapping(), {"stage2.projection"}) ==
        std::vector<std::vector<std::string>>{{"projections.2"}});
}

TEST_CASE("a tied Hugging Face model: the final norm and lm_head shard with the token table", "[torch]") {
  const std::string llama = write_temp("tied-llama.json", R"J({"model_type": "llama", "hidden_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256,
      "tie_word_embeddings": true})J");
  const std::string gpt2 = write_temp(
      "gpt2.json", R"J({"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 4, "vocab_size": 256})J");
  using V = std::vector<std::vector<std::string>>;
  const costmodel::ModelSpec l = costmodel::load_model(llama), g = costmodel::load_model(gpt2);
  CHECK(transformers_model_type(l) == "llama");
  CHECK(transformers_model_type(g) == "gpt2");
  CHECK(map_operators(default_name_mapping(l), names_of(costmodel::lower(l))) ==
        V{{"model.embed_tokens", "model.norm", "lm_head"},
          {"model.layers.0.input_layernorm", "model.layers.0.self_attn"},
          {"model.layers.0.post_attention_layernorm", "model.layers.0.mlp"}});
  CHECK(map_operators(default_name_mapping(g), names_of(costmodel::lower(g))) ==
        V{{"transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head"},
          {"transformer.h.0.ln_1", "transformer.h.0.attn"},
          {"transformer.h.0.ln_2", "transformer.h.0.mlp"}});
}

TEST_CASE("the export of a Hugging Face model: the module lists, the model_type, FSDP2's bf16 policy",
          "[torch]") {
  costmodel::Plan p;
  p.tool_version = "test";
  p.strategy = "fsdp";
  p.model = costmodel::load_model("qwen2.5-7b");
  p.cluster = costmodel::load_cluster("h100-8");
  p.batch_size = 1;
  const costmodel::Workload w = costmodel::lower(p.model);
  std::vector<costmodel::Choice> c(w.operators.size(), costmodel::Choice{false, 1, 1, false});
  c.back() = {false, 2, 1, false};  // the head split in two
  costmodel::set_data_parallel(p, w, c);
  const nlohmann::json j = export_fsdp2(p, "q.json", default_name_mapping());
  CHECK(j["transformers"] == nlohmann::json{{"model_type", "qwen2"}});
  CHECK(j["source"]["name_mapping"] == "transformers' module tree of model_type qwen2");
  const auto& m = j["modules"];
  CHECK(m[0]["paths"] == nlohmann::json{"model.embed_tokens"});
  CHECK(m[0]["path"] == "model.embed_tokens");  // one module: the path of exports before lists too
  CHECK(m[1]["paths"] == nlohmann::json{"model.layers.0.input_layernorm", "model.layers.0.self_attn"});
  CHECK_FALSE(m[1].contains("path"));
  CHECK(m.back()["paths"] == nlohmann::json{"model.norm", "lm_head"});
  CHECK(m.back()["split"]["slices"] == 2);
  for (std::size_t i = 0; i < m.size(); ++i) CHECK(m[i]["parameters"] == w.operators[i].parameters());
  // A bf16 config (the bundled ones): FSDP2's MixedPrecisionPolicy(bfloat16, float32), model.hpp's bf16.
  CHECK(j["mixed_precision"] == nlohmann::json{{"param_dtype", "bfloat16"}, {"reduce_dtype", "float32"}});
  p.model.precision = costmodel::Precision::kBf16ReduceBf16;
  CHECK(export_fsdp2(p, "q.json", default_name_mapping())["mixed_precision"]["reduce_dtype"] == "bfloat16");
  // An explicit mapping wins over the model's default.
  const NameMapping mine = load_name_mapping(write_temp("map-qwen.json", R"J({"schema_version": 1, "rules": [
      {"operator": "embedding", "module": "emb"}, {"operator": "layer(\\d+)\\.(attention|mlp)", "module": "b.$1.$2"},
      {"operator": "head", "module": ["norm", "out"]}]})J"));
  const nlohmann::json x = export_fsdp2(p, "q.json", mine);
  CHECK(x["modules"].back()["paths"] == nlohmann::json{"norm", "out"});
  CHECK(x["modules"][1]["path"] == "b.0.attention");
  // osdp's own gpt files keep the gpt family's paths and have no transformers model.
  CHECK(export_fsdp2(sample_plan(), "p.json", default_name_mapping())["transformers"].is_null());
}

TEST_CASE("a name mapping file: groups, and each error names the operator", "[torch]") {
  const std::string good = write_temp("map-good.json", R"J({"schema_version": 1, "rules": [
      {"operator": "embedding", "module": "tok_emb"},
      {"operator": "layer(\\d+)\\.(attention|mlp)", "module": "blocks.$1.$2"},
      {"operator": "head", "module": "lm"}]})J");
  const NameMapping m = load_name_mapping(good);
  using V = std::vector<std::vector<std::string>>;
  CHECK(map_operators(m, {"embedding", "layer0.attention", "layer12.mlp", "head"}) ==
        V{{"tok_emb"}, {"blocks.0.attention"}, {"blocks.12.mlp"}, {"lm"}});
  // A rule may name a list of modules; each belongs to the operator alone.
  const NameMapping lists =
      load_name_mapping(write_temp("map-lists.json", R"J({"schema_version": 1, "rules": [
      {"operator": "layer(\\d+)\\.mlp", "module": ["blocks.$1.ln2", "blocks.$1.ffn"]}]})J"));
  CHECK(map_operators(lists, {"layer3.mlp"}) == V{{"blocks.3.ln2", "blocks.3.ffn"}});
  const NameMapping dup = load_name_mapping(write_temp("map-dup.json", R"J({"schema_version": 1, "rules": [
      {"operator": "head", "module": ["out", "out"]}]})J"));
  CHECK_THROWS_WITH(map_operators(dup, {"head"}), Contains("operator head names module out twice"));
  const NameMapping overlap =
      load_name_mapping(write_temp("map-overlap.json", R"J({"schema_version": 1, "rules": [
      {"operator": "embedding", "module": ["emb", "final_norm"]}, {"operator": "head", "module": ["final_norm", "out"]}]})J"));
  CHECK_THROWS_WITH(map_operators(overlap, {"embedding", "head"}),
                    Contains("operators embedding and head both map to module final_norm"));
  for (const char* bad : {R"J([])J", R"J(["a", 3])J", R"J(7)J"})
    CHECK_THROWS_WITH(
        load_name_mapping(write_temp(
            "map-badlist.json",
            std::string(R"J({"schema_version": 1, "rules": [{"operator": "x", "module": )J") + bad + "}]}")),
        Contains("/rules/0/module") && Contains("a non-empty list"));
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
    CHECK(m[i]["paths"] == nlohmann::json::array({expect[i].path}));
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
