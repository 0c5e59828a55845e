#include "validate/executor/numerics.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/executor/internal/numerics_common.hpp"

namespace osdp::validate {
using namespace detail;
namespace {

using costmodel::Operator;
using costmodel::OperatorKind;
using I = std::int64_t;

// The IR's elementwise kernels of one phase and site, a 1/n share of their bytes each.
void spend_elementwise(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a, bool forward) {
  if (a.touch == nullptr || a.touch_floats <= 0) return;
  const auto& list = forward ? a.op->forward : a.op->backward;
  for (const auto& k : list) {
    if (k.kind != costmodel::KernelKind::kElementwise || k.site != a.site) continue;
    // touch reads and writes every float: 8 bytes moved per element. Under TP a rank runs 1/t of the
    // kernels over heads, ffn columns or the vocabulary and the others whole (workload.hpp).
    const double share = k.tp_sliced ? a.layout->slices : a.layout->local_slices();
    I left = static_cast<I>(k.bytes_per_sample * static_cast<double>(m.batch) / share / 8.0 /
                            static_cast<double>(m.context));  // a CP rank: its chunk's share
    while (left > 0) {
      const I n = std::min(left, a.touch_floats);
      dev.touch(s, a.touch, static_cast<std::size_t>(n));
      left -= n;
    }
  }
}

// Calls f(t0, count, at) for the runs of vector elements t0 .. t0 + count - 1 (of `len`, the first at
// whole-sequence position `offset`, folded mod the whole sequence's context x period floats) that land
// in this rank's chunk, `at` the first one's place in the chunk's `period` floats.
// Without context parallelism: one run of all of them (the kernels fold mod period themselves).
template <class F>
void for_each_chunk_run(I len, I offset, I period, const MathShape& m, F&& f) {
  if (m.context == 1) return f(I{0}, len, offset);
  const I all = period * m.context, lo = m.chunk * period;
  for (I wrap = offset / all * all; wrap < offset + len; wrap += all) {
    const I from = std::max(offset, wrap + lo), to = std::min(offset + len, wrap + lo + period);
    if (from < to) f(from - offset, to - from, from - wrap - lo);
  }
}

// `origin`: the output's first column (a vocabulary-parallel head's vocab0), so that element k of the
// vector lands where it lands in the whole output.
void fold_forward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a, float* out, I width,
                  I origin = 0) {
  const SliceLayout& sl = a.layout->slice[static_cast<std::size_t>(a.slice)];
  if (sl.vector_len == 0) return;
  const I period = m.seq * width;
  for_each_chunk_run(sl.vector_len, sl.vector_start - origin, period, m, [&](I t0, I count, I at) {
    dev.add_folded(s, a.weights + sl.vector_offset + t0, static_cast<std::size_t>(count),
                   static_cast<std::size_t>(at), out, static_cast<std::size_t>(period),
                   static_cast<std::size_t>(m.batch));
  });
}

void fold_backward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a, const float* dout, I width,
                   I origin = 0) {
  const SliceLayout& sl = a.layout->slice[static_cast<std::size_t>(a.slice)];
  if (sl.vector_len == 0) return;
  const I period = m.seq * width;
  for_each_chunk_run(sl.vector_len, sl.vector_start - origin, period, m, [&](I t0, I count, I at) {
    dev.sum_folded(s, dout, static_cast<std::size_t>(period), static_cast<std::size_t>(m.batch),
                   static_cast<std::size_t>(at), a.grads + sl.vector_offset + t0,
                   static_cast<std::size_t>(count));
  });
}

// Per-slice internals of attention (slice of n: an = a/n query heads, gn = g/n key/value heads, the
// group of query head i is key/value head i / r, r = a / g): QKV [R x (wq + 2 wk)], the core
// (the scores S [b an s s], or the products K^T V [b gn d d] where the IR saves no scores), O [R x wq].
struct AttentionDims {
  I h, a, g, d, r, an, gn, wq, wk, s, b, rows;
  I s_all, context, chunk;  // the whole sequence; context parallelism: s = s_all / context tokens here
  bool scores;              // (c Q K^T) V with the scores saved; else c Q (K^T V)
  I ld() const { return wq + 2 * wk; }
  I qkv() const { return rows * ld(); }
  // Under context parallelism K^T V (summed over every chunk) is not kept: the backward, which gathers
  // every chunk's K and V again, sums it again in the exchange scratch (attention_exchange_floats).
  I core() const { return scores ? b * an * s * s_all : context > 1 ? 0 : b * gn * d * d; }
  I out() const { return rows * wq; }
  I per_slice() const { return qkv() + core() + out(); }
  float scale() const { return 1.0f / (static_cast<float>(s_all) * std::sqrt(static_cast<float>(d))); }
};

