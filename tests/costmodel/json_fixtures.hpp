// Shared by the tests of the JSON descriptions (test_json_reader.cpp, test_model_file.cpp,
// test_cluster_file.cpp, test_calibration_file.cpp, test_plan_file.cpp, test_catalog.cpp): a helper that
// catches the osdp::InputError a read throws, sample documents of a model, a cluster and a calibration,
// and field-by-field comparisons for round trips.
// Byte counts are derived in comments: Ki = 1024, Mi = 2^20 = 1048576, Gi = 2^30 = 1073741824.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/bounds.hpp"
#include "costmodel/calibration.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/model.hpp"

namespace osdp::costmodel::json_fixtures {

using costmodel::kInf;
inline constexpr double kMi = 1048576.0;
inline constexpr double kGi = 1073741824.0;

struct Caught {
  std::string file;
  std::string pointer;
  std::string what;
};

// Runs `f` and returns the osdp::InputError it throws; fails the test when it throws none.
template <class F>
Caught input_error(F&& f) {
  try {
    f();
  } catch (const osdp::InputError& e) {
    return {e.file(), e.pointer(), e.what()};
  }
  FAIL("no osdp::InputError was thrown");
  return {};
}

inline Approx rel(double expected) {
  return Approx(expected).epsilon(1e-12).margin(0.0);
}

// A two-stage model: stage 0 has ffn defaulted to 4 * 64 = 256, stage 1 gives ffn explicitly; untied, as
// the stages' widths differ.
inline nlohmann::json model_doc() {
  return parse_json_text(R"({
    "schema_version": 1,
    "name": "tiny",
    "seq": 128,
    "vocab": 1000,
    "tied_embeddings": false,
    "stages": [
      {"layers": 2, "hidden": 64, "heads": 4},
      {"layers": 1, "hidden": 128, "heads": 8, "ffn": 384}
    ]
  })",
                         "model_doc");
}

inline nlohmann::json cluster_doc() {
  return parse_json_text(R"({
    "schema_version": 1,
    "name": "two-nodes",
    "description": "2 x 4 test devices",
    "source": "made up",
    "nodes": 2,
    "devices_per_node": 4,
    "device": {
      "name": "Test GPU",
      "memory": "16GiB",
      "reserve": "512MiB",
      "fp32_flops": "16.3TFLOP/s",
      "bf16_flops": "130TFLOP/s",
      "gemm_efficiency": 0.7,
      "gemm_half_efficiency_dim": 64,
      "memory_bandwidth": "672GB/s",
      "kernel_overhead": "10us"
    },
    "links": {
      "intra": {"alpha": "5us", "bandwidth": "12GB/s"},
      "inter": {"alpha": "10us", "bandwidth": "400Gb/s"}
    },
    "overlap": {"enabled": false, "interference": 1.25},
    "calibration": "lab"
  })",
                         "cluster_doc");
}

inline nlohmann::json calibration_doc() {
  return parse_json_text(R"({
    "schema_version": 1,
    "name": "lab-2024",
    "provenance": {"host": "node0", "backend": "nccl"},
    "collectives": {
      "allgather": [
        {"up_to": "1MiB", "alpha": "20us", "bandwidth": "4GiB/s", "residual_rms": 0.01},
        {"up_to": "64MiB", "alpha": "30us", "bandwidth": "8GiB/s"},
        {"alpha": "40us", "bandwidth": "16GiB/s"}
      ],
      "reducescatter": [{"alpha": "25us", "bandwidth": "8GiB/s"}]
    },
    "compute": {"gemm_efficiency": 0.5, "kernel_overhead": "4us"},
    "overlap": {"interference": 1.5}
  })",
                         "calibration_doc");
}

inline ComputeSpec base_compute() {
  ComputeSpec c;
  c.fp32_flops_per_s = 16.3e12;
  c.bf16_flops_per_s = 130e12;
  c.gemm_efficiency = 0.7;
  c.gemm_half_efficiency_dim = 64;
  c.memory_bandwidth_bytes_per_s = 672e9;
  c.kernel_overhead_s = 1e-5;
  return c;
}

