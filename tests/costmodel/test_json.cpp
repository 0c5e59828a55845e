// Strict, versioned JSON descriptions (json_reader, model, cluster, calibration, plan, catalog): unknown
// keys, missing keys, wrong types and out-of-range values are osdp::InputError naming the file and the
// JSON pointer (RFC 6901); to_json followed by read_* gives the same values; every built-in file loads.
// Byte counts are derived in comments: Ki = 1024, Mi = 2^20 = 1048576, Gi = 2^30 = 1073741824.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/model.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using nlohmann::json;
using namespace osdp::costmodel;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMi = 1048576.0;
constexpr double kGi = 1073741824.0;

struct Caught {
  std::string file;
  std::string pointer;
  std::string what;
};

// Runs `f` and returns the osdp::InputError it throws; fails the test when it throws none.
template <class F>
Caught input_error(F&& f) {
  try {
    f();
  } catch (const osdp::InputError& e) {
    return {e.file(), e.pointer(), e.what()};
  }
  FAIL("no osdp::InputError was thrown");
  return {};
}

Approx rel(double expected) {
  return Approx(expected).epsilon(1e-12).margin(0.0);
}

// A two-stage model: stage 0 has ffn defaulted to 4 * 64 = 256, stage 1 gives ffn explicitly; untied, as
// the stages' widths differ.
json model_doc() {
  return parse_json_text(R"({
    "schema_version": 1,
    "name": "tiny",
    "seq": 128,
    "vocab": 1000,
    "tied_embeddings": false,
    "stages": [
      {"layers": 2, "hidden": 64, "heads": 4},
      {"layers": 1, "hidden": 128, "heads": 8, "ffn": 384}
    ]
  })",
                         "model_doc");
}

json cluster_doc() {
  return parse_json_text(R"({
    "schema_version": 1,
    "name": "two-nodes",
    "description": "2 x 4 test devices",
    "source": "made up",
    "nodes": 2,
    "devices_per_node": 4,
    "device": {
      "name": "Test GPU",
      "memory": "16GiB",
      "reserve": "512MiB",
      "fp32_flops": "16.3TFLOP/s",
      "bf16_flops": "130TFLOP/s",
      "gemm_efficiency": 0.7,
      "gemm_half_efficiency_dim": 64,
      "memory_bandwidth": "672GB/s",
      "kernel_overhead": "10us"
    },
    "links": {
      "intra": {"alpha": "5us", "bandwidth": "12GB/s"},
      "inter": {"alpha": "10us", "bandwidth": "400Gb/s"}
    },
    "overlap": {"enabled": false, "interference": 1.25},
    "calibration": "lab"
  })",
                         "cluster_doc");
}

json calibration_doc() {
  return parse_json_text(R"({
    "schema_version": 1,
    "name": "lab-2024",
    "provenance": {"host": "node0", "backend": "nccl"},
    "collectives": {
      "allgather": [
        {"up_to": "1MiB", "alpha": "20us", "bandwidth": "4GiB/s", "residual_rms": 0.01},
        {"up_to": "64MiB", "alpha": "30us", "bandwidth": "8GiB/s"},
        {"alpha": "40us", "bandwidth": "16GiB/s"}
      ],
      "reducescatter": [{"alpha": "25us", "bandwidth": "8GiB/s"}]
    },
    "compute": {"gemm_efficiency": 0.5, "kernel_overhead": "4us"},
    "overlap": {"interference": 1.5}
  })",
                         "calibration_doc");
}

ComputeSpec base_compute() {
  ComputeSpec c;
  c.fp32_flops_per_s = 16.3e12;
  c.bf16_flops_per_s = 130e12;
  c.gemm_efficiency = 0.7;
  c.gemm_half_efficiency_dim = 64;
  c.memory_bandwidth_bytes_per_s = 672e9;
  c.kernel_overhead_s = 1e-5;
  return c;
}

void check_same(const ModelSpec& a, const ModelSpec& b) {
  CHECK(a.name == b.name);
  CHECK(a.description == b.description);
  CHECK(a.family == b.family);
  CHECK(a.seq == b.seq);
  CHECK(a.vocab == b.vocab);
  CHECK(a.tied_embeddings == b.tied_embeddings);
  CHECK(a.precision == b.precision);
  CHECK(a.dropout == b.dropout);
  REQUIRE(a.stages.size() == b.stages.size());
  for (std::size_t i = 0; i < a.stages.size(); ++i) {
    INFO("stage " << i);
    CHECK(a.stages[i].layers == b.stages[i].layers);
    CHECK(a.stages[i].hidden == b.stages[i].hidden);
    CHECK(a.stages[i].heads == b.stages[i].heads);
    CHECK(a.stages[i].ffn == b.stages[i].ffn);
  }
}

void check_same(const ComputeSpec& a, const ComputeSpec& b) {
  CHECK(a.fp32_flops_per_s == b.fp32_flops_per_s);
  CHECK(a.bf16_flops_per_s == b.bf16_flops_per_s);
  CHECK(a.gemm_efficiency == b.gemm_efficiency);
  CHECK(a.gemm_half_efficiency_dim == b.gemm_half_efficiency_dim);
  CHECK(a.memory_bandwidth_bytes_per_s == b.memory_bandwidth_bytes_per_s);
  CHECK(a.kernel_overhead_s == b.kernel_overhead_s);
}

void check_same(const ClusterSpec& a, const ClusterSpec& b) {
  CHECK(a.name == b.name);
  CHECK(a.description == b.description);
  CHECK(a.source == b.source);
  CHECK(a.nodes == b.nodes);
  CHECK(a.devices_per_node == b.devices_per_node);
  CHECK(a.device_name == b.device_name);
  CHECK(a.memory_bytes == b.memory_bytes);
  CHECK(a.reserve_bytes == b.reserve_bytes);
  check_same(a.compute, b.compute);
  CHECK(a.intra.alpha_s == b.intra.alpha_s);
  CHECK(a.intra.bandwidth_bytes_per_s == b.intra.bandwidth_bytes_per_s);
  REQUIRE(a.inter.has_value() == b.inter.has_value());
  if (a.inter) {
    CHECK(a.inter->alpha_s == b.inter->alpha_s);
    CHECK(a.inter->bandwidth_bytes_per_s == b.inter->bandwidth_bytes_per_s);
  }
  CHECK(a.overlap.enabled == b.overlap.enabled);
  CHECK(a.overlap.interference == b.overlap.interference);
  CHECK(a.calibration == b.calibration);
}

