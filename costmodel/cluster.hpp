// Cluster descriptions: devices (count, memory, reserve, compute rates), topology (nodes x devices
// per node), links (alpha latency per ring step, bandwidth per level), overlap of compute and
// communication, and optionally the calibration file that overrides the spec-sheet figures.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/model.hpp"

namespace osdp::costmodel {

struct LinkSpec {
  double alpha_s = 0.0;                // latency per ring step
  double bandwidth_bytes_per_s = 1.0;  // per direction; beta = 1 / bandwidth
  double beta_s_per_byte() const { return 1.0 / bandwidth_bytes_per_s; }
};

// Per-kernel compute model (DESIGN.md section 4, extended tier):
//   GEMM:        t = overhead + max(flops / (peak * eff * d / (d + d_half)), bytes / memory_bandwidth)
//                with d the smallest of the GEMM's three dimensions;
//   elementwise: t = overhead + bytes / memory_bandwidth.
struct ComputeSpec {
  double fp32_flops_per_s = 1e12;
  double bf16_flops_per_s = 2e12;
  double gemm_efficiency = 1.0;         // fraction of peak a large GEMM reaches
  double gemm_half_efficiency_dim = 0;  // d_half: smallest GEMM dimension at which efficiency halves
  double memory_bandwidth_bytes_per_s = 1e11;
  double kernel_overhead_s = 0.0;                // launch and setup per kernel
  double optimizer_bandwidth_bytes_per_s = 0.0;  // the optimizer step's streaming rate (0: memory_bandwidth)
  // The rate at which a GEMM that adds into its output (C += A B, a split's partial sums) reads C beyond
  // one that writes it: each slice after the first of a split along the reduction dimension pays
  // bytes(C) / this (0: memory_bandwidth). Calibrations measure it (the "gemm-accumulate" sweep).
  double accumulate_bandwidth_bytes_per_s = 0.0;
  // What a REPLICATE operator's step pays in its runtime beyond its kernels and its gradient's
  // all-reduce, for W bytes of weights: replicate_overhead + W / replicate_bandwidth (0 bandwidth:
  // nothing). In FSDP2 a REPLICATE operator is a module on a (world x 1) mesh: its unshard on a shard
  // group of one rank and its gradient's copies are host work on the compute thread. The torch
  // backend's calibration measures it (the "replicate-copies" sweep); the MPI and NCCL executors
  // have none.
  double replicate_overhead_s = 0.0;
  double replicate_bandwidth_bytes_per_s = 0.0;
  double peak_flops(Precision p) const { return p == Precision::kFp32 ? fp32_flops_per_s : bf16_flops_per_s; }
};

struct OverlapSpec {
  bool enabled = true;
  double interference = 1.0;  // compute runs this much slower while a collective is in flight (>= 1)
};

struct ClusterSpec {
  std::string name;
  std::string description;
  std::string source;  // where the figures come from
  int nodes = 1;
  int devices_per_node = 1;
  std::string device_name;
  double memory_bytes = 0;   // device memory capacity
  double reserve_bytes = 0;  // taken by the runtime (context, allocator slack): never available
  ComputeSpec compute;
  LinkSpec intra;
  std::optional<LinkSpec> inter;  // required when nodes > 1
  OverlapSpec overlap;
  std::string calibration;  // a calibration name or path, empty for none

  int world_size() const { return nodes * devices_per_node; }
};

// The compute block shared by cluster and calibration files: every key optional, defaults from `base`.
class JsonReader;
ComputeSpec read_compute_fields(JsonReader& r, const ComputeSpec& base);
nlohmann::json compute_json(const ComputeSpec& c);

ClusterSpec read_cluster(const nlohmann::json& doc, const std::string& file, const std::string& pointer = "");
nlohmann::json to_json(const ClusterSpec& cluster);

// The cluster at another size (`world_size` devices; 0 or its own: as it is): a cluster with an
// inter-node link is resized in whole nodes (UsageError when world_size is not a multiple of its
// devices per node); a single-level cluster becomes one flat node. Its name says the size: "a100-8@16".
ClusterSpec resized(ClusterSpec cluster, int world_size);

}  // namespace osdp::costmodel
