// The communicator of the `mpi` backend: collectives on fp32 buffers in host memory. All-gather,
// reduce-scatter and all-reduce are rings (validate/mpi/mpi_rings.cpp): N - 1 steps (all-reduce 2(N - 1))
// in each of which every rank sends one chunk to the next rank and receives one from the previous,
// the algorithm the cost model prices (costmodel/collective.hpp) and NCCL runs on a ring, rather than
// the library's choice (Open MPI's nonblocking all-reduce and reduce-scatter are a reduction to one rank
// and a broadcast or scatter, which loads a link's two directions unevenly). All-to-all is
// MPI_Ialltoallv. Every request is polled with MPI_Test until it completes or a timeout says a peer
// died or hung. Also the MPI session (init/finalize),
// the job abort, and fault injection for the tests.
//
// Fault injection: OSDP_INJECT_FAULT="rank=R,op=SUBSTRING,kind=hang|exit|delay[,seconds=S]" makes
// rank R, before every collective or barrier whose `what` contains SUBSTRING (every match, not only
// the first), hang forever (kind=hang), print a line and _Exit(17) (kind=exit), or sleep S seconds
// and go on (kind=delay, S default 1).
#pragma once

#include <mpi.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "validate/executor/backend.hpp"

namespace osdp::validate {

// MPI_Init_thread (asking for MPI_THREAD_MULTIPLE) unless MPI is initialised already; throws
// osdp::Error when the library provides less than MPI_THREAD_SERIALIZED. MPI_Finalize on
// destruction when this session initialised MPI.
class MpiSession {
 public:
  MpiSession();
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int thread_level() const { return provided_; }  // MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE
  bool owns_mpi() const { return initialised_here_; }

 private:
  int provided_ = 0;
  bool initialised_here_ = false;
};

// True when this process is a rank started by mpirun/mpiexec (OMPI_COMM_WORLD_SIZE or PMI_SIZE set).
bool launched_by_mpirun();

// Prints "osdp: error: <message>" to stderr and aborts every rank of the job
// (MPI_Abort(MPI_COMM_WORLD, 4); _Exit(4) when MPI is not running).
[[noreturn]] void abort_job(const std::string& message);

enum class FaultKind { kHang, kExit, kKill, kDelay };

struct FaultSpec {
  int rank = 0;
  std::string op;  // a substring of the operation's `what`
  FaultKind kind = FaultKind::kHang;
  double seconds = 1.0;  // kDelay only
};

// Parses the OSDP_INJECT_FAULT syntax above; throws osdp::Error naming the bad part.
FaultSpec parse_fault_spec(std::string_view text);

// The injection point every backend calls before an operation: when `fault` is for this rank and
// `what` matches, kind=exit prints a line and _Exit(17)s, kind=kill prints a line that does not name
// the operation and raises SIGKILL (a rank killed from outside), kind=delay prints and sleeps; returns true
// for kind=hang, which the caller carries out as its backend hangs (MPI: never returns; NCCL: skips
// the collective, so that its peers hang in it).
bool injected_hang(const std::optional<FaultSpec>& fault, int rank, const std::string& what);

// Polls `request` with MPI_Test (its return code through check_mpi), yielding the CPU between polls,
// until it completes (true) or `timeout_s` seconds have passed (false: it is still pending, and what
// it reads or writes must stay allocated). Both backends wait on MPI this way. With `lock` (held on
// entry and on return), it lets go of it while it yields between polls.
bool mpi_wait(MPI_Request& request, double timeout_s, std::string_view what, int rank,
              std::unique_lock<std::mutex>* lock = nullptr);

struct MpiCommunicatorOptions {
  double timeout_s = 60.0;         // a collective or barrier not done by then fails with BackendFailure
  std::optional<FaultSpec> fault;  // when unset, read from OSDP_INJECT_FAULT (if that is set)
};

// Collectives over MPI_COMM_WORLD (duplicated, errors returned rather than fatal). After a timeout the
// communicator is unusable: later operations fail at once and it is not freed (a request is pending). A
// collective is called from work running on stream `s` and completes before it returns (the stream is
// unused). Calls are serialised by a mutex (shared with its rings), so the communicator is safe under
// MPI_THREAD_SERIALIZED. Sizes in error messages are the whole buffer: shard x ranks for all-gather and
// reduce-scatter. Buffers may be in place (shard == full + rank * shard_elems). Rings (ring()) are
// MPI_Comm_split of this communicator; their messages name the rank in the job.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MpiCommunicatorOptions options = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  std::string version() const override;  // the first line of MPI_Get_library_version
  double timeout() const { return options_.timeout_s; }
  const std::optional<FaultSpec>& fault() const { return options_.fault; }

