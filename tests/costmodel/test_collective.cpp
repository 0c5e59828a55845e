// Closed-form oracle tests of the collective descriptor (costmodel/collective.hpp), the values written
// here from the ring algorithm and nccl-tests' PERFORMANCE.md, independently of the code:
//   a ring over N ranks moves the buffer S in chunks of S/N; all-gather and reduce-scatter take one
//   pass of N - 1 steps, all-reduce (reduce-scatter then all-gather) two passes, 2(N - 1) steps;
//   one step takes alpha + (S/N) beta, so  t = steps (alpha + S/N beta)
//     all-gather = reduce-scatter = (N-1) alpha + (N-1)/N S beta,  all-reduce = 2 (N-1) alpha + 2 (N-1)/N S
//     beta;
//   bus bandwidth busbw = (S / t) F with F = (N-1)/N for all-gather and reduce-scatter, 2(N-1)/N for
//   all-reduce: the bandwidth each link sustains, so with alpha = 0 it is the link's, 1 / beta.
//   On one rank there is nothing to move: no steps, no time, no bus bandwidth.
#include <string>

#include <catch2/catch.hpp>

#include "costmodel/calibration_fit.hpp"
#include "costmodel/collective.hpp"
#include "costmodel/cost_model.hpp"

using namespace osdp::costmodel;

namespace {

constexpr double kRel = 1e-12;
constexpr double kAlpha = 10e-6;  // 10 us per step
constexpr double kBeta = 1e-10;   // 10 GB/s
constexpr double kS = 80e6;       // 80 MB

}  // namespace

TEST_CASE("every collective is listed once, in the order of the enum, with its names", "[cost][collective]") {
  REQUIRE(kCollectives.size() == 4);
  CHECK(kCollectives[0].kind == Collective::kAllGather);
  CHECK(kCollectives[1].kind == Collective::kReduceScatter);
  CHECK(kCollectives[2].kind == Collective::kAllReduce);
  CHECK(kCollectives[3].kind == Collective::kAllToAll);
  CHECK(std::string(name_of(Collective::kAllGather)) == "all-gather");
  CHECK(std::string(name_of(Collective::kReduceScatter)) == "reduce-scatter");
  CHECK(std::string(name_of(Collective::kAllReduce)) == "all-reduce");
  CHECK(std::string(name_of(Collective::kAllToAll)) == "all-to-all");
  // The calibration file's keys.
  CHECK(std::string(to_string(Collective::kAllGather)) == "allgather");
  CHECK(std::string(to_string(Collective::kReduceScatter)) == "reducescatter");
  CHECK(std::string(to_string(Collective::kAllReduce)) == "allreduce");
  CHECK(std::string(to_string(Collective::kAllToAll)) == "alltoall");
  // Only the all-to-all exchanges between pairs; the others step along a ring.
  for (const CollectiveKind& k : kCollectives) CHECK(k.pairwise == (k.kind == Collective::kAllToAll));
  for (const CollectiveKind& k : kCollectives) {
    CHECK(&describe(k.kind) == &k);
    CHECK(collective_from_string(k.key) == k.kind);
    CHECK(collective_from_string(k.name) == k.kind);
  }
  CHECK_FALSE(collective_from_string("broadcast").has_value());
  CHECK_FALSE(collective_from_string("").has_value());
}

TEST_CASE("ring steps: N - 1 for all-gather and reduce-scatter, 2(N - 1) for all-reduce",
          "[cost][collective]") {
  // N = 1: 0, 0, 0;  N = 2: 1, 1, 2;  N = 8: 7, 7, 14.
  CHECK(ring_steps(Collective::kAllGather, 1) == 0);
  CHECK(ring_steps(Collective::kReduceScatter, 1) == 0);
  CHECK(ring_steps(Collective::kAllReduce, 1) == 0);
  CHECK(ring_steps(Collective::kAllGather, 2) == 1);
  CHECK(ring_steps(Collective::kReduceScatter, 2) == 1);
  CHECK(ring_steps(Collective::kAllReduce, 2) == 2);
  CHECK(ring_steps(Collective::kAllGather, 8) == 7);
  CHECK(ring_steps(Collective::kReduceScatter, 8) == 7);
  CHECK(ring_steps(Collective::kAllReduce, 8) == 14);
  CHECK(CollectiveOp{Collective::kAllReduce, kS, 8}.steps() == 14);
  // All-to-all: N - 1 pairwise steps (step k: to rank r + k, from r - k).
  CHECK(ring_steps(Collective::kAllToAll, 1) == 0);
  CHECK(ring_steps(Collective::kAllToAll, 2) == 1);
  CHECK(ring_steps(Collective::kAllToAll, 8) == 7);
}

