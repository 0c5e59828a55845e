// Internal to the executor's arithmetic (numerics.cpp, layout.cpp, moe.cpp): the GEMM call and the
// slice helpers they use, an operator's heads and MLP width, and the MoE operator's forward and backward
// (numerics.hpp's moe).
#pragma once

#include <cstdint>

#include "validate/executor/numerics.hpp"

namespace osdp::validate::detail {

using I = std::int64_t;

inline bool is_matrix(const costmodel::Weight& w) {
  return w.rows > 1;
}

struct Gm {
  Device& dev;
  Stream& s;
  GemmMath math;
  void operator()(Transpose ta, Transpose tb, I m, I n, I k, float alpha, const float* a, I lda,
                  const float* b, I ldb, float beta, float* c, I ldc, I batch = 1, I sa = 0, I sb = 0,
                  I sc = 0) const {
    Gemm g;
    g.math = math;
    g.ta = ta;
    g.tb = tb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.alpha = alpha;
    g.beta = beta;
    g.a = a;
    g.lda = lda;
    g.b = b;
    g.ldb = ldb;
    g.c = c;
    g.ldc = ldc;
    g.batch = batch;
    g.stride_a = sa;
    g.stride_b = sb;
    g.stride_c = sc;
    dev.gemm(s, g);
  }
};
constexpr Transpose N = Transpose::kNo;
constexpr Transpose T = Transpose::kYes;

inline const Block& block(const SliceArgs& a, int index) {
  return a.layout->slice[static_cast<std::size_t>(a.slice)].blocks[static_cast<std::size_t>(index)];
}
inline int internal_index(const SliceArgs& a) {
  return a.internal >= 0 ? a.internal : a.slice;
}
inline float grad_beta(const SliceArgs& a) {
  return a.accumulate ? 1.0f : 0.0f;
}
inline const float* block_ptr(const SliceArgs& a, int index) {
  return a.weights +
         a.layout->slice[static_cast<std::size_t>(a.slice)].blocks[static_cast<std::size_t>(index)].offset;
}
inline float* grad_ptr(const SliceArgs& a, int index) {
  return a.grads +
         a.layout->slice[static_cast<std::size_t>(a.slice)].blocks[static_cast<std::size_t>(index)].offset;
}

// The attention's sizes, from its weights (the IR states no heads): the projection [q x h] gives the
// query width q = a d, the QKV weight [h x (q + 2k)] the key/value width k = g d, the operator's
// split_units the key/value heads g (a slice holds whole ones); so d = k / g and a = q / d.
struct HeadShape {
  I a = 0, g = 0, d = 0;
  I q() const { return a * d; }
  I k() const { return g * d; }
};
HeadShape head_shape(const costmodel::Operator& op);

// The MLP's inner width f: the rows of its row-split weight (fc2 [f x h]); its column-split weight
// (fc1) is [h x f], or [h x 2f] for a gated MLP (gate columns, then up columns).
I ffn_of(const costmodel::Operator& op);
bool gated(const costmodel::Operator& op);

void moe_forward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a);
void moe_backward(Device& dev, Stream& s, const MathShape& m, const SliceArgs& a);
// Floats of an MoE operator's internals (saved) and backward workspace (numerics.hpp).
I moe_internal_floats(const costmodel::Operator& op, const MathShape& m);
I moe_workspace_floats(const costmodel::Operator& op, const MathShape& m);

}  // namespace osdp::validate::detail
