// Experiments: strict experiment files (unknown keys and axes rejected with file and JSON pointer),
// their expansion into units (the axes' product, axes ordered by name, the last axis fastest,
// strategies innermost, indices 0..n-1), the stability of Unit::key (what a resumed sweep matches rows by),
// costmodel::resized(), and the reading of rows.jsonl on --resume (torn, stale and duplicate lines
// dropped). The files a sweep writes: test_results_files.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"
#include "experiments/experiment.hpp"
#include "experiments/results_dir.hpp"
#include "experiments/run.hpp"
#include "experiments/sweep.hpp"
#include "unit_rows.hpp"

using Catch::Matchers::Contains;
using nlohmann::json;
using namespace osdp::experiments;
using osdp::experiments::testing::ev;
using osdp::experiments::testing::result;

namespace {

json minimal() {
  return json::parse(R"({"schema_version": 1, "name": "t",
    "base": {"model": "nd-48x1024", "cluster": "titan-rtx-8"},
    "strategies": [{"label": "fsdp", "strategy": "fsdp"}, {"label": "best", "strategy": "exact", "split_max": 4}],
    "baseline": "fsdp"})");
}

struct Caught {
  std::string file, pointer, what;
};

// The osdp::InputError that reading `doc` as "exp.json" throws.
Caught rejected(const json& doc) {
  try {
    read_experiment(doc, "exp.json");
  } catch (const osdp::InputError& e) {
    return {e.file(), e.pointer(), e.what()};
  }
  FAIL("no osdp::InputError for " << doc.dump());
  return {};
}