// Whether the IR's saved activations hold the s x s scores beside the input, Q, K, V and O (fp32, per
// sample): materialized attention does, fused attention (FlashAttention) keeps none. The choice
// depends on the whole operator, so every slicing and TP degree makes the same one.
bool scores_saved(const Operator& op, const HeadShape& hs, I s) {
  const I floats = s * op.hidden + s * (hs.q() + 2 * hs.k()) + s * hs.q() + hs.a * s * s;
  return static_cast<double>(floats) * sizeof(float) <= op.saved_bytes_per_sample;
}

AttentionDims attention_dims(const Operator& op, int n, const MathShape& m) {
  const HeadShape hs = head_shape(op);
  if (hs.g % n != 0)
    throw UsageError(
        fmt::format("attention {}: {} key/value heads cannot be cut into {} slices", op.name, hs.g, n));
  AttentionDims a{};
  a.h = op.hidden;
  a.a = hs.a;
  a.g = hs.g;
  a.d = hs.d;
  a.r = hs.a / hs.g;
  a.an = hs.a / n;
  a.gn = hs.g / n;
  a.wq = a.an * a.d;
  a.wk = a.gn * a.d;
  a.s = m.seq;
  a.s_all = m.seq_all();
  a.context = m.context;
  a.chunk = m.chunk;
  a.b = m.batch;
  a.rows = m.rows();
  a.scores = scores_saved(op, hs, m.seq_all());  // as for the whole sequence: the IR decides, not CP
  return a;
}

// Context parallelism (A.context = c chunks of the sequence, one per rank of the CP group, in chunk
// order): ring attention's loop. The rank at chunk k holds, at step j = 0 .. c - 1, the Q K V block of
// chunk k - j (mod c): its own first, then each passed on by a point-to-point send to rank k + 1 and
// received from rank k - 1 (two blocks in flight, in `ring`). Each step adds that chunk's part of the
// rank's queries' core: the scores S[:, chunk] = c Q K^T and O += S[:, chunk] V; or, where no scores
// are saved, K^T V summed over the chunks (every sample's, in the scratch after the blocks), then
// O = c Q (sum K^T V). The output is the rank's rows only.
struct Ring {
  Gm& mm;
  const AttentionDims& A;
  const SliceArgs& a;
  I block;  // floats of one block
  float* buf(I j) const { return a.gathered + (j % 2) * block; }
  // The block after `from` (step j's), passed around the ring: sent to the next rank, received from the
  // previous one into the other buffer.
  float* pass(const float* from, I j, const std::string& what) const {
    const int c = static_cast<int>(A.context), k = static_cast<int>(A.chunk);
    float* to = buf(j + 1);
    a.context_group->send(mm.s, from, static_cast<std::size_t>(block), (k + 1) % c, 0, what);
    a.context_group->recv(mm.s, to, static_cast<std::size_t>(block), (k + c - 1) % c, 0, what);
    return to;
  }
  I src(I j) const { return (A.chunk - j + A.context) % A.context; }
  float* kv() const { return a.gathered + 4 * A.qkv(); }  // b x gn d x d: sum over chunks of K^T V
  float* dkv() const { return kv() + A.b * A.gn * A.d * A.d; }
};