void check_same(const std::vector<Segment>& a, const std::vector<Segment>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("segment " << i);
    CHECK(a[i].up_to_bytes == b[i].up_to_bytes);
    CHECK(a[i].alpha_s == b[i].alpha_s);
    CHECK(a[i].beta_s_per_byte == b[i].beta_s_per_byte);
  }
}

void check_same(const Calibration& a, const Calibration& b) {
  CHECK(a.name == b.name);
  CHECK(a.provenance == b.provenance);
  check_same(a.allgather, b.allgather);
  check_same(a.reducescatter, b.reducescatter);
  check_same(a.allreduce, b.allreduce);
  REQUIRE(a.compute.has_value() == b.compute.has_value());
  if (a.compute) check_same(*a.compute, *b.compute);
  CHECK(a.interference == b.interference);
}

// to_json, then to text and back, as a file would go.
json through_text(const json& j) {
  return parse_json_text(j.dump(2), "round-trip");
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// JSON syntax

TEST_CASE("invalid JSON is reported with the origin, line and column", "[json]") {
  // Line 3 is `  "b": }`: the '}' is its 8th character.
  const auto e = input_error([] { parse_json_text("{\n  \"a\": 1,\n  \"b\": }\n", "broken.json"); });
  CHECK(e.file == "broken.json");
  CHECK(e.pointer == "");
  CHECK_THAT(e.what, StartsWith("broken.json: line 3 column 8: invalid JSON: syntax error"));

  // A trailing comma: `{"a": 1,}` fails at the '}', character 9 of line 1.
  const auto trailing = input_error([] { parse_json_text("{\"a\": 1,}", "t.json"); });
  CHECK_THAT(trailing.what, StartsWith("t.json: line 1 column 9: invalid JSON: syntax error"));

  // Empty text: nothing to read at line 1 column 1.
  const auto empty = input_error([] { parse_json_text("", "empty.json"); });
  CHECK_THAT(empty.what, StartsWith("empty.json: line 1 column 1: invalid JSON: syntax error"));
  CHECK_THAT(empty.what, Contains("unexpected end of input"));
}

TEST_CASE("a JSON number too large for a double is an InputError", "[json]") {
  // nlohmann::json reports 1e400 as json::out_of_range (406 "number overflow"), not json::parse_error;
  // parse_json_text catches only parse_error, so the nlohmann exception escapes without the file name.
  try {
    parse_json_text("{\n  \"memory\": 1e400\n}", "big.json");
    FAIL_CHECK("no exception was thrown");
  } catch (const osdp::InputError& e) {
    CHECK(e.file() == "big.json");
    CHECK_THAT(std::string(e.what()), StartsWith("big.json"));
  } catch (const std::exception& e) {
    FAIL_CHECK("not an osdp::InputError: " << e.what());
  }
}

TEST_CASE("valid JSON text parses", "[json]") {
  const json j = parse_json_text("{\"a\": [1, 2.5, \"x\"], \"b\": {\"c\": true}}", "ok.json");
  CHECK(j.at("a").at(0) == 1);
  CHECK(j.at("a").at(1) == 2.5);
  CHECK(j.at("a").at(2) == "x");
  CHECK(j.at("b").at("c") == true);
}

TEST_CASE("load_json_file names the file when it is missing or malformed", "[json]") {
  const auto missing = input_error([] { load_json_file("/nonexistent/osdp/missing.json"); });
  CHECK(missing.file == "/nonexistent/osdp/missing.json");
  CHECK(missing.pointer == "");
  CHECK_THAT(missing.what, Contains("cannot open the file for reading"));

  const auto path =
      std::filesystem::temp_directory_path() / ("osdp_test_json_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(path);
    out << "{\n\t\"name\": \"x\",\n\t\"seq\": ]\n}\n";  // a ']' where a value belongs, on line 3
  }
  const auto bad = input_error([&] { load_json_file(path.string()); });
  std::filesystem::remove(path);
  CHECK(bad.file == path.string());
  // Line 3 is `\t"seq": ]`: the tab is column 1 (one character, not a tab stop), the ']' column 9.
  CHECK_THAT(bad.what, StartsWith(path.string() + ": line 3 column 9: invalid JSON: syntax error"));
}

// ---------------------------------------------------------------------------------------------------
// JsonReader

TEST_CASE("JsonReader: unknown keys, escaping of pointers, messages", "[json]") {
  const json doc = parse_json_text(R"({"a": 1, "b": "x", "c/d~e": 2})", "r.json");
  JsonReader r(doc, "r.json", "/top");
  CHECK(r.integer("a", 0, 10) == 1);
  CHECK(r.string("b") == "x");
  // "c/d~e" was never asked for; RFC 6901 writes '/' as ~1 and '~' as ~0.
  const auto e = input_error([&] { r.finish(); });
  CHECK(e.file == "r.json");
  CHECK(e.pointer == "/top/c~1d~0e");
  CHECK(e.what == "r.json:/top/c~1d~0e: unknown key \"c/d~e\" (known keys here: a, b)");
}

TEST_CASE("JsonReader: has() does not mark a key as known, raw() does", "[json]") {
  const json doc = parse_json_text(R"({"meta": {"anything": [1, 2]}})", "r.json");
  {
    JsonReader r(doc, "r.json", "");
    CHECK(r.has("meta"));
    CHECK_FALSE(r.has("other"));
    const auto e = input_error([&] { r.finish(); });
    CHECK(e.pointer == "/meta");
  }
  {
    JsonReader r(doc, "r.json", "");
    const json* meta = r.raw("meta");
    REQUIRE(meta != nullptr);
    CHECK(meta->at("anything").size() == 2);
    CHECK(r.raw("absent") == nullptr);
    CHECK_NOTHROW(r.finish());
  }
}

TEST_CASE("JsonReader: quantities accept a unit string or a plain number in base units", "[json]") {
  const json doc = parse_json_text(R"({"m1": "8GiB", "m2": 4096, "t1": "1.5ms", "t2": 0.25, "t3": "5",
                                       "bw": "400Gb/s", "neg": "-1GiB", "f": true})",
                                   "q.json");
  JsonReader r(doc, "q.json", "");
  CHECK(r.quantity("m1", UnitKind::kBytes, 0, kInf) == 8589934592.0);  // 8 * 2^30
  CHECK(r.quantity("m2", UnitKind::kBytes, 0, kInf) == 4096.0);
  CHECK(r.quantity("t1", UnitKind::kSeconds, 0, 1) == rel(1.5e-3));
  CHECK(r.quantity("t2", UnitKind::kSeconds, 0, 1) == 0.25);  // a JSON number is seconds already
  CHECK(r.quantity("bw", UnitKind::kBytesPerSecond, 1, kInf) == 50000000000.0);  // 400e9 / 8
  CHECK(r.quantity_or("absent", UnitKind::kBytes, 0, kInf, 7.0) == 7.0);

  // A string needs its unit, even when the JSON number would have been accepted.
  const auto bare = input_error([&] { r.quantity("t3", UnitKind::kSeconds, 0, 1); });
  CHECK(bare.pointer == "/t3");
  CHECK(bare.what == "q.json:/t3: expected a time like \"10us\", \"1.5ms\" or \"2s\", got \"5\"");

  // -1 GiB = -1073741824 bytes is below the minimum 1.
  const auto neg = input_error([&] { r.quantity("neg", UnitKind::kBytes, 1, kInf); });
  CHECK(neg.pointer == "/neg");
  CHECK(neg.what == "q.json:/neg: value -1073741824 is out of range [1, inf] (base units)");

  const auto type = input_error([&] { r.quantity("f", UnitKind::kBytes, 0, kInf); });
  CHECK(type.pointer == "/f");
  CHECK_THAT(type.what, Contains("got boolean"));
}

