#include "costmodel/catalog.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

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

namespace {

struct DataDir {
  std::string path;
  bool builtin = false;
};

bool same_dir(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  return fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
}

std::vector<DataDir> search_path() {
  std::vector<DataDir> out;
  const std::string builtin = builtin_data_dir();
  auto add = [&](const std::string& d) {
    if (d.empty()) return;
    for (const auto& seen : out)
      if (same_dir(seen.path, d)) return;
    out.push_back({d, !builtin.empty() && same_dir(d, builtin)});
  };
  if (const char* env = std::getenv("OSDP_DATA_DIR"); env && *env) {
    const std::string list = env;
    for (std::size_t begin = 0; begin <= list.size();) {
      const std::size_t colon = std::min(list.find(':', begin), list.size());
      add(list.substr(begin, colon - begin));
      begin = colon + 1;
    }
  }
  add(builtin);
  return out;
}

}  // namespace

std::string builtin_data_dir() {
  for (const char* d : {OSDP_SOURCE_DATA_DIR, OSDP_INSTALL_DATA_DIR})
    if (*d && fs::is_directory(fs::path(d) / "models")) return d;
  return OSDP_SOURCE_DATA_DIR;
}

std::vector<std::string> data_dirs() {
  std::vector<std::string> out;
  for (const auto& d : search_path()) out.push_back(d.path);
  return out;
}

std::string data_dir() {
  std::string out;
  for (const auto& d : data_dirs()) out += (out.empty() ? "" : ":") + d;
  return out;
}

std::vector<CatalogEntry> list_catalog(const std::string& kind) {
  std::map<std::string, CatalogEntry> by_name;  // sorted by name
  for (const auto& d : search_path()) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(d.path) / kind, ec))
      if (e.is_regular_file(ec) && e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::string name = f.stem().string();
      if (auto it = by_name.find(name); it != by_name.end())
        it->second.shadows.push_back(f.string());
      else
        by_name.emplace(name, CatalogEntry{name, f.string(), d.path, d.builtin, {}});
    }
  }
  std::vector<CatalogEntry> out;
  out.reserve(by_name.size());
  for (auto& [name, e] : by_name) out.push_back(std::move(e));
  return out;
}

std::string resolve(const std::string& kind, const std::string& name) {
  const bool looks_like_path =
      name.find('/') != std::string::npos || (name.size() > 5 && name.substr(name.size() - 5) == ".json");
  if (looks_like_path || fs::is_regular_file(name)) {
    if (!fs::is_regular_file(name)) throw InputError(name, "", "no such file");
    return name;
  }
  const auto entries = list_catalog(kind);
  for (const auto& e : entries)
    if (e.name == name) return e.path;
  std::string known;
  for (const auto& e : entries) known += (known.empty() ? "" : ", ") + e.name;
  throw InputError(name, "",
                   fmt::format("not a file and not a built-in {} name (known: {}; searched {})",
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