void attention_forward_context(Gm& mm, const AttentionDims& A, const SliceArgs& a, const float* qkv,
                               float* core, float* o) {
  const I ld = A.ld(), ss = A.s * A.s_all, dd = A.d * A.d, wq = A.wq, wk = A.wk, d = A.d, r = A.r;
  const Ring ring{mm, A, a, A.qkv()};
  const std::string what = fmt::format("passing the K/V blocks of {} (context parallelism)", a.op->name);
  const float* blk = qkv;
  for (I j = 0; j < A.context; ++j) {
    const I src = ring.src(j);
    // The next block's pass starts before this one's arithmetic (the send does not wait).
    const float* next = j + 1 < A.context ? ring.pass(blk, j, what) : nullptr;
    for (I i = 0; i < A.b; ++i) {
      const float* qi = qkv + i * A.s * ld;
      const float* ki = blk + i * A.s * ld + wq;
      if (A.scores) {
        float* si = core + i * A.an * ss;
        for (I q = 0; q < r; ++q) {
          mm(N, T, A.s, A.s, d, A.scale(), qi + q * d, ld, ki, ld, 0.0f, si + q * ss + src * A.s, A.s_all,
             A.gn, r * d, d, r * ss);  // S[:, chunk] = c Q K^T
          mm(N, N, A.s, d, A.s, 1.0f, si + q * ss + src * A.s, A.s_all, ki + wk, ld, j > 0 ? 1.0f : 0.0f,
             o + i * A.s * wq + q * d, wq, A.gn, r * ss, d, r * d);  // O += S[:, chunk] V
        }
      } else {
        mm(T, N, d, d, A.s, 1.0f, ki, ld, ki + wk, ld, j > 0 ? 1.0f : 0.0f, ring.kv() + i * A.gn * dd, d,
           A.gn, d, d, dd);  // sum K^T V
      }
    }
    if (next != nullptr) blk = next;
  }
  if (A.scores) return;
  for (I i = 0; i < A.b; ++i)
    for (I q = 0; q < r; ++q)
      mm(N, N, A.s, d, d, A.scale(), qkv + i * A.s * ld + q * d, ld, ring.kv() + i * A.gn * dd, d, 0.0f,
         o + i * A.s * wq + q * d, wq, A.gn, r * d, dd, r * d);  // O = c Q (sum K^T V)
}

void attention_forward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a) {
  const AttentionDims A = attention_dims(*a.op, a.layout->slices, m);
  Gm mm{dev, s, m.math};
  float* qkv = a.internals + internal_index(a) * A.per_slice();
  float* core = qkv + A.qkv();
  float* o = core + A.core();
  const I ld = A.ld(), ss = A.s * A.s, dd = A.d * A.d, wq = A.wq, wk = A.wk, d = A.d, r = A.r;
  mm(N, N, A.rows, ld, A.h, 1.0f, a.x, A.h, block_ptr(a, 0), ld, 0.0f, qkv, ld);
  if (A.context > 1) {
    attention_forward_context(mm, A, a, qkv, core, o);
    mm(N, N, A.rows, A.h, wq, 1.0f, o, wq, block_ptr(a, 1), A.h, 1.0f, a.y, A.h);
    return;
  }
  // Query head k r + q (k: its key/value head) for q = 0 .. r - 1: one GEMM batched over the gn groups.
  for (I i = 0; i < A.b; ++i) {
    const float* qi = qkv + i * A.s * ld;
    const float *ki = qi + wq, *vi = qi + wq + wk;
    float* oi = o + i * A.s * wq;
    if (A.scores) {
      float* si = core + i * A.an * ss;
      for (I q = 0; q < r; ++q) {
        mm(N, T, A.s, A.s, d, A.scale(), qi + q * d, ld, ki, ld, 0.0f, si + q * ss, A.s, A.gn, r * d, d,
           r * ss);  // S = c Q K^T
        mm(N, N, A.s, d, A.s, 1.0f, si + q * ss, A.s, vi, ld, 0.0f, oi + q * d, wq, A.gn, r * ss, d,
           r * d);  // O = S V
      }
    } else {
      float* kv = core + i * A.gn * dd;
      mm(T, N, d, d, A.s, 1.0f, ki, ld, vi, ld, 0.0f, kv, d, A.gn, d, d, dd);  // K^T V
      for (I q = 0; q < r; ++q)
        mm(N, N, A.s, d, d, A.scale(), qi + q * d, ld, kv, d, 0.0f, oi + q * d, wq, A.gn, r * d, dd,
           r * d);  // O = c Q (K^T V)
    }
  }
  mm(N, N, A.rows, A.h, wq, 1.0f, o, wq, block_ptr(a, 1), A.h, 1.0f, a.y, A.h);
}

