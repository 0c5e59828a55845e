// The mpi communicator under mpirun (2 and 3 ranks): every collective against its closed form on
// every rank, with rank-dependent data whose sums are exact in fp32 (integers below 2^24):
//   all-gather:     rank q's shard j is f(q, j) = q * 2^17 + j       -> full[q S + j] = f(q, j)
//   reduce-scatter: rank r's full[i] is (r + 1) (i mod 97 + 1)      -> rank q's shard j is
//                   N (N + 1) / 2 * ((q S + j) mod 97 + 1)
//   all-reduce:     rank r's buf[i] is (r + 1) (i mod 13) + r       -> N (N + 1) / 2 (i mod 13) + N (N - 1) /
//   2
// (all-reduce also on buffers the ranks do not divide; reduce-scatter also in place: the shard at its place
// in the input), with and without a comm thread, issued from the comm stream while the compute stream runs
// GEMMs.
//
// Then the node rings (Communicator::ring) of every node size that divides the job.
//
// Modes: (none) the checks; --fault-mode [--timeout S] a few steps of collectives for
// test_faults.sh (a BackendFailure aborts the job through abort_job); --relaunch N runs the checks
// by relaunching this program under mpirun with N ranks.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "validate/cpu/cpu_device.hpp"
#include "validate/mpi/launcher.hpp"
#include "validate/mpi/mpi_backend.hpp"

namespace {

using namespace osdp::validate;

struct Checks {
  int rank = 0;
  int failures = 0;
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  }
};

