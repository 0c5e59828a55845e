// The JSON layer under every description file (json_reader): invalid text and unreadable files are
// osdp::InputError naming the file, line and column; JsonReader rejects unknown keys, reads quantities with
// units and names the JSON pointer (RFC 6901) of each error; every description needs schema_version 1 and
// must be a JSON object.
#include <catch2/catch.hpp>

#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/model.hpp"
#include "json_fixtures.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using nlohmann::json;
using namespace osdp::costmodel;
using namespace osdp::costmodel::json_fixtures;

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
// Common to model, cluster and calibration files

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