// The backward's core under context parallelism: the ring again, each block now chunk src's Q K V and
// the partial gradient of its K and V (zero at its owner), c passes so that it comes home. At each step
// the rank adds its queries' contributions to the block's dK and dV and to its own dQ (in dqkv, whose
// K and V columns stay zero); returns its own block's gradient (Q columns zero), which adds to dqkv.
// Without scores: d(K^T V) of the rank's queries first (c sum Q^T dO), dK += V d^T and dV += K d at
// each block, and dQ = c dO (sum K^T V)^T once the loop has summed K^T V again.
const float* attention_backward_context(Device& dev, Gm& mm, const AttentionDims& A, const SliceArgs& a,
                                        const float* qkv, float* core, const float* dout, float* dqkv) {
  const I ld = A.ld(), ss = A.s * A.s_all, dd = A.d * A.d, wq = A.wq, wk = A.wk, d = A.d, r = A.r;
  const I chunk = A.qkv();
  const Ring ring{mm, A, a, 2 * chunk};
  const std::string what =
      fmt::format("passing the K/V blocks of {}'s backward (context parallelism)", a.op->name);
  float* blk = ring.buf(0);
  dev.copy(mm.s, qkv, blk, static_cast<std::size_t>(chunk));
  dev.fill(mm.s, blk + chunk, static_cast<std::size_t>(chunk), 0.0f);
  dev.fill(mm.s, dqkv, static_cast<std::size_t>(chunk), 0.0f);
  if (!A.scores)
    for (I i = 0; i < A.b; ++i)
      for (I q = 0; q < r; ++q)
        mm(T, N, d, d, A.s, A.scale(), qkv + i * A.s * ld + q * d, ld, dout + i * A.s * wq + q * d, wq,
           q > 0 ? 1.0f : 0.0f, ring.dkv() + i * A.gn * dd, d, A.gn, r * d, r * d, dd);  // c Q^T dO
  for (I j = 0; j < A.context; ++j) {
    const I src = ring.src(j);
    for (I i = 0; i < A.b; ++i) {
      const float* qi = qkv + i * A.s * ld;
      const float* doi = dout + i * A.s * wq;
      const float* ki = blk + i * A.s * ld + wq;
      float* dki = blk + chunk + i * A.s * ld + wq;  // the block's dK (then dV at + wk)
      float* dq = dqkv + i * A.s * ld;
      if (A.scores) {
        float* si = core + i * A.an * ss;
        for (I q = 0; q < r; ++q) {
          float* sq = si + q * ss + src * A.s;
          mm(T, N, A.s, d, A.s, 1.0f, sq, A.s_all, doi + q * d, wq, 1.0f, dki + wk, ld, A.gn, r * ss, r * d,
             d);           // dV += S[:, chunk]^T dO
          float* ds = sq;  // S[:, chunk] is dead once dV has it: dS takes its place
          mm(N, T, A.s, A.s, d, 1.0f, doi + q * d, wq, ki + wk, ld, 0.0f, ds, A.s_all, A.gn, r * d, d,
             r * ss);  // dS = dO V^T
          mm(N, N, A.s, d, A.s, A.scale(), ds, A.s_all, ki, ld, j > 0 ? 1.0f : 0.0f, dq + q * d, ld, A.gn,
             r * ss, d, r * d);  // dQ += c dS K
          mm(T, N, A.s, d, A.s, A.scale(), ds, A.s_all, qi + q * d, ld, 1.0f, dki, ld, A.gn, r * ss, r * d,
             d);  // dK += c dS^T Q
        }
      } else {
        mm(T, N, d, d, A.s, 1.0f, ki, ld, ki + wk, ld, j > 0 ? 1.0f : 0.0f, ring.kv() + i * A.gn * dd, d,
           A.gn, d, d, dd);  // sum K^T V again
        mm(N, T, A.s, d, d, 1.0f, ki + wk, ld, ring.dkv() + i * A.gn * dd, d, 1.0f, dki, ld, A.gn, d, dd,
           d);  // dK += V d^T
        mm(N, N, A.s, d, d, 1.0f, ki, ld, ring.dkv() + i * A.gn * dd, d, 1.0f, dki + wk, ld, A.gn, d, dd,
           d);  // dV += K d
      }
    }
    blk = ring.pass(blk, j, what);
  }
  if (!A.scores)
    for (I i = 0; i < A.b; ++i)
      for (I q = 0; q < r; ++q)
        mm(N, T, A.s, d, d, A.scale(), dout + i * A.s * wq + q * d, wq, ring.kv() + i * A.gn * dd, d, 0.0f,
           dqkv + i * A.s * ld + q * d, ld, A.gn, r * d, dd, r * d);  // dQ = c dO (sum K^T V)^T
  return blk + chunk;
}