TEST_CASE("JsonReader: a node that is not an object", "[json]") {
  const json doc = json::array({1, 2});
  const auto e = input_error([&] { JsonReader r(doc, "arr.json", "/x"); });
  CHECK(e.file == "arr.json");
  CHECK(e.pointer == "/x");
  CHECK(e.what == "arr.json:/x: expected a JSON object, got array");
}

// ---------------------------------------------------------------------------------------------------
// Models

TEST_CASE("a model with stages reads its values and defaults", "[json]") {
  const ModelSpec m = read_model(model_doc(), "tiny.json");
  CHECK(m.name == "tiny");
  CHECK(m.description == "");
  CHECK(m.family == "gpt");
  CHECK(m.seq == 128);
  CHECK(m.vocab == 1000);
  CHECK_FALSE(m.tied_embeddings);
  CHECK(m.precision == Precision::kFp32);
  CHECK(m.dropout);
  REQUIRE(m.stages.size() == 2);
  CHECK(m.stages[0].layers == 2);
  CHECK(m.stages[0].hidden == 64);
  CHECK(m.stages[0].heads == 4);
  CHECK(m.stages[0].ffn == 256);  // 4 x hidden when not given
  CHECK(m.stages[1].ffn == 384);
  CHECK(m.total_layers() == 3);
  CHECK(m.first_hidden() == 64);
  CHECK(m.last_hidden() == 128);
}

TEST_CASE("a uniform model is one stage", "[json]") {
  const json doc = parse_json_text(R"({"schema_version": 1, "name": "u", "seq": 1024, "vocab": 50257,
      "layers": 48, "hidden": 1600, "heads": 25, "precision": "mixed", "tied_embeddings": false,
      "dropout": false, "description": "d"})",
                                   "u.json");
  const ModelSpec m = read_model(doc, "u.json");
  REQUIRE(m.stages.size() == 1);
  CHECK(m.stages[0].layers == 48);
  CHECK(m.stages[0].hidden == 1600);
  CHECK(m.stages[0].heads == 25);
  CHECK(m.stages[0].ffn == 6400);  // 4 * 1600
  CHECK(m.precision == Precision::kMixed);
  CHECK_FALSE(m.tied_embeddings);
  CHECK_FALSE(m.dropout);
  CHECK(m.description == "d");
}

TEST_CASE("model: embeddings are tied by default, and only when first and last widths agree", "[json]") {
  json doc = model_doc();
  doc.erase("tied_embeddings");
  const auto e = input_error([&] { read_model(doc, "tiny.json"); });
  CHECK(e.file == "tiny.json");
  CHECK(e.pointer == "/tied_embeddings");
  CHECK_THAT(e.what, Contains("cannot be tied"));

  doc["stages"][1]["hidden"] = 64;  // both stages 64 wide: the token table can serve as the LM head
  const ModelSpec m = read_model(doc, "tiny.json");
  CHECK(m.tied_embeddings);
  CHECK(m.first_hidden() == m.last_hidden());
}

TEST_CASE("model: unknown keys are rejected with file and pointer", "[json]") {
  SECTION("in a stage") {
    json doc = model_doc();
    doc["stages"][1]["head"] = 8;
    const auto e = input_error([&] { read_model(doc, "tiny.json"); });
    CHECK(e.file == "tiny.json");
    CHECK(e.pointer == "/stages/1/head");
    CHECK_THAT(e.what, StartsWith("tiny.json:/stages/1/head: unknown key \"head\""));
  }
  SECTION("at the top") {
    json doc = model_doc();
    doc["vocabulary"] = 1000;
    const auto e = input_error([&] { read_model(doc, "tiny.json"); });
    CHECK(e.pointer == "/vocabulary");
    CHECK_THAT(e.what, Contains("unknown key \"vocabulary\""));
    CHECK_THAT(e.what, Contains("tiny.json"));
  }
  SECTION("under a pointer prefix (a model inside a plan)") {
    json doc = model_doc();
    doc["stages"][0]["dropout"] = true;
    const auto e = input_error([&] { read_model(doc, "plan.json", "/model"); });
    CHECK(e.file == "plan.json");
    CHECK(e.pointer == "/model/stages/0/dropout");
    CHECK_THAT(e.what, Contains("unknown key"));
  }
}

TEST_CASE("model: required keys are named when missing", "[json]") {
  json doc = model_doc();
  std::string pointer;
  SECTION("seq") {
    doc.erase("seq");
    pointer = "/seq";
  }
  SECTION("name") {
    doc.erase("name");
    pointer = "/name";
  }
  SECTION("a stage's hidden") {
    doc["stages"][0].erase("hidden");
    pointer = "/stages/0/hidden";
  }
  SECTION("a stage's heads") {
    doc["stages"][1].erase("heads");
    pointer = "/stages/1/heads";
  }
  SECTION("neither layers nor stages") {
    doc.erase("stages");
    pointer = "/layers";
  }
  const auto e = input_error([&] { read_model(doc, "tiny.json"); });
  CHECK(e.file == "tiny.json");
  CHECK(e.pointer == pointer);
  CHECK_THAT(e.what, Contains("required key is missing"));
}

TEST_CASE("model: stages and uniform sizes are not both given", "[json]") {
  json doc = model_doc();
  doc["hidden"] = 64;
  const auto e = input_error([&] { read_model(doc, "tiny.json"); });
  CHECK(e.pointer == "/stages");
  CHECK_THAT(e.what, Contains("not both"));
}

