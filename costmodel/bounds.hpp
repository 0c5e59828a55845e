// Physical bounds on what osdp reads, in one place: every hardware figure of a cluster or calibration
// file and every size on the command line is checked against the bound of its kind here, so that a
// value no machine has (a device with 1e308 B of memory, a link of 1 B/s, a GEMM efficiency of
// 1e-6) is an input error naming the file, the JSON pointer and the range, not a plan.
//
// The ranges are generous on purpose: they reject mistakes of units or of orders of magnitude, not
// unusual machines. Limits on the JSON itself (nesting, file size) are in json_reader.hpp; limits on
// how far an experiment expands are in experiments/experiment.hpp.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "costmodel/units.hpp"

namespace osdp::costmodel {

// No bound at all: "unlimited", and the least of an empty set.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct Bound {
  double min;
  double max;
  const char* what;  // "a device's memory", for messages
};

namespace bounds {
// The largest size of one dimension a model file may give (a hidden size, a head count, a sequence).
inline constexpr std::int64_t kMaxDim = 1 << 20;
inline constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kPiB = kGiB * 1024 * 1024;

// A device's memory: 1 MiB to 1 PiB.
inline constexpr Bound kDeviceMemory{kMiB, kPiB, "a device's memory"};
// A link's or a collective segment's bandwidth: 1 MB/s (a slow serial line) to 100 PB/s.
inline constexpr Bound kLinkBandwidth{1e6, 1e17, "a link's bandwidth"};
// A link's latency (alpha): 0 to 1 s.
inline constexpr Bound kLatency{0.0, 1.0, "a latency"};
// Memory bandwidth of a device (elementwise passes, the optimizer): at least 10 MB/s; no upper
// bound, so that closed-form studies can make memory passes free (the golden tests do).
inline constexpr Bound kMemoryBandwidth{1e7, std::numeric_limits<double>::infinity(), "a memory bandwidth"};
// Peak arithmetic: 1 MFLOP/s to 1 EFLOP/s per device.
inline constexpr Bound kFlopRate{1e6, 1e18, "a device's FLOP rate"};
// The fraction of peak a large GEMM reaches: 1% to 100%.
inline constexpr Bound kGemmEfficiency{0.01, 1.0, "a GEMM efficiency"};
// A kernel's launch overhead: 0 to 10 ms.
inline constexpr Bound kKernelOverhead{0.0, 0.01, "a kernel overhead"};
// A REPLICATE operator's runtime overhead per step (ComputeSpec::replicate_overhead_s): 0 to 1 s.
inline constexpr Bound kReplicateOverhead{0.0, 1.0, "a REPLICATE operator's overhead"};
}  // namespace bounds

// Why `value` (read from `text`, in base units of `kind`) is outside the physical bound `b`, or ""
// when it is inside: "a device's memory must be between 1 MiB and 1 PiB, got 8 B (a plain number
// is bytes: did you mean "8GiB"?)".
std::string bound_problem(double value, UnitKind kind, const Bound& b, std::string_view text);

}  // namespace osdp::costmodel
