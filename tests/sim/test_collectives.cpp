// Ring collectives in the simulator against the closed form, written here independently of the
// engine (REFERENCE.md, "Formulas"; alpha latency per step, beta = 1 / bandwidth, S the full buffer):
//   all-gather = reduce-scatter = (N-1) alpha + (N-1)/N S beta      (N - 1 steps of alpha + (S/N) beta)
//   all-reduce                  = 2 (N-1) alpha + 2 (N-1)/N S beta  (2 (N - 1) such steps)
// The simulator rounds each step to whole ticks (1 ps) and the closed form is rounded once, so the two
// differ by at most steps/2 + 1/2 ticks: the tolerance is one tick per step.
// Then a slow link, a calibration, and stragglers, each derived from the ring recurrence of
// sim/engine.hpp: step k of rank r ends at  sent_k[r] = max(sent_{k-1}[r], sent_{k-1}[r-1]) + c_r
// (c_r the step on the link leaving r; step 0 starts when r and r+1 have entered); rank r is done at
// max(sent_{K-1}[r], sent_{K-1}[r-1]) after K steps.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/cost_model.hpp"
#include "sim/engine.hpp"
#include "sim/network.hpp"
#include "sim/schedule.hpp"
#include "sim/ticks.hpp"

namespace {

using namespace osdp;
using sim::TaskKind;
using sim::Tick;

constexpr double kAlpha = 10e-6;      // 10 us per step
constexpr double kBandwidth = 12e9;   // 12 GB/s: beta = 1/12e9 is not a round number of ticks
constexpr double kSlowAlpha = 25e-6;  // the inter-node link of the two-node cluster
constexpr double kSlowBandwidth = 3e9;

costmodel::ClusterSpec cluster(int nodes, int per_node) {
  costmodel::ClusterSpec c;
  c.name = "ring-test";
  c.nodes = nodes;
  c.devices_per_node = per_node;
  c.intra = costmodel::LinkSpec{kAlpha, kBandwidth};
  if (nodes > 1) c.inter = costmodel::LinkSpec{kSlowAlpha, kSlowBandwidth};
  return c;
}

sim::Task collective(TaskKind kind, double bytes) {
  sim::Task t;
  t.name = sim::to_string(kind);
  t.kind = kind;
  t.stream = sim::Stream::kComm;
  t.bytes = bytes;
  return t;
}

sim::Task compute(double seconds, std::vector<int> deps) {
  sim::Task t;
  t.name = "compute";
  t.kind = sim::TaskKind::kForward;
  t.stream = sim::Stream::kCompute;
  t.duration_s = seconds;
  t.deps = std::move(deps);
  return t;
}

sim::Schedule one_collective(int world, TaskKind kind, double bytes) {
  sim::Schedule s;
  s.world_size = world;
  s.tasks.push_back(collective(kind, bytes));
  return s;
}

// The closed form, in seconds.
double closed_form(TaskKind kind, int n, double alpha, double bandwidth, double bytes) {
  const double one = (n - 1) * alpha + (n - 1.0) / n * bytes / bandwidth;  // all-to-all too: one pass
  return kind == TaskKind::kAllReduce ? 2 * one : one;
}

int steps(TaskKind kind, int n) {
  return (kind == TaskKind::kAllReduce ? 2 : 1) * (n - 1);
}

// One step over a link, rounded to ticks as the simulator does.
Tick step_ticks(int n, double alpha, double bandwidth, double bytes) {
  return sim::to_ticks(alpha + bytes / n / bandwidth);
}

const TaskKind kKinds[] = {TaskKind::kAllGather, TaskKind::kReduceScatter, TaskKind::kAllReduce};

}  // namespace

