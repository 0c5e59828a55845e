// Built-in data (catalog): the catalog lists every file under data/, every built-in model, cluster and
// calibration loads by name and by path and survives a round trip, and the built-in descriptions hold the
// figures their files state; unknown names are osdp::InputError listing the known ones. $OSDP_DATA_DIR
// adds to the built-ins: the union is listed, its names shadow built-ins, a bad file is listed and fails
// only when loaded.
// Byte counts are derived in comments: Ki = 1024, Mi = 2^20 = 1048576, Gi = 2^30 = 1073741824.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
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
  // The built-in directory is that same data/ (the build's source tree), so the union with itself is
  // one directory and no name appears twice.
  const char* env = std::getenv("OSDP_DATA_DIR");
  REQUIRE(env != nullptr);
  CHECK(std::filesystem::equivalent(builtin_data_dir(), OSDP_TEST_DATA_DIR));
  REQUIRE(data_dirs().size() == 1);
  CHECK(data_dirs()[0] == env);
  CHECK(data_dir() == env);
  for (const auto& e : list_catalog("models")) {
    INFO(e.name);
    CHECK(e.builtin);
    CHECK(e.shadows.empty());
    CHECK(std::filesystem::equivalent(
        e.path, std::filesystem::path(OSDP_TEST_DATA_DIR) / "models" / (e.name + ".json")));
  }
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

// ---------------------------------------------------------------------------------------------------
// $OSDP_DATA_DIR adds to the built-ins

namespace {

namespace fs = std::filesystem;

// Sets OSDP_DATA_DIR for one test and puts back what was there.
class ScopedDataDir {
 public:
  explicit ScopedDataDir(const std::string& value) {
    if (const char* old = std::getenv("OSDP_DATA_DIR")) old_ = old;
    setenv("OSDP_DATA_DIR", value.c_str(), 1);
  }
  ~ScopedDataDir() {
    if (old_)
      setenv("OSDP_DATA_DIR", old_->c_str(), 1);
    else
      unsetenv("OSDP_DATA_DIR");
  }
  ScopedDataDir(const ScopedDataDir&) = delete;
  ScopedDataDir& operator=(const ScopedDataDir&) = delete;

 private:
  std::optional<std::string> old_;
};

// A fresh directory under the system's temporary directory, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "osdp-catalog-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  // Writes TEXT to <dir>/<kind>/<name>.json and returns that path.
  std::string write(const std::string& kind, const std::string& name, const std::string& text) const {
    fs::create_directories(path_ / kind);
    const fs::path file = path_ / kind / (name + ".json");
    std::ofstream(file) << text;
    return file.string();
  }

 private:
  fs::path path_;
};

// gpt2-1.5b's description with another name and layer count.
std::string gpt_model_text(const std::string& name, int layers) {
  json j = load_json_file((fs::path(OSDP_TEST_DATA_DIR) / "models" / "gpt2-1.5b.json").string());
  j["name"] = name;
  j["layers"] = layers;
  return j.dump(2);
}