void attention_backward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a) {
  const AttentionDims A = attention_dims(*a.op, a.layout->slices, m);
  Gm mm{dev, s, m.math};
  float* qkv = a.internals + internal_index(a) * A.per_slice();
  float* core = qkv + A.qkv();
  float* o = core + A.core();
  float* dqkv = a.workspace;
  const I ld = A.ld(), ss = A.s * A.s, dd = A.d * A.d, wq = A.wq, wk = A.wk, d = A.d, r = A.r;
  mm(T, N, wq, A.h, A.rows, 1.0f, o, wq, a.dy, A.h, grad_beta(a), grad_ptr(a, 1), A.h);  // dW_proj = O^T dY
  float* dout = o;  // O is dead: dO takes its place
  mm(N, T, A.rows, wq, A.h, 1.0f, a.dy, A.h, block_ptr(a, 1), A.h, 0.0f, dout, wq);
  const float* returned =
      A.context > 1 ? attention_backward_context(dev, mm, A, a, qkv, core, dout, dqkv) : nullptr;
  for (I i = 0; i < (A.context > 1 ? 0 : A.b); ++i) {
    const float* qi = qkv + i * A.s * ld;
    const float *ki = qi + wq, *vi = qi + wq + wk;
    const float* doi = dout + i * A.s * wq;
    float* dq = dqkv + i * A.s * ld;
    float *dk = dq + wq, *dv = dq + wq + wk;
    if (A.scores) {
      float* si = core + i * A.an * ss;
      for (I q = 0; q < r; ++q) {
        const float beta = q > 0 ? 1.0f : 0.0f;  // a key/value head sums over its group
        float* sq = si + q * ss;
        mm(T, N, A.s, d, A.s, 1.0f, sq, A.s, doi + q * d, wq, beta, dv, ld, A.gn, r * ss, r * d,
           d);           // dV = S^T dO
        float* ds = sq;  // S is dead once dV has it: dS takes its place
        mm(N, T, A.s, A.s, d, 1.0f, doi + q * d, wq, vi, ld, 0.0f, ds, A.s, A.gn, r * d, d,
           r * ss);  // dS = dO V^T
        mm(N, N, A.s, d, A.s, A.scale(), ds, A.s, ki, ld, 0.0f, dq + q * d, ld, A.gn, r * ss, d,
           r * d);  // dQ = c dS K
        mm(T, N, A.s, d, A.s, A.scale(), ds, A.s, qi + q * d, ld, beta, dk, ld, A.gn, r * ss, r * d,
           d);  // dK = c dS^T Q
      }
    } else {
      float* kv = core + i * A.gn * dd;
      for (I q = 0; q < r; ++q)
        mm(N, T, A.s, d, d, A.scale(), doi + q * d, wq, kv, d, 0.0f, dq + q * d, ld, A.gn, r * d, dd,
           r * d);      // dQ = c dO (K^T V)^T
      float* dkv = kv;  // K^T V is dead: its gradient takes its place
      for (I q = 0; q < r; ++q)
        mm(T, N, d, d, A.s, A.scale(), qi + q * d, ld, doi + q * d, wq, q > 0 ? 1.0f : 0.0f, dkv, d, A.gn,
           r * d, r * d, dd);  // d(K^T V) = c sum over the group Q^T dO
      mm(N, T, A.s, d, d, 1.0f, vi, ld, dkv, d, 0.0f, dk, ld, A.gn, d, dd, d);  // dK = V d(K^T V)^T
      mm(N, N, A.s, d, d, 1.0f, ki, ld, dkv, d, 0.0f, dv, ld, A.gn, d, dd, d);  // dV = K d(K^T V)
    }
  }
  mm(N, T, A.rows, A.h, ld, 1.0f, dqkv, ld, block_ptr(a, 0), ld, 1.0f, a.dx, A.h);        // dX += dQKV W^T
  mm(T, N, A.h, ld, A.rows, 1.0f, a.x, A.h, dqkv, ld, grad_beta(a), grad_ptr(a, 0), ld);  // dW = X^T dQKV
  if (returned == nullptr) return;  // context parallelism: the K and V gradients came home apart
  mm(N, T, A.rows, A.h, ld, 1.0f, returned, ld, block_ptr(a, 0), ld, 1.0f, a.dx, A.h);
  mm(T, N, A.h, ld, A.rows, 1.0f, a.x, A.h, returned, ld, 1.0f, grad_ptr(a, 0), ld);
}

