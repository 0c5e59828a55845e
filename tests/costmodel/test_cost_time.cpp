// Closed-form oracle and property tests of the cost model's time (costmodel::CostModel): kernels, and the
// time of a choice in both tiers. The expected values are written here from the formulas of DESIGN.md
// section 4, REFERENCE.md and the seed paper, on the synthetic cluster of cost_fixtures.hpp (8 ranks,
// alpha 10 us, 10 GB/s, known compute figures):
//   paper tier: t_ZDP = 3(N-1) alpha + 3(N-1)/N S beta + b gamma, t_DP = 2(...) + b gamma, S = w P;
//   extended tier: compute + communication, or per phase the overlapped time.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cost_fixtures.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/choice.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"

using namespace osdp::costmodel;
using namespace osdp::costmodel::cost_fixtures;

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
// per-kernel overhead, flat efficiency (d_half = 0) and adding into C free, a compute-bound split
// costs exactly the unsplit time, whether its slices make partial sums (k split) or not (n split).
// Both GEMMs below stay compute-bound at n = 8: 1.07e9 flops per slice take 215 us at 5 TFLOP/s,
// their 19.4 MB of operands 39 us at 500 GB/s. What a split adds: each partial sum after the first
// reads C once more, [1024 x 4096] fp32 at batch 2 = 16.8 MB at the accumulate bandwidth, and each
// slice, of a GEMM or of an elementwise kernel over heads or ffn columns, is one more launch (the
// overhead). With the
// synthetic figures (overhead, d_half > 0) finer splits of a real operator never get cheaper.
TEST_CASE("kernels_s: splitting costs only overhead, efficiency and the partial sums", "[cost]") {
  ClusterSpec flat = synthetic_cluster();
  flat.compute.kernel_overhead_s = 0;
  flat.compute.gemm_half_efficiency_dim = 0;
  flat.compute.accumulate_bandwidth_bytes_per_s = 1e300;
  const CostModel ideal(flat, nullptr, Precision::kFp32, CostOptions{});
  Kernel dx;  // grad-input of a [1024 x 4096] weight: split along n, nothing to sum
  dx.kind = KernelKind::kGemm;
  dx.m = 512;
  dx.n = 1024;
  dx.k = 4096;
  dx.batch_dim = Dim::kM;
  dx.split_dim = Dim::kN;
  Kernel fwd = dx;  // forward of the same weight: split along k, slices summed in place
  fwd.n = 4096;
  fwd.k = 1024;
  fwd.split_dim = Dim::kK;
  for (const int n : {2, 4, 8}) {
    CAPTURE(n);
    CHECK(ideal.kernels_s({dx}, 2, n) == Approx(ideal.kernels_s({dx}, 2, 1)).epsilon(kRel));
    CHECK(ideal.kernels_s({fwd}, 2, n) == Approx(ideal.kernels_s({fwd}, 2, 1)).epsilon(kRel));
  }
  ClusterSpec summing = flat;
  summing.compute.accumulate_bandwidth_bytes_per_s = 4e11;
  summing.compute.kernel_overhead_s = 3e-6;
  const CostModel sums(summing, nullptr, Precision::kFp32, CostOptions{});
  const CostModel sums_bf16(summing, nullptr, Precision::kMixed, CostOptions{});
  Kernel act;  // an activation over the ffn columns: 1 MB per sample, one launch per slice
  act.kind = KernelKind::kElementwise;
  act.bytes_per_sample = 1e6;
  act.tp_sliced = true;
  Kernel norm = act;  // a norm over the hidden state: not cut
  norm.tp_sliced = false;
  const double c_bytes = 1024.0 * 4096 * 4;
  for (const int n : {2, 4, 8}) {
    CAPTURE(n);
    CHECK(sums.kernels_s({dx}, 2, n) == Approx(sums.kernels_s({dx}, 2, 1) + (n - 1) * 3e-6).epsilon(kRel));
    CHECK(sums.kernels_s({fwd}, 2, n) ==
          Approx(sums.kernels_s({fwd}, 2, 1) + (n - 1) * (3e-6 + c_bytes / 4e11)).epsilon(kRel));
    // bf16 partial sums: half the bytes of C (the slices, memory-bound at bf16's peak, priced apart).
    CHECK(sums_bf16.kernels_s({fwd}, 2, n) ==
          Approx(n * sums_bf16.kernel_s(fwd.slice(n), 2) + (n - 1) * c_bytes / 2 / 4e11).epsilon(kRel));
    CHECK(sums.kernels_s({act}, 2, n) == Approx(3e-6 + 2e6 / 5e11 + (n - 1) * 3e-6).epsilon(kRel));
    CHECK(sums.kernels_s({norm}, 2, n) == Approx(3e-6 + 2e6 / 5e11).epsilon(kRel));
  }
  // Without an accumulate bandwidth of its own, adding into C goes at the memory bandwidth.
  ClusterSpec plain = flat;
  plain.compute.accumulate_bandwidth_bytes_per_s = 0;
  const CostModel memory(plain, nullptr, Precision::kFp32, CostOptions{});
  CHECK(memory.kernels_s({fwd}, 2, 4) ==
        Approx(memory.kernels_s({fwd}, 2, 1) + 3 * c_bytes / plain.compute.memory_bandwidth_bytes_per_s)
            .epsilon(kRel));

  const CostModel model(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{});
  const Workload w = lower(load_model("gpt2-1.5b"));
  for (const auto& op : w.operators) {
    if (op.layer > 0) break;
    double prev_f = 0, prev_b = 0;
    for (const int n : op.splits(64)) {
      CAPTURE(op.name, n);
      const double f = model.kernels_s(op.forward, 2, n), b = model.kernels_s(op.backward, 2, n);
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
    const double gamma = model.kernels_s(att.forward, 1, 1) + model.kernels_s(att.backward, 1, 1);
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
        const double gamma_n = model.kernels_s(att.forward, 1, n) + model.kernels_s(att.backward, 1, n);
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
      const double fwd1 = model.kernels_s(att.forward, 1, 1);
      const ChoiceCost zc = model.cost(att, zdp(true), b, w.bytes);
      CHECK(zc.compute_s == Approx(b * (gamma + fwd1)).epsilon(kRel));
      CHECK(zc.comm_s == Approx(z.comm_s).epsilon(kRel));
    }
  }
}