inline void check_same(const ModelSpec& a, const ModelSpec& b) {
  CHECK(a.name == b.name);
  CHECK(a.description == b.description);
  CHECK(a.family == b.family);
  CHECK(a.seq == b.seq);
  CHECK(a.vocab == b.vocab);
  CHECK(a.tied_embeddings == b.tied_embeddings);
  CHECK(a.precision == b.precision);
  CHECK(a.dropout == b.dropout);
  REQUIRE(a.stages.size() == b.stages.size());
  for (std::size_t i = 0; i < a.stages.size(); ++i) {
    INFO("stage " << i);
    CHECK(a.stages[i].layers == b.stages[i].layers);
    CHECK(a.stages[i].hidden == b.stages[i].hidden);
    CHECK(a.stages[i].heads == b.stages[i].heads);
    CHECK(a.stages[i].ffn == b.stages[i].ffn);
  }
}

inline void check_same(const ComputeSpec& a, const ComputeSpec& b) {
  CHECK(a.fp32_flops_per_s == b.fp32_flops_per_s);
  CHECK(a.bf16_flops_per_s == b.bf16_flops_per_s);
  CHECK(a.gemm_efficiency == b.gemm_efficiency);
  CHECK(a.gemm_half_efficiency_dim == b.gemm_half_efficiency_dim);
  CHECK(a.memory_bandwidth_bytes_per_s == b.memory_bandwidth_bytes_per_s);
  CHECK(a.kernel_overhead_s == b.kernel_overhead_s);
}

inline void check_same(const ClusterSpec& a, const ClusterSpec& b) {
  CHECK(a.name == b.name);
  CHECK(a.description == b.description);
  CHECK(a.source == b.source);
  CHECK(a.nodes == b.nodes);
  CHECK(a.devices_per_node == b.devices_per_node);
  CHECK(a.device_name == b.device_name);
  CHECK(a.memory_bytes == b.memory_bytes);
  CHECK(a.reserve_bytes == b.reserve_bytes);
  check_same(a.compute, b.compute);
  CHECK(a.intra.alpha_s == b.intra.alpha_s);
  CHECK(a.intra.bandwidth_bytes_per_s == b.intra.bandwidth_bytes_per_s);
  REQUIRE(a.inter.has_value() == b.inter.has_value());
  if (a.inter) {
    CHECK(a.inter->alpha_s == b.inter->alpha_s);
    CHECK(a.inter->bandwidth_bytes_per_s == b.inter->bandwidth_bytes_per_s);
  }
  CHECK(a.overlap.enabled == b.overlap.enabled);
  CHECK(a.overlap.interference == b.overlap.interference);
  CHECK(a.calibration == b.calibration);
}

inline void check_same(const std::vector<Segment>& a, const std::vector<Segment>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("segment " << i);
    CHECK(a[i].up_to_bytes == b[i].up_to_bytes);
    CHECK(a[i].alpha_s == b[i].alpha_s);
    CHECK(a[i].beta_s_per_byte == b[i].beta_s_per_byte);
  }
}

inline void check_same(const Calibration& a, const Calibration& b) {
  CHECK(a.name == b.name);
  CHECK(a.provenance == b.provenance);
  check_same(a.allgather, b.allgather);
  check_same(a.reducescatter, b.reducescatter);
  check_same(a.allreduce, b.allreduce);
  CHECK(a.per_node == b.per_node);
  for (const auto level : {&Calibration::intra, &Calibration::inter}) {
    check_same((a.*level).allgather, (b.*level).allgather);
    check_same((a.*level).reducescatter, (b.*level).reducescatter);
    check_same((a.*level).allreduce, (b.*level).allreduce);
  }
  REQUIRE(a.compute.has_value() == b.compute.has_value());
  if (a.compute) check_same(*a.compute, *b.compute);
  CHECK(a.interference == b.interference);
}

// to_json, then to text and back, as a file would go.
inline nlohmann::json through_text(const nlohmann::json& j) {
  return parse_json_text(j.dump(2), "round-trip");
}

}  // namespace osdp::costmodel::json_fixtures
