// The backend interface the executor runs a schedule on (DESIGN.md section 7): a device (tracked
// memory, GEMM and elementwise kernels, streams with events) and a communicator (all-gather,
// reduce-scatter, all-reduce over the ranks of the job or of a split of it; sends and receives
// between two ranks for pipelines).
//
// Stream semantics are CUDA's, so one executor drives every backend: work enqueued on a stream runs
// after everything enqueued on it before, and after the events it was told to wait for. On the CPU
// (`mpi` backend) a stream is a thread that runs the enqueued closures in order (or, with a single
// stream, the caller itself); on a GPU (`nccl` backend) a closure runs at once on the host and its
// kernels and collectives are launched asynchronously on the stream. Kernels and collectives take
// the stream they run on. All tensors are fp32, row-major.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "costmodel/cost_model.hpp"
#include "costmodel/error.hpp"

namespace osdp::validate {

// A device allocation past the capacity; names what was asked for.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// A collective or a peer that did not answer in time, or a backend call that failed; names the rank
// and the operation. The job cannot go on: the caller reports it and aborts every rank.
class BackendFailure : public Error {
 public:
  using Error::Error;
};

struct MemoryStats {
  std::size_t current_bytes = 0;
  std::size_t peak_bytes = 0;
  std::size_t allocations = 0;  // live allocations
  std::size_t device_free = 0;  // the driver's view where there is one (GPU), else 0
  std::size_t device_total = 0;
};

// Completion of the work enqueued on a stream before the event was recorded.
class Event {
 public:
  virtual ~Event() = default;
  virtual void synchronize() = 0;  // the host waits; throws when the stream failed
  // Seconds from `start` to this event (both recorded on streams of the same device).
  virtual double seconds_since(const Event& start) const = 0;
};
using EventPtr = std::shared_ptr<Event>;

class Stream {
 public:
  virtual ~Stream() = default;
  virtual void enqueue(std::function<void()> work) = 0;
  virtual void wait(const EventPtr& event) = 0;  // later work waits for `event`
  virtual EventPtr record() = 0;
  // The host waits for everything enqueued so far; rethrows the first error raised by the work.
  virtual void synchronize() = 0;
};

// Holds a stream until opened (or destroyed): work enqueued meanwhile starts only then, so that a
// timed batch of work does not time the host enqueueing it.
class StreamGate {
 public:
  virtual ~StreamGate() = default;
  virtual void open() = 0;  // idempotent
};

enum class Transpose { kNo, kYes };

// How a GEMM multiplies its fp32 operands: in fp32, or rounded to bf16 with the products summed in
// fp32 (on a GPU: a kernel rounds the operands, then cuBLAS on bf16 tensor cores; emulated on the CPU).
enum class GemmMath { kFp32, kBf16 };

// C = alpha op(A) op(B) + beta C for `batch` matrices at the given element strides.
struct Gemm {
  Transpose ta = Transpose::kNo, tb = Transpose::kNo;
  GemmMath math = GemmMath::kFp32;
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* a = nullptr;
  std::int64_t lda = 0;
  const float* b = nullptr;
  std::int64_t ldb = 0;
  float* c = nullptr;
  std::int64_t ldc = 0;
  std::int64_t batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

struct AdamParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  int step = 1;

  // The bias corrections every device applies, in double and rounded to float once (so devices agree
  // bit for bit): w -= step_size() m / (sqrt(v) inv_sqrt_bias2() + eps).
  float step_size() const { return static_cast<float>(static_cast<double>(lr) / (1.0 - power(beta1))); }
  float inv_sqrt_bias2() const { return static_cast<float>(1.0 / std::sqrt(1.0 - power(beta2))); }

 private:
  double power(float beta) const { return std::pow(static_cast<double>(beta), step); }
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // The largest cache a kernel's operands can stay in between two uses (a CPU's last-level cache, a
  // GPU's L2), in bytes; 0 when unknown. Calibration sizes its cold working sets from it.
  virtual std::size_t cache_bytes() const = 0;

  // Tracked memory. Throws OutOfMemory (naming `what` and the bytes) past the device's capacity.
  virtual float* allocate(std::size_t bytes, std::string_view what) = 0;
  virtual void deallocate(float* p) = 0;
  virtual MemoryStats memory() const = 0;
  virtual void reset_peak() = 0;

  virtual Stream& compute_stream() = 0;
  virtual Stream& comm_stream() = 0;  // the compute stream itself when there is no overlap
  // Holds `s` (see StreamGate); open it before waiting for the stream.
  virtual std::unique_ptr<StreamGate> hold(Stream& s) = 0;

