// Closed-form oracle tests of the cost model's collectives (costmodel::CostModel::collective_s). The
// expected values are written here from the formulas of DESIGN.md section 4, REFERENCE.md and the seed
// paper, on the synthetic cluster of cost_fixtures.hpp (8 ranks, alpha 10 us, 10 GB/s):
//   ring all-gather / reduce-scatter of a buffer S over N ranks: N - 1 steps of alpha + (S/N) beta,
//     t = (N-1) alpha + (N-1)/N S beta;  all-reduce (reduce-scatter then all-gather) = twice that;
//   a calibration's fitted segment, where one covers the size, replaces the cluster's link.
#include <string>

#include <catch2/catch.hpp>

#include "cost_fixtures.hpp"
#include "costmodel/calibration.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/choice.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/workload.hpp"

using namespace osdp::costmodel;
using namespace osdp::costmodel::cost_fixtures;

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
  const double gamma = paper.kernels_s(att.forward, 1, 1) + paper.kernels_s(att.backward, 1, 1);
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
// Sharding groups and two-level collectives (issue 14), on 4 nodes of 8 (N = 32, M = 4, G = 8), with
// intra 5 us and 100 GB/s and inter 20 us and 10 GB/s. For a slice of S = 64e6 B gathered and R =
// 64e6 B reduced (fp32 weights and gradients), the opening comment of cost_model.hpp gives
//   world, flat:      AG = ring(32, inter, S)                    = 31 x 20 us + 31/32 x 6.4 ms
//   world, two-level: AG = ring(4, inter, S/8) + ring(8, intra, S)
//                     RS = ring(8, intra, R) + ring(4, inter, R/8)
//   node:             AG = ring(8, intra, S)
//                     RS = ring(8, intra, R) + 2 ring(4, inter, R/8)   (the all-reduce of the shard)
TEST_CASE("node groups and two-level collectives are priced per level", "[cost][groups]") {
  ClusterSpec c = synthetic_cluster(4, 8);
  c.intra = LinkSpec{5e-6, 100e9};
  c.inter = LinkSpec{20e-6, 10e9};
  const CostModel model(c, nullptr, Precision::kFp32, CostOptions{});
  REQUIRE(model.two_levels());
  const double S = 64e6, R = 64e6;
  const double in_ag = ring(8, 5e-6, 100e9, S), in_rs = ring(8, 5e-6, 100e9, R);
  const double out_ag = ring(4, 20e-6, 10e9, S / 8), out_rs = ring(4, 20e-6, 10e9, R / 8);

  Choice world = zdp(), two = zdp(), node = zdp();
  two.two_level = true;
  node.node_group = true;
  const auto flat = model.shard_comm_s(world, S, R);
  CHECK(flat.all_gather_s == Approx(ring(32, 20e-6, 10e9, S)).epsilon(kRel));
  CHECK(flat.reduce_scatter_s == Approx(ring(32, 20e-6, 10e9, R)).epsilon(kRel));
  const auto t = model.shard_comm_s(two, S, R);
  CHECK(t.all_gather_s == Approx(out_ag + in_ag).epsilon(kRel));
  CHECK(t.reduce_scatter_s == Approx(in_rs + out_rs).epsilon(kRel));
  const auto n = model.shard_comm_s(node, S, R);
  CHECK(n.all_gather_s == Approx(in_ag).epsilon(kRel));
  CHECK(n.reduce_scatter_s == Approx(in_rs + 2 * out_rs).epsilon(kRel));
  // In figures: the flat ring moves 31/32 of S over the slow link, two-level 3/4 of S/8 of it.
  CHECK(flat.all_gather_s == Approx(31 * 20e-6 + 31.0 / 32 * 6.4e-3).epsilon(kRel));
  CHECK(t.all_gather_s == Approx(3 * 20e-6 + 0.75 * 0.8e-3 + 7 * 5e-6 + 7.0 / 8 * 0.64e-3).epsilon(kRel));

  // A ZDP operator's choice cost carries them: forward one all-gather, backward one more and the
  // reduce-scatter (prefetch 0: times add).
  const Workload w = lower(load_model("gpt2-1.5b"));
  const Operator& att = find_op(w, "layer0.attention");
  const double P = static_cast<double>(att.parameters());
  for (const Choice& ch : {world, two, node}) {
    const auto sc = model.shard_comm_s(ch, 4 * P, 4 * P);
    CHECK(model.cost(att, ch, 2, w.bytes).comm_s ==
          Approx(2 * sc.all_gather_s + sc.reduce_scatter_s).epsilon(kRel));
  }
}