// Floats of internals per row and ffn column of a slice: relu's pre-activation and H; gated, the gate's
// and the up's pre-activations and their product (the IR's saved gate, up and product).
I mlp_internals(const Operator& op) {
  return gated(op) ? 3 : 2;
}

// H = relu(X W_1); Y += H W_2. Internals: the pre-activation P = X W_1, then H.
// Gated (G and U the gate and up columns of the slice's W_1 block, [h x 2w] with ld 2w):
// H = silu(X G) * (X U); internals X G, X U, then H.
void mlp_forward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a) {
  const I h = a.op->hidden, w = ffn_of(*a.op) / a.layout->slices, rows = m.rows();
  const bool gate = gated(*a.op);
  const I ld1 = gate ? 2 * w : w;
  const auto n = static_cast<std::size_t>(rows * w);
  Gm mm{dev, s, m.math};
  float* pre = a.internals + internal_index(a) * mlp_internals(*a.op) * rows * w;
  float* up = gate ? pre + rows * w : nullptr;
  float* act = pre + (gate ? 2 : 1) * rows * w;
  const float* w1 = block_ptr(a, 0);
  mm(N, N, rows, w, h, 1.0f, a.x, h, w1, ld1, 0.0f, pre, w);  // X W_1 (gated: X G)
  if (gate) {
    mm(N, N, rows, w, h, 1.0f, a.x, h, w1 + w, ld1, 0.0f, up, w);  // X U
    dev.gated(s, pre, up, act, n);
  } else {
    dev.relu(s, pre, act, n);
  }
  mm(N, N, rows, h, w, 1.0f, act, w, block_ptr(a, 1), h, 1.0f, a.y, h);
}

void mlp_backward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a) {
  const I h = a.op->hidden, w = ffn_of(*a.op) / a.layout->slices, rows = m.rows();
  const bool gate = gated(*a.op);
  const I ld1 = gate ? 2 * w : w;
  const auto n = static_cast<std::size_t>(rows * w);
  Gm mm{dev, s, m.math};
  float* pre = a.internals + internal_index(a) * mlp_internals(*a.op) * rows * w;
  float* up = gate ? pre + rows * w : nullptr;
  float* act = pre + (gate ? 2 : 1) * rows * w;
  const float* w1 = block_ptr(a, 0);
  float* g1 = grad_ptr(a, 0);
  mm(T, N, w, h, rows, 1.0f, act, w, a.dy, h, grad_beta(a), grad_ptr(a, 1), h);  // dW2 = H^T dY
  float* dh = act;  // H is dead: dH takes its place
  mm(N, T, rows, w, h, 1.0f, a.dy, h, block_ptr(a, 1), h, 0.0f, dh, w);
  // In place: relu's gradient over dH; gated, the gate's over X G and the up's over X U.
  float* dpre = gate ? pre : dh;
  if (gate) {
    float* dup = up;
    dev.gated_backward(s, pre, up, dh, dpre, dup, n);
    mm(N, T, rows, h, w, 1.0f, dup, w, w1 + w, ld1, 1.0f, a.dx, h);         // dX += dUp U^T
    mm(T, N, h, w, rows, 1.0f, a.x, h, dup, w, grad_beta(a), g1 + w, ld1);  // dW_up = X^T dUp
  } else {
    dev.relu_backward(s, pre, dh, dpre, n);
  }
  mm(N, T, rows, h, w, 1.0f, dpre, w, w1, ld1, 1.0f, a.dx, h);         // dX += dPre W1^T
  mm(T, N, h, w, rows, 1.0f, a.x, h, dpre, w, grad_beta(a), g1, ld1);  // dW1 = X^T dPre
}

