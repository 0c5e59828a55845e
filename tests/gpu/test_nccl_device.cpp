// The NCCL communicator on GPUs, under mpirun with 1..N ranks (one GPU per rank: local rank modulo the
// GPUs visible). CTest runs it with one rank; gpu-smoke.sh with one rank per GPU. Without a GPU,
// gpu_main.cpp exits 77 (skipped) before any test case, so MPI is never started.
//
// Every collective against its closed form on every rank, with rank-dependent data whose sums are
// exact in fp32 (integers below 2^24), N ranks, shard size S:
//   all-gather:     rank q's shard j is f(q, j) = q * 2^17 + j        -> full[q S + j] = f(q, j)
//   reduce-scatter: rank r's full[i] is (r + 1) (i mod 97 + 1)       -> rank q's shard j is
//                   N (N + 1) / 2 * ((q S + j) mod 97 + 1)
//   all-reduce:     rank r's buf[i] is (r + 1) (i mod 13) + r        -> N (N + 1) / 2 (i mod 13)
//                                                                       + N (N - 1) / 2
//   each group:     an all-reduce of 1.0 on every rank               -> the group's size
//   split by parity: an all-reduce of r + 1                           -> the sum of q + 1 over the
//                                                                       ranks q of r's parity
//   point to point: message i from rank q to rank p, element j        -> q 2^16 + p 2^8 + i + j mod 7
//
// MPI: a function-static MpiSession, made by the first test case that needs MPI (MPI_Init_thread) and
// finalized at exit. Every rank runs the same test cases in the same order (declaration order), so
// the collectives match; checks are non-fatal (CHECK) so that a failed check on one rank does not
// leave its peers waiting in a collective. All waits are bounded by the timeouts anyway.
//
// The injected hang (2 ranks or more, last test case): rank 1 skips launching an all-gather, so the
// others hang in NCCL until the device's 3 s timeout calls the communicator's timed_out(), which
// aborts their NCCL communicators and throws BackendFailure naming the all-gather. The test then ends
// every rank cleanly, without MPI_Abort: MPI still works, so the ranks meet in all_values (over MPI),
// and rank 1, whose communicators are intact but whose peers' are gone, aborts its own (finalizing
// them would wait for the peers until the timeout). The devices drain their streams (the aborted
// kernels have exited), the communicators destroy nothing more, and MPI_Finalize runs at exit.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "validate/cuda/cuda_device.hpp"
#include "validate/cuda/cuda_errors.hpp"
#include "validate/cuda/nccl_backend.hpp"
#include "validate/mpi/mpi_backend.hpp"

