// Collectives, described once (nccl-tests' habit: each collective is a small descriptor, so no
// caller branches on which collective it handles). The cost model prices them, the simulator steps
// them, the calibration sweeps and fits them, and reports name them and give their bus bandwidth,
// all from this file.
//
// A ring over N ranks on a buffer of S bytes (the full gathered or reduced buffer, S/N per rank):
// all-gather and reduce-scatter take one pass of N - 1 steps, each moving one chunk S/N over every
// link; all-reduce is a reduce-scatter then an all-gather, two passes, 2(N - 1) steps. An all-to-all
// over N ranks of S bytes each (S/N for every rank, its own included) is a pairwise exchange, not a
// ring: in step k = 1 .. N-1 rank r sends its chunk for r + k and receives that of r - k, so it too
// takes N - 1 steps of S/N, each on the link between the pair (the simulator steps it so). With alpha
// the latency of a step and beta seconds per byte on the link (DESIGN.md section 4):
//   t = passes ((N-1) alpha + (N-1)/N S beta)        (0 on one rank)
// nccl-tests' bus bandwidth (its PERFORMANCE.md), from the algorithm bandwidth S / t:
//   busbw = S / t * passes (N-1)/N:   (N-1)/N for all-gather, reduce-scatter and all-to-all, 2(N-1)/N
//   for all-reduce.
#pragma once

#include <array>
#include <optional>
#include <string_view>
#include <vector>

namespace osdp::costmodel {

enum class Collective { kAllGather, kReduceScatter, kAllReduce, kAllToAll };

// What is fixed for a kind of collective.
struct CollectiveKind {
  Collective kind;
  const char* name;  // "all-gather": calibration sweeps, reports, messages
  const char* key;   // "allgather": calibration files, task names, the command line
  int passes;        // passes of N - 1 steps: all-reduce 2, the others 1
  bool pairwise;     // steps exchange between pairs of ranks (all-to-all), not along a ring
};

// Every collective, once, in the order of the enum.
inline constexpr std::array<CollectiveKind, 4> kCollectives{{
    {Collective::kAllGather, "all-gather", "allgather", 1, false},
    {Collective::kReduceScatter, "reduce-scatter", "reducescatter", 1, false},
    {Collective::kAllReduce, "all-reduce", "allreduce", 2, false},
    {Collective::kAllToAll, "all-to-all", "alltoall", 1, true},
}};

const CollectiveKind& describe(Collective c);
const char* to_string(Collective c);  // the key: "allgather", "reducescatter", "allreduce", "alltoall"
const char* name_of(Collective c);    // "all-gather", "reduce-scatter", "all-reduce", "all-to-all"
// The collective whose key or name is `s`; none if no collective has it.
std::optional<Collective> collective_from_string(std::string_view s);

// Ring steps on `ranks` ranks: passes (N - 1); 0 when N <= 1.
int ring_steps(Collective c, int ranks);
// nccl-tests' bus bandwidth factor: passes (N - 1) / N; 0 when N <= 1.
double bus_bandwidth_factor(Collective c, int ranks);

// One collective: its kind, the full buffer S and the ranks of its ring.
struct CollectiveOp {
  Collective kind = Collective::kAllGather;
  double bytes = 0;  // S
  int ranks = 1;     // N

  int steps() const { return ring_steps(kind, ranks); }
  double chunk_bytes() const;  // S / N, moved over every link by each step
  double bus_factor() const { return bus_bandwidth_factor(kind, ranks); }
  // One step over a link: alpha + S/N beta.
  double step_s(double alpha_s, double beta_s_per_byte) const;
  // The closed-form ring time on links of alpha and beta: passes ((N-1) alpha + (N-1)/N S beta); 0
  // when N <= 1. The one place this formula is written.
  double ring_s(double alpha_s, double beta_s_per_byte) const;
  // nccl-tests' bus bandwidth of a run that took `seconds`: S / seconds * bus_factor(); 0 if seconds <= 0.
  double bus_bandwidth(double seconds) const;
};

// An all-to-all-v: bytes[p][q] from rank p to rank q (N x N, the diagonal stays on its rank). Its
// pairwise exchange in lockstep takes, on links of alpha and beta,
//   t = sum over k = 1 .. N-1 of (alpha + beta max_p bytes[p][(p + k) mod N])
// (step k waits for its largest message). The even all-to-all of S = N / (N - 1) sum_k max_p
// bytes[p][p + k] takes exactly that, so an uneven exchange is priced, simulated and looked up in a
// calibration's segments as that S: N b for even messages of b, c N b when some pair carries c times
// b in every step (a capacity factor's busiest expert). 0 for fewer than two ranks. Throws
// std::invalid_argument unless the matrix is square.
double all_to_all_v_bytes(const std::vector<std::vector<double>>& bytes);

}  // namespace osdp::costmodel
