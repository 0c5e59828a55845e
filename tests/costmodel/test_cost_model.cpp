// Closed-form oracle and property tests of the cost model (costmodel::CostModel). The expected values
// are written here from the formulas of DESIGN.md section 4, REFERENCE.md and the seed paper, on a
// small synthetic cluster built in the test (8 ranks, alpha 10 us, 10 GB/s, known compute figures):
//   ring all-gather / reduce-scatter of a buffer S over N ranks: N - 1 steps of alpha + (S/N) beta,
//     t = (N-1) alpha + (N-1)/N S beta;  all-reduce (reduce-scatter then all-gather) = twice that;
//   paper tier: t_ZDP = 3(N-1) alpha + 3(N-1)/N S beta + b gamma, t_DP = 2(...) + b gamma, S = w P;
//   extended tier: compute + communication, or per phase the overlapped time;
//   memory: shards + DP-held gathered weights + activations (persistent) and one gathered slice +
//     one slice's gradient + workspace + recomputed activations (transient).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/choice.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"

namespace {

using namespace osdp::costmodel;

constexpr double kRel = 1e-12;  // relative tolerance: the same formula summed in a different order
constexpr double kAlpha = 10e-6;
constexpr double kBandwidth = 10e9;  // 10 GB/s, beta = 1e-10 s/B
constexpr double kInf = std::numeric_limits<double>::infinity();

// 8 ranks on one node, 10 us per ring step, 10 GB/s; 10 TFLOP/s fp32 (100 bf16), half of peak on
// large GEMMs, halved again at 64 along the smallest dimension, 500 GB/s memory, 5 us per kernel;
// no overlap, interference 1.
ClusterSpec synthetic_cluster(int nodes = 1, int devices_per_node = 8) {
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
double ring(double n_ranks, double alpha, double bandwidth, double bytes) {
  return (n_ranks - 1) * alpha + (n_ranks - 1) / n_ranks * bytes / bandwidth;
}

double ceil_div(std::int64_t a, std::int64_t b) {
  return static_cast<double>((a + b - 1) / b);
}

Choice dp(bool ckpt = false) {
  return Choice{false, 1, 0, ckpt};
}
Choice zdp(bool ckpt = false) {
  return Choice{false, 1, 1, ckpt};
}
Choice split(int n, int k, bool ckpt = false) {
  return Choice{false, n, k, ckpt};
}
Choice replicate(bool ckpt = false) {
  return Choice{true, 1, 0, ckpt};
}

// Every choice of an operator: REPLICATE, and k-of-n ZDP for each allowed n; with and without
// checkpointing.
std::vector<Choice> all_choices(const Operator& op, int split_max = 8) {
  std::vector<Choice> out;
  for (const bool ckpt : {false, true}) {
    out.push_back(replicate(ckpt));
    for (const int n : op.splits(split_max))
      for (int k = 0; k <= n; ++k) out.push_back(split(n, k, ckpt));
  }
  return out;
}

const Operator& find_op(const Workload& w, const std::string& name) {
  for (const auto& op : w.operators)
    if (op.name == name) return op;
  FAIL("no operator " << name);
  return w.operators.front();  // not reached
}

// The first three operators of GPT-2 XL (tied embedding, attention, mlp) plus, from a small untied
// mixed-precision model of two stages, its projection and head: every kind of operator.
std::vector<Operator> sample_operators() {
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

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Collectives.

// N = 8, alpha = 10 us, 10 GB/s, S = 80e6 B: all-gather = 7 x 10 us + 7/8 x 80e6 / 1e10 s
//   = 70 us + 7 ms = 7.07 ms; reduce-scatter the same; all-reduce 14.14 ms.
TEST_CASE("collective_s follows the ring formulas", "[cost]") {
  const CostModel model(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{});
  CHECK(model.world_size() == 8);
  CHECK(model.collective_s(Collective::kAllGather, 80e6) == Approx(7.07e-3).epsilon(kRel));
  CHECK(model.collective_s(Collective::kReduceScatter, 80e6) == Approx(7.07e-3).epsilon(kRel));
  CHECK(model.collective_s(Collective::kAllReduce, 80e6) == Approx(14.14e-3).epsilon(kRel));

  for (const int ranks : {2, 3, 8, 64}) {
    for (const double bytes : {1.0, 4096.0, 1048576.0, 67108864.0, 1e9}) {
      CAPTURE(ranks, bytes);
      const CostModel m(synthetic_cluster(1, ranks), nullptr, Precision::kFp32, CostOptions{});
      const double one = ring(ranks, kAlpha, kBandwidth, bytes);
      CHECK(m.collective_s(Collective::kAllGather, bytes) == Approx(one).epsilon(kRel));
      CHECK(m.collective_s(Collective::kReduceScatter, bytes) == Approx(one).epsilon(kRel));
      CHECK(m.collective_s(Collective::kAllReduce, bytes) == Approx(2 * one).epsilon(kRel));
    }
  }
}

TEST_CASE("a single rank communicates for free", "[cost]") {
  const CostModel model(synthetic_cluster(1, 1), nullptr, Precision::kFp32, CostOptions{});
  CHECK(model.world_size() == 1);
  for (const double bytes : {1.0, 1e6, 1e9}) {
    CHECK(model.collective_s(Collective::kAllGather, bytes) == 0.0);
    CHECK(model.collective_s(Collective::kReduceScatter, bytes) == 0.0);
    CHECK(model.collective_s(Collective::kAllReduce, bytes) == 0.0);
  }
  // And then the paper tier's DP and ZDP cost the same: b gamma.
  const Workload w = lower(load_model("gpt2-1.5b"));
  const Operator& att = find_op(w, "layer0.attention");
  const CostModel paper(synthetic_cluster(1, 1), nullptr, Precision::kFp32, CostOptions{Tier::kPaper});
  const double gamma = paper.kernels_s(att.forward, 1, 1, 4) + paper.kernels_s(att.backward, 1, 1, 4);
  CHECK(paper.cost(att, dp(), 3, w.bytes).time_s == Approx(3 * gamma).epsilon(kRel));
  CHECK(paper.cost(att, zdp(), 3, w.bytes).time_s == Approx(3 * gamma).epsilon(kRel));
}

// Two nodes of four: the ring crosses the inter-node link twice, so every step is paced by it
// (alpha 10 us, 10 GB/s there against 2 us, 100 GB/s inside a node): the 7.07 ms of the one-node case.
TEST_CASE("with two nodes the ring runs on the inter-node link", "[cost]") {
  ClusterSpec two = synthetic_cluster(2, 4);
  two.intra = LinkSpec{2e-6, 100e9};
  two.inter = LinkSpec{kAlpha, kBandwidth};
  const CostModel model(two, nullptr, Precision::kFp32, CostOptions{});
  CHECK(model.world_size() == 8);
  CHECK(model.collective_s(Collective::kAllGather, 80e6) == Approx(7.07e-3).epsilon(kRel));
  CHECK(model.collective_s(Collective::kReduceScatter, 80e6) == Approx(7.07e-3).epsilon(kRel));
  CHECK(model.collective_s(Collective::kAllReduce, 80e6) == Approx(14.14e-3).epsilon(kRel));

  // One node: an inter link in the description is not used.
  ClusterSpec one = synthetic_cluster(1, 8);
  one.intra = LinkSpec{2e-6, 100e9};
  one.inter = LinkSpec{kAlpha, kBandwidth};
  const CostModel intra_only(one, nullptr, Precision::kFp32, CostOptions{});
  CHECK(intra_only.collective_s(Collective::kAllGather, 80e6) ==
        Approx(ring(8, 2e-6, 100e9, 80e6)).epsilon(kRel));
}

// Calibrated segments: all-gather fitted as (3 us, 2 GB/s) up to 1 MiB and (10 us, 10 GB/s) above;
// all-reduce as (4 us, 20 GB/s) per half; reduce-scatter not calibrated, so the cluster's link
// (50 us, 1 GB/s here, deliberately different) prices it.
TEST_CASE("a calibration's segment covering the size prices the collective", "[cost]") {
  ClusterSpec cluster = synthetic_cluster();
  cluster.intra = LinkSpec{50e-6, 1e9};
  Calibration cal;
  cal.name = "test";
  cal.allgather = {Segment{1048576.0, 3e-6, 1.0 / 2e9}, Segment{kInf, 10e-6, 1.0 / 10e9}};
  cal.allreduce = {Segment{kInf, 4e-6, 1.0 / 20e9}};
  const CostModel model(cluster, &cal, Precision::kFp32, CostOptions{});

  CHECK(model.collective_s(Collective::kAllGather, 524288.0) ==
        Approx(ring(8, 3e-6, 2e9, 524288.0)).epsilon(kRel));
  // "covers sizes <= up_to": the boundary belongs to the lower segment.
  CHECK(model.collective_s(Collective::kAllGather, 1048576.0) ==
        Approx(ring(8, 3e-6, 2e9, 1048576.0)).epsilon(kRel));
  CHECK(model.collective_s(Collective::kAllGather, 1048577.0) ==
        Approx(ring(8, 10e-6, 10e9, 1048577.0)).epsilon(kRel));
  CHECK(model.collective_s(Collective::kAllGather, 80e6) == Approx(7.07e-3).epsilon(kRel));
  CHECK(model.collective_s(Collective::kReduceScatter, 80e6) ==
        Approx(ring(8, 50e-6, 1e9, 80e6)).epsilon(kRel));
  CHECK(model.collective_s(Collective::kAllReduce, 80e6) ==
        Approx(2 * ring(8, 4e-6, 20e9, 80e6)).epsilon(kRel));

  // Without compute or interference figures the cluster's stay; with them, the calibration's win.
  CHECK(model.compute().fp32_flops_per_s == 1e13);
  CHECK(model.interference() == 1.0);
  ComputeSpec measured = cluster.compute;
  measured.fp32_flops_per_s = 7e12;
  cal.compute = measured;
  cal.interference = 1.4;
  const CostModel calibrated(cluster, &cal, Precision::kFp32, CostOptions{});
  CHECK(calibrated.compute().fp32_flops_per_s == 7e12);
  CHECK(calibrated.interference() == 1.4);
}

// ---------------------------------------------------------------------------------------------------
// Compute.

// GEMM: t = overhead + max(flops / (peak eff d / (d + d_half)), bytes / memory bandwidth), d the
// smallest dimension. With the memory bandwidth made unbounded only the flops term is left:
//   4096 x 4096 x 4096 at batch 2 along m: 2 x 8192 x 4096^2 = 2.749e11 flops, d = 4096,
//   eff = 0.5 x 4096 / 4160; t = 5 us + flops / (1e13 eff).
//   16 x 4096 x 4096: d = 16, eff = 0.5 x 16 / 80 = 0.1.
// Elementwise: t = overhead + b bytes / memory bandwidth = 5 us + 3 x 1e6 / 5e11 = 11 us.
TEST_CASE("kernel_s follows the compute model", "[cost]") {
  ClusterSpec cluster = synthetic_cluster();
  cluster.compute.memory_bandwidth_bytes_per_s = 1e300;
  const CostModel fp32(cluster, nullptr, Precision::kFp32, CostOptions{});
  const CostModel mixed(cluster, nullptr, Precision::kMixed, CostOptions{});
  Kernel g;
  g.kind = KernelKind::kGemm;
  g.m = g.n = g.k = 4096;
  g.batch_dim = Dim::kM;
  const double flops = 2.0 * 8192 * 4096 * 4096;
  CHECK(g.flops(2) == flops);
  const double eff = 0.5 * 4096 / (4096 + 64);
  CHECK(fp32.kernel_s(g, 2) == Approx(5e-6 + flops / (1e13 * eff)).epsilon(kRel));
  CHECK(mixed.kernel_s(g, 2) == Approx(5e-6 + flops / (1e14 * eff)).epsilon(kRel));

  Kernel thin = g;
  thin.m = 16;
  thin.batch_dim = Dim::kN;  // the batch grows a large dimension: d stays 16
  CHECK(fp32.kernel_s(thin, 1) == Approx(5e-6 + 2.0 * 16 * 4096 * 4096 / (1e13 * 0.1)).epsilon(kRel));
  CHECK(fp32.kernel_s(thin, 2) == Approx(5e-6 + 2.0 * 16 * 8192 * 4096 / (1e13 * 0.1)).epsilon(kRel));

  Kernel ew;
  ew.kind = KernelKind::kElementwise;
  ew.bytes_per_sample = 1e6;
  const CostModel normal(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{});
  CHECK(normal.kernel_s(ew, 3) == Approx(11e-6).epsilon(kRel));
}

// Splitting a GEMM along its split dimension into n slices: n GEMMs of 1/n the flops. With no
// per-kernel overhead and flat efficiency (d_half = 0), a compute-bound split that needs no
// accumulation costs exactly the unsplit time; one that accumulates costs more (n - 1 sums of the
// output). Both GEMMs below stay compute-bound at n = 8: 1.07e9 flops per slice take 215 us at
// 5 TFLOP/s, their 19.4 MB of operands 39 us at 500 GB/s. With the synthetic figures, finer splits
// of a real operator never get cheaper.
TEST_CASE("kernels_s: splitting costs only overhead, efficiency and accumulation", "[cost]") {
  ClusterSpec flat = synthetic_cluster();
  flat.compute.kernel_overhead_s = 0;
  flat.compute.gemm_half_efficiency_dim = 0;
  const CostModel ideal(flat, nullptr, Precision::kFp32, CostOptions{});
  Kernel dx;  // grad-input of a [1024 x 4096] weight: split along n, nothing to sum
  dx.kind = KernelKind::kGemm;
  dx.m = 512;
  dx.n = 1024;
  dx.k = 4096;
  dx.batch_dim = Dim::kM;
  dx.split_dim = Dim::kN;
  Kernel fwd = dx;  // forward of the same weight: split along k, slices summed
  fwd.n = 4096;
  fwd.k = 1024;
  fwd.split_dim = Dim::kK;
  fwd.accumulates = true;
  for (const int n : {2, 4, 8}) {
    CAPTURE(n);
    CHECK(ideal.kernels_s({dx}, 2, n, 4) == Approx(ideal.kernels_s({dx}, 2, 1, 4)).epsilon(kRel));
    CHECK(ideal.kernels_s({fwd}, 2, n, 4) > ideal.kernels_s({fwd}, 2, 1, 4));
  }

  const CostModel model(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{});
  const Workload w = lower(load_model("gpt2-1.5b"));
  for (const auto& op : w.operators) {
    if (op.layer > 0) break;
    double prev_f = 0, prev_b = 0;
    for (const int n : op.splits(64)) {
      CAPTURE(op.name, n);
      const double f = model.kernels_s(op.forward, 2, n, 4), b = model.kernels_s(op.backward, 2, n, 4);
      CHECK(f >= prev_f);
      CHECK(b >= prev_b);
      prev_f = f;
      prev_b = b;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Time of a choice.

// GPT-2 XL layer-0 attention, fp32: P = 4h^2 + 6h = 10,249,600, S = w P = 40,998,400 B; N = 8.
//   one all-gather of S: 7 x 10 us + 7/8 x 40,998,400 / 1e10 s = 70 us + 3.58736 ms = 3.65736 ms
//   t_ZDP = 3(N-1) alpha + 3(N-1)/N S beta + b gamma = 10.97208 ms + b gamma
//   t_DP  = 2(N-1) alpha + 2(N-1)/N S beta + b gamma =  7.31472 ms + b gamma
//   split k of n: n gathers for forward, k again for backward, n reduce-scatters, all of S/n:
//     (2n + k) [(N-1) alpha + (N-1)/N (S/n) beta] + b gamma_n (gamma_n: the kernels cut n ways)
//   REPLICATE: one all-reduce of g P: 2(N-1) alpha + 2(N-1)/N g P beta + b gamma.
// gamma is the operator's compute per sample: its forward and backward kernels at batch 1. The paper
// tier has no overlap, whatever the cluster says.
TEST_CASE("paper tier: t_ZDP, t_DP, k-of-n splits and REPLICATE", "[cost]") {
  const Workload w = lower(load_model("gpt2-1.5b"));
  const Operator& att = find_op(w, "layer0.attention");
  REQUIRE(att.parameters() == 10'249'600);
  const double P = 10'249'600, S = 4 * P, N = 8;
  ClusterSpec cluster = synthetic_cluster();
  for (const bool overlap : {false, true}) {
    CAPTURE(overlap);
    cluster.overlap.enabled = overlap;
    cluster.overlap.interference = 1.2;
    const CostModel model(cluster, nullptr, Precision::kFp32, CostOptions{Tier::kPaper});
    const double gamma = model.kernels_s(att.forward, 1, 1, 4) + model.kernels_s(att.backward, 1, 1, 4);
    REQUIRE(gamma > 0);
    for (const int b : {1, 2, 5}) {
      CAPTURE(b);
      const ChoiceCost z = model.cost(att, zdp(), b, w.bytes);
      const ChoiceCost d = model.cost(att, dp(), b, w.bytes);
      CHECK(z.time_s ==
            Approx(3 * (N - 1) * kAlpha + 3 * (N - 1) / N * S / kBandwidth + b * gamma).epsilon(kRel));
      CHECK(d.time_s ==
            Approx(2 * (N - 1) * kAlpha + 2 * (N - 1) / N * S / kBandwidth + b * gamma).epsilon(kRel));
      CHECK(z.comm_s == Approx(10.97208e-3).epsilon(kRel));
      CHECK(d.comm_s == Approx(7.31472e-3).epsilon(kRel));
      CHECK(z.compute_s == Approx(b * gamma).epsilon(kRel));
      CHECK(z.time_s - d.time_s == Approx(3.65736e-3).epsilon(1e-9));  // one all-gather of S

      for (const int n : {2, 4, 8}) {
        const double gamma_n = model.kernels_s(att.forward, 1, n, 4) + model.kernels_s(att.backward, 1, n, 4);
        for (int k = 0; k <= n; ++k) {
          CAPTURE(n, k);
          const double unit = (N - 1) * kAlpha + (N - 1) / N * (S / n) / kBandwidth;
          const ChoiceCost c = model.cost(att, split(n, k), b, w.bytes);
          CHECK(c.comm_s == Approx((2 * n + k) * unit).epsilon(kRel));
          CHECK(c.time_s == Approx((2 * n + k) * unit + b * gamma_n).epsilon(kRel));
        }
      }
      const ChoiceCost r = model.cost(att, replicate(), b, w.bytes);
      CHECK(r.time_s ==
            Approx(2 * (N - 1) * kAlpha + 2 * (N - 1) / N * 4 * P / kBandwidth + b * gamma).epsilon(kRel));

      // Checkpointing recomputes the forward: gamma + forward, communication unchanged.
      const double fwd1 = model.kernels_s(att.forward, 1, 1, 4);
      const ChoiceCost zc = model.cost(att, zdp(true), b, w.bytes);
      CHECK(zc.compute_s == Approx(b * (gamma + fwd1)).epsilon(kRel));
      CHECK(zc.comm_s == Approx(z.comm_s).epsilon(kRel));
    }
  }
}

namespace {

struct Phases {
  double fwd, bwd, opt, comm_f, comm_b;
};

// The extended tier's parts, written from the header's formulas: per-kernel compute (the kernels
// cut n ways), recompute of the forward when checkpointed, the Adam step over the shard (the whole
// operator for REPLICATE); forward gathers n slices of w ceil(P/n), backward gathers the k ZDP slices
// again (twice with regather) and reduce-scatters n slices of g ceil(P/n); REPLICATE all-reduces g P.
Phases phases(const CostModel& m, const Operator& op, const Choice& ch, int b, const PrecisionBytes& B,
              bool regather) {
  const std::int64_t P = op.parameters();
  const int n = ch.replicate ? 1 : ch.split, k = ch.replicate ? 0 : ch.zdp_slices;
  const bool ckpt = ch.checkpoint && op.checkpointable;
  Phases p{};
  p.fwd = m.kernels_s(op.forward, b, n, B.activation);
  p.bwd = m.kernels_s(op.backward, b, n, B.activation) + (ckpt ? p.fwd : 0.0);
  p.opt = m.optimizer_s(ch.replicate ? static_cast<double>(P) : ceil_div(P, m.world_size()), B);
  const double N = m.world_size();
  const LinkSpec link{kAlpha, kBandwidth};
  if (ch.replicate) {
    p.comm_f = 0;
    p.comm_b = 2 * ring(N, link.alpha_s, link.bandwidth_bytes_per_s, B.gradient * static_cast<double>(P));
  } else {
    const double Ps = ceil_div(P, n);
    const double ag = ring(N, link.alpha_s, link.bandwidth_bytes_per_s, B.weight * Ps);
    const double rs = ring(N, link.alpha_s, link.bandwidth_bytes_per_s, B.gradient * Ps);
    p.comm_f = n * ag;
    p.comm_b = (k + (ckpt && regather ? k : 0)) * ag + n * rs;
  }
  return p;
}

// ov(x, c) with interference i: compute slows by i while a collective runs. If the collective
// outlasts the slowed compute (c >= i x) it hides the compute entirely: c. Otherwise the compute
// runs slowed for c / i of its work while the collective runs, then at full speed: c + (x - c/i).
double overlap_oracle(double x, double c, double i) {
  return c >= i * x ? c : x + c - c / i;
}

}  // namespace

TEST_CASE("extended tier without overlap: compute + communication", "[cost]") {
  for (const auto& op : sample_operators()) {
    const bool mixed = op.kind == OperatorKind::kProjection || op.kind == OperatorKind::kHead;
    const Precision prec = mixed ? Precision::kMixed : Precision::kFp32;
    const PrecisionBytes B = precision_bytes(prec);
    for (const bool regather : {false, true}) {
      const CostModel model(synthetic_cluster(), nullptr, prec, CostOptions{Tier::kExtended, regather});
      REQUIRE(!model.overlap());
      for (const Choice& ch : all_choices(op)) {
        for (const int b : {1, 4}) {
          CAPTURE(op.name, ch.label(), b, regather);
          const Phases p = phases(model, op, ch, b, B, regather);
          const ChoiceCost c = model.cost(op, ch, b, B);
          CHECK(c.comm_s == Approx(p.comm_f + p.comm_b).epsilon(kRel));
          CHECK(c.compute_s == Approx(p.fwd + p.bwd + p.opt).epsilon(kRel));
          CHECK(c.time_s == Approx(c.compute_s + c.comm_s).epsilon(kRel));
        }
      }
    }
  }
}

TEST_CASE("extended tier with overlap: each phase overlaps its own communication", "[cost]") {
  for (const double interference : {1.0, 1.25}) {
    ClusterSpec cluster = synthetic_cluster();
    cluster.overlap.enabled = true;
    cluster.overlap.interference = interference;
    for (const auto& op : sample_operators()) {
      const bool mixed = op.kind == OperatorKind::kProjection || op.kind == OperatorKind::kHead;
      const Precision prec = mixed ? Precision::kMixed : Precision::kFp32;
      const PrecisionBytes B = precision_bytes(prec);
      const CostModel model(cluster, nullptr, prec, CostOptions{});
      for (const Choice& ch : all_choices(op)) {
        for (const int b : {1, 4}) {
          CAPTURE(interference, op.name, ch.label(), b);
          const Phases p = phases(model, op, ch, b, B, false);
          const ChoiceCost c = model.cost(op, ch, b, B);
          CHECK(c.comm_s == Approx(p.comm_f + p.comm_b).epsilon(kRel));
          CHECK(c.compute_s == Approx(p.fwd + p.bwd + p.opt).epsilon(kRel));
          if (interference == 1.0) {
            CHECK(c.time_s ==
                  Approx(std::max(p.fwd, p.comm_f) + std::max(p.bwd, p.comm_b) + p.opt).epsilon(kRel));
          } else {
            CHECK(c.time_s == Approx(overlap_oracle(p.fwd, p.comm_f, interference) +
                                     overlap_oracle(p.bwd, p.comm_b, interference) + p.opt)
                                  .epsilon(kRel));
          }
          CHECK(c.time_s <= (c.compute_s + c.comm_s) * (1 + kRel));
        }
      }
    }
  }
}

// ov(x, c, i): never less than either stream alone, never more than running them in turn; no
// communication leaves the compute as it is; continuous where the collective starts to dominate
// (c = i x); i = 1 is perfect overlap, max(x, c); monotone in both.
TEST_CASE("overlapped_s lies between max(x, c) and x + c", "[cost]") {
  const std::vector<double> xs{0.0, 1e-6, 1e-3, 0.25, 2.5};
  const std::vector<double> cs{0.0, 1e-7, 1e-3, 0.1, 0.3, 2.5, 10.0};
  for (const double i : {1.0, 1.1, 1.5, 2.0, 4.0}) {
    for (const double x : xs) {
      CAPTURE(i, x);
      CHECK(CostModel::overlapped_s(x, 0.0, i) == x);
      double prev = 0;
      for (const double c : cs) {
        CAPTURE(c);
        const double t = CostModel::overlapped_s(x, c, i);
        CHECK(t >= std::max(x, c) * (1 - kRel));
        CHECK(t <= (x + c) * (1 + kRel));
        CHECK(t >= prev * (1 - kRel));  // more communication never finishes sooner
        CHECK(t == Approx(overlap_oracle(x, c, i)).epsilon(kRel));
        if (i == 1.0) CHECK(t == Approx(std::max(x, c)).epsilon(kRel));
        prev = t;
      }
      // Continuity at c = i x.
      const double edge = i * x, eps = 1e-9;
      CHECK(CostModel::overlapped_s(x, edge * (1 - eps), i) == Approx(edge).epsilon(1e-8).margin(1e-15));
      CHECK(CostModel::overlapped_s(x, edge * (1 + eps), i) == Approx(edge).epsilon(1e-8).margin(1e-15));
      CHECK(CostModel::overlapped_s(x, edge, i) == Approx(edge).epsilon(kRel).margin(1e-300));
    }
    // More compute never finishes sooner either.
    for (const double c : cs) {
      double prev = 0;
      for (const double x : xs) {
        const double t = CostModel::overlapped_s(x, c, i);
        CHECK(t >= prev * (1 - kRel));
        prev = t;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Memory.

// A hand-made operator with an odd parameter count so that the ceilings show: a 10 x 100 weight and
// one bias, P = 1001; saves 5000 B per sample, keeps 1000 B (its input) when checkpointed, 700 B of
// backward workspace. N = 8, b = 3.
//   ceil(P/8) = 126, ceil(P/4) = 251.
//   fp32 (w, g, o) = (4, 4, 8): shards (w+g+o) ceil(P/N) = 16 x 126 = 2016; activations 3 x 5000 = 15000.
//   DP:          persistent 2016 + 4 x 1001 + 15000 = 21020      transient 4 x 1001 + 2100 = 6104
//   ZDP:         persistent 2016 + 15000 = 17016                 transient 4004 + 4004 + 2100 = 10108
//   split4:1zdp: persistent 2016 + 3 x 4 x 251 + 15000 = 20028   transient 1004 + 1004 + 2100 = 4108
//   split4:0zdp: persistent 2016 + 4 x 4 x 251 + 15000 = 21032   transient 1004 + 2100 = 3104
//   split4:4zdp: persistent 17016                                transient 4108
//   REPLICATE:   persistent 16 x 1001 + 15000 = 31016            transient 2100
//   checkpointed: activations 3 x 1000 = 3000, and 3 x (5000 - 1000) = 12000 recomputed in backward:
//   DP+ckpt:     persistent 2016 + 4004 + 3000 = 9020            transient 6104 + 12000 = 18104
//   ZDP+ckpt:    persistent 2016 + 3000 = 5016                   transient 10108 + 12000 = 22108
//   REPL+ckpt:   persistent 16016 + 3000 = 19016                 transient 2100 + 12000 = 14100
//   mixed (2, 2, 12): shards 16 x 126 = 2016 again;
//   DP:          persistent 2016 + 2002 + 15000 = 19018          transient 2002 + 2100 = 4102
//   ZDP:         persistent 17016                                transient 2002 + 2002 + 2100 = 6104
//   tied (fp32): the full gradient g P = 4004 lives through the backward, so it is persistent, and
//                no slice gradient is transient:
//   DP:          persistent 21020 + 4004 = 25024                 transient 2100
//   ZDP:         persistent 17016 + 4004 = 21020                 transient 4004 + 2100 = 6104
//   REPLICATE:   persistent 31016 (its gradient is already whole) transient 2100
TEST_CASE("memory of a hand-made operator: shards, held weights, activations, ceilings", "[cost]") {
  Operator op;
  op.name = "toy";
  op.weights = {Weight{"w", 10, 100, true}, Weight{"b", 1, 1, false}};
  op.saved_bytes_per_sample = 5000;
  op.input_bytes_per_sample = 1000;
  op.workspace_bytes_per_sample = 700;
  op.checkpointable = true;
  REQUIRE(op.parameters() == 1001);
  const PrecisionBytes fp32 = precision_bytes(Precision::kFp32);
  const PrecisionBytes mixed = precision_bytes(Precision::kMixed);
  for (const Tier tier : {Tier::kPaper, Tier::kExtended}) {
    CAPTURE(to_string(tier));
    const CostModel m(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{tier});
    const auto check = [&](const Choice& ch, const PrecisionBytes& B, double persistent, double transient) {
      CAPTURE(ch.label());
      const ChoiceCost c = m.cost(op, ch, 3, B);
      CHECK(c.persistent_bytes == persistent);
      CHECK(c.transient_bytes == transient);
    };
    check(dp(), fp32, 21020, 6104);
    check(zdp(), fp32, 17016, 10108);
    check(split(4, 1), fp32, 20028, 4108);
    check(split(4, 0), fp32, 21032, 3104);
    check(split(4, 4), fp32, 17016, 4108);
    check(replicate(), fp32, 31016, 2100);
    check(dp(true), fp32, 9020, 18104);
    check(zdp(true), fp32, 5016, 22108);
    check(replicate(true), fp32, 19016, 14100);
    check(dp(), mixed, 19018, 4102);
    check(zdp(), mixed, 17016, 6104);

    op.tied_gradient = true;
    check(dp(), fp32, 25024, 2100);
    check(zdp(), fp32, 21020, 6104);
    check(replicate(), fp32, 31016, 2100);
    op.tied_gradient = false;

    // An operator that cannot be checkpointed ignores the request.
    op.checkpointable = false;
    check(dp(true), fp32, 21020, 6104);
    check(zdp(true), fp32, 17016, 10108);
    op.checkpointable = true;
  }
}

// GPT-2 XL layer-0 attention, N = 8, b = 2: P = 10,249,600 = 8 x 1,281,200 = 4 x 2,562,400.
//   fp32 (4, 4, 8):  shards 16 x 1,281,200 = 20,499,200; gathered weights w P = 40,998,400;
//                    a slice w P/4 = g P/4 = 10,249,600.
//   mixed (2, 2, 12): shards 16 x 1,281,200 = 20,499,200; w P = 20,499,200; w P/4 = 5,124,800.
// Activations from the operator (their values are checked in test_workload.cpp).
TEST_CASE("memory of a real attention operator: DP, ZDP, split, REPLICATE, checkpointed", "[cost]") {
  ModelSpec spec = load_model("gpt2-1.5b");
  for (const Precision prec : {Precision::kFp32, Precision::kMixed}) {
    CAPTURE(to_string(prec));
    spec.precision = prec;
    const Workload w = lower(spec);
    const Operator& att = find_op(w, "layer0.attention");
    const CostModel m(synthetic_cluster(), nullptr, prec, CostOptions{});
    const double wb = prec == Precision::kFp32 ? 4 : 2;  // w = g
    const double shards = 20'499'200, full = wb * 10'249'600, quarter = wb * 2'562'400;
    const double b = 2, saved = b * att.saved_bytes_per_sample, input = b * att.input_bytes_per_sample;
    const double ws = b * att.workspace_bytes_per_sample;
    const auto check = [&](const Choice& ch, double persistent, double transient) {
      CAPTURE(ch.label());
      const ChoiceCost c = m.cost(att, ch, 2, w.bytes);
      CHECK(c.persistent_bytes == Approx(persistent).epsilon(kRel));
      CHECK(c.transient_bytes == Approx(transient).epsilon(kRel));
    };
    check(dp(), shards + full + saved, full + ws);
    check(zdp(), shards + saved, 2 * full + ws);
    check(split(4, 1), shards + 3 * quarter + saved, 2 * quarter + ws);
    check(split(4, 3), shards + quarter + saved, 2 * quarter + ws);
    check(replicate(), 16 * 10'249'600.0 + saved, ws);
    check(dp(true), shards + full + input, full + ws + saved - input);
    check(zdp(true), shards + input, 2 * full + ws + saved - input);
    check(split(4, 1, true), shards + 3 * quarter + input, 2 * quarter + ws + saved - input);
    check(replicate(true), 16 * 10'249'600.0 + input, ws + saved - input);
  }
}

// The tied embedding of GPT-2 XL: P = V h + s h + 2h = 80,411,200 + 1,638,400 + 3,200 = 82,052,800,
// ceil(P/8) = 10,256,600; fp32. Its full gradient (g P) is persistent, none is transient.
TEST_CASE("memory of the tied embedding keeps its whole gradient", "[cost]") {
  const Workload w = lower(load_model("gpt2-1.5b"));
  const Operator& emb = w.operators.front();
  REQUIRE(emb.parameters() == 82'052'800);
  REQUIRE(emb.tied_gradient);
  const CostModel m(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{});
  const double P = 82'052'800, shards = 16 * 10'256'600.0, b = 2;
  const double saved = b * emb.saved_bytes_per_sample, ws = b * emb.workspace_bytes_per_sample;
  const ChoiceCost d = m.cost(emb, dp(), 2, w.bytes);
  CHECK(d.persistent_bytes == Approx(shards + 4 * P + saved + 4 * P).epsilon(kRel));
  CHECK(d.transient_bytes == Approx(ws).epsilon(kRel));
  const ChoiceCost z = m.cost(emb, zdp(), 2, w.bytes);
  CHECK(z.persistent_bytes == Approx(shards + saved + 4 * P).epsilon(kRel));
  CHECK(z.transient_bytes == Approx(4 * P + ws).epsilon(kRel));
  const ChoiceCost s = m.cost(emb, split(4, 2), 2, w.bytes);  // P / 4 = 20,513,200
  CHECK(s.persistent_bytes == Approx(shards + 2 * 4 * 20'513'200.0 + saved + 4 * P).epsilon(kRel));
  CHECK(s.transient_bytes == Approx(4 * 20'513'200.0 + ws).epsilon(kRel));
  const ChoiceCost r = m.cost(emb, replicate(), 2, w.bytes);
  CHECK(r.persistent_bytes == Approx(16 * P + saved).epsilon(kRel));
  CHECK(r.transient_bytes == Approx(ws).epsilon(kRel));
}

// ---------------------------------------------------------------------------------------------------
// Properties, over every kind of operator and every choice.

TEST_CASE("more bandwidth or less latency is never slower", "[cost]") {
  const auto ops = sample_operators();
  for (const Tier tier : {Tier::kPaper, Tier::kExtended}) {
    for (const bool overlap : {false, true}) {
      for (const double interference : {1.0, 1.3}) {
        ClusterSpec slow = synthetic_cluster(2, 4);
        slow.inter = LinkSpec{kAlpha, kBandwidth};
        slow.overlap.enabled = overlap;
        slow.overlap.interference = interference;
        ClusterSpec wide = slow, quick = slow;
        wide.inter->bandwidth_bytes_per_s = 2 * kBandwidth;
        quick.inter->alpha_s = kAlpha / 4;
        for (const auto& op : ops) {
          const Precision prec = op.kind == OperatorKind::kProjection || op.kind == OperatorKind::kHead
                                     ? Precision::kMixed
                                     : Precision::kFp32;
          const PrecisionBytes B = precision_bytes(prec);
          const CostModel m_slow(slow, nullptr, prec, CostOptions{tier});
          const CostModel m_wide(wide, nullptr, prec, CostOptions{tier});
          const CostModel m_quick(quick, nullptr, prec, CostOptions{tier});
          for (const Choice& ch : all_choices(op)) {
            for (const int b : {1, 4}) {
              CAPTURE(to_string(tier), overlap, interference, op.name, ch.label(), b);
              const double t = m_slow.cost(op, ch, b, B).time_s;
              CHECK(m_wide.cost(op, ch, b, B).time_s <= t * (1 + kRel));
              CHECK(m_quick.cost(op, ch, b, B).time_s <= t * (1 + kRel));
            }
          }
        }
      }
    }
  }
}

// Splitting never increases the transient: with k = 0 (all DP) only the slice gradient g ceil(P/n)
// is transient; with k > 0 one gathered slice w ceil(P/n) too; both shrink as n grows.
// More ZDP slices never increase the persistent bytes ((n - k) w ceil(P/n) held), so ZDP <= DP;
// checkpointing keeps the input instead of every saved activation (input <= saved).
TEST_CASE("memory properties: splitting, ZDP and checkpointing never cost memory", "[cost]") {
  const CostModel m(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{});
  for (const auto& op : sample_operators()) {
    const PrecisionBytes B = precision_bytes(
        op.kind == OperatorKind::kProjection || op.kind == OperatorKind::kHead ? Precision::kMixed
                                                                               : Precision::kFp32);
    const std::vector<int> ns = op.splits(16);
    for (const bool ckpt : {false, true}) {
      for (const int b : {1, 3}) {
        CAPTURE(op.name, ckpt, b);
        const auto cost = [&](int n, int k) { return m.cost(op, split(n, k, ckpt), b, B); };
        CHECK(cost(1, 1).persistent_bytes <= cost(1, 0).persistent_bytes);
        for (std::size_t i = 0; i < ns.size(); ++i) {
          const int n = ns[i];
          for (int k = 1; k <= n; ++k) {
            CAPTURE(n, k);
            CHECK(cost(n, k).persistent_bytes <= cost(n, k - 1).persistent_bytes);
          }
          for (std::size_t j = i + 1; j < ns.size(); ++j) {
            const int fine = ns[j];
            CAPTURE(n, fine);
            CHECK(cost(fine, 0).transient_bytes <= cost(n, 0).transient_bytes);
            for (int k = 1; k <= n; ++k)
              for (int kf = 1; kf <= fine; ++kf)
                CHECK(cost(fine, kf).transient_bytes <= cost(n, k).transient_bytes);
          }
        }
      }
    }
    for (const Choice& ch : all_choices(op)) {
      if (ch.checkpoint) continue;
      Choice with = ch;
      with.checkpoint = true;
      CAPTURE(op.name, ch.label());
      CHECK(m.cost(op, with, 4, B).persistent_bytes <= m.cost(op, ch, 4, B).persistent_bytes);
      // Memory does not depend on the links or on the tier.
      const CostModel paper(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{Tier::kPaper});
      CHECK(paper.cost(op, ch, 4, B).persistent_bytes == m.cost(op, ch, 4, B).persistent_bytes);
      CHECK(paper.cost(op, ch, 4, B).transient_bytes == m.cost(op, ch, 4, B).transient_bytes);
    }
  }
}

TEST_CASE("time grows with the batch (never decreases under overlap)", "[cost]") {
  const auto ops = sample_operators();
  for (const Tier tier : {Tier::kPaper, Tier::kExtended}) {
    for (const bool overlap : {false, true}) {
      ClusterSpec cluster = synthetic_cluster();
      cluster.overlap.enabled = overlap;
      cluster.overlap.interference = 1.2;
      for (const auto& op : ops) {
        const Precision prec = op.kind == OperatorKind::kProjection || op.kind == OperatorKind::kHead
                                   ? Precision::kMixed
                                   : Precision::kFp32;
        const PrecisionBytes B = precision_bytes(prec);
        const CostModel m(cluster, nullptr, prec, CostOptions{tier});
        // Compute grows with every sample. Without overlap (the paper tier never overlaps) the time
        // does too; with overlap a phase whose collective hides its compute stays at the collective's
        // time, so there the time only never decreases.
        const bool strict = tier == Tier::kPaper || !overlap;
        for (const Choice& ch : all_choices(op)) {
          CAPTURE(to_string(tier), overlap, op.name, ch.label());
          double prev_time = 0, prev_compute = 0;
          for (int b = 1; b <= 6; ++b) {
            const ChoiceCost c = m.cost(op, ch, b, B);
            CHECK(c.compute_s > prev_compute);
            if (strict) {
              CHECK(c.time_s > prev_time);
            } else {
              CHECK(c.time_s >= prev_time);
            }
            prev_time = c.time_s;
            prev_compute = c.compute_s;
          }
        }
      }
    }
  }
}
