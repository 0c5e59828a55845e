// Ring collectives (see collective.hpp for the formulas).
#include "costmodel/collective.hpp"

#include <algorithm>
#include <cassert>
#include <stdexcept>

namespace osdp::costmodel {

const CollectiveKind& describe(Collective c) {
  const auto i = static_cast<std::size_t>(c);
  assert(i < kCollectives.size() && kCollectives[i].kind == c);
  return kCollectives[i];
}

const char* to_string(Collective c) {
  return describe(c).key;
}

const char* name_of(Collective c) {
  return describe(c).name;
}

std::optional<Collective> collective_from_string(std::string_view s) {
  for (const CollectiveKind& k : kCollectives)
    if (s == k.key || s == k.name) return k.kind;
  return std::nullopt;
}

int ring_steps(Collective c, int ranks) {
  return ranks <= 1 ? 0 : describe(c).passes * (ranks - 1);
}

double bus_bandwidth_factor(Collective c, int ranks) {
  return ranks <= 1 ? 0.0 : static_cast<double>(ring_steps(c, ranks)) / ranks;
}

double CollectiveOp::chunk_bytes() const {
  return bytes / ranks;
}

double CollectiveOp::step_s(double alpha_s, double beta_s_per_byte) const {
  return alpha_s + chunk_bytes() * beta_s_per_byte;
}

double CollectiveOp::ring_s(double alpha_s, double beta_s_per_byte) const {
  if (ranks <= 1) return 0.0;
  const double n = ranks;
  return describe(kind).passes * ((n - 1) * alpha_s + (n - 1) / n * bytes * beta_s_per_byte);
}

double CollectiveOp::bus_bandwidth(double seconds) const {
  return seconds > 0 ? bytes / seconds * bus_factor() : 0.0;
}

double all_to_all_v_bytes(const std::vector<std::vector<double>>& bytes) {
  const std::size_t n = bytes.size();
  for (const auto& row : bytes)
    if (row.size() != n) throw std::invalid_argument("all_to_all_v_bytes: the byte matrix is not square");
  if (n < 2) return 0.0;
  double largest = 0;  // sum over the steps of each step's largest message
  for (std::size_t k = 1; k < n; ++k) {
    double step = 0;
    for (std::size_t p = 0; p < n; ++p) step = std::max(step, bytes[p][(p + k) % n]);
    largest += step;
  }
  return static_cast<double>(n) / static_cast<double>(n - 1) * largest;
}

}  // namespace osdp::costmodel