// Expands an experiment given as JSON text (parsed as the sweep parses files).
std::vector<Unit> units_of(const std::string& text) {
  return expand(read_experiment(osdp::costmodel::parse_json_text(text, "exp.json"), "exp.json"));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Strictness: every error names the file and the JSON pointer

TEST_CASE("a minimal experiment file reads with its defaults", "[experiments]") {
  const Experiment e = read_experiment(minimal(), "exp.json");
  CHECK(e.file == "exp.json");
  CHECK(e.name == "t");
  CHECK(e.base.model == "nd-48x1024");
  CHECK(e.base.checkpoint == "off");
  CHECK_FALSE(e.base.batch.has_value());
  CHECK(e.axes.empty());
  REQUIRE(e.strategies.size() == 2);
  CHECK(e.strategies[1].split_max == 4);
  CHECK(e.baseline == "fsdp");
  CHECK(e.evaluators == std::vector<EvaluatorKind>{EvaluatorKind::kAnalytic});
  CHECK(e.output == "results/t");
  CHECK(e.source == minimal());
  CHECK(e.base.seq == 0);  // the model's own
}

TEST_CASE("seq is an axis: it sets the request's sequence and the unit's key", "[experiments]") {
  nlohmann::json doc = minimal();
  doc["axes"] = {{"seq", {4096, 8192}}};
  const Experiment e = read_experiment(doc, "exp.json");
  const auto units = expand(e);
  REQUIRE(units.size() == 4);  // 2 sequences x 2 strategies
  CHECK(units[0].config.seq == 4096);
  CHECK(units[2].config.seq == 8192);
  CHECK(to_json(units[2].config)["seq"] == 8192);
  CHECK(unit_request(units[2]).seq == 8192);
  doc["axes"] = {{"seq", {0}}};
  CHECK_THROWS_AS(read_experiment(doc, "exp.json"), osdp::InputError);
}

TEST_CASE("unknown keys and axes are rejected with the file and the JSON pointer", "[experiments]") {
  json top = minimal();
  top["outptu"] = "x";
  const auto a = rejected(top);
  CHECK(a.file == "exp.json");
  CHECK(a.pointer == "/outptu");
  CHECK_THAT(a.what, Contains("exp.json") && Contains("/outptu"));

  json base = minimal();
  base["base"]["modle"] = "x";
  CHECK(rejected(base).pointer == "/base/modle");

  json axis = minimal();
  axis["axes"] = {{"memroy", {"8GB"}}};
  const auto b = rejected(axis);
  CHECK(b.pointer == "/axes/memroy");
  CHECK_THAT(b.what, Contains("unknown axis"));

  json strategy = minimal();
  strategy["strategies"][0]["splitmax"] = 2;
  CHECK(rejected(strategy).pointer == "/strategies/0/splitmax");
}

TEST_CASE("bad values name the element: axis values, strategies, evaluators", "[experiments]") {
  json memory = minimal();
  memory["axes"] = {{"memory", {"8GB", "lots"}}};
  CHECK(rejected(memory).pointer == "/axes/memory/1");

  json world = minimal();
  world["axes"] = {{"world_size", {8, 0}}};
  CHECK(rejected(world).pointer == "/axes/world_size/1");

  json empty = minimal();
  empty["axes"] = {{"model", json::array()}};
  CHECK(rejected(empty).pointer == "/axes/model");

  json strategy = minimal();
  strategy["strategies"][1]["strategy"] = "greedy";
  const auto s = rejected(strategy);
  CHECK(s.pointer == "/strategies/1/strategy");
  CHECK_THAT(s.what, Contains("greedy") && Contains("exact"));

  json evaluator = minimal();
  evaluator["evaluators"] = {"analytic", "measured-on-the-moon"};
  CHECK(rejected(evaluator).pointer == "/evaluators/1");

  json checkpoint = minimal();
  checkpoint["base"]["checkpoint"] = "sometimes";
  CHECK(rejected(checkpoint).pointer == "/base/checkpoint");
}

TEST_CASE("the baseline names a strategy label; labels are unique; base model and cluster required",
          "[experiments]") {
  json baseline = minimal();
  baseline["baseline"] = "exact";  // a strategy, but not a label (the exact strategy is labelled "best")
  const auto b = rejected(baseline);
  CHECK(b.pointer == "/baseline");
  CHECK_THAT(b.what, Contains("exact"));

  json twice = minimal();
  twice["strategies"][1]["label"] = "fsdp";
  const auto t = rejected(twice);
  CHECK(t.pointer == "/strategies/1/label");
  CHECK_THAT(t.what, Contains("twice"));

  json unlabelled = minimal();  // the label defaults to the strategy name, so two fsdp clash
  unlabelled["strategies"] = {{{"strategy", "fsdp"}}, {{"strategy", "fsdp"}}};
  unlabelled.erase("baseline");
  CHECK(rejected(unlabelled).pointer == "/strategies/1/label");

  json no_model = minimal();
  no_model["base"].erase("model");
  CHECK(rejected(no_model).pointer == "/base/model");

  json version = minimal();
  version["schema_version"] = 0;
  CHECK(rejected(version).pointer == "/schema_version");
}

// ---------------------------------------------------------------------------------------------------
// Expansion

TEST_CASE("expansion: the axes' product, the last axis fastest, strategies innermost, indices 0..n-1",
          "[experiments]") {
  // Axes listed in alphabetical order (memory < model < world_size): 2 x 3 x 2 configurations, 2
  // strategies each = 24 units.
  const auto units = units_of(R"({"schema_version": 1, "name": "t",
    "base": {"model": "nd-48x1024", "cluster": "titan-rtx-8"},
    "axes": {"memory": ["8GB", "16GB"], "model": ["a", "b", "c"], "world_size": [8, 16]},
    "strategies": [{"strategy": "fsdp"}, {"strategy": "exact"}]})");
  REQUIRE(units.size() == 24);
  const std::vector<std::string> memory{"8GB", "16GB"}, model{"a", "b", "c"};
  const std::vector<int> world{8, 16};
  const std::vector<std::string> strategy{"fsdp", "exact"};
  for (int i = 0; i < 24; ++i) {
    const Unit& u = units[static_cast<std::size_t>(i)];
    INFO("unit " << i);
    CHECK(u.index == i);
    CHECK(u.strategy.strategy == strategy[static_cast<std::size_t>(i % 2)]);
    CHECK(u.config.world_size == world[static_cast<std::size_t>(i / 2 % 2)]);
    CHECK(u.config.model == model[static_cast<std::size_t>(i / 4 % 3)]);
    CHECK(u.config.memory == memory[static_cast<std::size_t>(i / 12)]);
    CHECK(u.config.cluster == "titan-rtx-8");  // from the base
  }
}

