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