  // Kernels, each on the stream given (call them from work running on that stream).
  virtual void gemm(Stream& s, const Gemm& g) = 0;
  virtual void fill(Stream& s, float* y, std::size_t n, float value) = 0;
  virtual void copy(Stream& s, const float* x, float* y, std::size_t n) = 0;
  virtual void relu(Stream& s, const float* x, float* y, std::size_t n) = 0;
  virtual void relu_backward(Stream& s, const float* x, const float* dy, float* dx, std::size_t n) = 0;
  // The gated product of a gated MLP (SwiGLU): y[i] = silu(g[i]) u[i], silu(x) = x sigma(x),
  // sigma(x) = 1 / (1 + exp(-x)). y may be g or u (in place).
  virtual void gated(Stream& s, const float* g, const float* u, float* y, std::size_t n) = 0;
  // Its gradient: dg[i] = dy[i] u[i] silu'(g[i]), du[i] = dy[i] silu(g[i]), with
  // silu'(x) = sigma(x) (1 + x (1 - sigma(x))). Element i's inputs are all read before its outputs are
  // written, so dg and du may each be one of g, u, dy (in place: the backward of a gated MLP writes dg
  // over g and du over u); dg and du must differ, and no array may overlap another otherwise.
  virtual void gated_backward(Stream& s, const float* g, const float* u, const float* dy, float* dg,
                              float* du, std::size_t n) = 0;
  // A memory-bound pass over y (read and write every element, values unchanged): how the executor
  // spends an elementwise kernel of the IR.
  virtual void touch(Stream& s, float* y, std::size_t n) = 0;
  // out[i][(offset + t) % period] += v[t] for every sample i < samples, t < len (out is samples x period).
  virtual void add_folded(Stream& s, const float* v, std::size_t len, std::size_t offset, float* out,
                          std::size_t period, std::size_t samples) = 0;
  // dv[t] += sum_i dout[i][(offset + t) % period] (the gradient of add_folded).
  virtual void sum_folded(Stream& s, const float* dout, std::size_t period, std::size_t samples,
                          std::size_t offset, float* dv, std::size_t len) = 0;
  // y[r][c] += table[(c0 + c)][tokens[r]] for c < cols (table is rows x vocab, y is n_rows x ldy); a
  // token outside 0 .. vocab - 1 is skipped (another rank's part of a vocabulary-parallel table).
  virtual void gather_columns(Stream& s, const float* table, std::int64_t vocab, std::int64_t c0,
                              std::int64_t cols, const std::int32_t* tokens, std::int64_t n_rows, float* y,
                              std::int64_t ldy) = 0;
  // dtable[(c0 + c)][tokens[r]] += dy[r][c] (the gradient of gather_columns; the same tokens skipped).
  virtual void scatter_add_columns(Stream& s, const float* dy, std::int64_t ldy, const std::int32_t* tokens,
                                   std::int64_t n_rows, std::int64_t c0, std::int64_t cols, float* dtable,
                                   std::int64_t vocab) = 0;
  // Rows by index (an MoE layer's dispatch and combine): y[i][c] = w[i] x[index[i]][c] for i < n,
  // c < width (w null: 1; y and x must not overlap).
  virtual void gather_rows(Stream& s, const float* x, std::int64_t ldx, const std::int32_t* index,
                           std::int64_t n, std::int64_t width, const float* w, float* y,
                           std::int64_t ldy) = 0;
  // Its gradient: y[index[i]][c] += w[i] x[i][c] (w null: 1), in order of i.
  virtual void scatter_add_rows(Stream& s, const float* x, std::int64_t ldx, const std::int32_t* index,
                                std::int64_t n, std::int64_t width, const float* w, float* y,
                                std::int64_t ldy) = 0;
  // out[i] = sum over c < width of a[index[i]][c] b[i][c], for i < n.
  virtual void row_dots(Stream& s, const float* a, std::int64_t lda, const std::int32_t* index,
                        const float* b, std::int64_t ldb, std::int64_t n, std::int64_t width, float* out) = 0;
  // Squared-error loss against one-hot targets: loss_out[0] += sum (logits - onehot)^2 * scale / 2,
  // then logits = (logits - onehot) * scale (the gradient). A target outside 0 .. vocab - 1 has no one
  // in the row (its column is another rank's, in a vocabulary-parallel head).
  virtual void mse_onehot(Stream& s, float* logits, std::int64_t rows, std::int64_t vocab,
                          const std::int32_t* targets, float scale, float* loss_out) = 0;
  virtual void adam(Stream& s, float* w, const float* g, float* m, float* v, std::size_t n,
                    const AdamParams& p) = 0;
  // Copies device memory to the host (synchronous for the stream's work so far).
  virtual void download(Stream& s, const float* x, float* host, std::size_t n) = 0;
  virtual void upload(Stream& s, const float* host, float* x, std::size_t n) = 0;
  // Host seconds on a steady clock.
  virtual double now_s() const = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "nccl"
  virtual std::string version() const = 0;

