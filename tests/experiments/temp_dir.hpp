// A directory of its own under the system's temporary directory (PREFIX followed by the process id),
// removed with everything in it at the end; `write` puts a JSON document in it.
#pragma once

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

namespace osdp::experiments::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix)
      : path(std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string write(const std::string& name, const nlohmann::json& doc) const {
    const auto file = path / name;
    std::ofstream(file) << doc.dump(2) << '\n';
    return file.string();
  }
};

}  // namespace osdp::experiments::testing