// Row-split GEMM operators: projection, head, tied head (site 1). A slice reads the columns of X its
// block's rows are (row0 ..), and writes `out` columns (a vocabulary-parallel head: its own).
void rows_forward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a, I in, I out, float* y) {
  const Block& b = block(a, 0);
  const I w = b.rows, rows = m.rows();
  Gm mm{dev, s, m.math};
  mm(N, N, rows, out, w, 1.0f, a.x + b.row0, in, block_ptr(a, 0), out, 1.0f, y, out);
}

void rows_backward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a, I in, I out,
                   const float* dy, int index) {
  const Block& b = block(a, index);
  const I w = b.rows, rows = m.rows();
  Gm mm{dev, s, m.math};
  mm(N, T, rows, w, out, 1.0f, dy, out, block_ptr(a, index), out, 0.0f, a.dx + b.row0, in);
  mm(T, N, w, out, rows, 1.0f, a.x + b.row0, in, dy, out, grad_beta(a), grad_ptr(a, index), out);
}

}  // namespace

I width_in(const Operator& op, int site) {
  if (op.kind == OperatorKind::kEmbedding && site == 0) return 0;
  if (op.kind == OperatorKind::kProjection) return op.weights.front().rows;
  return op.hidden;
}

I width_out(const Operator& op, int site, const MathShape& m) {
  if (op.kind == OperatorKind::kHead || (op.kind == OperatorKind::kEmbedding && site == 1)) return m.vocab;
  return op.hidden;
}

I input_floats(const Operator& op, const MathShape& m) {
  if (op.kind == OperatorKind::kEmbedding)
    return op.tied_gradient ? m.rows() * op.hidden : 0;  // the head's input
  return m.rows() * width_in(op, 0);
}

I vocab_width(const OperatorLayout& l, int slice, const MathShape& m) {
  const I c = l.slice[static_cast<std::size_t>(slice)].vocab_count;
  return c > 0 ? c : m.vocab;
}

I internal_floats(const Operator& op, const OperatorLayout& l, const MathShape& m) {
  if (l.tp == 1) return internal_floats(op, l.slices, m);
  const I v = m.vocab / l.tp;
  switch (op.kind) {
    case OperatorKind::kAttention:
      return l.local_slices() * attention_dims(op, l.slices, m).per_slice();
    case OperatorKind::kMlp:
      return mlp_internals(op) * m.rows() * ffn_of(op) / l.tp;
    case OperatorKind::kHead:
      return m.rows() * v;
    case OperatorKind::kEmbedding:
      return op.tied_gradient ? m.rows() * v : 0;
    case OperatorKind::kProjection:
      return 0;
  }
  return 0;
}

I workspace_floats(const Operator& op, const OperatorLayout& l, const MathShape& m) {
  if (op.experts > 0) return moe_workspace_floats(op, m);
  return op.kind == OperatorKind::kAttention ? attention_dims(op, l.slices, m).qkv() : 0;
}

I internal_floats(const Operator& op, int n, const MathShape& m) {
  if (op.experts > 0) return moe_internal_floats(op, m);
  switch (op.kind) {
    case OperatorKind::kAttention:
      return n * attention_dims(op, n, m).per_slice();
    case OperatorKind::kMlp:
      return mlp_internals(op) * m.rows() * ffn_of(op);
    case OperatorKind::kHead:
      return m.rows() * m.vocab;
    case OperatorKind::kEmbedding:
      return op.tied_gradient ? m.rows() * m.vocab : 0;
    case OperatorKind::kProjection:
      return 0;
  }
  return 0;
}

