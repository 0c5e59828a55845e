#include "cli/commands.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/units.hpp"
#include "costmodel/workload.hpp"
#include "osdp_version.hpp"
#include "validate/backends.hpp"

namespace osdp::cli {

// What is compiled in, and for CUDA and NCCL also what this machine has at run time (the libraries
// found, the driver, the GPUs), so that a cluster's `osdp --version` says whether --backend nccl can
// run. The CUDA and NCCL lines come from the nccl backend's module, the one command besides a GPU
// job that loads it.
int test_delay_ms(const char* name) {
  const char* s = std::getenv(name);
  return s ? std::max(0, std::atoi(s)) : 0;
}

std::string version_string() {
  std::string cuda = "not compiled in", nccl = "not compiled in";
  for (const auto& [key, text] : validate::module_versions()) {
    if (key == "CUDA") cuda = text;
    if (key == "NCCL") nccl = text;
  }
  std::string backends;
  for (const std::string& b : validate::compiled_backends()) backends += (backends.empty() ? "" : ", ") + b;
  if (std::string(OSDP_HAVE_MPI_STR) != "ON") backends = "none (built without MPI)";
  return fmt::format("osdp {} (commit {})\nMPI: {}\nCUDA: {}\nNCCL: {}\nbackends: {}", OSDP_VERSION,
                     OSDP_GIT_HASH, std::string(OSDP_HAVE_MPI_STR) == "ON" ? "yes" : "no", cuda, nccl,
                     backends);
}

namespace {

// Where a listed entry comes from: its file, whether it is built-in or from $OSDP_DATA_DIR, and the
// files of the same name it hides (costmodel/catalog.hpp).
nlohmann::json source_fields(const costmodel::CatalogEntry& e) {
  return {{"path", e.path}, {"source", e.builtin ? "built-in" : "OSDP_DATA_DIR"}, {"shadows", e.shadows}};
}

// The text listing's note after the description: nothing for a built-in that hides nothing.
std::string source_note(const costmodel::CatalogEntry& e) {
  if (e.builtin && e.shadows.empty()) return "";
  std::string note = "  [" + e.path;
  for (const auto& s : e.shadows) note += ", shadows " + s;
  return note + "]";
}

// A file that does not load is left out of the listing and named on stderr, with the reader's error
// (file and JSON pointer); the others are still listed and the exit status stays 0.
void warn_skipped(const std::string& command, const Error& err) {
  std::cerr << fmt::format("osdp {}: warning: skipped {}\n", command, err.what());
}

}  // namespace

Action add_models_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json,
               "Print a JSON array: name, parameters, layers, hidden, ..., path, source, shadows");
  return [json]() {
    nlohmann::json out = nlohmann::json::array();
    std::vector<std::array<std::string, 6>> rows;
    for (const auto& e : costmodel::list_catalog("models")) {
      try {
        const auto m = costmodel::load_model(e.path);
        const auto w = costmodel::lower(m);
        std::string hidden;
        for (const auto& s : m.stages) hidden += (hidden.empty() ? "" : "/") + std::to_string(s.hidden);
        nlohmann::json row = {
            {"name", e.name},
            {"parameters", w.parameters()},
            {"layers", m.total_layers()},
            {"hidden", m.stages.size() == 1 ? nlohmann::json(m.stages[0].hidden) : nlohmann::json(hidden)},
            {"seq", m.seq},
            {"vocab", m.vocab},
            {"precision", costmodel::to_string(m.precision)},
            {"description", m.description}};
        row.update(source_fields(e));
        out.push_back(std::move(row));
        rows.push_back({e.name, fmt::format("{:.3f}B", static_cast<double>(w.parameters()) / 1e9),
                        std::to_string(m.total_layers()), hidden, costmodel::to_string(m.precision),
                        m.description + source_note(e)});
      } catch (const Error& err) {
        warn_skipped("models", err);
      }
    }
    if (*json) {
      std::cout << out.dump(2) << "\n";
    } else {
      std::cout << fmt::format("{:<16} {:>9} {:>6} {:>16} {:>9}  {}\n", "name", "params", "layers", "hidden",
                               "precision", "description");
      for (const auto& r : rows)
        std::cout << fmt::format("{:<16} {:>9} {:>6} {:>16} {:>9}  {}\n", r[0], r[1], r[2], r[3], r[4], r[5]);
    }
    return kExitOk;
  };
}

Action add_clusters_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json,
               "Print a JSON array: name, nodes, devices_per_node, device, memory_bytes, ..., path, source, "
               "shadows");
  return [json]() {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : costmodel::list_catalog("clusters")) {
      try {
        const auto c = costmodel::load_cluster(e.path);
        nlohmann::json row = {{"name", e.name},
                              {"nodes", c.nodes},
                              {"devices_per_node", c.devices_per_node},
                              {"world_size", c.world_size()},
                              {"device", c.device_name},
                              {"memory_bytes", c.memory_bytes},
                              {"description", c.description}};
        row.update(source_fields(e));
        out.push_back(std::move(row));
        if (!*json)
          std::cout << fmt::format("{:<16} {:>2} x {:<2} {:<22} {:>10}  {}{}\n", e.name, c.nodes,
                                   c.devices_per_node, c.device_name, costmodel::format_bytes(c.memory_bytes),
                                   c.description, source_note(e));
      } catch (const Error& err) {
        warn_skipped("clusters", err);
      }
    }
    if (*json) std::cout << out.dump(2) << "\n";
    return kExitOk;
  };
}

}  // namespace osdp::cli
