// Calibration files (calibration): fitted segments per collective, compute overrides over a base and
// interference; segments sorted by up_to, the last one unbounded; unknown keys, missing keys and
// out-of-range values are osdp::InputError naming the file and the JSON pointer; to_json followed by
// read_calibration gives the same calibration.
// Byte counts are derived in comments: Ki = 1024, Mi = 2^20 = 1048576, Gi = 2^30 = 1073741824.
#include <catch2/catch.hpp>

#include <cmath>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/json_reader.hpp"
#include "json_fixtures.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using nlohmann::json;
using namespace osdp::costmodel;
using namespace osdp::costmodel::json_fixtures;

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
    expected = "a link's bandwidth must be between 1 MB/s and 100 PB/s, got 0 B/s";
  }
  SECTION("a negative alpha") {
    doc["collectives"]["allgather"][0]["alpha"] = "-1us";
    pointer = "/collectives/allgather/0/alpha";
    expected = "a latency must be between 0 s and 1 s, got -1 us";
  }
  const auto e = input_error([&] { read_calibration(doc, "k.json", ComputeSpec{}); });
  CHECK(e.file == "k.json");
  CHECK(e.pointer == pointer);
  CHECK_THAT(e.what, StartsWith("k.json:" + pointer + ": ") && Contains(expected));
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

TEST_CASE("round trip: a calibration with the rings of a node and across nodes", "[json][groups]") {
  Calibration cal;
  cal.name = "rt-levels";
  cal.allgather = {{kInf, 2e-5, std::ldexp(1.0, -33)}};
  cal.per_node = 4;
  cal.intra.allgather = {{65536.0, 1e-6, std::ldexp(1.0, -35)}, {kInf, 3e-6, std::ldexp(1.0, -36)}};
  cal.intra.reducescatter = {{kInf, 2e-6, std::ldexp(1.0, -35)}};
  cal.inter.allreduce = {{kInf, 4e-5, std::ldexp(1.0, -30)}};
  const json j = to_json(cal);
  CHECK(j["levels"]["per_node"] == 4);
  CHECK(j["levels"]["intra"].size() == 2);  // allgather, reducescatter
  CHECK(j["levels"]["inter"].size() == 1);
  check_same(read_calibration(through_text(j), "rt.json", ComputeSpec{}), cal);
  // Without levels the file has no "levels" block, and reads back with none.
  Calibration flat = cal;
  flat.per_node = 0;
  flat.intra = {};
  flat.inter = {};
  CHECK_FALSE(to_json(flat).contains("levels"));
  check_same(read_calibration(through_text(to_json(flat)), "rt.json", ComputeSpec{}), flat);
}

TEST_CASE("calibration levels: errors name the key", "[json][groups]") {
  json doc = calibration_doc();
  doc["levels"] = {{"per_node", 2},
                   {"intra", {{"allgather", json::array({{{"alpha", "1us"}, {"bandwidth", "1GB/s"}}})}}}};
  CHECK(read_calibration(doc, "k.json", ComputeSpec{}).intra.allgather.size() == 1);
  std::string pointer, expected;
  SECTION("a missing per_node") {
    doc["levels"].erase("per_node");
    pointer = "/levels/per_node";
    expected = "required key is missing";
  }
  SECTION("a level that is neither intra nor inter") {
    doc["levels"]["world"] = json::object();
    pointer = "/levels/world";
    expected = "unknown key \"world\"";
  }
  SECTION("per_node of 0") {
    doc["levels"]["per_node"] = 0;
    pointer = "/levels/per_node";
    expected = "expected an integer in [1, 1048576], got 0";
  }
  SECTION("an unknown collective in a level") {
    doc["levels"]["intra"]["broadcast"] = json::array();
    pointer = "/levels/intra/broadcast";
    expected = "unknown key \"broadcast\"";
  }
  const auto e = input_error([&] { read_calibration(doc, "k.json", ComputeSpec{}); });
  CHECK(e.file == "k.json");
  CHECK(e.pointer == pointer);
  CHECK_THAT(e.what, Contains(expected));
}