TEST_CASE("model: wrong types", "[json]") {
  json doc = model_doc();
  std::string pointer, expected;
  SECTION("an integer as a string") {
    doc["seq"] = "128";
    pointer = "/seq";
    expected = "expected an integer, got \"128\"";
  }
  SECTION("an integer with a fraction") {
    doc["stages"][0]["layers"] = 2.5;
    pointer = "/stages/0/layers";
    expected = "expected an integer, got 2.5";
  }
  SECTION("a boolean as a string") {
    doc["tied_embeddings"] = "yes";
    pointer = "/tied_embeddings";
    expected = "expected true or false, got string";
  }
  SECTION("a string as a number") {
    doc["name"] = 5;
    pointer = "/name";
    expected = "expected a string, got number";
  }
  SECTION("null for an optional string") {
    doc["description"] = nullptr;
    pointer = "/description";
    expected = "expected a string, got null";
  }
  SECTION("stages as an object") {
    doc["stages"] = json::object();
    pointer = "/stages";
    expected = "expected a non-empty array of objects, got object";
  }
  SECTION("stages empty") {
    doc["stages"] = json::array();
    pointer = "/stages";
    expected = "expected a non-empty array of objects, got array";
  }
  SECTION("a stage that is not an object") {
    doc["stages"][1] = 3;
    pointer = "/stages/1";
    expected = "expected a JSON object, got number";
  }
  SECTION("a precision that is not one of the choices") {
    doc["precision"] = "fp16";
    pointer = "/precision";
    expected = "expected one of \"fp32\", \"mixed\", got \"fp16\"";
  }
  const auto e = input_error([&] { read_model(doc, "tiny.json"); });
  CHECK(e.file == "tiny.json");
  CHECK(e.pointer == pointer);
  CHECK(e.what == "tiny.json:" + pointer + ": " + expected);
}

TEST_CASE("model: out-of-range values", "[json]") {
  json doc = model_doc();
  std::string pointer, expected;
  SECTION("heads not dividing hidden") {
    doc["stages"][1]["heads"] = 7;  // 128 % 7 = 2
    pointer = "/stages/1/heads";
    expected = "hidden size 128 is not divisible by 7 heads";
  }
  SECTION("more heads than hidden") {
    doc["stages"][0]["heads"] = 128;  // 64 % 128 = 64
    pointer = "/stages/0/heads";
    expected = "hidden size 64 is not divisible by 128 heads";
  }
  SECTION("zero heads") {
    doc["stages"][0]["heads"] = 0;
    pointer = "/stages/0/heads";
    expected = "expected an integer in [1, 1048576], got 0";  // 1048576 = 2^20
  }
  SECTION("negative layers") {
    doc["stages"][0]["layers"] = -1;
    pointer = "/stages/0/layers";
    expected = "expected an integer in [1, 100000], got -1";
  }
  SECTION("zero vocabulary") {
    doc["vocab"] = 0;
    pointer = "/vocab";
    expected = "expected an integer in [1, 67108864], got 0";  // 64 * 2^20
  }
  SECTION("zero ffn") {
    doc["stages"][1]["ffn"] = 0;
    pointer = "/stages/1/ffn";
    expected = "expected an integer in [1, 4194304], got 0";  // 4 * 2^20
  }
  const auto e = input_error([&] { read_model(doc, "tiny.json"); });
  CHECK(e.file == "tiny.json");
  CHECK(e.pointer == pointer);
  CHECK(e.what == "tiny.json:" + pointer + ": " + expected);
}

TEST_CASE("model: an integer too large for int64 is quoted as written", "[json]") {
  // 18446744073709551615 = 2^64 - 1 is read by nlohmann::json as an unsigned integer; JsonReader::integer
  // converts it to int64 (wrapping to -1) before the range check, so the message says "got -1".
  json doc = model_doc();
  doc["seq"] = std::numeric_limits<std::uint64_t>::max();
  const auto e = input_error([&] { read_model(doc, "tiny.json"); });
  CHECK(e.pointer == "/seq");
  CHECK_THAT(e.what, Contains("18446744073709551615"));
}

TEST_CASE("model, cluster and calibration files need schema_version 1", "[json]") {
  const auto check_schema = [](json doc, const std::function<void(const json&)>& read) {
    {
      json d = doc;
      d.erase("schema_version");
      const auto e = input_error([&] { read(d); });
      CHECK(e.file == "f.json");
      CHECK(e.pointer == "/schema_version");
      CHECK(e.what == "f.json:/schema_version: required key is missing (expected an integer)");
    }
    {
      json d = doc;
      d["schema_version"] = 2;
      const auto e = input_error([&] { read(d); });
      CHECK(e.pointer == "/schema_version");
      CHECK(e.what == "f.json:/schema_version: unsupported schema_version 2 (this osdp reads 1)");
    }
    {
      json d = doc;
      d["schema_version"] = "1";
      const auto e = input_error([&] { read(d); });
      CHECK(e.pointer == "/schema_version");
      CHECK(e.what == "f.json:/schema_version: expected an integer, got \"1\"");
    }
    {
      json d = doc;
      d["schema_version"] = 1.0;
      const auto e = input_error([&] { read(d); });
      CHECK(e.pointer == "/schema_version");
      CHECK(e.what == "f.json:/schema_version: expected an integer, got 1.0");
    }
  };
  SECTION("model") {
    check_schema(model_doc(), [](const json& d) { read_model(d, "f.json"); });
  }
  SECTION("cluster") {
    check_schema(cluster_doc(), [](const json& d) { read_cluster(d, "f.json"); });
  }
  SECTION("calibration") {
    check_schema(calibration_doc(), [](const json& d) { read_calibration(d, "f.json", ComputeSpec{}); });
  }
}

TEST_CASE("a model, a cluster or a calibration must be a JSON object", "[json]") {
  const json doc = json::array({1});
  CHECK_THAT(input_error([&] { read_model(doc, "m.json"); }).what,
             StartsWith("m.json:") && Contains("expected a JSON object, got array"));
  CHECK_THAT(input_error([&] { read_cluster(doc, "c.json"); }).what,
             StartsWith("c.json:") && Contains("expected a JSON object, got array"));
  CHECK_THAT(input_error([&] { read_calibration(doc, "k.json", ComputeSpec{}); }).what,
             StartsWith("k.json:") && Contains("expected a JSON object, got array"));
}

// ---------------------------------------------------------------------------------------------------
// Clusters

