#include "cli/commands.hpp"

#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/units.hpp"
#include "costmodel/workload.hpp"
#include "osdp_version.hpp"
#ifdef OSDP_HAVE_CUDA_BACKEND
#include "validate/cuda/cuda_device.hpp"
#endif
#ifdef OSDP_HAVE_NCCL_BACKEND
#include "validate/cuda/nccl_backend.hpp"
#endif

namespace osdp::cli {

// What is compiled in, and for CUDA and NCCL also what this machine has at run time (the libraries
// found, the driver, the GPUs), so that a cluster's `osdp --version` says whether --backend nccl can run.
std::string version_string() {
  std::string backends = "mpi";
  std::string cuda = "not compiled in", nccl = "not compiled in";
#ifdef OSDP_HAVE_CUDA_BACKEND
  const validate::CudaVersions v = validate::cuda_versions();
  const std::string why = validate::cuda_unavailable_reason();
  cuda = fmt::format("compiled in (toolkit {}); runtime {}, cuBLAS {}, driver {}; {}", OSDP_CUDA_VERSION,
                     validate::format_cuda_version(v.runtime), validate::format_cublas_version(v.cublas),
                     v.driver == 0 ? std::string("none") : validate::format_cuda_version(v.driver),
                     why.empty() ? fmt::format("{} GPU(s)", validate::cuda_device_count()) : why);
#endif
#ifdef OSDP_HAVE_NCCL_BACKEND
  int nccl_runtime = 0;
  if (ncclGetVersion(&nccl_runtime) != ncclSuccess) nccl_runtime = 0;
  nccl = fmt::format("compiled in ({}); library {}", validate::format_nccl_version(NCCL_VERSION_CODE),
                     nccl_runtime == 0 ? std::string("?") : validate::format_nccl_version(nccl_runtime));
  backends += ", nccl";
#endif
  if (std::string(OSDP_HAVE_MPI_STR) != "ON") backends = "none (built without MPI)";
  return fmt::format("osdp {} (commit {})\nMPI: {}\nCUDA: {}\nNCCL: {}\nbackends: {}", OSDP_VERSION,
                     OSDP_GIT_HASH, std::string(OSDP_HAVE_MPI_STR) == "ON" ? "yes" : "no", cuda, nccl,
                     backends);
}

Action add_models_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "Print a JSON array: name, parameters, layers, hidden, ...");
  return [json]() {
    nlohmann::json out = nlohmann::json::array();
    std::vector<std::array<std::string, 6>> rows;
    for (const auto& e : costmodel::list_catalog("models")) {
      const auto m = costmodel::load_model(e.path);
      const auto w = costmodel::lower(m);
      std::string hidden;
      for (const auto& s : m.stages) hidden += (hidden.empty() ? "" : "/") + std::to_string(s.hidden);
      out.push_back(
          {{"name", e.name},
           {"parameters", w.parameters()},
           {"layers", m.total_layers()},
           {"hidden", m.stages.size() == 1 ? nlohmann::json(m.stages[0].hidden) : nlohmann::json(hidden)},
           {"seq", m.seq},
           {"vocab", m.vocab},
           {"precision", costmodel::to_string(m.precision)},
           {"description", m.description}});
      rows.push_back({e.name, fmt::format("{:.3f}B", static_cast<double>(w.parameters()) / 1e9),
                      std::to_string(m.total_layers()), hidden, costmodel::to_string(m.precision),
                      m.description});
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
               "Print a JSON array: name, nodes, devices_per_node, device, memory_bytes, ...");
  return [json]() {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : costmodel::list_catalog("clusters")) {
      const auto c = costmodel::load_cluster(e.path);
      out.push_back({{"name", e.name},
                     {"nodes", c.nodes},
                     {"devices_per_node", c.devices_per_node},
                     {"world_size", c.world_size()},
                     {"device", c.device_name},
                     {"memory_bytes", c.memory_bytes},
                     {"description", c.description}});
      if (!*json)
        std::cout << fmt::format("{:<16} {:>2} x {:<2} {:<22} {:>10}  {}\n", e.name, c.nodes,
                                 c.devices_per_node, c.device_name, costmodel::format_bytes(c.memory_bytes),
                                 c.description);
    }
    if (*json) std::cout << out.dump(2) << "\n";
    return kExitOk;
  };
}

}  // namespace osdp::cli