I workspace_floats(const Operator& op, int n, const MathShape& m) {
  if (op.experts > 0) return moe_workspace_floats(op, m);
  return op.kind == OperatorKind::kAttention ? attention_dims(op, n, m).qkv() : 0;
}

I attention_exchange_floats(const Operator& op, int n, const MathShape& m) {
  if (op.kind != OperatorKind::kAttention || m.context == 1) return 0;
  const AttentionDims A = attention_dims(op, n, m);
  // Two blocks in flight of Q K V and their K/V gradients; without scores, every sample's K^T V and
  // d(K^T V).
  return 4 * A.qkv() + (A.scores ? 0 : 2 * A.b * A.gn * A.d * A.d);
}

void forward_slice(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a) {
  const Operator& op = *a.op;
  switch (op.kind) {
    case OperatorKind::kAttention:
      attention_forward(dev, s, m, a);
      fold_forward(dev, s, m, a, a.y, op.hidden);
      break;
    case OperatorKind::kMlp:
      if (op.experts > 0)
        moe_forward(dev, s, m, a);
      else
        mlp_forward(dev, s, m, a);
      fold_forward(dev, s, m, a, a.y, op.hidden);
      break;
    case OperatorKind::kProjection:
      rows_forward(dev, s, m, a, width_in(op, 0), op.hidden, a.y);
      fold_forward(dev, s, m, a, a.y, op.hidden);
      break;
    case OperatorKind::kHead: {
      const I v = vocab_width(*a.layout, a.slice, m);
      rows_forward(dev, s, m, a, op.hidden, v, a.internals);
      fold_forward(dev, s, m, a, a.internals, v, a.layout->slice[static_cast<std::size_t>(a.slice)].vocab0);
      break;
    }
    case OperatorKind::kEmbedding: {
      const I v = vocab_width(*a.layout, a.slice, m);
      if (a.site == 1) {
        rows_forward(dev, s, m, a, op.hidden, v, a.internals);
        break;
      }
      const Block& b = block(a, 0);
      dev.gather_columns(s, block_ptr(a, 0), v, 0, b.rows, a.tokens, m.rows(), a.y + b.row0, op.hidden);
      fold_forward(dev, s, m, a, a.y, op.hidden);
      break;
    }
  }
  spend_elementwise(dev, s, m, a, true);
}

void backward_slice(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a) {
  const Operator& op = *a.op;
  switch (op.kind) {
    case OperatorKind::kAttention:
      attention_backward(dev, s, m, a);
      fold_backward(dev, s, m, a, a.dy, op.hidden);
      break;
    case OperatorKind::kMlp:
      if (op.experts > 0)
        moe_backward(dev, s, m, a);
      else
        mlp_backward(dev, s, m, a);
      fold_backward(dev, s, m, a, a.dy, op.hidden);
      break;
    case OperatorKind::kProjection:
      rows_backward(dev, s, m, a, width_in(op, 0), op.hidden, a.dy, 0);
      fold_backward(dev, s, m, a, a.dy, op.hidden);
      break;
    case OperatorKind::kHead: {
      const I v = vocab_width(*a.layout, a.slice, m);
      rows_backward(dev, s, m, a, op.hidden, v, a.internals, 0);
      fold_backward(dev, s, m, a, a.internals, v, a.layout->slice[static_cast<std::size_t>(a.slice)].vocab0);
      break;
    }
    case OperatorKind::kEmbedding: {
      const I v = vocab_width(*a.layout, a.slice, m);
      if (a.site == 1) {
        rows_backward(dev, s, m, a, op.hidden, v, a.internals, 0);
        break;
      }
      const Block& b = block(a, 0);
      dev.scatter_add_columns(s, a.dy + b.row0, op.hidden, a.tokens, m.rows(), 0, b.rows, grad_ptr(a, 0), v);
      fold_backward(dev, s, m, a, a.dy, op.hidden);
      break;
    }
  }
  spend_elementwise(dev, s, m, a, false);
}

}  // namespace osdp::validate
