// The executor's arithmetic of an MoE layer's MLP (numerics.hpp's moe): its layout at an EP place, the
// routing of a rank's tokens, and its forward and backward with the dispatch and combine all-to-alls.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/executor/internal/numerics_common.hpp"

namespace osdp::validate {

using costmodel::Operator;

namespace detail {
namespace {

// The operator's matrices in IR order: the router [h x E], the experts' gate_up [h x E 2 f_e] and down
// [E f_e x h], then a shared MLP's gate_up [h x 2 f_s] and down [f_s x h] where it has one.
struct MoeDims {
  I h = 0, E = 0, k = 0, fe = 0, fs = 0;
  I El = 0;        // experts on this rank (E / e)
  I R = 0, K = 0;  // the rank's tokens and their choices (R k)
  I Kmax = 0;      // the most choices an expert rank receives (moe_received_max)
  I internals() const { return R * E + K + K * h + Kmax * h + 3 * Kmax * fe + 3 * R * fs; }
};

MoeDims moe_dims(const Operator& op, const MathShape& m, int ep) {
  std::vector<const costmodel::Weight*> mats;
  for (const auto& w : op.weights)
    if (is_matrix(w)) mats.push_back(&w);
  MoeDims d;
  d.h = op.hidden;
  d.E = op.experts;
  d.k = op.top_k;
  const bool shaped = (mats.size() == 3 || mats.size() == 5) && d.E > 0 && d.k >= 1 && d.k <= d.E &&
                      mats[0]->cols == d.E && mats[2]->rows % d.E == 0 &&
                      mats[1]->cols == 2 * mats[2]->rows && mats[1]->rows == d.h && mats[2]->cols == d.h;
  if (!shaped)
    throw UsageError(
        fmt::format("MoE operator {}: its weights are not a router, the experts' gate_up and down "
                    "(and a shared MLP) of {} experts, top {}",
                    op.name, d.E, d.k));
  d.fe = mats[2]->rows / d.E;
  d.fs = mats.size() == 5 ? mats[4]->rows : 0;
  if (ep < 1 || d.E % ep != 0)
    throw UsageError(
        fmt::format("MoE operator {}: {} experts cannot be placed over {} EP ranks", op.name, d.E, ep));
  d.El = d.E / ep;
  d.R = m.rows();
  d.K = d.R * d.k;
  d.Kmax = moe_received_max(op, m);
  return d;
}

// Offsets of the internals (floats): Z [R x E], the gates of the choices [K], the outputs back at the
// tokens Ot [K x h], the experts' inputs Xd [Kmax x h], their gate and up pre-activations and product
// [Kmax x f_e each], the shared MLP's [R x f_s each].
struct MoeInternals {
  float *z, *g, *ot, *xd, *pg, *pu, *hh, *sg, *su, *sh;
  MoeInternals(float* base, const MoeDims& d) {
    z = base;
    g = z + d.R * d.E;
    ot = g + d.K;
    xd = ot + d.K * d.h;
    pg = xd + d.Kmax * d.h;
    pu = pg + d.Kmax * d.fe;
    hh = pu + d.Kmax * d.fe;
    sg = hh + d.Kmax * d.fe;
    su = sg + d.R * d.fs;
    sh = su + d.R * d.fs;
  }
};

std::vector<std::size_t> times(const std::vector<std::size_t>& counts, I h) {
  std::vector<std::size_t> out(counts);
  for (auto& c : out) c *= static_cast<std::size_t>(h);
  return out;
}

const MoeRoute& route_of(const SliceArgs& a) {
  if (a.route == nullptr)
    throw Error(fmt::format("executor: MoE operator {} runs without its routing", a.op->name));
  return *a.route;
}

void check_args(const MoeDims& d, const SliceArgs& a) {
  if (a.send_rows == nullptr || a.gate_at == nullptr || a.route->slots != d.K ||
      a.route->local_experts != d.El)
    throw Error(fmt::format("executor: MoE operator {} runs without its routing of {} token choices",
                            a.op->name, d.K));
  if (a.route->ep > 1 && (a.expert_group == nullptr || a.send == nullptr || a.recv == nullptr))
    throw Error(fmt::format("executor: MoE operator {} at EP {} has no EP group or exchange buffers",
                            a.op->name, a.route->ep));
}

// What both passes of an MoE operator's slice work with: its routing, sizes, internals and weights
// (router [h x E], this rank's experts' gate_up [h x E_l 2 f_e] with ld E_l 2 f_e, and down).
struct MoeCall {
  const MoeRoute& r;
  MoeDims d;
  Gm mm;
  MoeInternals in;
  I h, fe, ld;
  const float *wr, *wgu, *wd;
  bool ep;
  std::string what;
  MoeCall(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a, const char* phase)
      : r(route_of(a)),
        d(moe_dims(*a.op, m, r.ep)),
        mm{dev, s, m.math},
        in(a.internals, d),
        h(d.h),
        fe(d.fe),
        ld(d.El * 2 * d.fe),
        wr(block_ptr(a, 0)),
        wgu(block_ptr(a, 1)),
        wd(block_ptr(a, 2)),
        ep(r.ep > 1),
        what(fmt::format("the expert all-to-all of {}{}", a.op->name, phase)) {
    check_args(d, a);
  }
};

}  // namespace

I moe_internal_floats(const Operator& op, const MathShape& m) {
  return moe_dims(op, m, 1).internals();
}

I moe_workspace_floats(const Operator& op, const MathShape& m) {
  const MoeDims d = moe_dims(op, m, 1);
  return d.K + d.K * d.h;  // the choices' gate gradients; the outputs' gradients at the tokens
}

// Forward: Z = X W_r; the gates; the dispatch (each choice's token row to its expert's rank); each local
// expert's gated MLP on the rows it received, peer by peer; the combine (the outputs back to their
// tokens' ranks) and Y += gate O at each token; the shared MLP.
void moe_forward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a) {
  const MoeCall call(dev, s, m, a, "");
  const auto& [r, d, mm, in, h, fe, ld, wr, wgu, wd, ep, what] = call;
  mm(N, N, d.R, d.E, h, 1.0f, a.x, h, wr, d.E, 0.0f, in.z, d.E);  // Z = X W_r
  dev.gather_rows(s, in.z, 1, a.gate_at, d.K, 1, nullptr, in.g, 1);
  dev.gather_rows(s, a.x, h, a.send_rows, d.K, h, nullptr, ep ? a.send : in.xd, h);
  if (ep)
    a.expert_group->all_to_all(s, a.send, times(r.send_counts, h), in.xd, times(r.recv_counts, h), what);
  float* out = ep ? a.send : in.ot;
  I o = 0;
  for (int p = 0; p < r.ep; ++p)
    for (I x = 0; x < d.El; ++x) {
      const I c = r.expert_rows[static_cast<std::size_t>(p * d.El + x)];
      if (c == 0) continue;
      float *pg = in.pg + o * fe, *pu = in.pu + o * fe, *hh = in.hh + o * fe;
      mm(N, N, c, fe, h, 1.0f, in.xd + o * h, h, wgu + x * 2 * fe, ld, 0.0f, pg, fe);       // X_x G_x
      mm(N, N, c, fe, h, 1.0f, in.xd + o * h, h, wgu + x * 2 * fe + fe, ld, 0.0f, pu, fe);  // X_x U_x
      dev.gated(s, pg, pu, hh, static_cast<std::size_t>(c * fe));
      mm(N, N, c, h, fe, 1.0f, hh, fe, wd + x * fe * h, h, 0.0f, out + o * h, h);  // O_x = H D_x
      o += c;
    }
  if (ep)
    a.expert_group->all_to_all(s, a.send, times(r.recv_counts, h), in.ot, times(r.send_counts, h), what);
  dev.scatter_add_rows(s, in.ot, h, a.send_rows, d.K, h, in.g, a.y, h);  // Y[t] += z O
  if (d.fs > 0) {
    const float *wsgu = block_ptr(a, 3), *wsd = block_ptr(a, 4);
    const I fs = d.fs;
    mm(N, N, d.R, fs, h, 1.0f, a.x, h, wsgu, 2 * fs, 0.0f, in.sg, fs);
    mm(N, N, d.R, fs, h, 1.0f, a.x, h, wsgu + fs, 2 * fs, 0.0f, in.su, fs);
    dev.gated(s, in.sg, in.su, in.sh, static_cast<std::size_t>(d.R * fs));
    mm(N, N, d.R, h, fs, 1.0f, in.sh, fs, wsd, h, 1.0f, a.y, h);
  }
}

// Backward, in reverse: the shared MLP's; the gates' gradients dz = dY . O and the outputs' dO = z dY
// at the tokens; dO to the experts' ranks (the combine's gradient); each expert's backward; the inputs'
// gradients back (the dispatch's) and added to their tokens' rows; the router's, from dZ (dz at each
// choice's logit).
void moe_backward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a) {
  const MoeCall call(dev, s, m, a, " (backward)");
  const auto& [r, d, mm, in, h, fe, ld, wr, wgu, wd, ep, what] = call;
  float *gwr = grad_ptr(a, 0), *gwgu = grad_ptr(a, 1), *gwd = grad_ptr(a, 2);
  if (d.fs > 0) {
    const float *wsgu = block_ptr(a, 3), *wsd = block_ptr(a, 4);
    float *gsgu = grad_ptr(a, 3), *gsd = grad_ptr(a, 4);
    const I fs = d.fs, R = d.R;
    mm(T, N, fs, h, R, 1.0f, in.sh, fs, a.dy, h, grad_beta(a), gsd, h);  // dD_s = H_s^T dY
    mm(N, T, R, fs, h, 1.0f, a.dy, h, wsd, h, 0.0f, in.sh, fs);          // dH_s over H_s
    dev.gated_backward(s, in.sg, in.su, in.sh, in.sg, in.su, static_cast<std::size_t>(R * fs));
    mm(N, T, R, h, fs, 1.0f, in.sg, fs, wsgu, 2 * fs, 1.0f, a.dx, h);
    mm(N, T, R, h, fs, 1.0f, in.su, fs, wsgu + fs, 2 * fs, 1.0f, a.dx, h);
    mm(T, N, h, fs, R, 1.0f, a.x, h, in.sg, fs, grad_beta(a), gsgu, 2 * fs);
    mm(T, N, h, fs, R, 1.0f, a.x, h, in.su, fs, grad_beta(a), gsgu + fs, 2 * fs);
  }
  float* dz = a.workspace;             // [K]: the gates' gradients
  float* dO = ep ? a.send : dz + d.K;  // the outputs' gradients at the tokens, in send order
  dev.row_dots(s, a.dy, h, a.send_rows, in.ot, h, d.K, h, dz);
  dev.gather_rows(s, a.dy, h, a.send_rows, d.K, h, in.g, dO, h);
  float* dOe = ep ? a.recv : dO;  // at the experts, in receive order
  if (ep)
    a.expert_group->all_to_all(s, a.send, times(r.send_counts, h), a.recv, times(r.recv_counts, h), what);
  float* dXe = ep ? a.send : in.ot;  // the inputs' gradients at the experts (Ot is read no more)
  std::vector<bool> seen(static_cast<std::size_t>(d.El), false);
  I o = 0;
  for (int p = 0; p < r.ep; ++p)
    for (I x = 0; x < d.El; ++x) {
      const I c = r.expert_rows[static_cast<std::size_t>(p * d.El + x)];
      if (c == 0) continue;
      const float beta = seen[static_cast<std::size_t>(x)] ? 1.0f : grad_beta(a);
      seen[static_cast<std::size_t>(x)] = true;
      float *pg = in.pg + o * fe, *pu = in.pu + o * fe, *hh = in.hh + o * fe;
      const float *xb = in.xd + o * h, *dob = dOe + o * h;
      mm(T, N, fe, h, c, 1.0f, hh, fe, dob, h, beta, gwd + x * fe * h, h);  // dD_x = H^T dO
      mm(N, T, c, fe, h, 1.0f, dob, h, wd + x * fe * h, h, 0.0f, hh, fe);   // dH over H
      dev.gated_backward(s, pg, pu, hh, pg, pu, static_cast<std::size_t>(c * fe));
      mm(N, T, c, h, fe, 1.0f, pg, fe, wgu + x * 2 * fe, ld, 0.0f, dXe + o * h, h);
      mm(N, T, c, h, fe, 1.0f, pu, fe, wgu + x * 2 * fe + fe, ld, 1.0f, dXe + o * h, h);
      mm(T, N, h, fe, c, 1.0f, xb, h, pg, fe, beta, gwgu + x * 2 * fe, ld);
      mm(T, N, h, fe, c, 1.0f, xb, h, pu, fe, beta, gwgu + x * 2 * fe + fe, ld);
      o += c;
    }
  // An expert no token of the EP group reached: its gradient is zero (unless earlier micro-batches').
  for (I x = 0; x < d.El; ++x) {
    if (seen[static_cast<std::size_t>(x)] || a.accumulate) continue;
    for (I row = 0; row < d.h; ++row)
      dev.fill(s, gwgu + row * ld + x * 2 * fe, static_cast<std::size_t>(2 * fe), 0.0f);
    dev.fill(s, gwd + x * fe * h, static_cast<std::size_t>(fe * h), 0.0f);
  }
  if (ep)
    a.expert_group->all_to_all(s, a.send, times(r.recv_counts, h), in.ot, times(r.send_counts, h), what);
  dev.scatter_add_rows(s, in.ot, h, a.send_rows, d.K, h, nullptr, a.dx, h);
  // The router: dZ (over Z) zero but at each choice's logit, where its gate's gradient adds.
  dev.fill(s, in.z, static_cast<std::size_t>(d.R * d.E), 0.0f);
  dev.scatter_add_rows(s, dz, 1, a.gate_at, d.K, 1, nullptr, in.z, 1);
  mm(T, N, h, d.E, d.R, 1.0f, a.x, h, in.z, d.E, grad_beta(a), gwr, d.E);  // dW_r = X^T dZ
  mm(N, T, d.R, h, d.E, 1.0f, in.z, d.E, wr, d.E, 1.0f, a.dx, h);          // dX += dZ W_r^T
}

}  // namespace detail