namespace {

using namespace osdp::validate;

MpiSession& mpi_session() {
  static MpiSession session;
  return session;
}

int world_size() {
  mpi_session();
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// This rank's GPU: its index among the ranks of its node, modulo the GPUs visible. Made current.
int use_my_gpu() {
  mpi_session();
  static const int device = local_rank_of_world() % cuda_device_count();
  check_cuda(cudaSetDevice(device), "cudaSetDevice", "choosing this rank's GPU", -1);
  return device;
}

// True on every rank when no node runs more ranks than it has GPUs (NCCL needs one GPU per rank).
bool one_gpu_per_rank() {
  mpi_session();
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_size = 1;
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  int ok = local_size <= cuda_device_count() ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all_ok == 1;
}

CudaDeviceOptions device_options(int device, int rank, double timeout_s) {
  CudaDeviceOptions o;
  o.device = device;
  o.rank = rank;
  o.timeout_s = timeout_s;
  return o;
}

NcclOptions nccl_options(double timeout_s, std::optional<FaultSpec> fault) {
  NcclOptions o;
  o.timeout_s = timeout_s;
  o.fault = std::move(fault);
  return o;
}

// Device memory holding `n` floats, freed on scope exit.
struct Buffer {
  Buffer(CudaDevice& device, std::size_t n, const char* what)
      : device_(device), p(device.allocate(n * sizeof(float), what)) {}
  ~Buffer() { device_.deallocate(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  CudaDevice& device_;
  float* p;
};

// A stream of another backend: the NCCL communicator refuses it.
class HostStream final : public Stream {
 public:
  void enqueue(std::function<void()> work) override { work(); }
  void wait(const EventPtr& /*event*/) override {}
  EventPtr record() override { return nullptr; }
  void synchronize() override {}
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("NCCL collectives on device buffers give their closed forms", "[nccl][gpu]") {
  if (!one_gpu_per_rank()) {
    WARN("more ranks than GPUs on a node: NCCL needs one GPU per rank");
    return;
  }
  const int gpu = use_my_gpu();
  // The communicator before the device: the device (which polls it) goes first.
  NcclCommunicator comm(gpu, nccl_options(60.0, std::nullopt));
  CudaDevice device(device_options(gpu, comm.rank(), 60.0));
  device.set_watchdog(&comm);
  const int r = comm.rank(), world = comm.size();
  const auto n = static_cast<std::size_t>(world);
  // N (N + 1) / 2 and N (N - 1) / 2: one of N, N +- 1 is even, so both are whole numbers.
  const float tri = static_cast<float>(world * (world + 1)) / 2.0f;
  const float tri_minus = static_cast<float>(world * (world - 1)) / 2.0f;
  CHECK(world == world_size());
  CHECK(comm.backend() == "nccl");
  CHECK(contains(comm.version(), "NCCL "));
  CHECK(contains(comm.version(), "built against"));
  CHECK(contains(comm.version(), "on the host"));

  CudaStream& cs = device.comm_stream();
  CudaStream& compute = device.compute_stream();
  for (const std::size_t s :
       {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{65537}, std::size_t{1} << 20}) {
    INFO("rank " << r << " of " << world << ", shard of " << s << " floats");
    Buffer shard(device, s, "shard"), full(device, s * n, "full"), buf(device, s * n, "buf");
    std::vector<float> host_shard(s), host_full(s * n), expect(s * n), got(s * n);

    // all-gather: the shard uploaded on the compute stream, the comm stream waits for its event.
    for (std::size_t j = 0; j < s; ++j)
      host_shard[j] = static_cast<float>(r * 131072 + static_cast<int>(j % 131072));
    device.upload(compute, host_shard.data(), shard.p, s);
    cs.wait(compute.record());
    cs.enqueue([&] { comm.all_gather(cs, shard.p, full.p, s, fmt::format("all-gather test {}", s)); });
    device.download(cs, full.p, got.data(), s * n);
    for (std::size_t q = 0; q < n; ++q) {
      for (std::size_t j = 0; j < s; ++j) expect[q * s + j] = static_cast<float>(q * 131072 + j % 131072);
    }
    CHECK(got == expect);

    // all-gather in place: the shard already sits at full + r S.
    device.fill(cs, full.p, s * n, -1.0f);
    device.upload(cs, host_shard.data(), full.p + static_cast<std::size_t>(r) * s, s);
    cs.enqueue([&] {
      comm.all_gather(cs, full.p + static_cast<std::size_t>(r) * s, full.p, s,
                      fmt::format("all-gather in place {}", s));
    });
    device.download(cs, full.p, got.data(), s * n);
    CHECK(got == expect);

    // reduce-scatter
    for (std::size_t i = 0; i < s * n; ++i)
      host_full[i] = static_cast<float>((r + 1) * static_cast<int>(i % 97 + 1));
    device.upload(cs, host_full.data(), full.p, s * n);
    cs.enqueue(
        [&] { comm.reduce_scatter(cs, full.p, shard.p, s, fmt::format("reduce-scatter test {}", s)); });
    std::vector<float> got_shard(s), expect_shard(s);
    device.download(cs, shard.p, got_shard.data(), s);
    for (std::size_t j = 0; j < s; ++j) {
      expect_shard[j] = tri * static_cast<float>((static_cast<std::size_t>(r) * s + j) % 97 + 1);
    }
    CHECK(got_shard == expect_shard);

    // all-reduce, in place
    for (std::size_t i = 0; i < s * n; ++i)
      host_full[i] = static_cast<float>((r + 1) * static_cast<int>(i % 13) + r);
    device.upload(cs, host_full.data(), buf.p, s * n);
    cs.enqueue([&] { comm.all_reduce(cs, buf.p, s * n, fmt::format("all-reduce test {}", s)); });
    device.download(cs, buf.p, got.data(), s * n);
    for (std::size_t i = 0; i < s * n; ++i) expect[i] = tri * static_cast<float>(i % 13) + tri_minus;
    CHECK(got == expect);
    CHECK(comm.collectives_in_flight() == 0);  // the downloads waited for the stream
  }
  HostStream host_stream;
  CHECK_THROWS_AS(comm.all_reduce(host_stream, nullptr, 1, "all-reduce on a host stream"), osdp::UsageError);
  // Zero elements launch nothing.
  cs.enqueue([&] { comm.all_reduce(cs, nullptr, 0, "all-reduce of nothing"); });
  CHECK(comm.collectives_in_flight() == 0);
  CHECK_NOTHROW(comm.check());
  CHECK_FALSE(comm.aborted());
  comm.barrier("end of the collectives test");
}

TEST_CASE("the NCCL groups exist with the right sizes and work", "[nccl][gpu]") {
  if (!one_gpu_per_rank()) return;
  const int gpu = use_my_gpu();
  NcclCommunicator comm(gpu, nccl_options(60.0, std::nullopt));
  CudaDevice device(device_options(gpu, comm.rank(), 60.0));
  device.set_watchdog(&comm);

  // The expected sizes, from MPI directly: ranks on this node, ranks with this local rank, nodes.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &node);
  int local_rank = 0, local_size = 0;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  std::vector<int> local_ranks(static_cast<std::size_t>(comm.size()));
  MPI_Allgather(&local_rank, 1, MPI_INT, local_ranks.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int same_local = 0, nodes = 0;
  for (const int l : local_ranks) {
    same_local += l == local_rank ? 1 : 0;
    nodes += l == 0 ? 1 : 0;
  }
  CHECK(comm.local_rank() == local_rank);
  CHECK(comm.local_size() == local_size);
  CHECK(comm.nodes() == nodes);

  const std::vector<std::pair<CommGroup, int>> groups = {{CommGroup::kWorld, comm.size()},
                                                         {CommGroup::kIntraNode, local_size},
                                                         {CommGroup::kInterNode, same_local}};
  CudaStream& cs = device.comm_stream();
  Buffer one(device, 1, "one");
  for (const auto& [g, expected] : groups) {
    INFO("group " << static_cast<int>(g));
    ncclComm_t c = comm.group(g);
    REQUIRE(c != nullptr);
    int count = 0, device_of = -1;
    CHECK(ncclCommCount(c, &count) == ncclSuccess);
    CHECK(count == expected);
    CHECK(ncclCommCuDevice(c, &device_of) == ncclSuccess);
    CHECK(device_of == gpu);
    // An all-reduce of 1.0 over the group, launched the nonblocking way, gives the group's size.
    device.fill(cs, one.p, 1, 1.0f);
    ncclResult_t result = ncclAllReduce(one.p, one.p, 1, ncclFloat32, ncclSum, c, cs.handle());
    const double t0 = device.now_s();
    while (result == ncclInProgress && device.now_s() - t0 < 60.0) {
      ncclResult_t state = ncclInProgress;
      CHECK(ncclCommGetAsyncError(c, &state) == ncclSuccess);
      result = state;
    }
    CHECK(result == ncclSuccess);
    float sum = 0.0f;
    device.download(cs, one.p, &sum, 1);
    CHECK(sum == static_cast<float>(expected));
  }
  int user_rank = -1;
  CHECK(ncclCommUserRank(comm.group(CommGroup::kWorld), &user_rank) == ncclSuccess);
  CHECK(user_rank == comm.rank());
  CHECK(ncclCommUserRank(comm.group(CommGroup::kIntraNode), &user_rank) == ncclSuccess);
  CHECK(user_rank == local_rank);
}

TEST_CASE("events recorded around a collective time it", "[nccl][gpu]") {
  if (!one_gpu_per_rank()) return;
  const int gpu = use_my_gpu();
  NcclCommunicator comm(gpu, nccl_options(60.0, std::nullopt));
  CudaDevice device(device_options(gpu, comm.rank(), 60.0));
  device.set_watchdog(&comm);
  CudaStream& cs = device.comm_stream();
  const std::size_t elems = std::size_t{1} << 24;  // 64 MiB
  Buffer buf(device, elems, "timed buffer");
  device.fill(cs, buf.p, elems, 1.0f);
  cs.enqueue([&] { comm.all_reduce(cs, buf.p, elems, "all-reduce warm-up"); });
  // before: the fill and the all-reduce; start to end: the all-reduce alone.
  const EventPtr before = cs.record();
  device.fill(cs, buf.p, elems, 2.0f);
  const EventPtr start = cs.record();
  cs.enqueue([&] { comm.all_reduce(cs, buf.p, elems, "all-reduce timed"); });
  const EventPtr end = cs.record();
  end->synchronize();
  const double seconds = end->seconds_since(*start), with_fill = end->seconds_since(*before);
  CHECK(seconds >= 0.0);  // one rank's in-place all-reduce may be no work at all
  CHECK(seconds < 10.0);
  CHECK(with_fill > 0.0);  // a 64 MiB fill takes time
  CHECK(with_fill >= seconds);
  // The end event completed after the collective: its result is there.
  float first = 0.0f;
  device.download(cs, buf.p, &first, 1);
  CHECK(first == 2.0f * static_cast<float>(comm.size()));
  const double slowest = comm.max_over_ranks(seconds);
  CHECK(slowest >= seconds);
  const std::vector<double> all = comm.all_values(seconds);
  CHECK(all.size() == static_cast<std::size_t>(comm.size()));
  CHECK(comm.sum_over_ranks(1.0) == static_cast<double>(comm.size()));

  // The watchdog's timeout with nothing in flight names what the host waited for, and aborts (every
  // rank does it, so no peer waits for this one).
  cs.synchronize();
  CHECK_THROWS_WITH(comm.timed_out(1.5, "the compute stream"),
                    Catch::Contains(fmt::format("rank {}", comm.rank())) &&
                        Catch::Contains("the compute stream") && Catch::Contains("no NCCL collective"));
  CHECK(comm.aborted());
}

TEST_CASE("a buffer freed on the comm stream after a collective goes to the compute stream once it is over",
          "[nccl][gpu]") {
  if (!one_gpu_per_rank()) return;
  const int gpu = use_my_gpu();
  NcclCommunicator comm(gpu, nccl_options(60.0, std::nullopt));
  CudaDevice device(device_options(gpu, comm.rank(), 60.0));
  device.set_watchdog(&comm);
  CudaStream& compute = device.compute_stream();
  CudaStream& cs = device.comm_stream();
  // The executor's pattern: the compute stream allocates and fills x, the comm stream waits for it,
  // all-reduces it (late: a spin first) and frees it. Were x handed back to the compute stream before
  // the all-reduce ran, the next round's fill would change what it sums.
  const std::size_t n = std::size_t{1} << 20, rounds = 8, kept = 256;
  Buffer results(device, rounds * kept, "results");
  for (std::size_t round = 0; round < rounds; ++round) {
    float* x = nullptr;
    compute.enqueue([&] {
      x = device.allocate(n * sizeof(float), "x");
      device.fill(compute, x, n, static_cast<float>(round + 1));
    });
    cs.wait(compute.record());
    cs.enqueue([&] {
      device.spin(cs, 0.02);
      comm.all_reduce(cs, x, n, fmt::format("all-reduce round {}", round));
      device.copy(cs, x + n - kept, results.p + round * kept, kept);
      device.deallocate(x);
    });
  }
  std::vector<float> got(rounds * kept), expect(rounds * kept);
  device.download(cs, results.p, got.data(), got.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    expect[i] = static_cast<float>((i / kept + 1) * static_cast<std::size_t>(comm.size()));
  CHECK(got == expect);
  CHECK(device.allocator_stats().current_bytes == rounds * kept * sizeof(float));
}

TEST_CASE("splits and point-to-point transfers give their closed forms", "[nccl][gpu]") {
  if (!one_gpu_per_rank()) return;
  const int gpu = use_my_gpu();
  NcclCommunicator comm(gpu, nccl_options(60.0, std::nullopt));
  CudaDevice device(device_options(gpu, comm.rank(), 60.0));
  device.set_watchdog(&comm);
  const int r = comm.rank(), world = comm.size();
  CudaStream& cs = device.compute_stream();
  const std::size_t before = comm.communicators();

  // Split by parity, ranked in reverse: rank r is (|group| - 1 - r / 2) of the ranks of its parity.
  // An all-reduce of (r + 1) gives the sum over that parity: sum_{q = r mod 2, +2, ...} (q + 1).
  Communicator& parity = comm.split(r % 2, world - r, "split by parity");
  const int group_size = (world - r % 2 + 1) / 2;
  CHECK(parity.size() == group_size);
  CHECK(parity.rank() == group_size - 1 - r / 2);
  CHECK(parity.backend() == "nccl");
  float expect_sum = 0.0f;
  for (int q = r % 2; q < world; q += 2) expect_sum += static_cast<float>(q + 1);
  Buffer one(device, 1, "one");
  device.fill(cs, one.p, 1, static_cast<float>(r + 1));
  cs.enqueue([&] { parity.all_reduce(cs, one.p, 1, "all-reduce over a parity"); });
  float got_sum = 0.0f;
  device.download(cs, one.p, &got_sum, 1);
  CHECK(got_sum == expect_sum);
  // A split of the split: every rank alone; its all-reduce leaves the value as it is.
  Communicator& alone = parity.split(parity.rank(), 0, "split into single ranks");
  CHECK(alone.size() == 1);
  CHECK(alone.rank() == 0);
  device.fill(cs, one.p, 1, 5.0f);
  cs.enqueue([&] { alone.all_reduce(cs, one.p, 1, "all-reduce alone"); });
  device.download(cs, one.p, &got_sum, 1);
  CHECK(got_sum == 5.0f);
  CHECK(comm.communicators() == before + 2);
  CHECK(parity.sum_over_ranks(1.0) == static_cast<double>(group_size));  // host side, on the MPI split
  CHECK_THROWS_AS(comm.split(-1, 0, "a negative color"), osdp::UsageError);

  // No peer but this rank: a send to itself or outside the communicator is refused before any
  // communicator is made.
  CHECK_THROWS_AS(comm.send(cs, one.p, 1, r, 0, "a send to itself"), osdp::UsageError);
  CHECK_THROWS_AS(comm.recv(cs, one.p, 1, world, 0, "a receive from nowhere"), osdp::UsageError);
  CHECK(comm.communicators() == before + 2);
  if (world < 2) return;

  // A chain, as a pipeline's stages are: every rank sends 3 messages to each neighbour (r - 1 and
  // r + 1) before it receives any, and then receives from both in turn. Were a send to wait for its
  // receiver on the caller's stream, the ranks would wait for each other at once. Message i from rank q
  // to rank p holds q * 2^16 + p * 2^8 + i + (j mod 7) at element j (exact in fp32). The send buffer is
  // overwritten right after each send: a send copies it first.
  const std::size_t n = 100003;
  std::vector<int> neighbours;
  if (r > 0) neighbours.push_back(r - 1);
  if (r + 1 < world) neighbours.push_back(r + 1);
  Buffer out(device, n, "out"), received(device, n * 6, "received");
  std::vector<float> host(n);
  const auto value = [](int q, int p, int i, std::size_t j) {
    return static_cast<float>(q * 65536 + p * 256 + i) + static_cast<float>(j % 7);
  };
  for (int i = 0; i < 3; ++i)
    for (const int peer : neighbours) {
      for (std::size_t j = 0; j < n; ++j) host[j] = value(r, peer, i, j);
      device.upload(cs, host.data(), out.p, n);
      cs.enqueue([&] { comm.send(cs, out.p, n, peer, i, fmt::format("send {} to {}", i, peer)); });
      device.fill(cs, out.p, n, -1.0f);
    }
  // Message i from neighbour k lands at (2 i + k) n.
  for (int i = 0; i < 3; ++i)
    for (std::size_t k = 0; k < neighbours.size(); ++k)
      cs.enqueue([&] {
        comm.recv(cs, received.p + (2 * static_cast<std::size_t>(i) + k) * n, n, neighbours[k], i,
                  fmt::format("receive {} from {}", i, neighbours[k]));
      });
  cs.enqueue([&] { comm.flush_sends(cs, "the end of the transfers"); });
  std::vector<float> got(n * 6);
  device.download(cs, received.p, got.data(), n * 6);
  for (int i = 0; i < 3; ++i)
    for (std::size_t k = 0; k < neighbours.size(); ++k) {
      INFO("rank " << r << " receiving message " << i << " from " << neighbours[k]);
      const float* g = got.data() + (2 * static_cast<std::size_t>(i) + k) * n;
      std::size_t wrong = 0;
      for (std::size_t j = 0; j < n; ++j) wrong += g[j] != value(neighbours[k], r, i, j) ? 1 : 0;
      CHECK(wrong == 0);
    }
  // Two more communicators (higher and lower ranks) for the world's point to point, none for the
  // splits, which sent nothing.
  CHECK(comm.communicators() == before + 4);
  cs.synchronize();
  CHECK(comm.collectives_in_flight() == 0);
  comm.barrier("end of the point-to-point test");
}

TEST_CASE("a peer that skips a collective fails the others' wait within the timeout", "[nccl][gpu]") {
  if (!one_gpu_per_rank() || world_size() < 2) {
    WARN("the injected hang needs 2 ranks or more");
    return;
  }
  const int gpu = use_my_gpu();
  const double device_timeout_s = 3.0;
  // NCCL's own timeout (creation, launches, the host side) stays long: the ranks meet over MPI after
  // the failure, seconds apart. The GPU wait is the device's, 3 s.
  FaultSpec fault;
  fault.rank = 1;
  fault.op = "hang-me";
  fault.kind = FaultKind::kHang;
  NcclCommunicator comm(gpu, nccl_options(60.0, fault));
  CudaDevice device(device_options(gpu, comm.rank(), device_timeout_s));
  device.set_watchdog(&comm);
  CudaStream& cs = device.comm_stream();
  const std::size_t s = 4096;
  Buffer shard(device, s, "shard"), full(device, s * static_cast<std::size_t>(comm.size()), "full");
  device.fill(cs, shard.p, s, 1.0f);
  // The same collective once without the fault: its connections exist before the hang.
  cs.enqueue([&] { comm.all_gather(cs, shard.p, full.p, s, "all-gather warm-up"); });
  cs.synchronize();

  const std::string what = "all-gather hang-me layer0";
  const double t0 = device.now_s();
  std::string message;
  bool threw = false;
  try {
    cs.enqueue([&] { comm.all_gather(cs, shard.p, full.p, s, what); });
    cs.synchronize();
  } catch (const BackendFailure& e) {
    threw = true;
    message = e.what();
  }
  const double waited = device.now_s() - t0;
  if (comm.rank() == 1) {
    CHECK_FALSE(threw);  // it launched nothing
    CHECK_FALSE(comm.aborted());
  } else {
    INFO(message);
    CHECK(threw);
    CHECK(contains(message, fmt::format("rank {}", comm.rank())));
    CHECK(contains(message, what));
    // Past the device's timeout; or, where the transport notices a peer's abort first (network), NCCL's
    // asynchronous error, which names the collective as well.
    CHECK((contains(message, "did not complete") || contains(message, "NCCL failed")));
    CHECK(waited >= device_timeout_s * 0.9);
    CHECK(waited < device_timeout_s + 20.0);
    CHECK(comm.aborted());
    CHECK(comm.group(CommGroup::kWorld) == nullptr);
    CHECK_THROWS_AS(comm.all_reduce(cs, shard.p, s, "all-reduce after the failure"), BackendFailure);
  }
  // Ending cleanly: the ranks meet over MPI, and those whose communicators are intact abort them.
  const std::vector<double> failed = comm.all_values(threw ? 1.0 : 0.0);
  for (std::size_t q = 0; q < failed.size(); ++q) CHECK(failed[q] == (q == 1 ? 0.0 : 1.0));
  comm.abort();
  CHECK(comm.aborted());
  CHECK_NOTHROW(comm.check());
}
