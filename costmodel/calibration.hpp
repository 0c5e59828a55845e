// Calibration files: fitted alpha and beta per collective and per message-size segment, compute
// coefficients and overlap interference, with provenance. Written by `osdp calibrate`, named by a
// cluster file or given with --calibration; what a calibration gives overrides the cluster's figures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/cluster.hpp"
#include "costmodel/collective.hpp"

namespace osdp::costmodel {

// Fitted alpha and beta of one collective for buffers S (full gathered/reduced buffer) up to a size,
// priced by the ring formula of costmodel/collective.hpp.
struct Segment {
  double up_to_bytes;  // this segment covers sizes <= up_to_bytes (the last one: infinity)
  double alpha_s;
  double beta_s_per_byte;
  double residual = 0;  // the fit's relative RMS residual over its points (0: not recorded)
};

// A measured GEMM: C[m x n] = A[m x k] B[k x n], `count` of them, took `seconds`. The cost model
// uses a measured shape's time instead of the formula (calibrations measure the shapes of the
// models they are made for).
struct GemmTime {
  std::int64_t m = 0, n = 0, k = 0, count = 1;
  double seconds = 0;
};

// The segments of each collective on one kind of ring (sorted by up_to_bytes; any may be empty).
struct LevelSegments {
  std::vector<Segment> allgather, reducescatter, allreduce, alltoall;

  const std::vector<Segment>& segments(Collective c) const;
  std::vector<Segment>& segments(Collective c);
  bool empty() const {
    return allgather.empty() && reducescatter.empty() && allreduce.empty() && alltoall.empty();
  }
};

struct Calibration {
  std::string name;
  nlohmann::json provenance = nlohmann::json::object();  // where, when, backend, versions
  // Sorted by up_to_bytes; any may be empty (files before all-to-all have no "alltoall").
  std::vector<Segment> allgather, reducescatter, allreduce, alltoall;
  // The rings of a job of nodes of `per_node` ranks (0: not measured), fitted on the ranks of one
  // node (intra) and on those at one local index across nodes (inter), all rings of a level at once
  // (as a two-level collective runs them). The file's "levels" block.
  int per_node = 0;
  LevelSegments intra, inter;
  std::optional<ComputeSpec> compute;  // overrides (fields not given keep the cluster's)
  std::optional<double> interference;
  std::vector<GemmTime> gemm_times;
  // The nodes of the job the levels were fitted in (the inter rings' ranks): set on a copy that prices a
  // smaller group's sub-cluster (PlanCostModel), whose own nodes may be fewer; 0: the priced cluster's.
  // Never written to a file.
  int level_nodes = 0;
  // Set on a copy to price one draw of the calibration's uncertainty (costmodel/uncertainty.hpp):
  // every fitted price is scaled by its error in that draw. Never written to a file.
  std::optional<std::uint64_t> draw;
  // Set on a copy to price every fitted price at one quantile of its error instead, z standard
  // deviations (uncertainty.hpp's at_quantile: the robust objective's pessimistic prices).
  std::optional<double> quantile_z;

  const std::vector<Segment>& segments(Collective c) const;
  std::vector<Segment>& segments(Collective c);
};

// `base_compute` supplies the values a calibration's compute block leaves out.
Calibration read_calibration(const nlohmann::json& doc, const std::string& file,
                             const ComputeSpec& base_compute, const std::string& pointer = "");
nlohmann::json to_json(const Calibration& cal);

}  // namespace osdp::costmodel
