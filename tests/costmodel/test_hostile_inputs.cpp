// Hostile inputs at the JSON layer (json_reader, bounds): documents nested past the limit, files too
// large or not files at all, values printed briefly in messages, misspelled keys named with a
// did-you-mean, one kind of file passed as another, names with control or bidirectional characters,
// and hardware figures no machine has. Each is an InputError naming the file and the JSON pointer;
// none crashes or prints a hostile value whole.
#include <catch2/catch.hpp>

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

namespace {

// `depth` arrays nested inside one another, as the value of "schema_version".
std::string nested(int depth) {
  return "{\"schema_version\": " + std::string(static_cast<std::size_t>(depth), '[') +
         std::string(static_cast<std::size_t>(depth), ']') + "}";
}

std::string temp_dir() {
  const auto dir = std::filesystem::temp_directory_path() / ("osdp-hostile-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("JSON nested past the limit is an input error, at any depth, without a crash", "[json][hostile]") {
  // The object is level 1, so kMaxJsonDepth - 1 arrays inside it reach the limit exactly.
  CHECK_NOTHROW(parse_json_text(nested(kMaxJsonDepth - 1), "ok.json"));
  const auto e = input_error([] { parse_json_text(nested(kMaxJsonDepth), "d.json"); });
  CHECK(e.file == "d.json");
  CHECK_THAT(e.what, Contains("nested deeper than 64 levels"));
  CHECK_THAT(e.pointer, StartsWith("/schema_version/-/-"));
  // 100,000 levels: what crashed the stack when the message printed the value.
  CHECK_THAT(input_error([] { parse_json_text(nested(100000), "deep.json"); }).what,
             Contains("nested deeper than 64 levels"));
}

TEST_CASE("a file over the size limit, a directory and a missing file are input errors", "[json][hostile]") {
  const std::string dir = temp_dir();
  CHECK(input_error([&] { load_json_file(dir); }).what == dir + ": is a directory, not a JSON file");
  const std::string big = dir + "/big.json";
  {
    std::ofstream out(big);
    out << "[" << std::string(kMaxJsonBytes, ' ') << "]";
  }
  CHECK_THAT(input_error([&] { load_json_file(big); }).what, Contains("is larger than osdp reads (64.0 MiB"));
  CHECK_THAT(input_error([&] { parse_json_text(std::string(kMaxJsonBytes + 1, ' '), "t"); }).what,
             Contains("is larger than osdp reads"));
  CHECK_THAT(input_error([&] { load_json_file(dir + "/none.json"); }).what, Contains("cannot open"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("messages show values briefly: containers by size, long or control text cut and escaped",
          "[json][hostile]") {
  CHECK(brief_json(json::array({1, 2, 3})) == "an array of 3 elements");
  CHECK(brief_json(json::array({1})) == "an array of 1 element");
  CHECK(brief_json(json::object({{"a", 1}})) == "an object with 1 key");
  CHECK(brief_json(json(1.5)) == "1.5");
  CHECK(brief_json(json("a\nb")) == "\"a\\x0ab\"");
  CHECK(brief_json(json(std::string(100, 'x'))) == "\"" + std::string(40, 'x') + "...\"");
  // An integer field given a deep array reports its size, not its contents.
  json m = model_doc();
  m["seq"] = parse_json_text("[[[[1]]], 2]", "v");
  CHECK(input_error([&] { read_model(m, "m.json"); }).what ==
        "m.json:/seq: expected an integer, got an array of 2 elements");
}

TEST_CASE("a misspelled key is named beside the missing one, with a did-you-mean", "[json][hostile]") {
  json m = model_doc();
  json& stage = m["stages"][0];
  stage["hiden"] = stage["hidden"];
  stage.erase("hidden");
  const auto e = input_error([&] { read_model(m, "m.json"); });
  CHECK(e.pointer == "/stages/0/hidden");
  CHECK_THAT(e.what, Contains("required key is missing") &&
                         Contains("the file has \"hiden\" here: did you mean \"hidden\"?"));
  // An optional key misspelled: the unknown key says what it was probably meant to be.
  json c = cluster_doc();
  c["descripton"] = "x";
  CHECK_THAT(input_error([&] { read_cluster(c, "c.json"); }).what,
             Contains("unknown key \"descripton\" (did you mean \"description\"?"));
  // Nothing near: no guess.
  json far = cluster_doc();
  far["zzzzzz"] = 1;
  CHECK_THAT(input_error([&] { read_cluster(far, "c.json"); }).what, !Contains("did you mean"));
}

TEST_CASE("one kind of file passed as another says which kind it is", "[json][hostile]") {
  CHECK(input_error([] { read_model(cluster_doc(), "c.json"); }).what ==
        "c.json:/: this is a cluster file (it has \"devices_per_node\" and \"nodes\"), not a model file");
  CHECK_THAT(input_error([] { read_cluster(model_doc(), "m.json"); }).what,
             Contains("this is a model file") && Contains("not a cluster file"));
  CHECK_THAT(input_error([] { read_cluster(calibration_doc(), "k.json"); }).what,
             Contains("this is a calibration file"));
  CHECK_THAT(input_error([] { read_calibration(model_doc(), "m.json", ComputeSpec{}); }).what,
             Contains("this is a model file") && Contains("not a calibration file"));
  // A document of no known kind gets the usual missing-key message.
  CHECK_THAT(input_error([] {
               read_model(json::object({{"schema_version", 1}}), "x.json");
             }).what,
             Contains("required key is missing"));
}

TEST_CASE("names: printable UTF-8 of at most 128 bytes, no control or bidirectional characters",
          "[json][hostile]") {
  CHECK(name_problem("gpt2-1.5b") == "");
  CHECK(name_problem("M\xc3\xbcller GPU") == "");  // "Müller GPU": UTF-8 is fine
  CHECK(name_problem(std::string(128, 'a')) == "");
  CHECK_THAT(name_problem(std::string(129, 'a')), Contains("at most 128 bytes"));
  CHECK_THAT(name_problem(""), Contains("must not be empty"));
  CHECK_THAT(name_problem(std::string("a\0b", 3)), Contains("control characters (byte 0x00 at 1)"));
  CHECK_THAT(name_problem("a\nb"), Contains("control characters (byte 0x0a at 1)"));
  CHECK_THAT(name_problem("a\x7f"), Contains("control characters"));
  CHECK_THAT(name_problem("a\xc2\x85"), Contains("U+0085"));  // NEL, a C1 control
  CHECK_THAT(name_problem("a\xe2\x80\xae"
                          "b"),
             Contains("bidirectional controls (U+202E"));         // RLO
  CHECK_THAT(name_problem("\xe2\x81\xa6x"), Contains("U+2066"));  // LRI
  CHECK_THAT(name_problem("\xe2\x80\x8f"), Contains("U+200F"));   // RLM
  CHECK_THAT(name_problem("a\xff"), Contains("valid UTF-8"));
  CHECK_THAT(name_problem("\xc0\xaf"), Contains("valid UTF-8"));      // overlong '/'
  CHECK_THAT(name_problem("\xed\xa0\x80"), Contains("valid UTF-8"));  // a surrogate
  CHECK_THAT(name_problem("\xe2\x80"), Contains("valid UTF-8"));      // cut short
  // Every reader goes through it.
  json m = model_doc();
  m["name"] = std::string("a\0b", 3);
  CHECK_THAT(input_error([&] { read_model(m, "m.json"); }).what, StartsWith("m.json:/name: a name must not"));
  json c = cluster_doc();
  c["device"]["name"] = "x\ny";
  CHECK_THAT(input_error([&] { read_cluster(c, "c.json"); }).what, StartsWith("c.json:/device/name: a name"));
}

TEST_CASE("hardware figures outside physical bounds are input errors that give the range",
          "[json][hostile]") {
  const auto error_with = [](const std::function<void(json&)>& edit) {
    json c = cluster_doc();
    edit(c);
    return input_error([&] { read_cluster(c, "c.json"); });
  };
  auto e = error_with([](json& c) { c["device"]["memory"] = 1e308; });
  CHECK(e.pointer == "/device/memory");
  CHECK_THAT(e.what, Contains("a device's memory must be between 1 MiB and 1 PiB, got 8.88e+292 PiB"));
  e = error_with([](json& c) { c["links"]["intra"]["bandwidth"] = 1; });
  CHECK(e.what ==
        "c.json:/links/intra/bandwidth: a link's bandwidth must be between 1 MB/s and 100 PB/s, got 1 B/s "
        "(check the unit)");
  e = error_with([](json& c) { c["device"]["gemm_efficiency"] = 1e-6; });
  CHECK(e.what == "c.json:/device/gemm_efficiency: a GEMM efficiency must be between 0.01 and 1, got 1e-06");
  e = error_with([](json& c) { c["device"]["fp32_flops"] = "1FLOP/s"; });
  CHECK_THAT(e.what, Contains("a device's FLOP rate must be between 1 MFLOP/s and 1 EFLOP/s"));
  e = error_with([](json& c) { c["links"]["intra"]["alpha"] = "2s"; });
  CHECK_THAT(e.what, Contains("a latency must be between"));
  // The bounds themselves are accepted.
  json edge = cluster_doc();
  edge["device"]["memory"] = "1MiB";
  edge["device"]["reserve"] = 0;
  edge["device"]["gemm_efficiency"] = 0.01;
  edge["links"]["intra"]["bandwidth"] = "1MB/s";
  CHECK_NOTHROW(read_cluster(edge, "c.json"));
  // A calibration's segments too.
  json k = calibration_doc();
  k["collectives"]["allgather"][0]["bandwidth"] = 0.5;
  CHECK_THAT(input_error([&] { read_calibration(k, "k.json", ComputeSpec{}); }).what,
             Contains("a link's bandwidth must be between"));
}

TEST_CASE("a plain number where a size is meant hints at the unit", "[json][hostile]") {
  CHECK(bound_problem(8, UnitKind::kBytes, bounds::kDeviceMemory, "8") ==
        "a device's memory must be between 1 MiB and 1 PiB, got 8 B (a plain number is bytes: did you mean "
        "\"8GiB\"?)");
  CHECK_THAT(bound_problem(8, UnitKind::kBytes, bounds::kDeviceMemory, "8B"), Contains("(check the unit)"));
  CHECK(bound_problem(8.0 * 1024 * 1024 * 1024, UnitKind::kBytes, bounds::kDeviceMemory, "8GiB") == "");
}

TEST_CASE("a model of more than 100,000 layers in all is refused at the stage that passes the cap",
          "[json][hostile]") {
  json m = model_doc();
  m["stages"] = json::array();
  for (int i = 0; i < 3; ++i) m["stages"].push_back({{"layers", 40000}, {"hidden", 64}, {"heads", 4}});
  const auto e = input_error([&] { read_model(m, "m.json"); });
  CHECK(e.pointer == "/stages");
  CHECK(e.what ==
        "m.json:/stages: more than 100000 layers in all (reached at stage 2), more than osdp plans");
  // Exactly the cap reads.
  m["stages"][2]["layers"] = 20000;
  CHECK(read_model(m, "m.json").total_layers() == kMaxLayers);
}