// Device memory holding `n` floats, freed on scope exit.
struct Buffer {
  Buffer(CpuDevice& dev, std::size_t n, const char* what)
      : dev_(dev), p(dev.allocate(n * sizeof(float), what)) {}
  ~Buffer() { dev_.deallocate(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  CpuDevice& dev_;
  float* p;
};

void check_collectives(Checks& checks, bool comm_thread) {
  MpiCommunicator comm({30.0, std::nullopt});
  const int r = comm.rank(), world = comm.size();
  const auto n = static_cast<std::size_t>(world);
  CpuDevice dev({0, comm_thread, r});
  const std::string mode = comm_thread ? "comm thread" : "one thread";

  // A GEMM keeps the compute stream busy while the collectives run: C = A B with A all ones
  // (m x k) and B all twos (k x n), so every element of C is 2k.
  const std::int64_t dim = 160;
  Buffer a(dev, dim * dim, "A"), b(dev, dim * dim, "B"), c(dev, dim * dim, "C");
  dev.fill(dev.compute_stream(), a.p, dim * dim, 1.0f);
  dev.fill(dev.compute_stream(), b.p, dim * dim, 2.0f);
  for (int rep = 0; rep < 4; ++rep) {
    dev.compute_stream().enqueue([&] {
      Gemm g;
      g.m = g.n = g.k = dim;
      g.a = a.p;
      g.b = b.p;
      g.c = c.p;
      g.lda = g.ldb = g.ldc = dim;
      dev.gemm(dev.compute_stream(), g);
    });
  }

  for (const std::size_t s :
       {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4099}, std::size_t{65537}}) {
    Buffer shard(dev, s, "shard"), full(dev, s * n, "full"), sum(dev, s * n, "sum");
    for (std::size_t j = 0; j < s; ++j) shard.p[j] = static_cast<float>(r * 131072 + static_cast<int>(j));
    for (std::size_t i = 0; i < s * n; ++i) full.p[i] = -1.0f;
    // all_gather (separate buffers), then in place, then reduce-scatter and all-reduce.
    auto& cs = dev.comm_stream();
    cs.enqueue([&] { comm.all_gather(cs, shard.p, full.p, s, fmt::format("all-gather {} elems", s)); });
    cs.synchronize();
    bool ok = true;
    for (std::size_t q = 0; q < n; ++q) {
      for (std::size_t j = 0; j < s; ++j) ok &= full.p[q * s + j] == static_cast<float>(q * 131072 + j);
    }
    checks.expect(ok, fmt::format("all-gather of {} elements per rank ({})", s, mode));

    for (std::size_t i = 0; i < s * n; ++i)
      full.p[i] = (i / s == static_cast<std::size_t>(r)) ? shard.p[i % s] : -1;
    cs.enqueue([&] { comm.all_gather(cs, full.p + r * s, full.p, s, "all-gather in place"); });
    cs.synchronize();
    ok = true;
    for (std::size_t q = 0; q < n; ++q) {
      for (std::size_t j = 0; j < s; ++j) ok &= full.p[q * s + j] == static_cast<float>(q * 131072 + j);
    }
    checks.expect(ok, fmt::format("in-place all-gather of {} elements per rank ({})", s, mode));

    for (std::size_t i = 0; i < s * n; ++i)
      sum.p[i] = static_cast<float>((r + 1) * static_cast<int>(i % 97 + 1));
    cs.enqueue([&] { comm.reduce_scatter(cs, sum.p, shard.p, s, "reduce-scatter"); });
    cs.synchronize();
    ok = true;
    const std::size_t tri = n * (n + 1) / 2;
    for (std::size_t j = 0; j < s; ++j) {
      ok &= shard.p[j] == static_cast<float>(tri * ((static_cast<std::size_t>(r) * s + j) % 97 + 1));
    }
    checks.expect(ok, fmt::format("reduce-scatter of {} elements per rank ({})", s, mode));

    // In place: the input in `sum`, this rank's shard at its own place in it.
    for (std::size_t i = 0; i < s * n; ++i)
      sum.p[i] = static_cast<float>((r + 1) * static_cast<int>(i % 97 + 1));
    cs.enqueue([&] { comm.reduce_scatter(cs, sum.p, sum.p + r * s, s, "reduce-scatter in place"); });
    cs.synchronize();
    ok = true;
    for (std::size_t j = 0; j < s; ++j) {
      ok &= sum.p[r * s + j] == static_cast<float>(tri * ((static_cast<std::size_t>(r) * s + j) % 97 + 1));
    }
    checks.expect(ok, fmt::format("in-place reduce-scatter of {} elements per rank ({})", s, mode));

    for (std::size_t i = 0; i < s * n; ++i)
      sum.p[i] = static_cast<float>((r + 1) * static_cast<int>(i % 13) + r);
    cs.enqueue([&] { comm.all_reduce(cs, sum.p, s * n, "all-reduce"); });
    cs.synchronize();
    ok = true;
    for (std::size_t i = 0; i < s * n; ++i)
      ok &= sum.p[i] == static_cast<float>(tri * (i % 13) + n * (n - 1) / 2);
    checks.expect(ok, fmt::format("all-reduce of {} elements ({})", s * n, mode));

    // Uneven: a ring's chunks differ by one element where the ranks do not divide the buffer, and some
    // are empty with fewer elements than ranks (s + 1 for s = 1 on 3 ranks).
    for (const std::size_t e : {s * n + 1, s + 1}) {
      Buffer odd(dev, e, "uneven all-reduce");
      for (std::size_t i = 0; i < e; ++i)
        odd.p[i] = static_cast<float>((r + 1) * static_cast<int>(i % 13) + r);
      cs.enqueue([&] { comm.all_reduce(cs, odd.p, e, "uneven all-reduce"); });
      cs.synchronize();
      ok = true;
      for (std::size_t i = 0; i < e; ++i)
        ok &= odd.p[i] == static_cast<float>(tri * (i % 13) + n * (n - 1) / 2);
      checks.expect(ok, fmt::format("all-reduce of {} elements over {} ranks ({})", e, n, mode));
    }

    // All-to-all: rank r's part for rank q is s elements j of value 1000 r + q + (j mod 7) / 8; rank q
    // then holds, from every p in rank order, p's part for q.
    Buffer got(dev, s * n, "all-to-all receive");
    for (std::size_t q = 0; q < n; ++q)
      for (std::size_t j = 0; j < s; ++j)
        full.p[q * s + j] = static_cast<float>(1000 * r + q) + j % 7 * 0.125f;
    const std::vector<std::size_t> even(n, s);
    cs.enqueue([&] { comm.all_to_all(cs, full.p, even, got.p, even, "all-to-all"); });
    cs.synchronize();
    ok = true;
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t j = 0; j < s; ++j)
        ok &= got.p[p * s + j] == static_cast<float>(1000 * p + r) + j % 7 * 0.125f;
    checks.expect(ok, fmt::format("all-to-all of {} elements per pair ({})", s, mode));

    // All-to-all-v: rank p sends (p + q) % 3 * s / 2 + 1 elements to rank q (uneven, never none), each
    // of value 1000 p + q; this rank receives (p + r) % 3 * s / 2 + 1 from each p.
    const auto count = [&](std::size_t p, std::size_t q) { return (p + q) % 3 * s / 2 + 1; };
    std::vector<std::size_t> send_counts, recv_counts;
    std::size_t sent = 0, received = 0;
    for (std::size_t q = 0; q < n; ++q) {
      send_counts.push_back(count(static_cast<std::size_t>(r), q));
      recv_counts.push_back(count(q, static_cast<std::size_t>(r)));
      sent += send_counts.back();
      received += recv_counts.back();
    }
    Buffer out(dev, sent, "all-to-all-v send"), in(dev, received, "all-to-all-v receive");
    std::size_t at = 0;
    for (std::size_t q = 0; q < n; ++q)
      for (std::size_t j = 0; j < send_counts[q]; ++j) out.p[at++] = static_cast<float>(1000 * r + q);
    cs.enqueue([&] { comm.all_to_all(cs, out.p, send_counts, in.p, recv_counts, "all-to-all-v"); });
    cs.synchronize();
    ok = true;
    at = 0;
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t j = 0; j < recv_counts[p]; ++j) ok &= in.p[at++] == static_cast<float>(1000 * p + r);
    checks.expect(ok, fmt::format("all-to-all-v of {} to {} elements per pair ({})", 1, s + 1, mode));
  }
  dev.compute_stream().synchronize();
  bool gemm_ok = true;
  for (std::int64_t i = 0; i < dim * dim; ++i) gemm_ok &= c.p[i] == static_cast<float>(2 * dim);
  checks.expect(gemm_ok, "the GEMM that ran beside the collectives");

  // Host side.
  comm.barrier("barrier after the collectives");
  checks.expect(comm.max_over_ranks(r) == world - 1, "max_over_ranks");
  checks.expect(comm.sum_over_ranks(r + 1) == world * (world + 1) / 2, "sum_over_ranks");
  const auto values = comm.all_values(2.5 * r);
  bool values_ok = values.size() == n;
  for (std::size_t q = 0; values_ok && q < n; ++q) values_ok = values[q] == 2.5 * static_cast<double>(q);
  checks.expect(values_ok, "all_values");
}

