// The workload IR's own accessors (workload.hpp): a kernel's sizes and FLOPs at a batch, an operator's
// parameters, FLOPs and what a choice makes it keep, a workload's totals. How a model lowers into the
// IR is workload.cpp; how an operator is cut, slicing.cpp.
#include "costmodel/workload.hpp"

namespace osdp::costmodel {

const char* to_string(OperatorKind k) {
  switch (k) {
    case OperatorKind::kEmbedding:
      return "embedding";
    case OperatorKind::kAttention:
      return "attention";
    case OperatorKind::kMlp:
      return "mlp";
    case OperatorKind::kProjection:
      return "projection";
    case OperatorKind::kHead:
      return "head";
  }
  return "?";
}

std::int64_t Kernel::dim(Dim d, int batch) const {
  const std::int64_t b = batch_dim == d ? batch : 1;
  switch (d) {
    case Dim::kM:
      return m * b;
    case Dim::kN:
      return n * b;
    case Dim::kK:
      return k * b;
    case Dim::kCount:
      return count * b;
    case Dim::kNone:
      return 1;
  }
  return 1;
}

double Kernel::flops(int batch) const {
  if (kind != KernelKind::kGemm) return 0.0;
  return 2.0 * static_cast<double>(dim(Dim::kM, batch)) * static_cast<double>(dim(Dim::kN, batch)) *
         static_cast<double>(dim(Dim::kK, batch)) * static_cast<double>(dim(Dim::kCount, batch)) * density;
}

Recompute Operator::recompute(const Choice& choice) const {
  if (!checkpointable) return Recompute::kNone;
  if (choice.selective && !selectable()) return Recompute::kNone;
  return choice.recompute();
}

double Operator::kept_bytes_per_sample(const Choice& choice) const {
  switch (recompute(choice)) {
    case Recompute::kFull:
      return input_bytes_per_sample;
    case Recompute::kSelective:
      return selective_bytes_per_sample;
    case Recompute::kNone:
      break;
  }
  return saved_bytes_per_sample;
}

std::int64_t Operator::parameters() const {
  std::int64_t p = 0;
  for (const auto& w : weights) p += w.elements();
  return p;
}

std::int64_t Operator::expert_parameters() const {
  std::int64_t p = 0;
  for (const auto& w : weights)
    if (w.expert) p += w.elements();
  return p;
}

double Operator::forward_flops(int batch) const {
  double f = 0;
  for (const auto& k : forward) f += k.flops(batch);
  return f;
}

double Operator::backward_flops(int batch) const {
  double f = 0;
  for (const auto& k : backward) f += k.flops(batch);
  return f;
}

std::int64_t Workload::parameters() const {
  std::int64_t p = 0;
  for (const auto& op : operators) p += op.parameters();
  return p;
}

std::vector<int> Workload::unit_of_operators() const {
  std::vector<int> out(operators.size(), -1);
  for (std::size_t u = 0; u < units.size(); ++u)
    for (const int o : units[u].ops) out[static_cast<std::size_t>(o)] = static_cast<int>(u);
  return out;
}

}  // namespace osdp::costmodel