TEST_CASE("a cluster reads its values in base units", "[json]") {
  const ClusterSpec c = read_cluster(cluster_doc(), "c.json");
  CHECK(c.name == "two-nodes");
  CHECK(c.description == "2 x 4 test devices");
  CHECK(c.source == "made up");
  CHECK(c.nodes == 2);
  CHECK(c.devices_per_node == 4);
  CHECK(c.world_size() == 8);
  CHECK(c.device_name == "Test GPU");
  CHECK(c.memory_bytes == 17179869184.0);  // 16 * 2^30
  CHECK(c.reserve_bytes == 536870912.0);   // 512 * 2^20
  CHECK(c.compute.fp32_flops_per_s == rel(16.3e12));
  CHECK(c.compute.bf16_flops_per_s == 130e12);
  CHECK(c.compute.gemm_efficiency == 0.7);
  CHECK(c.compute.gemm_half_efficiency_dim == 64.0);
  CHECK(c.compute.memory_bandwidth_bytes_per_s == 672e9);
  CHECK(c.compute.kernel_overhead_s == rel(1e-5));
  CHECK(c.intra.alpha_s == rel(5e-6));
  CHECK(c.intra.bandwidth_bytes_per_s == 12e9);
  REQUIRE(c.inter.has_value());
  CHECK(c.inter->alpha_s == rel(1e-5));
  CHECK(c.inter->bandwidth_bytes_per_s == 50e9);  // 400 Gb/s = 400e9 / 8 bytes/s
  CHECK(c.inter->beta_s_per_byte() == rel(2e-11));
  CHECK_FALSE(c.overlap.enabled);
  CHECK(c.overlap.interference == 1.25);
  CHECK(c.calibration == "lab");
}

TEST_CASE("a single-node cluster with only required keys takes the defaults", "[json]") {
  const json doc = parse_json_text(R"({"schema_version": 1, "name": "min", "nodes": 1, "devices_per_node": 2,
      "device": {"name": "G", "memory": 1073741824}, "links": {"intra": {"alpha": 0, "bandwidth": 1e9}}})",
                                   "min.json");
  const ClusterSpec c = read_cluster(doc, "min.json");
  const ComputeSpec defaults;
  CHECK(c.memory_bytes == kGi);  // a plain number is bytes
  CHECK(c.reserve_bytes == 0.0);
  check_same(c.compute, defaults);
  CHECK(c.intra.alpha_s == 0.0);
  CHECK(c.intra.bandwidth_bytes_per_s == 1e9);
  CHECK_FALSE(c.inter.has_value());
  CHECK(c.overlap.enabled);
  CHECK(c.overlap.interference == 1.0);
  CHECK(c.calibration == "");
  CHECK(c.description == "");
  CHECK(c.source == "");
}

TEST_CASE("cluster: unknown keys are rejected with file and pointer", "[json]") {
  json doc = cluster_doc();
  std::string pointer;
  SECTION("in a link") {
    doc["links"]["inter"]["beta"] = 2e-11;
    pointer = "/links/inter/beta";
  }
  SECTION("a third link level") {
    doc["links"]["rack"] = {{"alpha", "1us"}, {"bandwidth", "1GB/s"}};
    pointer = "/links/rack";
  }
  SECTION("a misspelled optional device key") {
    doc["device"]["reserv"] = "1GiB";
    pointer = "/device/reserv";
  }
  SECTION("in overlap") {
    doc["overlap"]["enable"] = true;
    pointer = "/overlap/enable";
  }
  SECTION("at the top") {
    doc["node"] = 2;
    pointer = "/node";
  }
  const auto e = input_error([&] { read_cluster(doc, "c.json"); });
  CHECK(e.file == "c.json");
  CHECK(e.pointer == pointer);
  CHECK_THAT(e.what, StartsWith("c.json:" + pointer + ": unknown key"));
}

TEST_CASE("cluster: a misspelled required key is reported as missing", "[json]") {
  json doc = cluster_doc();
  doc["links"]["inter"].erase("bandwidth");
  doc["links"]["inter"]["bandwith"] = "400Gb/s";
  const auto e = input_error([&] { read_cluster(doc, "c.json"); });
  CHECK(e.file == "c.json");
  CHECK(e.pointer == "/links/inter/bandwidth");
  CHECK_THAT(e.what, Contains("required key is missing"));
}

TEST_CASE("cluster: several nodes need an inter-node link", "[json]") {
  json doc = cluster_doc();
  doc["links"].erase("inter");
  const auto e = input_error([&] { read_cluster(doc, "c.json"); });
  CHECK(e.file == "c.json");
  CHECK(e.pointer == "/links/inter");
  CHECK_THAT(e.what, Contains("required when \"nodes\" > 1"));

  doc["nodes"] = 1;  // one node: no inter link is fine
  const ClusterSpec c = read_cluster(doc, "c.json");
  CHECK_FALSE(c.inter.has_value());
  CHECK(c.world_size() == 4);
}

TEST_CASE("cluster: required keys are named when missing", "[json]") {
  json doc = cluster_doc();
  std::string pointer;
  SECTION("device") {
    doc.erase("device");
    pointer = "/device";
  }
  SECTION("device memory") {
    doc["device"].erase("memory");
    pointer = "/device/memory";
  }
  SECTION("intra link") {
    doc["links"].erase("intra");
    pointer = "/links/intra";
  }
  SECTION("link alpha") {
    doc["links"]["intra"].erase("alpha");
    pointer = "/links/intra/alpha";
  }
  SECTION("nodes") {
    doc.erase("nodes");
    pointer = "/nodes";
  }
  const auto e = input_error([&] { read_cluster(doc, "c.json"); });
  CHECK(e.pointer == pointer);
  CHECK_THAT(e.what, StartsWith("c.json:" + pointer + ": required key is missing"));
}