// The node rings of every node size that divides the job: the ranks of a node (numbered node by
// node) and those at one local index. An all-gather of the job ranks on each ring gives its members
// in ring order; an all-reduce of rank + 1 their sum. A size that does not divide is refused.
void check_rings(Checks& checks) {
  MpiCommunicator comm({30.0, std::nullopt});
  const int r = comm.rank(), world = comm.size();
  CpuDevice dev({0, false, r});
  auto& cs = dev.compute_stream();
  for (int g = 1; g <= world; ++g) {
    if (world % g != 0) {
      bool refused = false;
      try {
        (void)comm.ring(osdp::costmodel::RingLevel::kIntra, g);
      } catch (const osdp::UsageError&) {
        refused = true;
      }
      checks.expect(refused, fmt::format("nodes of {} ranks in a job of {} are refused", g, world));
      continue;
    }
    const int node = r / g, local = r % g, nodes = world / g;
    for (const auto level : {osdp::costmodel::RingLevel::kIntra, osdp::costmodel::RingLevel::kInter}) {
      const bool intra = level == osdp::costmodel::RingLevel::kIntra;
      Communicator& ring = comm.ring(level, g);
      checks.expect(&comm.ring(level, g) == &ring, "a ring asked for again is the same communicator");
      const std::string name = fmt::format("{} ring of nodes of {}", osdp::costmodel::to_string(level), g);
      checks.expect(ring.size() == (intra ? g : nodes) && ring.rank() == (intra ? local : node),
                    fmt::format("{}: rank {} of {}", name, ring.rank(), ring.size()));
      const auto size = static_cast<std::size_t>(ring.size());
      Buffer mine(dev, 1, "rank"), members(dev, size, "members"), total(dev, 1, "total");
      mine.p[0] = static_cast<float>(r);
      total.p[0] = static_cast<float>(r + 1);
      cs.enqueue([&] {
        ring.all_gather(cs, mine.p, members.p, 1, name + " all-gather");
        ring.all_reduce(cs, total.p, 1, name + " all-reduce");
      });
      cs.synchronize();
      bool ok = true;
      double expected_total = 0;
      for (std::size_t i = 0; i < size; ++i) {
        const int member = intra ? node * g + static_cast<int>(i) : static_cast<int>(i) * g + local;
        ok &= members.p[i] == static_cast<float>(member);
        expected_total += member + 1;
      }
      checks.expect(ok, name + ": the members in ring order");
      checks.expect(total.p[0] == static_cast<float>(expected_total), name + ": all-reduce over the members");
      checks.expect(ring.sum_over_ranks(1.0) == static_cast<double>(size), name + ": host-side sum");
    }
  }
}

