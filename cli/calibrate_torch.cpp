// osdp calibrate --backend torch: the torch job's result read back (cli/calibrate_torch.hpp).
#include "cli/calibrate_torch.hpp"

#include <fmt/format.h>

#include "costmodel/provenance.hpp"

namespace osdp::cli {

costmodel::CalibrationRun torch_measurements(const nlohmann::json& result, int world) {
  costmodel::CalibrationRun run;
  run.world = world;
  for (const auto& m : result.at("measurements")) {
    costmodel::Measurement x;
    x.sweep = m.at("sweep").get<std::string>();
    x.bytes = m.at("bytes").get<double>();
    x.m = m.at("m").get<std::int64_t>();
    x.n = m.at("n").get<std::int64_t>();
    x.k = m.at("k").get<std::int64_t>();
    x.count = m.at("count").get<std::int64_t>();
    x.seconds = m.at("seconds").get<double>();
    x.min_s = m.at("min_s").get<double>();
    x.max_s = m.at("max_s").get<double>();
    x.repeats = m.at("repeats").get<int>();
    x.batch = m.at("batch").get<int>();
    if (m.contains("times_s")) x.times_s = m.at("times_s").get<std::vector<double>>();
    run.measurements.push_back(std::move(x));
  }
  return run;
}

void set_torch_provenance(costmodel::CalibrationRun& run, const nlohmann::json& result,
                          const validate::TorchJobOptions& torch, const validate::CalibrateOptions& options,
                          const std::optional<std::array<double, 3>>& load_at_start,
                          const std::string& measurements_file) {
  nlohmann::json& p = run.calibration.provenance;
  const nlohmann::json machine = costmodel::machine(run.world, 1);
  p["host"] = machine["hostname"];
  p["date"] = costmodel::utc_now();
  p["machine"] = machine;
  if (load_at_start) p["machine"]["load_average"] = *load_at_start;
  p["backend"] = fmt::format("torch ({})", result.value("backend", "?"));
  p["backend_version"] = fmt::format("torch {}", result.value("torch", "?"));
  const int threads = result.value("threads", 0);
  p["device"] =
      fmt::format("{} ({} thread{} per rank)", result.value("device", "?"), threads, threads == 1 ? "" : "s");
  if (const auto g = result.find("gemm_operands"); g != result.end())
    p["gemm_operands"] = validate::gemm_operands_provenance(g->value("rotation_bytes", 0.0),
                                                            g->value("last_level_cache_bytes", 0.0));
  p["python"] = torch.python;
  p["world_size"] = run.world;
  p["tool_version"] = options.tool_version;
  p["options"] = options.to_json();
  p["wall_s"] = run.wall_s;
  p["interference"] = "not measured: the torch backend runs each rank's collectives on its compute stream";
  p["measurements_file"] = measurements_file;
}

}  // namespace osdp::cli
