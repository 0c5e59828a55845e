// What osdp calibrate measures: the GEMM shapes (generic, and those of given models at every batch
// and split asked for) and the options, as recorded in the calibration's provenance.
#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "costmodel/workload.hpp"
#include "validate/calibrate/calibrate.hpp"

namespace osdp::validate {
namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

std::vector<GemmShape> generic_gemm_shapes(bool quick) {
  std::vector<GemmShape> out;
  for (std::int64_t d = 32; d <= (quick ? 256 : 2048); d *= 2) out.push_back({d, d, d, 1, "square"});
  if (quick) {
    out.push_back({256, 256, 32, 1, "skinny", true});
    return out;
  }
  out.push_back({1536, 1536, 1536, 1, "square"});
  // The skinny ones (C large beside the work) are timed adding into C as well.
  for (const std::int64_t k : {16, 32, 64, 128, 256}) out.push_back({1024, 1024, k, 1, "skinny", k >= 64});
  out.push_back({64, 1024, 1024, 1, "skinny"});
  return out;
}

std::vector<GemmShape> model_gemm_shapes(const std::vector<costmodel::ModelSpec>& models,
                                         const std::vector<int>& batches, double max_flops) {
  std::vector<GemmShape> out;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>, std::size_t> seen;
  for (const auto& model : models) {
    const costmodel::Workload w = costmodel::lower(model);
    for (const auto& op : w.operators)
      for (const auto* list : {&op.forward, &op.backward})
        for (const costmodel::Kernel& whole : *list) {
          if (whole.kind != costmodel::KernelKind::kGemm) continue;
          // Every slice shape the search may use (splits up to 4), at every batch size asked for.
          for (const int n : op.splits(4)) {
            const costmodel::Kernel k =
                n > 1 && whole.split_dim != costmodel::Dim::kNone ? whole.slice(n) : whole;
            for (const int b : batches) {
              using costmodel::Dim;
              // A slice cut along k makes a partial sum: it adds into the output.
              const bool partial = n > 1 && whole.split_dim == Dim::kK;
              const GemmShape sh{k.dim(Dim::kM, b),
                                 k.dim(Dim::kN, b),
                                 k.dim(Dim::kK, b),
                                 k.dim(Dim::kCount, b),
                                 fmt::format("{} {} batch {} split {}", model.name, k.name, b, n),
                                 partial};
              if (sh.flops() > max_flops) continue;
              const auto [at, added] = seen.emplace(std::tuple{sh.m, sh.n, sh.k, sh.count}, out.size());
              if (added)
                out.push_back(sh);
              else
                out[at->second].accumulates = out[at->second].accumulates || partial;
            }
          }
        }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const GemmShape& a, const GemmShape& b) { return a.flops() < b.flops(); });
  return out;
}

nlohmann::json gemm_operands_provenance(double rotation_bytes, double last_level_cache_bytes) {
  return {{"rotation_bytes", rotation_bytes},
          {"last_level_cache_bytes", last_level_cache_bytes},
          {"rule",
           "every timed GEMM call takes the next copy of its operands in a pool of twice the "
           "last-level cache (at least 64 MiB)"},
          {"values", "A and B uniform in [-1, 1) (a 4 MiB pattern repeated), C zeros"}};
}

std::vector<float> operand_pattern(std::size_t n, std::uint64_t seed) {
  std::vector<float> out(n);
  std::uint64_t x = seed;
  for (float& v : out) {  // splitmix64
    x += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    v = static_cast<float>(static_cast<double>(z >> 40) / 16777216.0 * 2.0 - 1.0);  // 24 bits: exact in float
  }
  return out;
}

nlohmann::json CalibrateOptions::to_json() const {
  nlohmann::json shapes = nlohmann::json::array();
  nlohmann::json accumulated = nlohmann::json::array();
  for (const auto& s : gemm_shapes) {
    shapes.push_back({s.m, s.n, s.k, s.count});
    if (s.accumulates) accumulated.push_back({s.m, s.n, s.k, s.count});
  }
  return {{"min_bytes", min_bytes},
          {"max_bytes", max_bytes},
          {"steps_per_doubling", steps_per_doubling},
          {"warmup", warmup},
          {"repeats", repeats},
          {"large_s", large_s},
          {"large_repeats", large_repeats},
          {"batch_target_s", batch_target_s},
          {"elementwise_min_bytes", elementwise_min_bytes},
          {"elementwise_max_bytes", elementwise_max_bytes},
          {"gemm_shapes", shapes},
          {"gemm_accumulate_shapes", accumulated},
          {"overlap_bytes", overlap_bytes},
          {"quick", quick},
          {"per_node", per_node},
          {"collectives_only", collectives_only},
          {"gemm", gemm_math == GemmMath::kBf16 ? "bf16" : "fp32"},
          {"segments",
           {{"max_residual", segments.max_residual},
            {"max_segments", segments.max_segments},
            {"min_points", segments.min_points},
            {"min_improvement", segments.min_improvement}}}};
}

CalibrateOptions quick_options() {
  CalibrateOptions o;
  o.quick = true;
  o.max_bytes = kMiB;
  o.steps_per_doubling = 1;
  o.warmup = 0;
  o.repeats = 3;  // a median of 3 drops one outlier; of 2 it is their mean
  o.large_repeats = 1;
  o.batch_target_s = 5e-4;
  o.elementwise_max_bytes = 4 * kMiB;
  o.overlap_bytes = kMiB;
  return o;
}

}  // namespace osdp::validate