namespace {

double ceil_div(std::int64_t a, std::int64_t b) {
  return static_cast<double>((a + b - 1) / b);
}

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
  p.fwd = m.kernels_s(op.forward, b, n);
  p.bwd = m.kernels_s(op.backward, b, n) + (ckpt ? p.fwd : 0.0);
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
      CostOptions prefetching;
      prefetching.prefetch = 1;  // with prefetch 0 nothing overlaps (checked below)
      const CostModel model(cluster, nullptr, prec, prefetching);
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
          // Without prefetch nothing overlaps: the sum.
          const CostModel serial(cluster, nullptr, prec, CostOptions{});
          const ChoiceCost s = serial.cost(op, ch, b, B);
          CHECK(s.time_s == Approx(s.compute_s + s.comm_s).epsilon(kRel));
        }
      }
    }
  }
}

// A runtime that pays for REPLICATE beyond its all-reduce (FSDP2's (world x 1) mesh: ComputeSpec's
// replicate_overhead and replicate_bandwidth) adds, to a REPLICATE choice only, overhead + w P /
// bandwidth once per step, outside the overlap: with 2 ms and 1 GB/s the time of every REPLICATE choice
// grows by exactly that, with or without prefetch; no other choice moves, and the paper tier (which
// prices no runtime) ignores it.
TEST_CASE("REPLICATE pays the runtime's copies once per step, beside the optimizer", "[cost]") {
  ClusterSpec plain = synthetic_cluster();
  plain.overlap.enabled = true;
  ClusterSpec fsdp2 = plain;
  fsdp2.compute.replicate_overhead_s = 2e-3;
  fsdp2.compute.replicate_bandwidth_bytes_per_s = 1e9;
  int replicated = 0;
  for (const auto& op : sample_operators()) {
    const Precision prec = op.kind == OperatorKind::kProjection ? Precision::kMixed : Precision::kFp32;
    const PrecisionBytes B = precision_bytes(prec);
    const double copies = 2e-3 + B.weight * static_cast<double>(op.parameters()) / 1e9;
    for (const int prefetch : {0, 1}) {
      CostOptions o;
      o.prefetch = prefetch;
      CostOptions paper = o;
      paper.tier = Tier::kPaper;
      const CostModel without(plain, nullptr, prec, o), with(fsdp2, nullptr, prec, o);
      const CostModel paper_without(plain, nullptr, prec, paper), paper_with(fsdp2, nullptr, prec, paper);
      CHECK(with.replicate_s(B.weight * static_cast<double>(op.parameters())) ==
            Approx(copies).epsilon(kRel));
      CHECK(without.replicate_s(B.weight * static_cast<double>(op.parameters())) == 0.0);
      for (const Choice& ch : all_choices(op)) {
        CAPTURE(op.name, ch.label(), prefetch);
        const ChoiceCost a = without.cost(op, ch, 2, B), b = with.cost(op, ch, 2, B);
        CHECK(b.time_s - a.time_s == Approx(ch.replicate ? copies : 0.0).margin(1e-12));
        CHECK(b.compute_s - a.compute_s == Approx(ch.replicate ? copies : 0.0).margin(1e-12));
        CHECK(b.comm_s == a.comm_s);
        CHECK(paper_with.cost(op, ch, 2, B).time_s == paper_without.cost(op, ch, 2, B).time_s);
        replicated += ch.replicate;
      }
    }
  }
  CHECK(replicated >= 4);
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
// Properties of the time, over every kind of operator and every choice.

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