// With a calibration that measured the rings of the nodes (`osdp calibrate --per-node 8`), each
// level's collective is the ring formula at that level's ring size on the segment covering its
// buffer: two-level AG = ring(4, inter segment, S/8) + ring(8, intra segment, S); a collective the
// calibration has no level segments for stays on the cluster's link of its level, and the flat world
// ring keeps the world segments.
TEST_CASE("a calibration's per-level segments price the rings of a node and across nodes", "[cost][groups]") {
  ClusterSpec c = synthetic_cluster(4, 8);
  c.intra = LinkSpec{5e-6, 100e9};
  c.inter = LinkSpec{20e-6, 10e9};
  Calibration cal;
  cal.name = "levels";
  cal.allgather = {Segment{kInf, 30e-6, 1.0 / 5e9}};
  cal.per_node = 8;
  cal.intra.allgather = {Segment{1e6, 2e-6, 1.0 / 50e9}, Segment{kInf, 3e-6, 1.0 / 80e9}};
  cal.inter.allgather = {Segment{kInf, 40e-6, 1.0 / 4e9}};
  cal.inter.allreduce = {Segment{kInf, 50e-6, 1.0 / 3e9}};
  const CostModel model(c, &cal, Precision::kFp32, CostOptions{});
  const double S = 64e6, R = 64e6;
  Choice two = zdp(), node = zdp();
  two.two_level = true;
  node.node_group = true;
  // S/8 = 8e6 B across nodes, S = 64e6 B within: both above 1e6, the intra ring on its second segment.
  CHECK(model.shard_comm_s(two, S, R).all_gather_s ==
        Approx(ring(4, 40e-6, 4e9, S / 8) + ring(8, 3e-6, 80e9, S)).epsilon(kRel));
  // A small buffer on the intra ring's first segment.
  CHECK(model.collective_s(Collective::kAllGather, 5e5, RingLevel::kIntra) ==
        Approx(ring(8, 2e-6, 50e9, 5e5)).epsilon(kRel));
  // No reduce-scatter segments at either level: the links; the node group's all-reduce across nodes
  // on the inter segment (twice the ring: reduce-scatter then all-gather).
  CHECK(model.shard_comm_s(two, S, R).reduce_scatter_s ==
        Approx(ring(8, 5e-6, 100e9, R) + ring(4, 20e-6, 10e9, R / 8)).epsilon(kRel));
  CHECK(model.shard_comm_s(node, S, R).reduce_scatter_s ==
        Approx(ring(8, 5e-6, 100e9, R) + 2 * ring(4, 50e-6, 3e9, R / 8)).epsilon(kRel));
  // The flat world ring: the world segment over all 32 ranks.
  CHECK(model.shard_comm_s(zdp(), S, R).all_gather_s == Approx(ring(32, 30e-6, 5e9, S)).epsilon(kRel));
}