TEST_CASE("expansion takes the axes in the alphabetical order of their names, not the file's",
          "[experiments]") {
  // experiment.hpp: JSON objects are unordered, so the axes are ordered by name ("memory" before
  // "model") whatever order the file lists them in; the last ("model") varies fastest.
  const auto units = units_of(R"({"schema_version": 1, "name": "t",
    "base": {"model": "nd-48x1024", "cluster": "titan-rtx-8"},
    "axes": {"model": ["a", "b"], "memory": ["8GB", "16GB"]},
    "strategies": [{"strategy": "fsdp"}]})");
  REQUIRE(units.size() == 4);
  CHECK(units[0].config.memory == "8GB");
  CHECK(units[0].config.model == "a");
  CHECK(units[1].config.memory == "8GB");
  CHECK(units[1].config.model == "b");
  CHECK(units[2].config.memory == "16GB");
  CHECK(units[2].config.model == "a");
}

TEST_CASE("without axes each strategy is one unit of the base configuration", "[experiments]") {
  const auto units = expand(read_experiment(minimal(), "exp.json"));
  REQUIRE(units.size() == 2);
  CHECK(units[0].index == 0);
  CHECK(units[0].strategy.label == "fsdp");
  CHECK(units[1].strategy.label == "best");
  CHECK(units[1].config.model == "nd-48x1024");
}

TEST_CASE("Unit::key is stable, distinct per unit and covers the strategy's overrides", "[experiments]") {
  const auto units = expand(read_experiment(minimal(), "exp.json"));
  // The exact text: rows.jsonl written by an earlier build must still match (changing the key's form
  // makes every --resume start again).
  CHECK(
      units[0].key() ==
      R"({"batch":"auto","checkpoint":"off","checkpoint_regather":false,"cluster":"titan-rtx-8","label":"fsdp",)"
      R"("memory":"","model":"nd-48x1024","prefetch":0,"split_max":1,"strategy":"fsdp","tier":"extended","world_size":0})");
  CHECK_THAT(units[1].key(), Contains(R"("strategy_split_max":4)"));
  CHECK(units[0].key() == expand(read_experiment(minimal(), "exp.json"))[0].key());

  json doc = minimal();
  doc["axes"] = {{"memory", {"8GB", "16GB"}},
                 {"prefetch", {0, 1}},
                 {"checkpoint", {"on", "auto"}},
                 {"checkpoint_regather", {false, true}}};
  std::set<std::string> keys;
  for (const auto& u : expand(read_experiment(doc, "exp.json"))) keys.insert(u.key());
  CHECK(keys.size() == 2 * 2 * 2 * 2 * 2);

  // The label is part of the key: relabelling a strategy runs it again.
  json relabelled = minimal();
  relabelled["strategies"][0]["label"] = "zero3";
  relabelled["baseline"] = "zero3";
  CHECK(expand(read_experiment(relabelled, "exp.json"))[0].key() != units[0].key());
}

// Issue 14: the multi-node baselines are strategies of an experiment, and "groups" an axis whose
// false (the default) leaves the key as it was, so that earlier rows still resume.
TEST_CASE("hsdp, fsdp-2level and the groups axis", "[experiments][groups]") {
  json doc = minimal();
  doc["base"]["cluster"] = "h100-2x8";
  doc["strategies"].push_back({{"label", "hsdp"}, {"strategy", "hsdp"}});
  doc["strategies"].push_back({{"label", "2lvl"}, {"strategy", "fsdp-2level"}});
  // "auto" (the default: where the cluster has two levels) leaves the key as it was; true and false
  // ("on", "off") are written.
  doc["axes"] = {{"groups", {"auto", true, false}}};
  const auto units = expand(read_experiment(doc, "exp.json"));
  REQUIRE(units.size() == 3 * 4);
  CHECK(units[2].strategy.strategy == "hsdp");
  CHECK(units[3].strategy.strategy == "fsdp-2level");
  CHECK(units[0].config.groups == "auto");
  CHECK(units[4].config.groups == "on");
  CHECK(units[8].config.groups == "off");
  CHECK(units[0].key().find("groups") == std::string::npos);
  CHECK_THAT(units[4].key(), Contains(R"("groups":true)"));
  CHECK_THAT(units[8].key(), Contains(R"("groups":false)"));
  doc["axes"] = {{"groups", {1}}};
  const Caught c = rejected(doc);
  CHECK(c.pointer == "/axes/groups/0");
  CHECK_THAT(c.what, Contains("expected true, false, \"auto\", \"on\" or \"off\", got 1"));
}