TEST_CASE("bus bandwidth factors: (N-1)/N, and 2(N-1)/N for all-reduce", "[cost][collective]") {
  // N = 1: 0;  N = 2: 1/2, 1/2, 1;  N = 8: 7/8 = 0.875, 0.875, 14/8 = 1.75 (all exact in binary).
  for (const CollectiveKind& k : kCollectives) CHECK(bus_bandwidth_factor(k.kind, 1) == 0.0);
  CHECK(bus_bandwidth_factor(Collective::kAllGather, 2) == 0.5);
  CHECK(bus_bandwidth_factor(Collective::kReduceScatter, 2) == 0.5);
  CHECK(bus_bandwidth_factor(Collective::kAllReduce, 2) == 1.0);
  CHECK(bus_bandwidth_factor(Collective::kAllGather, 8) == 0.875);
  CHECK(bus_bandwidth_factor(Collective::kReduceScatter, 8) == 0.875);
  CHECK(bus_bandwidth_factor(Collective::kAllReduce, 8) == 1.75);
  CHECK(bus_bandwidth_factor(Collective::kAllToAll, 2) == 0.5);  // nccl-tests' alltoall: (N-1)/N
  CHECK(bus_bandwidth_factor(Collective::kAllToAll, 8) == 0.875);
}

TEST_CASE("ring time: passes ((N-1) alpha + (N-1)/N S beta)", "[cost][collective]") {
  // S = 80 MB, alpha = 10 us, beta = 1e-10 s/B (10 GB/s):
  //   N = 1: 0 for every collective.
  //   N = 2: one step of 10 us + 40e6 x 1e-10 = 4 ms: all-gather 4.01 ms; all-reduce 8.02 ms.
  //   N = 8: 7 x 10 us + 7/8 x 8 ms = 70 us + 7 ms = 7.07 ms; all-reduce 14.14 ms.
  for (const CollectiveKind& k : kCollectives)
    CHECK(CollectiveOp{k.kind, kS, 1}.ring_s(kAlpha, kBeta) == 0.0);
  CHECK(CollectiveOp{Collective::kAllGather, kS, 2}.ring_s(kAlpha, kBeta) == Approx(4.01e-3).epsilon(kRel));
  CHECK(CollectiveOp{Collective::kReduceScatter, kS, 2}.ring_s(kAlpha, kBeta) ==
        Approx(4.01e-3).epsilon(kRel));
  CHECK(CollectiveOp{Collective::kAllReduce, kS, 2}.ring_s(kAlpha, kBeta) == Approx(8.02e-3).epsilon(kRel));
  CHECK(CollectiveOp{Collective::kAllGather, kS, 8}.ring_s(kAlpha, kBeta) == Approx(7.07e-3).epsilon(kRel));
  CHECK(CollectiveOp{Collective::kReduceScatter, kS, 8}.ring_s(kAlpha, kBeta) ==
        Approx(7.07e-3).epsilon(kRel));
  CHECK(CollectiveOp{Collective::kAllReduce, kS, 8}.ring_s(kAlpha, kBeta) == Approx(14.14e-3).epsilon(kRel));
  // All-to-all of S per rank, S/N to each peer: N = 8, seven exchanges of 10 MB: 7.07 ms.
  CHECK(CollectiveOp{Collective::kAllToAll, kS, 8}.ring_s(kAlpha, kBeta) == Approx(7.07e-3).epsilon(kRel));

  // One step moves S/N: N = 8, 10 MB in 1 ms plus 10 us; the ring is its steps one after another.
  const CollectiveOp ag8{Collective::kAllGather, kS, 8};
  CHECK(ag8.chunk_bytes() == 1e7);
  CHECK(ag8.step_s(kAlpha, kBeta) == Approx(1.01e-3).epsilon(kRel));
  for (const int n : {2, 8})
    for (const CollectiveKind& k : kCollectives) {
      const CollectiveOp op{k.kind, kS, n};
      CHECK(op.steps() * op.step_s(kAlpha, kBeta) == Approx(op.ring_s(kAlpha, kBeta)).epsilon(kRel));
    }
}