// A smaller group's rings under a calibration of the node levels (per_node 4, 2 nodes): every step on
// the link it crosses, priced by that level's fit for the same chunk (the segment covering chunk x the
// level ring's ranks), alpha + chunk beta; a ring crossing both links steps at the slower. On 2 x 4:
//   TP 4's DP group (stride 4): 2 ranks, one a node: all-reduce R = 2 (alpha_e + R/2 beta_e), the inter
//     all-reduce segment at R/2 x 2 = R;
//   TP 2's DP group (stride 2): 4 ranks, 2 a node: 6 steps of R/4, each the slower of the intra step
//     (segment at R/4 x 4) and the inter step (at R/4 x 2);
//   a TP ring of 2 in a node: 2 (alpha_i + S/2 beta_i), the intra segment at S/2 x 4.
// Without the levels every step takes the cluster's link (the ring formula).
TEST_CASE("a smaller group's rings take the node levels' fits of the links they cross", "[cost][groups]") {
  ClusterSpec c = synthetic_cluster(2, 4);
  c.intra = LinkSpec{5e-6, 100e9};
  c.inter = LinkSpec{20e-6, 10e9};
  Calibration cal;
  cal.name = "levels";
  cal.allreduce = {Segment{kInf, 1e-3, 1.0 / 1e9}};  // the world's: not a smaller group's
  cal.per_node = 4;
  cal.intra.allreduce = {Segment{1e6, 2e-6, 1.0 / 50e9}, Segment{kInf, 3e-6, 1.0 / 80e9}};
  cal.inter.allreduce = {Segment{kInf, 50e-6, 1.0 / 3e9}};
  const PlanCostModel plan(c, &cal, Precision::kFp32, CostOptions{});
  const double R = 8e6;
  CHECK(plan.dp_model(1, 4).collective_s(Collective::kAllReduce, R) ==
        Approx(2 * (50e-6 + R / 2 / 3e9)).epsilon(kRel));
  const double intra_step = 3e-6 + R / 4 / 80e9, inter_step = 50e-6 + R / 4 / 3e9;
  CHECK(plan.dp_model(1, 2).collective_s(Collective::kAllReduce, R) ==
        Approx(6 * std::max(intra_step, inter_step)).epsilon(kRel));
  CHECK(plan.tp_allreduce_s(2, 4e5) == Approx(2 * (2e-6 + 2e5 / 50e9)).epsilon(kRel));  // 2e5 x 4 <= 1e6
  CHECK(plan.tp_allreduce_s(2, 4e6) == Approx(2 * (3e-6 + 2e6 / 80e9)).epsilon(kRel));  // 2e6 x 4 > 1e6
  // The whole world's ring keeps the world's segment.
  CHECK(plan.dp_model(1, 1).collective_s(Collective::kAllReduce, R) ==
        Approx(ring(8, 1e-3, 1e9, R) * 2).epsilon(kRel));

  Calibration flat = cal;
  flat.per_node = 0;
  const PlanCostModel links(c, &flat, Precision::kFp32, CostOptions{});
  CHECK(links.dp_model(1, 4).collective_s(Collective::kAllReduce, R) ==
        Approx(2 * ring(2, 20e-6, 10e9, R)).epsilon(kRel));
  CHECK(links.tp_allreduce_s(2, 4e6) == Approx(2 * ring(2, 5e-6, 100e9, 4e6)).epsilon(kRel));
}

// Memory at rest: a node-sharded operator keeps (w+g+o) ceil(P/G) of state, a world shard (flat or
// two-level) (w+g+o) ceil(P/N); nothing else changes (fp32 Adam: w+g+o = 4 + 4 + 8 = 16 B).
TEST_CASE("a node-sharded operator keeps 1/G of its state, a world shard 1/N", "[cost][groups]") {
  ClusterSpec c = synthetic_cluster(4, 8);
  c.inter = LinkSpec{20e-6, 10e9};
  const CostModel model(c, nullptr, Precision::kFp32, CostOptions{});
  const Workload w = lower(load_model("gpt2-1.5b"));
  const Operator& mlp = find_op(w, "layer0.mlp");
  const std::int64_t P = mlp.parameters();
  Choice two = zdp(), node = zdp();
  two.two_level = true;
  node.node_group = true;
  const double world_bytes = model.cost(mlp, zdp(), 1, w.bytes).persistent_bytes;
  CHECK(model.cost(mlp, two, 1, w.bytes).persistent_bytes == world_bytes);
  CHECK(model.cost(mlp, node, 1, w.bytes).persistent_bytes - world_bytes ==
        Approx(16.0 * (static_cast<double>((P + 7) / 8) - static_cast<double>((P + 31) / 32))).epsilon(kRel));
  // The transient (one gathered slice and its gradient) is the same in all three.
  CHECK(model.cost(mlp, node, 1, w.bytes).transient_bytes ==
        model.cost(mlp, zdp(), 1, w.bytes).transient_bytes);
  CHECK(model.cost(mlp, two, 1, w.bytes).transient_bytes ==
        model.cost(mlp, zdp(), 1, w.bytes).transient_bytes);
}

TEST_CASE("on one node, groups change nothing and two_levels() says so", "[cost][groups]") {
  const CostModel model(synthetic_cluster(1, 8), nullptr, Precision::kFp32, CostOptions{});
  CHECK_FALSE(model.two_levels());
  Choice node = zdp();
  node.node_group = true;
  const auto a = model.shard_comm_s(node, 1e6, 1e6), b = model.shard_comm_s(zdp(), 1e6, 1e6);
  CHECK(a.all_gather_s == b.all_gather_s);
  CHECK(a.reduce_scatter_s == b.reduce_scatter_s);
}
