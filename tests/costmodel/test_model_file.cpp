// Model files (model): values and defaults of a model with stages and of a uniform one; unknown keys,
// missing keys, wrong types and out-of-range values are osdp::InputError naming the file and the JSON
// pointer; to_json followed by read_model gives the same model.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/json_reader.hpp"
#include "costmodel/model.hpp"
#include "json_fixtures.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using nlohmann::json;
using namespace osdp::costmodel;
using namespace osdp::costmodel::json_fixtures;

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
    expected = "expected one of \"fp32\", \"mixed\", \"bf16\", \"bf16-reduce-bf16\", got \"fp16\"";
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
    expected = "hidden size 128 is not divisible by 7 heads (give \"head_dim\")";
  }
  SECTION("more heads than hidden") {
    doc["stages"][0]["heads"] = 128;  // 64 % 128 = 64
    pointer = "/stages/0/heads";
    expected = "hidden size 64 is not divisible by 128 heads (give \"head_dim\")";
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