TEST_CASE("bus bandwidth: S / t x F, the link's bandwidth when latency is nil", "[cost][collective]") {
  // S = 8 GB moved in 1 s: algorithm bandwidth 8 GB/s. N = 2: all-gather 4 GB/s, all-reduce 8 GB/s;
  // N = 8: all-gather 7 GB/s, all-reduce 14 GB/s; N = 1: 0. No time, no bandwidth.
  CHECK(CollectiveOp{Collective::kAllGather, 8e9, 2}.bus_bandwidth(1.0) == Approx(4e9).epsilon(kRel));
  CHECK(CollectiveOp{Collective::kAllReduce, 8e9, 2}.bus_bandwidth(1.0) == Approx(8e9).epsilon(kRel));
  CHECK(CollectiveOp{Collective::kReduceScatter, 8e9, 8}.bus_bandwidth(1.0) == Approx(7e9).epsilon(kRel));
  CHECK(CollectiveOp{Collective::kAllReduce, 8e9, 8}.bus_bandwidth(1.0) == Approx(14e9).epsilon(kRel));
  CHECK(CollectiveOp{Collective::kAllReduce, 8e9, 1}.bus_bandwidth(1.0) == 0.0);
  CHECK(CollectiveOp{Collective::kAllGather, 8e9, 8}.bus_bandwidth(0.0) == 0.0);
  // With alpha = 0 every collective on any N >= 2 runs at the link's 10 GB/s of bus bandwidth.
  for (const int n : {2, 3, 8, 1000})
    for (const CollectiveKind& k : kCollectives) {
      const CollectiveOp op{k.kind, kS, n};
      CHECK(op.bus_bandwidth(op.ring_s(0.0, kBeta)) == Approx(1e10).epsilon(kRel));
    }
}

TEST_CASE("the cost model and the calibration fit price a collective by the descriptor's ring time",
          "[cost][collective]") {
  ClusterSpec c;
  c.name = "eight";
  c.nodes = 1;
  c.devices_per_node = 8;
  c.intra = LinkSpec{kAlpha, 1.0 / kBeta};
  const CostModel model(c, nullptr, Precision::kFp32, CostOptions{});
  for (const CollectiveKind& k : kCollectives) {
    const CollectiveOp op{k.kind, kS, 8};
    CHECK(model.collective_s(k.kind, kS) == Approx(op.ring_s(kAlpha, kBeta)).epsilon(kRel));
    CHECK(collective_model_s(k.kind, 8, kAlpha, kBeta, kS) == op.ring_s(kAlpha, kBeta));
  }
}

// An all-to-all-v as the even all-to-all of its lockstep bytes, by hand on 3 ranks (MB, p -> q):
//   0 -> 1: 6, 0 -> 2: 3;  1 -> 0: 9, 1 -> 2: 3;  2 -> 0: 3, 2 -> 1: 12.
//   step 1 (p -> p + 1): 6, 3, 3: 6 MB;  step 2 (p -> p + 2): 3, 9, 12: 12 MB.
//   S = 3/2 (6 + 12) = 27 MB; the even formula then gives 2 alpha + 18 MB beta, the two steps.
// Even messages of b: N b. Every step with one message c b: c N b (a capacity factor c).
TEST_CASE("an all-to-all-v is priced as the even all-to-all of its lockstep bytes", "[cost][collective]") {
  const double mb = 1e6;
  const std::vector<std::vector<double>> uneven = {
      {0, 6 * mb, 3 * mb}, {9 * mb, 0, 3 * mb}, {3 * mb, 12 * mb, 0}};
  CHECK(all_to_all_v_bytes(uneven) == Approx(27 * mb).epsilon(kRel));
  CHECK(CollectiveOp{Collective::kAllToAll, all_to_all_v_bytes(uneven), 3}.ring_s(kAlpha, kBeta) ==
        Approx(2 * kAlpha + 18 * mb * kBeta).epsilon(kRel));
  for (const int n : {2, 5, 8}) {
    const double b = 1.5 * mb;
    std::vector<std::vector<double>> even(static_cast<std::size_t>(n),
                                          std::vector<double>(static_cast<std::size_t>(n), b));
    CHECK(all_to_all_v_bytes(even) == Approx(n * b).epsilon(kRel));
    auto hot = even;  // rank n - 1 receives 1.25 b from every rank: one such message in every step
    for (auto& row : hot) row.back() = 1.25 * b;
    CHECK(all_to_all_v_bytes(hot) == Approx(1.25 * n * b).epsilon(kRel));
  }
  CHECK(all_to_all_v_bytes({{5 * mb}}) == 0.0);
  CHECK_THROWS_AS(all_to_all_v_bytes({{0, 1}, {1}}), std::invalid_argument);
}