// split: ranks of equal color (here: rank parity), ranked by key (here: descending rank). Send and
// receive: every rank sends 1 Mi floats to both neighbours on a ring before receiving (so the sends
// must not wait for their receivers, as two pipeline stages sending to each other need), tagged so
// that the two messages between a pair of ranks (2 ranks: both neighbours are the same rank) stay apart.
void check_split_and_p2p(Checks& checks) {
  MpiCommunicator comm({30.0, std::nullopt});
  const int r = comm.rank(), world = comm.size();
  CpuDevice dev({0, false, r});
  auto& cs = dev.compute_stream();
  Communicator& half = comm.split(r % 2, -r, "splitting by parity");
  const int members = (world - r % 2 + 1) / 2;
  int above = 0;  // members of this color with a higher rank: they come first
  for (int q = r + 2; q < world; q += 2) ++above;
  checks.expect(half.size() == members && half.rank() == above,
                fmt::format("split by parity: rank {} of {}, expected {} of {}", half.rank(), half.size(),
                            above, members));
  Buffer mine(dev, 1, "rank");
  mine.p[0] = static_cast<float>(r + 1);
  cs.enqueue([&] { half.all_reduce(cs, mine.p, 1, "all-reduce over a split"); });
  cs.synchronize();
  double expected = 0;
  for (int q = r % 2; q < world; q += 2) expected += q + 1;
  checks.expect(mine.p[0] == static_cast<float>(expected), "all-reduce over a split sums its members");

  const std::size_t n = std::size_t{1} << 20;
  const int next = (r + 1) % world, prev = (r + world - 1) % world;
  Buffer out(dev, n, "sent"), from_prev(dev, n, "from the previous rank"),
      from_next(dev, n, "from the next rank");
  for (std::size_t i = 0; i < n; ++i) out.p[i] = static_cast<float>(r * 1000 + static_cast<int>(i % 997));
  cs.enqueue([&] {
    comm.send(cs, out.p, n, next, 1, "send to the next rank");
    out.p[0] = -1.0f;  // the send holds its own copy: reusing the buffer at once is allowed
    comm.send(cs, out.p + 1, n - 1, prev, 2, "send to the previous rank");
    comm.recv(cs, from_prev.p, n, prev, 1, "receive from the previous rank");
    comm.recv(cs, from_next.p + 1, n - 1, next, 2, "receive from the next rank");
    comm.flush_sends(cs, "the end of the exchange");
  });
  cs.synchronize();
  bool ok = from_prev.p[0] == static_cast<float>(prev * 1000);
  for (std::size_t i = 1; ok && i < n; ++i)
    ok = from_prev.p[i] == static_cast<float>(prev * 1000 + static_cast<int>(i % 997)) &&
         from_next.p[i] == static_cast<float>(next * 1000 + static_cast<int>(i % 997));
  checks.expect(ok, "sends to both neighbours before any receive arrive whole and in order");
}

