// Cluster files (cluster): values in base units and defaults; unknown keys, missing keys, wrong types and
// out-of-range values are osdp::InputError naming the file and the JSON pointer; to_json followed by
// read_cluster gives the same cluster.
// Byte counts are derived in comments: Ki = 1024, Mi = 2^20 = 1048576, Gi = 2^30 = 1073741824.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/cluster.hpp"
#include "costmodel/json_reader.hpp"
#include "json_fixtures.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using nlohmann::json;
using namespace osdp::costmodel;
using namespace osdp::costmodel::json_fixtures;

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
    expected = "a device's memory must be between 1 MiB and 1 PiB, got -1 GiB (check the unit)";
  }
  SECTION("zero memory as a number") {
    doc["device"]["memory"] = 0;
    pointer = "/device/memory";
    expected =
        "a device's memory must be between 1 MiB and 1 PiB, got 0 B (a plain number is bytes: did you mean "
        "\"0GiB\"?)";
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
    expected = "a latency must be between 0 s and 1 s, got 2 s (check the unit)";
  }
  SECTION("efficiency above 1") {
    doc["device"]["gemm_efficiency"] = 1.5;
    pointer = "/device/gemm_efficiency";
    expected = "a GEMM efficiency must be between 0.01 and 1, got 1.5";
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