const CatalogEntry* find_entry(const std::vector<CatalogEntry>& entries, const std::string& name) {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("OSDP_DATA_DIR adds names to the built-ins and shadows built-ins of the same name", "[json]") {
  TempDir tmp;
  const std::string added = tmp.write("models", "my-model", gpt_model_text("my-model", 3));
  const std::string shadow = tmp.write("models", "gpt2-1.5b", gpt_model_text("gpt2-1.5b", 2));
  const std::string broken = tmp.write("models", "broken", R"({"schema_version": 1, "name": )");
  const std::string typo = tmp.write("models", "typo", R"({"schema_version": 1, "name": "typo", "seq": 128,
    "vocab": 1000, "layers": 2, "hidden": 64, "heads": 4, "precision": "fp32", "layerz": 3})");
  const std::string builtin_gpt2 = (fs::path(OSDP_TEST_DATA_DIR) / "models" / "gpt2-1.5b.json").string();
  // The test's environment names the source tree's data/; the built-in directory is that same one.
  ScopedDataDir env(tmp.path().string());

  REQUIRE(data_dirs().size() == 2);
  CHECK(data_dirs()[0] == tmp.path().string());
  CHECK(fs::equivalent(data_dirs()[1], OSDP_TEST_DATA_DIR));

  // The union: every built-in name once, plus the three new ones, sorted.
  std::vector<std::string> expected = json_stems("models");
  for (const char* n : {"broken", "my-model", "typo"}) expected.push_back(n);
  std::sort(expected.begin(), expected.end());
  const auto entries = list_catalog("models");
  CHECK(catalog_names("models") == expected);

  const CatalogEntry* gpt2 = find_entry(entries, "gpt2-1.5b");
  REQUIRE(gpt2 != nullptr);
  CHECK(gpt2->path == shadow);
  CHECK(gpt2->dir == tmp.path().string());
  CHECK_FALSE(gpt2->builtin);
  REQUIRE(gpt2->shadows.size() == 1);
  CHECK(fs::equivalent(gpt2->shadows[0], builtin_gpt2));

  const CatalogEntry* mine = find_entry(entries, "my-model");
  REQUIRE(mine != nullptr);
  CHECK(mine->path == added);
  CHECK_FALSE(mine->builtin);
  CHECK(mine->shadows.empty());

  const CatalogEntry* bert = find_entry(entries, "bert-large");
  REQUIRE(bert != nullptr);
  CHECK(bert->builtin);
  CHECK(fs::equivalent(bert->path, fs::path(OSDP_TEST_DATA_DIR) / "models" / "bert-large.json"));

  // By name, the first file on the search path is the one loaded.
  CHECK(load_model("gpt2-1.5b").total_layers() == 2);
  CHECK(load_model("my-model").total_layers() == 3);
  CHECK(load_model("bert-large").total_layers() == 24);
  CHECK(load_model(builtin_gpt2).total_layers() == 48);  // a path is still that file

  // A bad file is listed (the catalog does not read files) and fails when loaded by name, with the
  // reader's error naming the file and, for a key it does not know, the JSON pointer.
  const auto bad_json = input_error([] { load_model("broken"); });
  CHECK(bad_json.file == broken);
  CHECK_THAT(bad_json.what, StartsWith(broken) && Contains("invalid JSON"));
  const auto bad_key = input_error([] { load_model("typo"); });
  CHECK(bad_key.file == typo);
  CHECK(bad_key.pointer == "/layerz");

  // An unknown name lists the union and the directories searched.
  const auto unknown = input_error([] { load_model("gpt-9000"); });
  CHECK_THAT(unknown.what, Contains("my-model") && Contains("gpt2-1.5b") && Contains(tmp.path().string()));
}

TEST_CASE("OSDP_DATA_DIR is a colon-separated list, searched in order, each directory once", "[json]") {
  TempDir first, second;
  const std::string a = first.write("clusters", "cpu-2", R"({"schema_version": 1})");
  const std::string b = second.write("clusters", "cpu-2", R"({"schema_version": 1})");
  const std::string only_second = second.write("clusters", "only-here", R"({"schema_version": 1})");
  // Empty entries are ignored; the second spelling of `first` and the built-in directory named again
  // are searched once, in the place they first appear.
  ScopedDataDir env(first.path().string() + "::" + OSDP_TEST_DATA_DIR + ":" + second.path().string() + ":" +
                    (first.path() / ".").string());

  const auto dirs = data_dirs();
  REQUIRE(dirs.size() == 3);
  CHECK(dirs[0] == first.path().string());
  CHECK(fs::equivalent(dirs[1], OSDP_TEST_DATA_DIR));
  CHECK(dirs[2] == second.path().string());
  CHECK(data_dir() == dirs[0] + ":" + dirs[1] + ":" + dirs[2]);

  const auto entries = list_catalog("clusters");
  const CatalogEntry* cpu2 = find_entry(entries, "cpu-2");
  REQUIRE(cpu2 != nullptr);
  CHECK(cpu2->path == a);
  CHECK_FALSE(cpu2->builtin);
  REQUIRE(cpu2->shadows.size() == 2);  // the built-in, then the second directory's
  CHECK(fs::equivalent(cpu2->shadows[0], fs::path(OSDP_TEST_DATA_DIR) / "clusters" / "cpu-2.json"));
  CHECK(cpu2->shadows[1] == b);

  const CatalogEntry* here = find_entry(entries, "only-here");
  REQUIRE(here != nullptr);
  CHECK(here->path == only_second);
  CHECK(here->dir == second.path().string());

  const CatalogEntry* titan = find_entry(entries, "titan-rtx-8");
  REQUIRE(titan != nullptr);
  CHECK(titan->builtin);  // named in OSDP_DATA_DIR, and still the built-in directory
  CHECK(titan->shadows.empty());
  CHECK(entries.size() == json_stems("clusters").size() + 1);
}