TEST_CASE("cluster: wrong types and out-of-range values", "[json]") {
  json doc = cluster_doc();
  std::string pointer, expected;
  SECTION("negative memory") {
    doc["device"]["memory"] = "-1GiB";
    pointer = "/device/memory";
    expected = "value -1073741824 is out of range [1, inf] (base units)";  // -2^30
  }
  SECTION("zero memory as a number") {
    doc["device"]["memory"] = 0;
    pointer = "/device/memory";
    expected = "value 0 is out of range [1, inf] (base units)";
  }
  SECTION("reserve larger than memory") {
    doc["device"]["reserve"] = "17GiB";  // 18253611008 > 16 GiB = 17179869184
    pointer = "/device/reserve";
    expected = "value 18253611008 is out of range [0, 17179869184] (base units)";
  }
  SECTION("memory with a lowercase unit") {
    doc["device"]["memory"] = "16gib";
    pointer = "/device/memory";
    expected = "expected a size like \"8GiB\", \"16GB\", \"512MiB\" or a number of bytes, got \"16gib\"";
  }
  SECTION("a bandwidth without /s") {
    doc["links"]["intra"]["bandwidth"] = "12GB";
    pointer = "/links/intra/bandwidth";
    expected = "expected a bandwidth like \"12GB/s\", \"11GiB/s\" or \"400Gb/s\" (bits), got \"12GB\"";
  }
  SECTION("an alpha without unit") {
    doc["links"]["inter"]["alpha"] = "10";
    pointer = "/links/inter/alpha";
    expected = "expected a time like \"10us\", \"1.5ms\" or \"2s\", got \"10\"";
  }
  SECTION("an alpha as a boolean") {
    doc["links"]["intra"]["alpha"] = true;
    pointer = "/links/intra/alpha";
    expected = "expected a time like \"10us\", \"1.5ms\" or \"2s\", got boolean";
  }
  SECTION("an alpha over one second") {
    doc["links"]["intra"]["alpha"] = "2s";
    pointer = "/links/intra/alpha";
    expected = "value 2 is out of range [0, 1] (base units)";
  }
  SECTION("efficiency above 1") {
    doc["device"]["gemm_efficiency"] = 1.5;
    pointer = "/device/gemm_efficiency";
    expected = "expected a number in [1e-06, 1], got 1.5";
  }
  SECTION("interference below 1") {
    doc["overlap"]["interference"] = 0.5;
    pointer = "/overlap/interference";
    expected = "expected a number in [1, 100], got 0.5";
  }
  SECTION("zero devices per node") {
    doc["devices_per_node"] = 0;
    pointer = "/devices_per_node";
    expected = "expected an integer in [1, 65536], got 0";
  }
  SECTION("links as an array") {
    doc["links"] = json::array();
    pointer = "/links";
    expected = "expected an object, got array";
  }
  SECTION("overlap enabled as a number") {
    doc["overlap"]["enabled"] = 1;
    pointer = "/overlap/enabled";
    expected = "expected true or false, got number";
  }
  const auto e = input_error([&] { read_cluster(doc, "c.json"); });
  CHECK(e.file == "c.json");
  CHECK(e.pointer == pointer);
  CHECK(e.what == "c.json:" + pointer + ": " + expected);
}

TEST_CASE("cluster: a size that overflows to infinity once scaled is rejected", "[json]") {
  // "1e300TB" = 1e300 * 1e12 = 1e312 bytes, beyond the largest double: parse_quantity returns +inf and the
  // range check [1, inf] accepts it, so the device gets infinite memory (and to_json then writes null).
  json doc = cluster_doc();
  doc["device"]["memory"] = "1e300TB";
  const auto e = input_error([&] { read_cluster(doc, "c.json"); });
  CHECK(e.pointer == "/device/memory");
}

TEST_CASE("cluster: a world size that does not fit in an int is rejected", "[json]") {
  // nodes may be up to 2^20 and devices_per_node up to 2^16, each accepted, but
  // ClusterSpec::world_size() = nodes * devices_per_node = 2^36 overflows int (undefined behaviour).
  json doc = cluster_doc();
  doc["nodes"] = 1 << 20;
  doc["devices_per_node"] = 1 << 16;
  const auto e = input_error([&] { read_cluster(doc, "c.json"); });
  CHECK(e.file == "c.json");
}

// ---------------------------------------------------------------------------------------------------
// Calibrations

TEST_CASE("a calibration reads segments, compute overrides and interference", "[json]") {
  const ComputeSpec base = base_compute();
  const Calibration cal = read_calibration(calibration_doc(), "k.json", base);
  CHECK(cal.name == "lab-2024");
  CHECK(cal.provenance == json{{"host", "node0"}, {"backend", "nccl"}});
  REQUIRE(cal.allgather.size() == 3);
  CHECK(cal.allgather[0].up_to_bytes == 1048576.0);  // 1 MiB
  CHECK(cal.allgather[0].alpha_s == rel(2e-5));
  CHECK(cal.allgather[0].beta_s_per_byte == std::ldexp(1.0, -32));  // 1 / (4 * 2^30)
  CHECK(cal.allgather[1].up_to_bytes == 67108864.0);                // 64 * 2^20
  CHECK(cal.allgather[1].beta_s_per_byte == std::ldexp(1.0, -33));  // 1 / (8 * 2^30)
  CHECK(cal.allgather[2].up_to_bytes == kInf);                      // the last covers the rest
  CHECK(cal.allgather[2].alpha_s == rel(4e-5));
  CHECK(cal.allgather[2].beta_s_per_byte == std::ldexp(1.0, -34));  // 1 / (16 * 2^30)
  REQUIRE(cal.reducescatter.size() == 1);
  CHECK(cal.reducescatter[0].up_to_bytes == kInf);
  CHECK(cal.reducescatter[0].alpha_s == rel(2.5e-5));
  CHECK(cal.allreduce.empty());
  CHECK(&cal.segments(Collective::kAllGather) == &cal.allgather);
  CHECK(&cal.segments(Collective::kReduceScatter) == &cal.reducescatter);
  CHECK(&cal.segments(Collective::kAllReduce) == &cal.allreduce);
  // Compute: the two given fields override, the rest come from the base.
  REQUIRE(cal.compute.has_value());
  CHECK(cal.compute->gemm_efficiency == 0.5);
  CHECK(cal.compute->kernel_overhead_s == rel(4e-6));
  CHECK(cal.compute->fp32_flops_per_s == base.fp32_flops_per_s);
  CHECK(cal.compute->bf16_flops_per_s == base.bf16_flops_per_s);
  CHECK(cal.compute->gemm_half_efficiency_dim == base.gemm_half_efficiency_dim);
  CHECK(cal.compute->memory_bandwidth_bytes_per_s == base.memory_bandwidth_bytes_per_s);
  CHECK(cal.interference == std::optional<double>(1.5));
}

TEST_CASE("a calibration with only a name overrides nothing", "[json]") {
  const Calibration cal =
      read_calibration(parse_json_text(R"({"schema_version": 1, "name": "n"})", "n.json"), "n.json", {});
  CHECK(cal.name == "n");
  CHECK(cal.provenance == json::object());
  CHECK(cal.allgather.empty());
  CHECK(cal.reducescatter.empty());
  CHECK(cal.allreduce.empty());
  CHECK_FALSE(cal.compute.has_value());
  CHECK_FALSE(cal.interference.has_value());
}

TEST_CASE("calibration: segments must be sorted by up_to", "[json]") {
  json doc = calibration_doc();
  std::string pointer;
  SECTION("decreasing") {
    doc["collectives"]["allgather"][1]["up_to"] = "512KiB";  // 524288 < 1 MiB
    pointer = "/collectives/allgather/1/up_to";
  }
  SECTION("equal") {
    doc["collectives"]["allgather"][1]["up_to"] = 1048576;  // = 1 MiB
    pointer = "/collectives/allgather/1/up_to";
  }
  SECTION("the last one, when given, below the one before") {
    doc["collectives"]["allgather"][2]["up_to"] = "32MiB";  // < 64 MiB
    pointer = "/collectives/allgather/2/up_to";
  }
  const auto e = input_error([&] { read_calibration(doc, "k.json", ComputeSpec{}); });
  CHECK(e.file == "k.json");
  CHECK(e.pointer == pointer);
  CHECK(e.what == "k.json:" + pointer + ": segments must be sorted by increasing \"up_to\"");
}

