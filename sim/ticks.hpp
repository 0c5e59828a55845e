// Simulated time is integer ticks of one picosecond; seconds are converted in exactly these two
// functions (int64 picoseconds reach 106 days).
#pragma once

#include <cmath>
#include <cstdint>

namespace osdp::sim {

using Tick = std::int64_t;
constexpr double kTicksPerSecond = 1e12;

inline Tick to_ticks(double seconds) {
  return static_cast<Tick>(std::llround(seconds * kTicksPerSecond));
}
inline double to_seconds(Tick t) {
  return static_cast<double>(t) / kTicksPerSecond;
}

}  // namespace osdp::sim