  // Collectives over all ranks on stream `s` (enqueued from work running on `s`). `what` names the
  // operation in error messages (e.g. "all-gather layer3.mlp slice 0"). Sizes are per rank. Either
  // may run in place as NCCL defines it (shard == full + rank * shard_elems); other overlaps are
  // not allowed.
  virtual void all_gather(Stream& s, const float* shard, float* full, std::size_t shard_elems,
                          const std::string& what) = 0;
  virtual void reduce_scatter(Stream& s, const float* full, float* shard, std::size_t shard_elems,
                              const std::string& what) = 0;                                        // sum
  virtual void all_reduce(Stream& s, float* buf, std::size_t elems, const std::string& what) = 0;  // sum
  // All-to-all(-v): `send` holds send_counts[p] elements for every rank p in rank order (this rank's
  // own part among them), and `recv` gets recv_counts[p] elements from every rank p in rank order;
  // recv_counts[p] here must equal send_counts[rank()] on p. Equal counts make an all-to-all. `send`
  // and `recv` must not overlap. Both count lists have size() entries (check_all_to_all_counts).
  virtual void all_to_all(Stream& s, const float* send, const std::vector<std::size_t>& send_counts,
                          float* recv, const std::vector<std::size_t>& recv_counts,
                          const std::string& what) = 0;

  // The communicator of one ring of the job seen as nodes of `per_node` ranks, numbered node by node
  // (rank = node * per_node + local): kIntra the ranks of this rank's node (its rank there: local),
  // kInter the ranks at this rank's local index on every node (its rank there: node); kWorld this
  // one. Collective the first time a (level, per_node) is asked for: every rank asks, in the same
  // order. Owned by this communicator and alive as long as it is. Collectives on a ring follow the
  // rules of this interface within the ring. This default serves a job of one rank and refuses
  // anything else.
  virtual Communicator& ring(costmodel::RingLevel level, int per_node) {
    if (level == costmodel::RingLevel::kWorld || size() == 1) return *this;
    throw UsageError(fmt::format("the {} communicator has no node rings ({} ranks in nodes of {})", backend(),
                                 size(), per_node));
  }

  // The communicator of the ranks that pass the same `color` (>= 0), ranked by `key` (ties by rank
  // here). Collective over this communicator: every rank calls it, the same number of times in the
  // same order. Owned by this communicator and alive as long as it is. This default serves a job of
  // one rank and refuses anything else.
  virtual Communicator& split(int color, int key, const std::string& what) {
    (void)color;
    (void)key;
    if (size() == 1) return *this;
    throw UsageError(
        fmt::format("{}: the {} communicator cannot be split ({} ranks)", what, backend(), size()));
  }

  // Point to point on stream `s` (called from work running on it), between ranks of this
  // communicator, matched by (peer, tag) in order; a backend without tags (nccl) matches by peer in
  // the order issued, so messages from one rank to another must be received in the order sent. send returns
  // without waiting for the receiver (two stages may send to each other at once) and `buf` may be reused at
  // once; recv completes before later work on `s`. flush_sends waits until every send has been delivered
  // (before the step ends). This default refuses them: a backend without point-to-point cannot run a
  // pipeline.
  virtual void send(Stream& s, const float* buf, std::size_t elems, int peer, int tag,
                    const std::string& what) {
    (void)s, (void)buf, (void)elems, (void)peer, (void)tag;
    throw UsageError(fmt::format("{}: the {} backend has no point-to-point transfers", what, backend()));
  }
  virtual void recv(Stream& s, float* buf, std::size_t elems, int peer, int tag, const std::string& what) {
    (void)s, (void)buf, (void)elems, (void)peer, (void)tag;
    throw UsageError(fmt::format("{}: the {} backend has no point-to-point transfers", what, backend()));
  }
  virtual void flush_sends(Stream& s, const std::string& what) {
    (void)s;
    (void)what;
  }

  // Host-side, between steps (no stream work in flight).
  virtual void barrier(const std::string& what) = 0;
  virtual double max_over_ranks(double x) = 0;
  virtual double sum_over_ranks(double x) = 0;
  // Every rank's value, on every rank.
  virtual std::vector<double> all_values(double x) = 0;
};

// Throws UsageError unless both count lists of an all-to-all on `comm` have one entry per rank.
inline void check_all_to_all_counts(const Communicator& comm, const std::vector<std::size_t>& send_counts,
                                    const std::vector<std::size_t>& recv_counts, const std::string& what) {
  const auto n = static_cast<std::size_t>(comm.size());
  if (send_counts.size() != n || recv_counts.size() != n)
    throw UsageError(
        fmt::format("{}: an all-to-all over {} ranks needs {} send and receive counts, got {} and {}", what,
                    n, n, send_counts.size(), recv_counts.size()));
}

}  // namespace osdp::validate
