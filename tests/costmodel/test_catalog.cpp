// Built-in data (catalog): the catalog lists every file under data/, every built-in model, cluster and
// calibration loads by name and by path and survives a round trip, and the built-in descriptions hold the
// figures their files state; unknown names are osdp::InputError listing the known ones.
// Byte counts are derived in comments: Ki = 1024, Mi = 2^20 = 1048576, Gi = 2^30 = 1073741824.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/model.hpp"
#include "costmodel/workload.hpp"
#include "json_fixtures.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using nlohmann::json;
using namespace osdp::costmodel;
using namespace osdp::costmodel::json_fixtures;

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