void check_faults(Checks& checks) {
  const auto throws = [](const char* text) {
    try {
      parse_fault_spec(text);
    } catch (const osdp::Error& e) {
      return std::string(e.what()).find("OSDP_INJECT_FAULT") != std::string::npos;
    }
    return false;
  };
  const FaultSpec spec = parse_fault_spec("rank=1,op=all-gather layer3,kind=delay,seconds=0.5");
  checks.expect(spec.rank == 1 && spec.op == "all-gather layer3" && spec.kind == FaultKind::kDelay &&
                    spec.seconds == 0.5,
                "parse_fault_spec fields");
  checks.expect(parse_fault_spec("rank=0,op=x,kind=kill").kind == FaultKind::kKill,
                "parse_fault_spec kind=kill");
  for (const char* bad : {"", "garbage", "rank=1,op=x", "rank=a,op=x,kind=hang", "rank=1,op=x,kind=boom",
                          "rank=1,op=x,kind=hang,foo=1", "rank=1,op=,kind=exit",
                          "rank=1,rank=2,op=x,kind=hang", "rank=1,op=x,kind=hang,seconds=2"}) {
    checks.expect(throws(bad), fmt::format("parse_fault_spec(\"{}\") throws", bad));
  }

  // Rank 0 is late by 0.4 s for "delayed all-reduce": every rank's all-reduce takes at least that.
  MpiCommunicator late({30.0, FaultSpec{0, "delayed", FaultKind::kDelay, 0.4}});
  CpuDevice dev({0, false, late.rank()});
  float x = 1.0f;
  late.barrier("before the delay");
  const auto t0 = std::chrono::steady_clock::now();
  late.all_reduce(dev.compute_stream(), &x, 1, "delayed all-reduce");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  checks.expect(waited >= 0.35, fmt::format("the delayed all-reduce took {} s, expected >= 0.4 s", waited));
  checks.expect(x == static_cast<float>(late.size()), "the delayed all-reduce's sum");

  // Rank 0 is 1.5 s late for a barrier that the others give 0.3 s: they fail, naming themselves.
  {
    MpiCommunicator impatient({0.3, FaultSpec{0, "late barrier", FaultKind::kDelay, 1.5}});
    std::string message = "(nothing thrown)";
    try {
      impatient.barrier("late barrier");
    } catch (const BackendFailure& e) {
      message = e.what();
    }
    if (impatient.rank() != 0) {
      checks.expect(
          message == fmt::format("rank {}: late barrier (0 B) did not complete within 0.3 s: a peer "
                                 "rank died or hung",
                                 impatient.rank()),
          "the timeout message: " + message);
      message = "(nothing thrown)";
      try {
        impatient.barrier("next barrier");
      } catch (const BackendFailure& e) {
        message = e.what();
      }
      checks.expect(message.find("unusable since late barrier timed out") != std::string::npos,
                    "an operation after a timeout fails at once: " + message);
    }
  }
  late.barrier("after the late barrier");
}

int fault_mode(double timeout_s) {
  MpiCommunicator comm({timeout_s, std::nullopt});
  CpuDevice dev({0, true, comm.rank()});
  try {
    const std::size_t s = 1024, n = static_cast<std::size_t>(comm.size());
    Buffer shard(dev, s, "shard"), full(dev, s * n, "full");
    dev.fill(dev.compute_stream(), shard.p, s, 1.0f);
    auto& cs = dev.comm_stream();
    for (int layer = 0; layer < 3; ++layer) {
      cs.enqueue([&, layer] {
        comm.all_gather(cs, shard.p, full.p, s, fmt::format("all-gather fault.layer{}", layer));
        comm.reduce_scatter(cs, full.p, shard.p, s, fmt::format("reduce-scatter fault.layer{}", layer));
      });
      cs.synchronize();
      comm.barrier(fmt::format("barrier after fault.layer{}", layer));
    }
  } catch (const BackendFailure& e) {
    abort_job(e.what());
  }
  std::fprintf(stderr, "rank %d: fault mode finished\n", comm.rank());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 2 && args[0] == "--relaunch") {
      if (launched_by_mpirun()) {
        std::fprintf(stderr, "--relaunch: already under mpirun\n");
        return 1;
      }
      return relaunch_under_mpirun(std::stoi(args[1]), {}, {"--oversubscribe"});
    }
    MpiSession session(&argc, &argv);
    if (!args.empty() && args[0] == "--fault-mode") {
      return fault_mode(args.size() == 3 && args[1] == "--timeout" ? std::stod(args[2]) : 3.0);
    }
    Checks checks;
    {
      MpiCommunicator comm;
      checks.rank = comm.rank();
      checks.expect(launched_by_mpirun(), "launched_by_mpirun() under mpirun");
      checks.expect(comm.backend() == "mpi", "backend() is mpi");
      checks.expect(comm.version().find("MPI") != std::string::npos,
                    "version() names MPI: " + comm.version());
      checks.expect(session.thread_level() >= MPI_THREAD_SERIALIZED, "thread level");
    }
    check_collectives(checks, true);
    check_collectives(checks, false);
    check_rings(checks);
    check_split_and_p2p(checks);
    check_faults(checks);
    MpiCommunicator comm;
    const double failures = comm.sum_over_ranks(checks.failures);
    if (comm.rank() == 0) {
      std::printf("test_mpi_backend: %d ranks, %s, %.0f failed checks\n", comm.size(), comm.version().c_str(),
                  failures);
    }
    return failures == 0 ? 0 : 1;
  } catch (const osdp::Error& e) {
    abort_job(e.what());
  }
}