TEST_CASE("calibration: the last segment's up_to is infinity even when given", "[json]") {
  json doc = calibration_doc();
  doc["collectives"]["allgather"][2]["up_to"] = "1GiB";
  const Calibration cal = read_calibration(doc, "k.json", ComputeSpec{});
  REQUIRE(cal.allgather.size() == 3);
  CHECK(cal.allgather[2].up_to_bytes == kInf);
}

TEST_CASE("calibration: strictness", "[json]") {
  json doc = calibration_doc();
  std::string pointer, expected;
  SECTION("an unknown collective") {
    doc["collectives"]["broadcast"] = json::array({{{"alpha", "1us"}, {"bandwidth", "1GB/s"}}});
    pointer = "/collectives/broadcast";
    expected = "unknown key \"broadcast\"";
  }
  SECTION("an unknown key in a segment") {
    doc["collectives"]["reducescatter"][0]["beta"] = 1e-10;
    pointer = "/collectives/reducescatter/0/beta";
    expected = "unknown key \"beta\"";
  }
  SECTION("an unknown key in compute") {
    doc["compute"]["gemm_eff"] = 0.5;
    pointer = "/compute/gemm_eff";
    expected = "unknown key \"gemm_eff\"";
  }
  SECTION("an unknown key at the top") {
    doc["cluster"] = "h100-8";
    pointer = "/cluster";
    expected = "unknown key \"cluster\"";
  }
  SECTION("a missing up_to before the last segment") {
    doc["collectives"]["allgather"][0].erase("up_to");
    pointer = "/collectives/allgather/0/up_to";
    expected = "required key is missing";
  }
  SECTION("a missing alpha") {
    doc["collectives"]["reducescatter"][0].erase("alpha");
    pointer = "/collectives/reducescatter/0/alpha";
    expected = "required key is missing";
  }
  SECTION("overlap without interference") {
    doc["overlap"] = json::object();
    pointer = "/overlap/interference";
    expected = "required key is missing";
  }
  SECTION("provenance that is not an object") {
    doc["provenance"] = "lab";
    pointer = "/provenance";
    expected = "expected an object";
  }
  SECTION("an empty segment list") {
    doc["collectives"]["allreduce"] = json::array();
    pointer = "/collectives/allreduce";
    expected = "expected a non-empty array of objects";
  }
  SECTION("a zero bandwidth") {
    doc["collectives"]["allgather"][1]["bandwidth"] = 0;
    pointer = "/collectives/allgather/1/bandwidth";
    expected = "value 0 is out of range [1, inf] (base units)";
  }
  SECTION("a negative alpha") {
    doc["collectives"]["allgather"][0]["alpha"] = "-1us";
    pointer = "/collectives/allgather/0/alpha";
    expected = "is out of range [0, 1] (base units)";
  }
  const auto e = input_error([&] { read_calibration(doc, "k.json", ComputeSpec{}); });
  CHECK(e.file == "k.json");
  CHECK(e.pointer == pointer);
  CHECK_THAT(e.what, StartsWith("k.json:" + pointer + ": ") && Contains(expected));
}

// ---------------------------------------------------------------------------------------------------
// Round trips

TEST_CASE("round trip: a model with stages", "[json]") {
  ModelSpec m;
  m.name = "ic-test";
  m.description = "three stages";
  m.stages = {{2, 256, 4, 1024}, {1, 512, 8, 1536}, {3, 1024, 16, 4096}};
  m.seq = 512;
  m.vocab = 32000;
  m.tied_embeddings = false;
  m.precision = Precision::kMixed;
  m.dropout = false;
  const ModelSpec back = read_model(through_text(to_json(m)), "rt.json");
  check_same(back, m);
}

TEST_CASE("round trip: a uniform model read from a file comes back as one stage", "[json]") {
  const json doc = parse_json_text(R"({"schema_version": 1, "name": "u", "seq": 64, "vocab": 100,
      "layers": 3, "hidden": 32, "heads": 2})",
                                   "u.json");
  const ModelSpec m = read_model(doc, "u.json");
  const json j = to_json(m);
  CHECK(j.at("stages").size() == 1);
  CHECK(j.at("stages").at(0).at("ffn") == 128);  // 4 * 32, written out
  check_same(read_model(through_text(j), "rt.json"), m);
}

TEST_CASE("round trip: a cluster with an inter-node link", "[json]") {
  ClusterSpec c;
  c.name = "rt";
  c.description = "desc";
  c.source = "src";
  c.nodes = 4;
  c.devices_per_node = 8;
  c.device_name = "GPU";
  c.memory_bytes = 81559.0 * kMi;  // 85520809984
  c.reserve_bytes = kGi;
  c.compute = base_compute();
  c.intra = {5e-6, 370e9};
  c.inter = LinkSpec{1e-5, 50e9};
  c.overlap = {false, 1.05};
  c.calibration = "lab-2024";
  const ClusterSpec back = read_cluster(through_text(to_json(c)), "rt.json");
  check_same(back, c);
  CHECK(back.memory_bytes == 85520809984.0);
}

TEST_CASE("round trip: a calibration with segments", "[json]") {
  Calibration cal;
  cal.name = "rt-cal";
  cal.provenance = {{"host", "h"}, {"date", "2024-01-01"}, {"versions", {{"nccl", "2.18"}}}};
  // Betas are powers of two so that 1 / (1 / beta) is exact.
  cal.allgather = {{65536.0, 1e-5, std::ldexp(1.0, -30)}, {kInf, 2e-5, std::ldexp(1.0, -33)}};
  cal.reducescatter = {{4096.0, 3e-6, std::ldexp(1.0, -29)},
                       {16.0 * kMi, 7e-6, std::ldexp(1.0, -31)},
                       {kInf, 9e-6, std::ldexp(1.0, -34)}};
  cal.allreduce = {{kInf, 4e-5, std::ldexp(1.0, -32)}};
  cal.compute = base_compute();
  cal.compute->gemm_efficiency = 0.55;
  cal.interference = 1.3;
  const Calibration back = read_calibration(through_text(to_json(cal)), "rt.json", ComputeSpec{});
  check_same(back, cal);
}

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

// ---------------------------------------------------------------------------------------------------
// Built-in data