std::int64_t MoeRoute::received() const {
  std::int64_t n = 0;
  for (const auto c : recv_counts) n += static_cast<std::int64_t>(c);
  return n;
}

std::int64_t moe_received_max(const Operator& op, const MathShape& m) {
  const std::int64_t s = m.seq_all(), E = op.experts, k = op.top_k;
  if (E <= 0) return 0;
  return m.batch * ((s * k + E - 1) / E) * E * m.seq / s;
}

std::int64_t moe_exchange_floats(const Operator& op, int ep, const MathShape& m) {
  if (op.experts <= 0 || ep <= 1) return 0;
  return moe_received_max(op, m) * op.hidden;
}

MoeRoute moe_route(const Operator& op, ExpertPlace place, const std::vector<std::int64_t>& first_samples,
                   std::int64_t samples, std::int64_t seq, std::int64_t position0) {
  const std::int64_t E = op.experts, k = op.top_k;
  if (E <= 0 || k < 1 || place.ep < 1 || E % place.ep != 0 ||
      static_cast<int>(first_samples.size()) != place.ep || place.index < 0 || place.index >= place.ep)
    throw UsageError(fmt::format("MoE operator {}: no routing of top {} of {} experts over {} EP ranks",
                                 op.name, k, E, place.ep));
  MoeRoute r;
  r.ep = place.ep;
  r.index = place.index;
  r.local_experts = static_cast<int>(E / place.ep);
  r.rows = samples * seq;
  r.slots = r.rows * k;
  const auto expert_of = [&](std::int64_t g, std::int64_t p, std::int64_t i) { return (g + p * k + i) % E; };
  // Send order: by expert (so by EP rank), then row, then choice; a counting sort.
  const std::int64_t mine = first_samples[static_cast<std::size_t>(place.index)];
  std::vector<std::int64_t> count(static_cast<std::size_t>(E), 0);
  for (std::int64_t i = 0; i < samples; ++i)
    for (std::int64_t p = 0; p < seq; ++p)
      for (std::int64_t c = 0; c < k; ++c)
        ++count[static_cast<std::size_t>(expert_of(mine + i, position0 + p, c))];
  std::vector<std::int64_t> next(static_cast<std::size_t>(E), 0);
  for (std::int64_t e = 1; e < E; ++e)
    next[static_cast<std::size_t>(e)] =
        next[static_cast<std::size_t>(e - 1)] + count[static_cast<std::size_t>(e - 1)];
  r.send_rows.assign(static_cast<std::size_t>(r.slots), 0);
  r.gate_at.assign(static_cast<std::size_t>(r.slots), 0);
  for (std::int64_t i = 0; i < samples; ++i)
    for (std::int64_t p = 0; p < seq; ++p)
      for (std::int64_t c = 0; c < k; ++c) {
        const std::int64_t e = expert_of(mine + i, position0 + p, c), row = i * seq + p;
        const auto at = static_cast<std::size_t>(next[static_cast<std::size_t>(e)]++);
        r.send_rows[at] = static_cast<std::int32_t>(row);
        r.gate_at[at] = static_cast<std::int32_t>(row * E + e);
      }
  const std::int64_t El = r.local_experts;
  r.send_counts.assign(static_cast<std::size_t>(r.ep), 0);
  for (std::int64_t e = 0; e < E; ++e)
    r.send_counts[static_cast<std::size_t>(e / El)] +=
        static_cast<std::size_t>(count[static_cast<std::size_t>(e)]);
  // What each EP rank sends this one: its choices of this rank's experts.
  r.expert_rows.assign(static_cast<std::size_t>(r.ep * El), 0);
  r.recv_counts.assign(static_cast<std::size_t>(r.ep), 0);
  for (int q = 0; q < r.ep; ++q) {
    const std::int64_t first = first_samples[static_cast<std::size_t>(q)];
    for (std::int64_t i = 0; i < samples; ++i)
      for (std::int64_t p = 0; p < seq; ++p)
        for (std::int64_t c = 0; c < k; ++c) {
          const std::int64_t e = expert_of(first + i, position0 + p, c);
          if (e / El != place.index) continue;
          ++r.expert_rows[static_cast<std::size_t>(q * El + e % El)];
          ++r.recv_counts[static_cast<std::size_t>(q)];
        }
  }
  return r;
}

