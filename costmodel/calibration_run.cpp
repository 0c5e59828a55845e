// fit_measurements applies the fits of calibration_fit.cpp to a run's measurements (grouped by sweep)
// and builds the costmodel::Calibration: segments per collective (and per ring level), ComputeSpec
// (the elementwise overhead and bandwidth, the GEMM peak and d_half, gemm_efficiency 1, bf16 = fp32
// since the CPU kernels are fp32, the partial sums' accumulate bandwidth) and the interference; the
// fit diagnostics go to the provenance under "fit". Also the calibration file, the measurements' CSV
// and the list of noisy fits.
#include "costmodel/calibration_fit.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "costmodel/bounds.hpp"
#include "costmodel/error.hpp"
#include "costmodel/units.hpp"

namespace osdp::costmodel {
namespace {

std::vector<SizePoint> size_points(const std::vector<Measurement>& ms, const std::string& sweep) {
  std::vector<SizePoint> out;
  for (const auto& m : ms)
    if (m.sweep == sweep) out.push_back({m.bytes, m.seconds});
  return out;
}

}  // namespace

std::string level_sweep(const CollectiveKind& k, RingLevel level) {
  return level == RingLevel::kWorld ? std::string(k.name) : fmt::format("{} {}", k.name, to_string(level));
}

void fit_measurements(CalibrationRun& run, const std::string& name, const SegmentOptions& segments) {
  costmodel::Calibration& cal = run.calibration;
  cal.name = name;
  nlohmann::json fit = nlohmann::json::object();
  // The segments of collective k measured as `sweep` on rings of `ranks`, into `segs` and the file's
  // `file`; the fit's diagnostics into `diag`.
  auto fit_rings = [&](const CollectiveKind& k, const std::string& sweep, int ranks,
                       std::vector<FitSegment>& segs, std::vector<costmodel::Segment>& file,
                       nlohmann::json& diag) {
    const auto pts = size_points(run.measurements, sweep);
    segs =
        ranks >= 2 && !pts.empty() ? fit_collective(k.kind, ranks, pts, segments) : std::vector<FitSegment>{};
    for (const FitSegment& seg : segs)
      if (seg.alpha_s > 1.0)  // the file's limit: a latency per ring step of more than a second
        throw Error(fmt::format(
            "{}: the segment from {} B has alpha = {:.3g} s, more than a calibration file holds (1 s); the "
            "measurements are too noisy to fit (is the machine busy?)",
            sweep, seg.from_bytes, seg.alpha_s));
      else if (seg.beta_s_per_byte * bounds::kLinkBandwidth.min > 1.0)  // the file's limit: at least 1 MB/s
        throw Error(fmt::format(
            "{}: the segment from {} B has a bandwidth of {:.3g} B/s, less than a calibration file holds "
            "(1 MB/s); the measurements are too noisy to fit (is the machine busy?)",
            sweep, seg.from_bytes, 1.0 / seg.beta_s_per_byte));
    file = to_segments(segs);
    for (auto& s : file) s.beta_s_per_byte = std::max(s.beta_s_per_byte, 1.0 / kMaxBandwidth);
    nlohmann::json a = nlohmann::json::array();
    for (const auto& s : segs)
      a.push_back({{"from", s.from_bytes}, {"points", s.points}, {"residual_rms", s.residual_rms}});
    if (!segs.empty()) diag[k.key] = a;
  };
  for (const CollectiveKind& k : kCollectives)
    fit_rings(k, k.name, run.world, run.collectives[static_cast<std::size_t>(k.kind)], cal.segments(k.kind),
              fit);
  cal.per_node = run.per_node;
  if (run.per_node > 0) {
    if (run.world % run.per_node != 0)
      throw Error(
          fmt::format("calibration fit: nodes of {} ranks do not divide {} ranks", run.per_node, run.world));
    nlohmann::json levels = nlohmann::json::object();
    for (int l = 0; l < 2; ++l) {
      const char* level = to_string(kRingLevels[l]);
      const int ranks = l == 0 ? run.per_node : run.world / run.per_node;
      nlohmann::json diag = nlohmann::json::object();
      for (const CollectiveKind& k : kCollectives)
        fit_rings(k, level_sweep(k, kRingLevels[l]), ranks, run.levels[l][static_cast<std::size_t>(k.kind)],
                  (l == 0 ? cal.intra : cal.inter).segments(k.kind), diag);
      if (!diag.empty()) levels[level] = diag;
    }
    fit["levels"] = levels;
  }
  // Collectives only (osdp calibrate --compute emulate): no compute figures; the cluster's price it.
  const bool compute =
      std::any_of(run.measurements.begin(), run.measurements.end(),
                  [](const Measurement& m) { return m.sweep == "gemm" || m.sweep == "elementwise"; });
  if (!compute) {
    fit["compute"] = "not measured";
    fit["repeat_spread"] = repeat_spread_json(run.measurements);
    cal.provenance["fit"] = fit;
    return;
  }
  run.elementwise = fit_elementwise(size_points(run.measurements, "elementwise"));
  // The optimizer streams each operator's shard (megabytes, not cache-resident): its rate is fitted on
  // the Adam points from 4 MiB up when there are enough of them.
  auto adam_points = size_points(run.measurements, "adam");
  std::vector<SizePoint> large;
  for (const auto& p : adam_points)
    if (p.bytes >= 4.0 * 1024 * 1024) large.push_back(p);
  run.adam = fit_elementwise(large.size() >= 3 ? large : adam_points);
  const double bw = std::min(run.elementwise.bandwidth_bytes_per_s, kMaxBandwidth);
  std::vector<GemmPoint> gemms;
  for (const auto& m : run.measurements)
    if (m.sweep == "gemm") gemms.push_back({m.m, m.n, m.k, m.count, m.seconds});
  run.gemm = fit_gemm(gemms, run.elementwise.overhead_s, bw);
  costmodel::ComputeSpec cs;
  cs.fp32_flops_per_s = run.gemm.peak_flops_per_s;
  cs.bf16_flops_per_s = run.gemm.peak_flops_per_s;  // the CPU kernels are fp32 only
  cs.gemm_efficiency = 1.0;
  cs.gemm_half_efficiency_dim = run.gemm.half_efficiency_dim;
  cs.memory_bandwidth_bytes_per_s = bw;
  cs.kernel_overhead_s = run.elementwise.overhead_s;
  if (run.adam.points > 0)
    cs.optimizer_bandwidth_bytes_per_s = std::min(run.adam.bandwidth_bytes_per_s, kMaxBandwidth);
  // Each shape timed adding into C against the same shape writing it.
  std::vector<AccumulatePoint> accumulated;
  for (const auto& m : run.measurements) {
    if (m.sweep != "gemm-accumulate") continue;
    for (const auto& g : gemms)
      if (g.m == m.m && g.n == m.n && g.k == m.k && g.count == m.count) {
        accumulated.push_back({4.0 * static_cast<double>(m.m * m.n * m.count), g.seconds, m.seconds});
        break;
      }
  }
  run.accumulate = fit_accumulate(accumulated);
  if (run.accumulate.points > 0) cs.accumulate_bandwidth_bytes_per_s = run.accumulate.bandwidth_bytes_per_s;
  // A REPLICATE module's runtime copies (the torch backend's "replicate-copies" sweep), per byte of
  // weights as the elementwise fit prices bytes.
  const auto replicate_points = size_points(run.measurements, kReplicateSweep);
  if (replicate_points.size() >= 2) {
    run.replicate = fit_elementwise(replicate_points);
    cs.replicate_overhead_s = std::min(run.replicate.overhead_s, bounds::kReplicateOverhead.max);
    cs.replicate_bandwidth_bytes_per_s = std::min(run.replicate.bandwidth_bytes_per_s, kMaxBandwidth);
  }
  cal.compute = cs;
  // Every GEMM shape measured keeps its time: the cost model prices those shapes by it.
  for (const auto& g : gemms) cal.gemm_times.push_back({g.m, g.n, g.k, g.count, g.seconds});
  std::vector<OverlapPoint> overlap;
  for (const auto& m : run.measurements)
    if (m.sweep == "overlap") overlap.push_back({m.seconds, m.with_comm_s});
  run.interference = overlap.empty() ? std::nullopt : std::optional<double>(fit_interference(overlap));
  cal.interference = run.interference;

  fit["elementwise"] = {{"points", run.elementwise.points}, {"residual_rms", run.elementwise.residual_rms}};
  fit["gemm"] = {{"points", run.gemm.points_used},
                 {"memory_bound_left_out", run.gemm.points_memory_bound},
                 {"overhead_s", run.gemm.overhead_s},
                 {"residual_rms", run.gemm.residual_rms}};
  if (run.accumulate.points > 0)
    fit["accumulate"] = {{"points", run.accumulate.points},
                         {"residual_rms", run.accumulate.residual_rms},
                         {"bandwidth_bytes_per_s", run.accumulate.bandwidth_bytes_per_s}};
  fit["adam"] = {{"points", run.adam.points},
                 {"residual_rms", run.adam.residual_rms},
                 {"overhead_s", run.adam.overhead_s},
                 {"bandwidth_bytes_per_s", std::min(run.adam.bandwidth_bytes_per_s, kMaxBandwidth)},
                 {"bytes_per_param", kAdamBytesPerParam}};
  if (run.replicate.points > 0)
    fit["replicate"] = {
        {"points", run.replicate.points},
        {"residual_rms", run.replicate.residual_rms},
        {"overhead_s", run.replicate.overhead_s},
        {"bandwidth_bytes_per_s", std::min(run.replicate.bandwidth_bytes_per_s, kMaxBandwidth)}};
  nlohmann::json ratios = nlohmann::json::array();
  for (const auto& p : overlap) ratios.push_back(p.with_comm_s / p.alone_s);
  fit["interference_samples"] = ratios;
  fit["repeat_spread"] = repeat_spread_json(run.measurements);
  cal.provenance["fit"] = fit;
}

double expected_normal_range(int n) {
  if (n < 2) return 0.0;
  const double step = 1e-3;
  double sum = 0;
  for (double x = -10; x <= 10; x += step) {
    const double phi = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += (1 - std::pow(phi, n) - std::pow(1 - phi, n)) * step;
  }
  return sum;
}

namespace {
double repeat_sigma(const std::vector<Measurement>& ms, bool compute) {
  std::vector<double> sigmas;
  for (const Measurement& m : ms) {
    const bool is_compute = m.sweep == "gemm" || m.sweep == "gemm-accumulate" || m.sweep == "elementwise" ||
                            m.sweep == "adam" || m.sweep == kReplicateSweep;
    if (is_compute != compute || m.sweep == "overlap" || m.repeats < 2 || !(m.seconds > 0)) continue;
    sigmas.push_back((m.max_s - m.min_s) / m.seconds / expected_normal_range(m.repeats));
  }
  return sigmas.empty() ? 0.0 : costmodel::median(sigmas);
}
}  // namespace

nlohmann::json repeat_spread_json(const std::vector<Measurement>& ms) {
  return {{"compute", repeat_sigma(ms, true)}, {"communication", repeat_sigma(ms, false)}};
}

std::string measurements_csv(const CalibrationRun& run) {
  std::string out = "sweep,bytes,m,n,k,count,seconds,min_s,max_s,repeats,batch,with_comm_s,times_s\n";
  for (const auto& m : run.measurements)
    out += fmt::format("{},{},{},{},{},{},{:.9g},{:.9g},{:.9g},{},{},{:.9g},{:.9g}\n", m.sweep, m.bytes, m.m,
                       m.n, m.k, m.count, m.seconds, m.min_s, m.max_s, m.repeats, m.batch, m.with_comm_s,
                       fmt::join(m.times_s, " "));
  return out;
}

std::vector<std::string> noisy_fits(const CalibrationRun& run, double threshold) {
  const auto pct = [](double x) { return fmt::format("{:.1f}%", 100 * x); };
  std::vector<std::string> out;
  for (const auto& kind : kCollectives)
    for (const auto& s : run.collectives[static_cast<std::size_t>(kind.kind)])
      if (s.residual_rms > threshold)
        out.push_back(
            fmt::format("{} from {} ({})", kind.name, format_bytes(s.from_bytes), pct(s.residual_rms)));
  for (int l = 0; l < 2; ++l)
    for (const auto& kind : kCollectives)
      for (const auto& s : run.levels[l][static_cast<std::size_t>(kind.kind)])
        if (s.residual_rms > threshold)
          out.push_back(fmt::format("{} from {} ({})", level_sweep(kind, kRingLevels[l]),
                                    format_bytes(s.from_bytes), pct(s.residual_rms)));
  if (run.elementwise.residual_rms > threshold)
    out.push_back(fmt::format("elementwise ({})", pct(run.elementwise.residual_rms)));
  if (run.adam.residual_rms > threshold) out.push_back(fmt::format("adam ({})", pct(run.adam.residual_rms)));
  if (run.replicate.residual_rms > threshold)
    out.push_back(fmt::format("{} ({})", kReplicateSweep, pct(run.replicate.residual_rms)));
  // Not the accumulation: its residual is over a cost of a few percent of its GEMMs' time, measured as
  // the difference of two timings, and large on any machine; it widens the intervals instead.
  if (run.gemm.residual_rms > threshold)
    out.push_back(fmt::format("the GEMM formula ({}; the --model shapes are priced by their measured times)",
                              pct(run.gemm.residual_rms)));
  return out;
}

}  // namespace osdp::costmodel