namespace {

std::vector<std::string> json_stems(const std::string& kind) {
  std::vector<std::string> out;
  const auto dir = std::filesystem::path(OSDP_TEST_DATA_DIR) / kind;
  if (!std::filesystem::exists(dir)) return out;  // git keeps no empty folder (data/calibrations)
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> catalog_names(const std::string& kind) {
  std::vector<std::string> out;
  for (const auto& e : list_catalog(kind)) out.push_back(e.name);
  return out;
}

}  // namespace

TEST_CASE("the catalog lists every built-in file, sorted by name", "[json]") {
  // The test runs with OSDP_DATA_DIR pointing at the source tree's data/.
  const char* env = std::getenv("OSDP_DATA_DIR");
  REQUIRE(env != nullptr);
  CHECK(data_dir() == env);
  CHECK(std::filesystem::equivalent(data_dir(), OSDP_TEST_DATA_DIR));
  for (const std::string kind : {"models", "clusters", "calibrations"}) {
    INFO(kind);
    const auto names = catalog_names(kind);
    CHECK(names == json_stems(kind));
    CHECK(std::is_sorted(names.begin(), names.end()));
  }
  CHECK(catalog_names("models").size() >= 1);
  CHECK(catalog_names("clusters").size() >= 1);
}

TEST_CASE("every built-in model loads, by name and by path, and survives a round trip", "[json]") {
  const auto entries = list_catalog("models");
  REQUIRE_FALSE(entries.empty());
  for (const auto& entry : entries) {
    INFO(entry.path);
    const ModelSpec m = load_model(entry.name);
    CHECK(m.name == entry.name);  // the file's "name" is its file name
    CHECK(m.total_layers() >= 1);
    for (const auto& s : m.stages) CHECK(s.hidden % s.heads == 0);
    check_same(load_model(entry.path), m);
    check_same(read_model(through_text(to_json(m)), "rt.json"), m);
    // The lowering has an embedding, an attention and an MLP per layer, a projection between stages of
    // different widths and a head when untied.
    int projections = 0;
    for (std::size_t i = 1; i < m.stages.size(); ++i)
      projections += m.stages[i].hidden != m.stages[i - 1].hidden;
    const std::size_t expected_ops = 1 + 2 * static_cast<std::size_t>(m.total_layers()) +
                                     static_cast<std::size_t>(projections) + (m.tied_embeddings ? 0 : 1);
    CHECK(lower(m).operators.size() == expected_ops);
  }
}

TEST_CASE("every built-in cluster loads, by name and by path, and survives a round trip", "[json]") {
  const auto entries = list_catalog("clusters");
  REQUIRE_FALSE(entries.empty());
  for (const auto& entry : entries) {
    INFO(entry.path);
    const ClusterSpec c = load_cluster(entry.name);
    CHECK(c.name == entry.name);
    CHECK(c.world_size() >= 1);
    CHECK(c.reserve_bytes < c.memory_bytes);
    CHECK((c.nodes == 1 || c.inter.has_value()));
    check_same(load_cluster(entry.path), c);
    check_same(read_cluster(through_text(to_json(c)), "rt.json"), c);
  }
}

TEST_CASE("every built-in calibration loads", "[json]") {
  // data/calibrations may be empty; whatever is there must load against the spec-sheet defaults.
  for (const auto& entry : list_catalog("calibrations")) {
    INFO(entry.path);
    const Calibration cal = load_calibration(entry.name, ComputeSpec{});
    CHECK(cal.name == entry.name);
  }
  CHECK(catalog_names("calibrations") == json_stems("calibrations"));
}

TEST_CASE("built-in descriptions hold the figures their files state", "[json]") {
  const ModelSpec gpt2 = load_model("gpt2-1.5b");
  REQUIRE(gpt2.stages.size() == 1);
  CHECK(gpt2.stages[0].layers == 48);
  CHECK(gpt2.stages[0].hidden == 1600);
  CHECK(gpt2.stages[0].heads == 25);
  CHECK(gpt2.stages[0].ffn == 6400);  // 4 * 1600
  CHECK(gpt2.seq == 1024);
  CHECK(gpt2.vocab == 50257);
  CHECK(gpt2.precision == Precision::kFp32);
  CHECK(gpt2.tied_embeddings);

  const ModelSpec ic = load_model("ic-4x1024-2048-4096");
  REQUIRE(ic.stages.size() == 3);
  CHECK(ic.stages[0].hidden == 1024);
  CHECK(ic.stages[1].hidden == 2048);
  CHECK(ic.stages[2].hidden == 4096);
  CHECK(ic.total_layers() == 12);

  const ModelSpec opt = load_model("opt-30b-8l");
  CHECK(opt.stages[0].hidden == 7168);
  CHECK(opt.stages[0].heads == 56);
  CHECK(opt.stages[0].ffn == 28672);  // given in the file (= 4 * 7168)
  CHECK(opt.precision == Precision::kMixed);
  CHECK_FALSE(opt.dropout);

  const ClusterSpec h100 = load_cluster("h100-2x8");
  CHECK(h100.world_size() == 16);
  CHECK(h100.memory_bytes == 85520809984.0);  // 81559 MiB = 81559 * 1048576
  CHECK(h100.reserve_bytes == 1073741824.0);  // 1 GiB
  CHECK(h100.intra.bandwidth_bytes_per_s == 370e9);
  REQUIRE(h100.inter.has_value());
  CHECK(h100.inter->bandwidth_bytes_per_s == 50e9);  // 400 Gb/s / 8
  CHECK(h100.inter->alpha_s == rel(1e-5));
  CHECK(h100.compute.bf16_flops_per_s == 989e12);

  const ClusterSpec titan = load_cluster("titan-rtx-8");
  CHECK(titan.memory_bytes == 25769803776.0);  // 24 * 2^30
  CHECK(titan.reserve_bytes == 838860800.0);   // 800 * 2^20
  CHECK(titan.compute.fp32_flops_per_s == rel(16.3e12));
  CHECK(titan.intra.bandwidth_bytes_per_s == 12e9);
  CHECK_FALSE(titan.inter.has_value());
}

TEST_CASE("unknown built-in names list the known ones", "[json]") {
  const auto e = input_error([] { load_model("gpt-9000"); });
  CHECK(e.file == "gpt-9000");
  CHECK(e.pointer == "");
  CHECK_THAT(e.what, Contains("not a file and not a built-in model name") && Contains("gpt2-1.5b"));

  const auto missing = input_error([] { load_cluster("no/such/cluster.json"); });
  CHECK(missing.file == "no/such/cluster.json");
  CHECK_THAT(missing.what, Contains("no such file"));
}