TEST_CASE("a ring collective takes the closed form, within one tick per step", "[collectives]") {
  // Sizes divisible by none of the rank counts: a prime, 1000003 and 123456791.
  for (const int n : {2, 3, 5, 8, 64, 1000}) {
    const sim::RingLinks net(cluster(1, n), nullptr);
    for (const double bytes : {1021.0, 1000003.0, 123456791.0}) {
      for (const TaskKind kind : kKinds) {
        INFO(sim::to_string(kind) << " of " << bytes << " B over " << n << " ranks");
        const auto r = sim::simulate(one_collective(n, kind, bytes), net, {});
        const Tick expected = sim::to_ticks(closed_form(kind, n, kAlpha, kBandwidth, bytes));
        const Tick tolerance = steps(kind, n);
        REQUIRE(r.ranks_simulated == n);
        REQUIRE(std::llabs(r.iteration - expected) <= tolerance);
        // Every rank enters at 0 and every link is alike: all finish together, busy all along.
        for (const auto& rank : r.ranks) {
          REQUIRE(rank.finish == r.iteration);
          REQUIRE(rank.comm_busy == r.iteration);
          REQUIRE(rank.compute_busy == 0);
        }
        // The exact value of the recurrence: K steps of one rounded step each.
        REQUIRE(r.iteration == steps(kind, n) * step_ticks(n, kAlpha, kBandwidth, bytes));
      }
    }
  }
}

TEST_CASE("a ring of one rank takes no time", "[collectives]") {
  const sim::RingLinks net(cluster(1, 1), nullptr);
  for (const TaskKind kind : kKinds)
    REQUIRE(sim::simulate(one_collective(1, kind, 1e6), net, {}).iteration == 0);
}

TEST_CASE("a ring with slow links takes the closed form on the slow link", "[collectives]") {
  // Two nodes of G ranks: ranks G-1 and 2G-1 send over the slow inter-node link (step s), every
  // other rank over the fast intra-node link (step f < s). Unrolling the recurrence, sent_k[r] is
  // the largest sum of k+1 step times along a path that starts at r and at each step stays or moves
  // to the predecessor. The best path walks back d ranks to the nearest slow rank (d f) and stays
  // there (k + 1 - d) s: staying on a slow link beats walking on to another one. So with K steps
  //   done[r] = K s                      for d = 0 (the slow rank) and d = 1 (its successor),
  //   done[r] = (d-1) f + (K-d+1) s      for d >= 1,
  // and the collective ends at K s: every step waits for the chunk crossing the slowest link, which
  // carries N - 1 (all-reduce: 2(N - 1)) chunks one after another — the closed form with the slow
  // link's alpha and beta, which is also what the cost model prices (the bottleneck link).
  for (const int per_node : {4, 32}) {
    const int n = 2 * per_node;
    const sim::RingLinks net(cluster(2, per_node), nullptr);
    for (const double bytes : {1000003.0, 123456791.0}) {
      const Tick f = step_ticks(n, kAlpha, kBandwidth, bytes);
      const Tick s = step_ticks(n, kSlowAlpha, kSlowBandwidth, bytes);
      REQUIRE(s > f);
      for (const TaskKind kind : kKinds) {
        INFO(sim::to_string(kind) << " of " << bytes << " B over 2 x " << per_node << " ranks");
        const auto r = sim::simulate(one_collective(n, kind, bytes), net, {});
        const Tick k = steps(kind, n);
        REQUIRE(std::llabs(r.iteration -
                           sim::to_ticks(closed_form(kind, n, kSlowAlpha, kSlowBandwidth, bytes))) <= k);
        REQUIRE(r.iteration == k * s);
        for (int rank = 0; rank < n; ++rank) {
          const int d = (rank + 1) % per_node;  // ranks back to the nearest slow one (G - 1 mod G)
          INFO("rank " << rank << ", " << d << " ranks after a slow link");
          REQUIRE(r.ranks[rank].finish == (d <= 1 ? k * s : (d - 1) * f + (k - d + 1) * s));
        }
      }
    }
  }
}

