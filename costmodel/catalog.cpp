#include "costmodel/catalog.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"

#ifndef OSDP_SOURCE_DATA_DIR
#define OSDP_SOURCE_DATA_DIR ""
#endif
#ifndef OSDP_INSTALL_DATA_DIR
#define OSDP_INSTALL_DATA_DIR ""
#endif

namespace fs = std::filesystem;

namespace osdp::costmodel {

std::string data_dir() {
  if (const char* env = std::getenv("OSDP_DATA_DIR"); env && *env) return env;
  for (const char* d : {OSDP_SOURCE_DATA_DIR, OSDP_INSTALL_DATA_DIR})
    if (*d && fs::is_directory(fs::path(d) / "models")) return d;
  return OSDP_SOURCE_DATA_DIR;
}

std::vector<CatalogEntry> list_catalog(const std::string& kind) {
  std::vector<CatalogEntry> out;
  const fs::path dir = fs::path(data_dir()) / kind;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".json")
      out.push_back({e.path().stem().string(), e.path().string()});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

std::string resolve(const std::string& kind, const std::string& name) {
  const bool looks_like_path =
      name.find('/') != std::string::npos || (name.size() > 5 && name.substr(name.size() - 5) == ".json");
  if (looks_like_path || fs::is_regular_file(name)) {
    if (!fs::is_regular_file(name)) throw InputError(name, "", "no such file");
    return name;
  }
  for (const auto& e : list_catalog(kind))
    if (e.name == name) return e.path;
  std::string known;
  for (const auto& e : list_catalog(kind)) known += (known.empty() ? "" : ", ") + e.name;
  throw InputError(name, "",
                   fmt::format("not a file and not a built-in {} name (built-in: {}; data directory {})",
                               kind.substr(0, kind.size() - 1), known.empty() ? "none" : known, data_dir()));
}

ModelSpec load_model(const std::string& name) {
  const std::string path = resolve("models", name);
  return read_model(load_json_file(path), path);
}

ClusterSpec load_cluster(const std::string& name) {
  const std::string path = resolve("clusters", name);
  return read_cluster(load_json_file(path), path);
}

Calibration load_calibration(const std::string& name, const ComputeSpec& base) {
  const std::string path = resolve("calibrations", name);
  return read_calibration(load_json_file(path), path, base);
}

}  // namespace osdp::costmodel
