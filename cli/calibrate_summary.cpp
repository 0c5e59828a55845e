#include "cli/calibrate_summary.hpp"

#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "costmodel/collective.hpp"
#include "costmodel/units.hpp"

namespace osdp::cli {

std::string csv_path(const std::string& json_path) {
  const std::string stem = json_path.size() > 5 && json_path.ends_with(".json")
                               ? json_path.substr(0, json_path.size() - 5)
                               : json_path;
  return stem + ".measurements.csv";
}

using costmodel::format_bandwidth;
using costmodel::format_bytes;
using costmodel::format_seconds;

namespace {

std::string pct(double x) {
  return fmt::format("{:.1f}%", 100 * x);
}

}  // namespace

void print_summary(const costmodel::CalibrationRun& run, const std::string& path) {
  const auto& p = run.calibration.provenance;
  const std::string version = p.value("backend_version", "?");
  std::cout << fmt::format("osdp calibrate: {} rank{} ({}, {}), {} points in {:.1f} s\n", run.world,
                           run.world == 1 ? "" : "s", p.value("backend", "?"),
                           version.substr(0, version.find(',')), run.measurements.size(), run.wall_s)
            << fmt::format("  written to {} (raw points in {})\n", path, csv_path(path));
  if (run.world < 2)
    std::cout << "  collectives    none on one rank\n";
  else
    std::cout << fmt::format("  {:<21} {:<23} {:>10} {:>12} {:>9} {:>6}\n", "collective", "sizes (S)",
                             "alpha", "bandwidth", "residual", "points");
  auto rows = [](const std::string& name, const std::vector<costmodel::FitSegment>& segs) {
    for (const auto& s : segs) {
      const std::string range = fmt::format("{} - {}", format_bytes(s.from_bytes),
                                            std::isinf(s.up_to_bytes) ? "" : format_bytes(s.up_to_bytes));
      std::cout << fmt::format("  {:<21} {:<23} {:>10} {:>12} {:>9} {:>6}\n", name, range,
                               format_seconds(s.alpha_s),
                               s.beta_s_per_byte > 0 ? format_bandwidth(1 / s.beta_s_per_byte) : "inf",
                               pct(s.residual_rms), s.points);
    }
  };
  for (const auto& kind : costmodel::kCollectives)
    rows(kind.name, run.collectives[static_cast<std::size_t>(kind.kind)]);
  if (run.per_node > 0)
    std::cout << fmt::format(
        "  rings of nodes of {} ranks: intra within a node ({} ranks), inter across nodes ({} ranks)\n",
        run.per_node, run.per_node, run.world / run.per_node);
  for (int l = 0; l < 2; ++l)
    for (const auto& kind : costmodel::kCollectives)
      rows(costmodel::level_sweep(kind, costmodel::kRingLevels[l]),
           run.levels[l][static_cast<std::size_t>(kind.kind)]);
  if (!run.calibration.compute || run.gemm.points_used == 0) {
    std::cout << fmt::format("  compute        {}\n",
                             p.value("compute", std::string("not measured: the cluster's figures price it")));
    return;
  }
  const auto& cs = *run.calibration.compute;
  std::cout << fmt::format(
                   "  gemm           peak {:.1f} GFLOP/s, d_half {:.1f} (residual {}, {} points, {} "
                   "memory-bound left out)\n",
                   cs.fp32_flops_per_s / 1e9, cs.gemm_half_efficiency_dim, pct(run.gemm.residual_rms),
                   run.gemm.points_used, run.gemm.points_memory_bound)
            << fmt::format("  elementwise    {}, kernel overhead {} (residual {}, {} points)\n",
                           format_bandwidth(cs.memory_bandwidth_bytes_per_s),
                           format_seconds(cs.kernel_overhead_s), pct(run.elementwise.residual_rms),
                           run.elementwise.points)
            << fmt::format(
                   "  adam           {} at 28 B/param, overhead {} (residual {}; {:.2f} x the elementwise "
                   "bandwidth)\n",
                   format_bandwidth(run.adam.bandwidth_bytes_per_s), format_seconds(run.adam.overhead_s),
                   pct(run.adam.residual_rms),
                   run.adam.bandwidth_bytes_per_s / cs.memory_bandwidth_bytes_per_s);
  if (run.accumulate.points == 0)
    std::cout << "  accumulate     not measured (no shape of a split's partial sums): priced at the "
                 "elementwise bandwidth\n";
  else if (run.accumulate.bandwidth_bytes_per_s >= costmodel::kMaxBandwidth)
    std::cout << fmt::format(
        "  accumulate     no cost found: adding into C was as fast as writing it ({} "
        "points)\n",
        run.accumulate.points);
  else
    std::cout << fmt::format("  accumulate     {} read of C per partial sum (residual {}, {} points)\n",
                             format_bandwidth(run.accumulate.bandwidth_bytes_per_s),
                             pct(run.accumulate.residual_rms), run.accumulate.points);
  if (run.interference)
    std::cout << fmt::format(
        "  overlap        interference {:.2f} (compute slowdown while all-gathers run)\n", *run.interference);
  else
    std::cout << fmt::format("  overlap        {}\n", p.value("interference", "not measured"));
  if (run.replicate.points > 0)
    std::cout << fmt::format(
        "  replicate      overhead {} + weights at {} per REPLICATE operator and step (FSDP2's copies beyond "
        "its all-reduce; residual {}, {} points)\n",
        format_seconds(run.replicate.overhead_s), format_bandwidth(run.replicate.bandwidth_bytes_per_s),
        pct(run.replicate.residual_rms), run.replicate.points);
  const std::vector<std::string> noisy = costmodel::noisy_fits(run);
  if (!noisy.empty()) {
    std::string load = "unknown";
    if (const auto* m = p.contains("machine") ? &p["machine"] : nullptr; m && m->contains("load_average"))
      load = fmt::format("{:.2f}", (*m)["load_average"][0].get<double>());
    std::cerr << fmt::format(
        "osdp calibrate: warning: {} fit{} with more than {:.0f}% residual: {} (load average {} at the "
        "start on {} cores); a busy machine fits noise: calibrate again when it is quiet\n",
        noisy.size(), noisy.size() == 1 ? "" : "s", 100 * costmodel::kNoisyResidual, fmt::join(noisy, ", "),
        load, p.contains("machine") ? p["machine"].value("nproc", 0u) : 0u);
  }
}

}  // namespace osdp::cli