  void all_gather(Stream& s, const float* shard, float* full, std::size_t shard_elems,
                  const std::string& what) override;
  void reduce_scatter(Stream& s, const float* full, float* shard, std::size_t shard_elems,
                      const std::string& what) override;
  void all_reduce(Stream& s, float* buf, std::size_t elems, const std::string& what) override;
  void all_to_all(Stream& s, const float* send, const std::vector<std::size_t>& send_counts, float* recv,
                  const std::vector<std::size_t>& recv_counts, const std::string& what) override;

  Communicator& ring(costmodel::RingLevel level, int per_node) override;
  // MPI_Comm_split of this communicator.
  Communicator& split(int color, int key, const std::string& what) override;
  // MPI_Isend of a copy of `buf` (kept until delivered); MPI_Irecv polled to the timeout.
  void send(Stream& s, const float* buf, std::size_t elems, int peer, int tag,
            const std::string& what) override;
  void recv(Stream& s, float* buf, std::size_t elems, int peer, int tag, const std::string& what) override;
  void flush_sends(Stream& s, const std::string& what) override;

  void barrier(const std::string& what) override;
  double max_over_ranks(double x) override;
  double sum_over_ranks(double x) override;
  std::vector<double> all_values(double x) override;

 private:
  // Before every operation: fails once a timeout left the communicator unusable, then injects the
  // configured fault if `what` matches.
  void begin(const std::string& what) const;
  int count(std::size_t elems, const std::string& what) const;
  // Polls `request` until done; BackendFailure past the timeout.
  // Waits for `request` (a BackendFailure after the timeout). With `lock` (held), it lets go of the
  // process's MPI lock between its polls: the other stream's operations, on other communicators, go on
  // meanwhile, so a collective of the compute stream waiting for its peers never holds up the comm
  // stream's (their peers may be waiting for those first).
  void complete(MPI_Request& request, const std::string& what, std::size_t bytes,
                std::unique_lock<std::mutex>* lock = nullptr);
  double reduce_double(double x, MPI_Op op, const std::string& what);
  // One step of a ring collective: `send_n` floats to the next rank of the ring while `recv_n` come
  // from the previous one, both polled to completion (the lock let go between polls). `bytes`: the
  // collective's whole buffer, for messages.
  void ring_step(const float* send, std::size_t send_n, float* recv, std::size_t recv_n, int tag,
                 const std::string& what, std::size_t bytes, std::unique_lock<std::mutex>& lock);
  // The tag of the next ring collective on this communicator (every rank calls them in one order), apart
  // from the small tags of point-to-point sends.
  int next_ring_tag();

  // A ring: `comm` (owned) split from `parent`.
  MpiCommunicator(const MpiCommunicator& parent, MPI_Comm comm);

  MpiCommunicatorOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int job_rank_ = 0;  // this rank in the job (MPI_COMM_WORLD), for messages
  std::shared_ptr<std::mutex> mutex_ = std::make_shared<std::mutex>();     // one MPI call at a time
  std::map<std::pair<int, int>, std::unique_ptr<MpiCommunicator>> rings_;  // (level, per_node) ->
  std::vector<std::unique_ptr<MpiCommunicator>> splits_;                   // in the order made
  struct PendingSend {
    std::vector<float> data;
    MPI_Request request = MPI_REQUEST_NULL;
    std::string what;
  };
  std::vector<std::unique_ptr<PendingSend>> sends_;  // not yet known to be delivered
  std::string timed_out_;            // the operation that timed out (its request is still pending), if any
  std::vector<float> ring_scratch_;  // the chunk a ring step receives (a reduce-scatter's partial sum too)
  unsigned ring_sequence_ = 0;
};

}  // namespace osdp::validate