// Schema 1 files were written for the data-parallel space: what they leave open is searched there;
// schema 2 leaves it to the whole space. Explicit values hold in both; the keys are the same.
TEST_CASE("schema 1 experiments plan in the data-parallel space, schema 2 in the whole space",
          "[experiments][layout]") {
  json doc = minimal();
  doc["base"]["cluster"] = "h100-2x8";
  doc["axes"] = {{"pp", {"auto", 2}}};
  const auto v1 = expand(read_experiment(doc, "exp.json"));
  doc["schema_version"] = 2;
  const auto v2 = expand(read_experiment(doc, "exp.json"));
  REQUIRE(v1.size() == 4);
  REQUIRE(v2.size() == 4);
  const osdp::search::PlanRequest a1 = unit_request(v1[1], ""), a2 = unit_request(v2[1], "");
  CHECK(a1.pp == std::vector<int>{1});
  CHECK(a1.tp == std::vector<int>{1});
  CHECK(a1.micro_batches == 1);
  CHECK(a1.groups == "off");
  CHECK(a2.pp.empty());
  CHECK(a2.tp.empty());
  CHECK(a2.micro_batches == 0);
  CHECK(a2.groups == "auto");
  // pp 2 asked for explicitly: in both.
  CHECK(unit_request(v1[3], "").pp == std::vector<int>{2});
  CHECK(unit_request(v2[3], "").pp == std::vector<int>{2});
  for (std::size_t i = 0; i < v1.size(); ++i) CHECK(v1[i].key() == v2[i].key());
  doc["schema_version"] = 3;
  const Caught c = rejected(doc);
  CHECK(c.pointer == "/schema_version");
  CHECK_THAT(c.what, Contains("reads 1 and 2"));
}

// A strategy may narrow the layout for itself (the hybrid study's pure TP: megatron-3d at pp 1, TP 8);
// the override is in its units' keys and requests; a data-parallel strategy refuses one.
TEST_CASE("a strategy's pp, tp and micro_batches override the configuration's", "[experiments][layout]") {
  json doc = minimal();
  doc["schema_version"] = 2;
  doc["base"]["cluster"] = "a100-8";
  doc["strategies"].push_back({{"label", "pure-tp"}, {"strategy", "megatron-3d"}, {"pp", 1}, {"tp", 8}});
  doc["strategies"].push_back({{"label", "exact-m1"}, {"strategy", "exact"}, {"micro_batches", 1}});
  doc["strategies"].push_back({{"label", "tp12"}, {"strategy", "exact"}, {"tp", {1, 2}}});
  const auto units = expand(read_experiment(doc, "exp.json"));
  REQUIRE(units.size() == 5);
  CHECK(unit_request(units[4], "").tp == std::vector<int>{1, 2});
  CHECK_THAT(units[4].key(), Contains(R"("strategy_tp":[1,2])"));
  const osdp::search::PlanRequest tp = unit_request(units[2], ""), m1 = unit_request(units[3], "");
  CHECK(tp.pp == std::vector<int>{1});
  CHECK(tp.tp == std::vector<int>{8});
  CHECK(tp.micro_batches == 0);
  CHECK(m1.micro_batches == 1);
  CHECK(m1.pp.empty());
  CHECK_THAT(units[2].key(), Contains(R"("strategy_pp":1)"));
  CHECK_THAT(units[2].key(), Contains(R"("strategy_tp":8)"));
  CHECK_THAT(units[3].key(), Contains(R"("strategy_micro_batches":1)"));
  doc["strategies"][0]["tp"] = 2;  // fsdp
  const Caught c = rejected(doc);
  CHECK(c.pointer == "/strategies/0/tp");
  CHECK_THAT(c.what, Contains("strategy fsdp searches data parallelism only"));
  doc["strategies"][0].erase("tp");
  doc["strategies"][2]["tp"] = 3;
  CHECK(rejected(doc).pointer == "/strategies/2/tp");
}

// ---------------------------------------------------------------------------------------------------
// costmodel::resized()