OperatorLayout make_layout(const Operator& op, int tp, int n, int world, ExpertPlace place) {
  if (op.experts <= 0) return make_layout(op, tp, n, world);
  if (tp != 1 || n != 1)
    throw UsageError(
        fmt::format("executor: MoE operator {} at TP {} in {} slices; its executor runs an MoE "
                    "layer's MLP at TP 1, unsplit",
                    op.name, tp, n));
  if (place.ep < 1 || op.experts % place.ep != 0 || place.index < 0 || place.index >= place.ep)
    throw UsageError(fmt::format("MoE operator {}: {} experts cannot be placed over {} EP ranks", op.name,
                                 op.experts, place.ep));
  OperatorLayout l;
  l.slices = 1;
  SliceLayout sl;
  std::int64_t offset = 0;
  // The shared matrices, then the vector chunk, then this EP rank's experts.
  for (const bool expert : {false, true}) {
    if (expert) {
      sl.vector_offset = offset;
      sl.vector_start = 0;
      sl.vector_len = l.vector_total;
      offset += l.vector_total;
    }
    for (int wi = 0; wi < static_cast<int>(op.weights.size()); ++wi) {
      const auto& w = op.weights[static_cast<std::size_t>(wi)];
      if (!detail::is_matrix(w)) {
        if (!expert) {
          l.vector_weights.push_back(wi);
          l.vector_total += w.elements();
        }
        continue;
      }
      if (w.expert != expert) continue;
      Block b;
      b.weight = wi;
      b.offset = offset;
      b.rows = w.rows;
      b.columns.push_back({0, w.cols});
      if (expert && w.split_columns) {
        b.columns[0] = {place.index * (w.cols / place.ep), w.cols / place.ep};
      } else if (expert) {
        b.rows = w.rows / place.ep;
        b.row0 = place.index * b.rows;
      }
      offset += b.rows * b.cols();
      sl.blocks.push_back(b);
    }
  }
  // Blocks in IR order (block i is the i-th matrix), as the arithmetic indexes them.
  std::sort(sl.blocks.begin(), sl.blocks.end(),
            [](const Block& x, const Block& y) { return x.weight < y.weight; });
  l.slice_elems = offset;
  l.padded_elems = (l.slice_elems + world - 1) / world * world;
  l.shard_elems = l.padded_elems / world;
  l.slice.push_back(std::move(sl));
  return l;
}

std::int64_t shared_prefix(const Operator& op, const OperatorLayout& l, int j) {
  const SliceLayout& sl = l.slice[static_cast<std::size_t>(j)];
  if (op.experts <= 0) return l.slice_elems;
  return sl.vector_offset + sl.vector_len;
}

}  // namespace osdp::validate