// The inverse of the case above: nodes joined by a fast link (50 GB/s) but slow inside (12 GB/s, as
// PCIe behind NVLink-less GPUs can be). The slow steps are now every step but the node-crossing ones,
// and the ring still goes at its slowest link: K steps on the intra-node link. The cost model prices
// the same sum (it once priced a multi-node ring on the inter-node link alone, 21-40% short).
TEST_CASE("a ring whose intra-node link is the slower one goes at that link, as the cost model says",
          "[collectives]") {
  constexpr double kIntraAlpha = 8e-6, kIntraBandwidth = 12e9, kInterAlpha = 5e-6, kInterBandwidth = 50e9;
  for (const int per_node : {2, 4, 8}) {
    costmodel::ClusterSpec c = cluster(2, per_node);
    c.intra = costmodel::LinkSpec{kIntraAlpha, kIntraBandwidth};
    c.inter = costmodel::LinkSpec{kInterAlpha, kInterBandwidth};
    const int n = 2 * per_node;
    const sim::RingLinks net(c, nullptr);
    const costmodel::CostModel model(c, nullptr, costmodel::Precision::kFp32, costmodel::CostOptions{});
    for (const double bytes : {1000003.0, 123456791.0}) {
      for (const TaskKind kind : kKinds) {
        INFO(sim::to_string(kind) << " of " << bytes << " B over 2 x " << per_node << " ranks");
        const Tick k = steps(kind, n);
        const double closed = closed_form(kind, n, kIntraAlpha, kIntraBandwidth, bytes);
        const auto r = sim::simulate(one_collective(n, kind, bytes), net, {});
        REQUIRE(r.iteration == k * step_ticks(n, kIntraAlpha, kIntraBandwidth, bytes));
        REQUIRE(std::llabs(r.iteration - sim::to_ticks(closed)) <= k);
        const costmodel::Collective ck = kind == TaskKind::kAllGather ? costmodel::Collective::kAllGather
                                         : kind == TaskKind::kReduceScatter
                                             ? costmodel::Collective::kReduceScatter
                                             : costmodel::Collective::kAllReduce;
        REQUIRE(model.collective_s(ck, bytes) == Approx(closed).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("a calibration prices every step by the segment covering the buffer", "[collectives]") {
  // Segments per collective: sizes <= 1 MiB and the rest, each with its own alpha and beta. The
  // segment is chosen by the full buffer S (not the chunk S/N), boundaries inclusive, and prices
  // every link alike, so even the two-node cluster with a slow inter link runs at the segment's
  // figures: the closed form with the segment's alpha and beta.
  constexpr double kMiB = 1048576;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  costmodel::Calibration cal;
  cal.allgather = {{kMiB, 20e-6, 1 / 2e9}, {kInf, 8e-6, 1 / 20e9}};
  cal.reducescatter = {{kMiB, 30e-6, 1 / 1e9}, {kInf, 12e-6, 1 / 15e9}};
  cal.allreduce = {{kMiB, 40e-6, 1 / 1.5e9}, {kInf, 16e-6, 1 / 10e9}};
  const auto segment = [&](TaskKind kind, double bytes) {
    const auto& segs = kind == TaskKind::kAllGather       ? cal.allgather
                       : kind == TaskKind::kReduceScatter ? cal.reducescatter
                                                          : cal.allreduce;
    return bytes <= kMiB ? segs[0] : segs[1];
  };
  for (const auto& [nodes, per_node] : {std::pair{1, 8}, std::pair{2, 4}, std::pair{1, 5}}) {
    const int n = nodes * per_node;
    const sim::RingLinks net(cluster(nodes, per_node), &cal);
    REQUIRE(net.period(n) == 1);  // every link alike
    for (const double bytes : {1021.0, kMiB, kMiB + 1, 123456791.0}) {
      for (const TaskKind kind : kKinds) {
        INFO(sim::to_string(kind) << " of " << bytes << " B over " << nodes << " x " << per_node << " ranks");
        const costmodel::Segment seg = segment(kind, bytes);
        const auto r = sim::simulate(one_collective(n, kind, bytes), net, {});
        const Tick expected =
            sim::to_ticks(closed_form(kind, n, seg.alpha_s, 1 / seg.beta_s_per_byte, bytes));
        REQUIRE(std::llabs(r.iteration - expected) <= steps(kind, n));
        REQUIRE(r.iteration == steps(kind, n) * step_ticks(n, seg.alpha_s, 1 / seg.beta_s_per_byte, bytes));
      }
    }
  }
}

TEST_CASE("a straggler delays the step by exactly what the dependency chain predicts",
          "[collectives][stragglers]") {
  // N = 4 ranks on one node, every link alike: one ring step is c ticks, a collective K = N-1 steps.
  // Ring entries e_r: unrolling the recurrence with equal steps, sent_k[r] = (k+1) c + the latest
  // entry among ranks r-k .. r+1, so rank r is done at K c + max over ranks r-K .. r+1 — a window of
  // N + 1 ranks, i.e. all of them:
  //   every rank finishes a collective at  (latest entry) + K c.
  // Rank q runs compute `speed` times slower (durations a, b, d are whole ticks; speed 1.5 keeps
  // them whole), so it enters the collective last.
  constexpr int kN = 4;
  constexpr int kSlow = 2;
  constexpr double kSpeed = 1.5;
  const double a = 1e-3, b = 2e-3, d = 0.5e-3;  // compute seconds
  const double bytes = 4e6;
  const sim::RingLinks net(cluster(1, kN), nullptr);
  const Tick c = step_ticks(kN, kAlpha, kBandwidth, bytes);
  const Tick ring = (kN - 1) * c;
  const Tick A = sim::to_ticks(a), B = sim::to_ticks(b), D = sim::to_ticks(d);
  const auto slow = [&](Tick t) { return static_cast<Tick>(kSpeed * static_cast<double>(t)); };
  sim::SimOptions opt;
  opt.speed.assign(kN, 1.0);
  opt.speed[kSlow] = kSpeed;

  SECTION("compute, all-gather, compute, reduce-scatter, compute") {
    // Each collective starts at the straggler's entry, so its extra compute before each collective
    // lands on everyone's critical path:
    //   nominal: A + K c + B + K c + D;   with rank q slow: 1.5 A + K c + 1.5 B + K c + D on the
    //   fast ranks and 1.5 (A + B + D) + 2 K c on rank q, the step.
    sim::Schedule s;
    s.world_size = kN;
    s.tasks = {compute(a, {}), collective(TaskKind::kAllGather, bytes), compute(b, {}),
               collective(TaskKind::kReduceScatter, bytes), compute(d, {})};
    s.tasks[1].deps = {0};
    s.tasks[2].deps = {1};
    s.tasks[3].deps = {2};
    s.tasks[4].deps = {3};
    const auto nominal = sim::simulate(s, net, {});
    REQUIRE(nominal.iteration == A + ring + B + ring + D);
    const auto r = sim::simulate(s, net, opt);
    REQUIRE(r.iteration == slow(A) + slow(B) + slow(D) + 2 * ring);
    REQUIRE(r.critical_rank == kSlow);
    for (int rank = 0; rank < kN; ++rank) {
      INFO("rank " << rank);
      REQUIRE(r.ranks[rank].finish == (rank == kSlow ? r.iteration : slow(A) + slow(B) + 2 * ring + D));
      // Fast ranks wait inside the collectives: (1.5 - 1)(A + B) more comm time than nominal.
      if (rank != kSlow) REQUIRE(r.ranks[rank].comm_busy == 2 * ring + (slow(A) - A) + (slow(B) - B));
    }
  }

  SECTION("a straggler's compute hidden behind a collective it does not feed") {
    // All-gather G with no dependency next to compute A; compute B needs both. Every rank enters G
    // at 0, so G ends at K c everywhere; rank r's B starts at max(K c, its A). With a small buffer
    // the straggler's A is exposed (1.5 A > K c), with a large one it hides behind the ring.
    for (const double gathered : {4e6, 1e9}) {
      const Tick ring_g = (kN - 1) * step_ticks(kN, kAlpha, kBandwidth, gathered);
      INFO("ring " << ring_g << " ticks, straggler's compute " << slow(A));
      sim::Schedule s;
      s.world_size = kN;
      s.tasks = {collective(TaskKind::kAllGather, gathered), compute(a, {}), compute(b, {0, 1})};
      const auto r = sim::simulate(s, net, opt);
      REQUIRE(r.iteration == std::max(ring_g, slow(A)) + slow(B));
      for (int rank = 0; rank < kN; ++rank)
        if (rank != kSlow) REQUIRE(r.ranks[rank].finish == std::max(ring_g, A) + B);
    }
  }
}

// An all-to-all exchanges between pairs (costmodel/collective.hpp): in step k rank r sends S/N to
// r + k and receives from r - k. On links all alike that is N - 1 steps of alpha + (S/N) beta, the
// closed form of one pass, exactly in rounded steps.
TEST_CASE("an all-to-all takes the closed form on a uniform network", "[collectives][alltoall]") {
  for (const int n : {2, 3, 5, 8, 64}) {
    const sim::RingLinks net(cluster(1, n), nullptr);
    for (const double bytes : {1021.0, 1000003.0, 123456791.0}) {
      INFO("all-to-all of " << bytes << " B over " << n << " ranks");
      const auto r = sim::simulate(one_collective(n, TaskKind::kAllToAll, bytes), net, {});
      REQUIRE(r.iteration == (n - 1) * step_ticks(n, kAlpha, kBandwidth, bytes));
      REQUIRE(std::llabs(r.iteration - sim::to_ticks(closed_form(TaskKind::kAllToAll, n, kAlpha, kBandwidth,
                                                                 bytes))) <= n - 1);
      for (const auto& rank : r.ranks) REQUIRE(rank.finish == r.iteration);
    }
  }
  REQUIRE(
      sim::simulate(one_collective(1, TaskKind::kAllToAll, 1e6), sim::RingLinks(cluster(1, 1), nullptr), {})
          .iteration == 0);
}

// Across two nodes each pair's step goes at its own link: f within a node, s across (s > f).
//   2 x 2 ranks (0 1 | 2 3), by hand. Step 1: 0->1 and 2->3 take f, 1->2 and 3->0 take s; every
//   rank sends or receives one of the slow ones, so all are done at s. Step 2 (r -> r + 2) crosses
//   for every pair: 2 s. Step 3: 0->3 and 2->1 cross: 3 s. The exchange ends at 3 s = (N - 1) s.
//   2 x G for larger G: no rank can end before its own N - 1 sends, G - 1 of them within its node
//   and G across ((G - 1) f + G s), and none after N - 1 slow steps in lockstep ((N - 1) s, what
//   the cost model prices a world all-to-all at: its slowest link).
TEST_CASE("an all-to-all across two nodes: each step on its pair's link", "[collectives][alltoall]") {
  for (const double bytes : {1000003.0, 123456791.0}) {
    const sim::RingLinks two(cluster(2, 2), nullptr);
    const Tick s4 = step_ticks(4, kSlowAlpha, kSlowBandwidth, bytes);
    const auto r4 = sim::simulate(one_collective(4, TaskKind::kAllToAll, bytes), two, {});
    REQUIRE(r4.iteration == 3 * s4);
    for (const int per_node : {4, 8}) {
      const int n = 2 * per_node;
      INFO(bytes << " B over 2 x " << per_node);
      const sim::RingLinks net(cluster(2, per_node), nullptr);
      const Tick f = step_ticks(n, kAlpha, kBandwidth, bytes),
                 s = step_ticks(n, kSlowAlpha, kSlowBandwidth, bytes);
      const auto r = sim::simulate(one_collective(n, TaskKind::kAllToAll, bytes), net, {});
      for (const auto& rank : r.ranks) REQUIRE(rank.finish >= (per_node - 1) * f + per_node * s);
      REQUIRE(r.iteration <= (n - 1) * s);
      // The cost model's flat all-to-all over this world: the slowest link's closed form.
      const costmodel::CostModel cost(cluster(2, per_node), nullptr, costmodel::Precision::kFp32, {});
      CHECK(cost.collective_s(costmodel::Collective::kAllToAll, bytes) ==
            Approx(closed_form(TaskKind::kAllToAll, n, kSlowAlpha, kSlowBandwidth, bytes)).epsilon(1e-12));
      // Symmetric simulation (one node's ranks stand for the others) gives the same.
      sim::SimOptions sym;
      sym.symmetric = true;
      const auto rs = sim::simulate(one_collective(n, TaskKind::kAllToAll, bytes), net, sym);
      REQUIRE(rs.ranks_simulated == per_node);
      REQUIRE(rs.iteration == r.iteration);
    }
  }
}

// Where a ring and the pairwise exchange part: nodes joined by a fast link, slow inside (as in the
// ring case above). 2 x 2 ranks (0 1 | 2 3), slow step w within a node, fast v across, by hand:
//   step 1: 0->1 and 2->3 slow, 1->2 and 3->0 fast: every rank sends or receives a slow one: w;
//   step 2: r -> r + 2 crosses for every pair: w + v;
//   step 3: 0->3 and 2->1 fast, 1->0 and 3->2 slow: every rank meets a slow one: 2 w + v.
// A ring would take 3 w (its every step waits for the slow intra-node chunks).
TEST_CASE("an all-to-all steps by pairs, not along a ring", "[collectives][alltoall]") {
  costmodel::ClusterSpec c = cluster(2, 2);
  c.intra = costmodel::LinkSpec{kSlowAlpha, kSlowBandwidth};
  c.inter = costmodel::LinkSpec{kAlpha, kBandwidth};
  const sim::RingLinks net(c, nullptr);
  for (const double bytes : {1000003.0, 123456791.0}) {
    const Tick w = step_ticks(4, kSlowAlpha, kSlowBandwidth, bytes),
               v = step_ticks(4, kAlpha, kBandwidth, bytes);
    REQUIRE(w > v);
    CHECK(sim::simulate(one_collective(4, TaskKind::kAllToAll, bytes), net, {}).iteration == 2 * w + v);
    CHECK(sim::simulate(one_collective(4, TaskKind::kAllGather, bytes), net, {}).iteration == 3 * w);
  }
}

// A calibration's all-to-all segment prices every step of a world all-to-all, on every link alike; a
// calibration from before all-to-all (no "alltoall" segments) leaves its steps to the links.
TEST_CASE("a calibrated all-to-all goes at its segment", "[collectives][alltoall]") {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  costmodel::Calibration cal;
  cal.allgather = {{kInf, 20e-6, 1 / 2e9}};
  cal.reducescatter = cal.allgather;
  cal.allreduce = cal.allgather;
  cal.alltoall = {{kInf, 7e-6, 1 / 5e9}};
  const double bytes = 1000003.0;
  const sim::RingLinks net(cluster(2, 4), &cal);
  CHECK(net.period(8) == 1);
  CHECK(sim::simulate(one_collective(8, TaskKind::kAllToAll, bytes), net, {}).iteration ==
        7 * step_ticks(8, 7e-6, 5e9, bytes));
  costmodel::Calibration before = cal;
  before.alltoall.clear();
  const sim::RingLinks old(cluster(2, 4), &before);
  CHECK(old.period(8) == 1);  // the rings are still all calibrated
  const auto links = sim::simulate(one_collective(8, TaskKind::kAllToAll, bytes),
                                   sim::RingLinks(cluster(2, 4), nullptr), {});
  CHECK(sim::simulate(one_collective(8, TaskKind::kAllToAll, bytes), old, {}).iteration == links.iteration);
}

// A two-level all-to-all (CostModel::all_to_all_parts): an exchange of S within each node (G ranks,
// intra link) and then one of S across nodes among the ranks of one local index (M ranks, inter
// link). On 2 x 4 ranks the cost model prices it at the two closed forms, and the simulator, running
// each part on its ring, takes the same to one tick per step; flat, it is one world exchange priced
// on the slowest link.
TEST_CASE("a two-level all-to-all: within the node, then across", "[collectives][alltoall]") {
  const double bytes = 123456791.0;
  const costmodel::ClusterSpec c = cluster(2, 4);
  const costmodel::CostModel cost(c, nullptr, costmodel::Precision::kFp32, {});
  const double intra = closed_form(TaskKind::kAllToAll, 4, kAlpha, kBandwidth, bytes);
  const double inter = closed_form(TaskKind::kAllToAll, 2, kSlowAlpha, kSlowBandwidth, bytes);
  CHECK(cost.all_to_all_s(bytes, true) == Approx(intra + inter).epsilon(1e-12));
  CHECK(cost.all_to_all_s(bytes, false) ==
        Approx(closed_form(TaskKind::kAllToAll, 8, kSlowAlpha, kSlowBandwidth, bytes)).epsilon(1e-12));
  const auto parts = cost.all_to_all_parts(bytes, true);
  REQUIRE(parts.size() == 2);
  sim::Schedule s;
  s.world_size = 8;
  s.per_node = 4;
  for (const auto& part : parts) {
    sim::Task t = collective(TaskKind::kAllToAll, part.bytes);
    t.level = part.level;
    t.group = part.level == costmodel::RingLevel::kIntra ? sim::Group{4, 1} : sim::Group{2, 4};
    if (!s.tasks.empty()) t.deps = {0};
    s.tasks.push_back(t);
  }
  const auto r = sim::simulate(s, sim::RingLinks(c, nullptr), {});
  CHECK(r.iteration ==
        3 * step_ticks(4, kAlpha, kBandwidth, bytes) + step_ticks(2, kSlowAlpha, kSlowBandwidth, bytes));
  CHECK(std::llabs(r.iteration - sim::to_ticks(intra + inter)) <= 4);
  // On one node there is no second level: the flat exchange.
  const costmodel::CostModel one(cluster(1, 8), nullptr, costmodel::Precision::kFp32, {});
  CHECK(one.all_to_all_parts(bytes, true).size() == 1);
}