TEST_CASE("resize: whole nodes of a multi-node cluster, one flat node otherwise", "[experiments]") {
  osdp::costmodel::ClusterSpec multi;
  multi.name = "two-nodes";
  multi.nodes = 2;
  multi.devices_per_node = 8;
  multi.inter = osdp::costmodel::LinkSpec{};

  const auto four = osdp::costmodel::resized(multi, 32);
  CHECK(four.nodes == 4);
  CHECK(four.devices_per_node == 8);
  CHECK(four.world_size() == 32);
  CHECK(four.name == "two-nodes@32");
  CHECK_THROWS_AS(osdp::costmodel::resized(multi, 12),
                  osdp::UsageError);  // 12 is not a whole number of 8-device nodes
  CHECK_THROWS_WITH(osdp::costmodel::resized(multi, 12), Contains("12") && Contains("8-device"));

  const auto same = osdp::costmodel::resized(multi, 16);  // its own size (or 0): unchanged, name included
  CHECK(same.nodes == 2);
  CHECK(same.name == "two-nodes");
  CHECK(osdp::costmodel::resized(multi, 0).world_size() == 16);

  osdp::costmodel::ClusterSpec flat;
  flat.name = "box";
  flat.nodes = 1;
  flat.devices_per_node = 8;
  const auto three = osdp::costmodel::resized(flat, 3);
  CHECK(three.nodes == 1);
  CHECK(three.devices_per_node == 3);
  CHECK(three.name == "box@3");
}

// ---------------------------------------------------------------------------------------------------
// rows.jsonl on --resume

TEST_CASE("read_rows keeps matching rows and drops torn, stale and repeated lines", "[experiments][sweep]") {
  const auto units = expand(read_experiment(minimal(), "exp.json"));
  std::vector<std::string> keys;
  for (const auto& u : units) keys.push_back(u.key());
  const std::vector<EvaluatorKind> evaluators{EvaluatorKind::kAnalytic};
  auto row = [&](int index, const std::string& key) {
    UnitResult r = result(index, "s", {ev("analytic", true, 10)});
    r.key = key;
    return to_json(r).dump();
  };
  const std::string path =
      (std::filesystem::temp_directory_path() / ("osdp_rows_" + std::to_string(::getpid()) + ".jsonl"))
          .string();
  SECTION("a missing file is no rows") {
    CHECK(read_rows(path + ".none", keys, evaluators).rows.empty());
  }
  SECTION("torn last line, stale key, index out of range, repeated index, other evaluators") {
    {
      std::ofstream out(path);
      out << row(1, units[1].key()) << "\n"
          << row(0, "another experiment's unit") << "\n"
          << row(5, units[1].key()) << "\n"
          << row(1, units[1].key()) << "\n"
          << to_json(result(0, "s", {ev("sim", true, 1)})).dump() << "\n"
          << "\n"
          << row(0, units[0].key()).substr(0, 40);  // kill -9 mid-write
    }
    const StoredRows stored = read_rows(path, keys, evaluators);
    CHECK(stored.rows.size() == 1);
    CHECK(stored.rows.count(1) == 1);
    CHECK(stored.dropped == 5);
    CHECK(read_rows(path, keys, {EvaluatorKind::kAnalytic, EvaluatorKind::kSim})
              .rows.empty());  // evaluators changed: all run again
  }
  std::remove(path.c_str());
}

// The cap on expansion: 2 strategies x 400 x 4 x 65 = 208,000 units from a 4 KB file is refused before
// anything is expanded (such a file once took 19 GB in 40 s with no output); the cap itself passes.
TEST_CASE("an experiment that expands past kMaxUnits is refused, naming the product", "[experiments]") {
  nlohmann::json doc = minimal();
  nlohmann::json memory = nlohmann::json::array(), prefetch = nlohmann::json::array();
  for (int i = 1; i <= 400; ++i) memory.push_back(std::to_string(i) + "GiB");
  for (int i = 0; i <= 64; ++i) prefetch.push_back(i);
  doc["axes"] = {{"memory", memory}, {"split_max", {1, 2, 4, 8}}, {"prefetch", prefetch}};
  const auto e = rejected(doc);
  CHECK(e.pointer == "/");
  CHECK_THAT(e.what,
             Contains("expands to 208000 units (2 strategies x 400 memory x 65 prefetch x 4 split_max)") &&
                 Contains("more than osdp runs from one file (100000)"));
  // Exactly the cap: 2 strategies x 50000 memory values.
  nlohmann::json at_cap = minimal();
  nlohmann::json many = nlohmann::json::array();
  for (int i = 1; i <= kMaxUnits / 2; ++i) many.push_back(std::to_string(i) + "MiB");
  at_cap["axes"] = {{"memory", many}};
  CHECK(read_experiment(at_cap, "exp.json").axes.size() == 1);
}
