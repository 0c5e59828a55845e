// Shared by the cost model tests (test_cost_comm.cpp, test_cost_time.cpp, test_cost_memory.cpp): a small
// synthetic cluster built in the test (8 ranks, alpha 10 us, 10 GB/s, known compute figures), the ring
// formula written independently of the code, shorthands for choices, and sample operators of every kind.
//   ring all-gather / reduce-scatter of a buffer S over N ranks: N - 1 steps of alpha + (S/N) beta,
//     t = (N-1) alpha + (N-1)/N S beta;  all-reduce (reduce-scatter then all-gather) = twice that.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "costmodel/bounds.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/choice.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/model.hpp"
#include "costmodel/workload.hpp"

namespace osdp::costmodel::cost_fixtures {

inline constexpr double kRel = 1e-12;  // relative tolerance: the same formula summed in a different order
inline constexpr double kAlpha = 10e-6;
inline constexpr double kBandwidth = 10e9;  // 10 GB/s, beta = 1e-10 s/B
using costmodel::kInf;

// 8 ranks on one node, 10 us per ring step, 10 GB/s; 10 TFLOP/s fp32 (100 bf16), half of peak on
// large GEMMs, halved again at 64 along the smallest dimension, 500 GB/s memory, 5 us per kernel;
// no overlap, interference 1.
inline ClusterSpec synthetic_cluster(int nodes = 1, int devices_per_node = 8) {
  ClusterSpec c;
  c.name = "synthetic";
  c.nodes = nodes;
  c.devices_per_node = devices_per_node;
  c.memory_bytes = 24.0 * 1024 * 1024 * 1024;
  c.compute.fp32_flops_per_s = 1e13;
  c.compute.bf16_flops_per_s = 1e14;
  c.compute.gemm_efficiency = 0.5;
  c.compute.gemm_half_efficiency_dim = 64;
  c.compute.memory_bandwidth_bytes_per_s = 5e11;
  c.compute.kernel_overhead_s = 5e-6;
  c.intra = LinkSpec{kAlpha, kBandwidth};
  c.overlap.enabled = false;
  c.overlap.interference = 1.0;
  return c;
}

// Ring all-gather or reduce-scatter of a total buffer of S bytes over N ranks.
inline double ring(double n_ranks, double alpha, double bandwidth, double bytes) {
  return (n_ranks - 1) * alpha + (n_ranks - 1) / n_ranks * bytes / bandwidth;
}

inline Choice dp(bool ckpt = false) {
  return Choice{false, 1, 0, ckpt};
}
inline Choice zdp(bool ckpt = false) {
  return Choice{false, 1, 1, ckpt};
}
inline Choice split(int n, int k, bool ckpt = false) {
  return Choice{false, n, k, ckpt};
}
inline Choice replicate(bool ckpt = false) {
  return Choice{true, 1, 0, ckpt};
}

// Every choice of an operator: REPLICATE, and k-of-n ZDP for each allowed n; with and without
// checkpointing.
inline std::vector<Choice> all_choices(const Operator& op, int split_max = 8) {
  std::vector<Choice> out;
  for (const bool ckpt : {false, true}) {
    out.push_back(replicate(ckpt));
    for (const int n : op.splits(split_max))
      for (int k = 0; k <= n; ++k) out.push_back(split(n, k, ckpt));
  }
  return out;
}

// A small llama-family model in fp32 (h 64, 4 query heads of 16 over kv_heads, ffn 96, seq 32,
// vocabulary 128, untied): the expert- and context-parallel tests' base.
inline ModelSpec small_llama(int layers, int kv_heads, const std::string& name) {
  ModelSpec m;
  apply_family_defaults(m, "llama");
  m.name = name;
  m.precision = Precision::kFp32;
  m.stages = {StageSpec{layers, 64, 4, 96, kv_heads, 16}};
  m.seq = 32;
  m.vocab = 128;
  m.tied_embeddings = false;
  return m;
}

inline const Operator& find_op(const Workload& w, const std::string& name) {
  for (const auto& op : w.operators)
    if (op.name == name) return op;
  FAIL("no operator " << name);
  return w.operators.front();  // not reached
}

// The first three operators of GPT-2 XL (tied embedding, attention, mlp) plus, from a small untied
// mixed-precision model of two stages, its projection and head: every kind of operator.
inline std::vector<Operator> sample_operators() {
  std::vector<Operator> ops;
  const Workload xl = lower(load_model("gpt2-1.5b"));
  ops.assign(xl.operators.begin(), xl.operators.begin() + 3);
  ModelSpec small;
  small.name = "small";
  small.stages = {StageSpec{1, 256, 4, 1024}, StageSpec{1, 512, 8, 2048}};
  small.seq = 128;
  small.vocab = 1000;
  small.tied_embeddings = false;
  small.precision = Precision::kMixed;
  const Workload w = lower(small);
  for (const auto& op : w.operators)
    if (op.kind == OperatorKind::kProjection || op.kind == OperatorKind::kHead) ops.push_back(op);
  return ops;
}

}  // namespace osdp::costmodel::cost_fixtures
