// The pieces the lowering builds operators from (workload.cpp defines them; workload_blocks.cpp
// lowers the MoE MLP and the latent attention with them). Internal to costmodel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/workload.hpp"

namespace osdp::costmodel::lowering {

using I = std::int64_t;

Kernel gemm(std::string name, I m, I n, I k, Dim batch_dim, Dim split_dim = Dim::kNone, I count = 1);
Kernel elementwise(std::string name, double bytes_per_sample, bool tp_sliced = false);
// A weight GEMM's three kernels (forward, dX, dW) for a weight [in x out] cut by rows or by columns.
void add_gemms(Operator& op, const std::string& name, I s, I in, I out, bool split_columns);
// A splittable weight (and its bias) and its three kernels.
void add_linear(Operator& op, const std::string& name, I s, I in, I out, bool split_columns = false,
                bool bias = true);
void add_column_parts(Operator& op, const std::string& weight, const std::vector<std::string>& parts,
                      const std::vector<I>& outs, I s, I in, bool bias, std::vector<Kernel>& backward);
int norm_width(const ModelSpec& m);
// A norm of width h (its weights, its forward kernel over s tokens of e bytes).
void add_norm(Operator& op, const std::string& name, I h, double s, double e, const ModelSpec& m);
Operator layer_operator(int layer, OperatorKind kind, const char* part, int hidden);
double attention_density(const ModelSpec& m, I s);

Operator moe_mlp(int layer, const StageSpec& st, const ModelSpec& m, I s, double e, double mask);
Operator latent_attention(int layer, const StageSpec& st, const ModelSpec& m, I s, double e, double mask);

}  // namespace osdp::costmodel::lowering
