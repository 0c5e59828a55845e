// Messages for values outside a physical bound (bounds.hpp).
#include "costmodel/bounds.hpp"

#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace osdp::costmodel {

namespace {
// A bound or an offending value in a message: 3 significant digits in the largest unit that keeps
// it at 1 or more ("1 PiB", "1 MB/s", "1e+308 B" beyond the units).
std::string format_in(UnitKind kind, double v) {
  struct U {
    double scale;
    const char* name;
  };
  static const std::vector<U> kBytes = {{1.0, "B"},
                                        {1024.0, "KiB"},
                                        {1048576.0, "MiB"},
                                        {1073741824.0, "GiB"},
                                        {1099511627776.0, "TiB"},
                                        {1125899906842624.0, "PiB"}};
  static const std::vector<U> kRate = {{1.0, "B/s"},  {1e3, "kB/s"},  {1e6, "MB/s"},
                                       {1e9, "GB/s"}, {1e12, "TB/s"}, {1e15, "PB/s"}};
  static const std::vector<U> kFlops = {{1.0, "FLOP/s"},   {1e6, "MFLOP/s"},  {1e9, "GFLOP/s"},
                                        {1e12, "TFLOP/s"}, {1e15, "PFLOP/s"}, {1e18, "EFLOP/s"}};
  static const std::vector<U> kTime = {{1e-9, "ns"}, {1e-6, "us"}, {1e-3, "ms"}, {1.0, "s"}};
  const std::vector<U>& units = kind == UnitKind::kBytes            ? kBytes
                                : kind == UnitKind::kBytesPerSecond ? kRate
                                : kind == UnitKind::kFlopsPerSecond ? kFlops
                                                                    : kTime;
  if (v == 0.0 || !std::isfinite(v))
    return fmt::format("{:g} {}", v, kind == UnitKind::kSeconds ? "s" : units.front().name);
  const U* u = &units.front();
  for (const U& c : units)
    if (std::abs(v) >= c.scale) u = &c;
  return fmt::format("{:.3g} {}", v / u->scale, u->name);
}
}  // namespace

std::string bound_problem(double value, UnitKind kind, const Bound& b, std::string_view text) {
  if (value >= b.min && value <= b.max) return "";
  const bool bare = !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string_view::npos;
  std::string hint = "check the unit";
  if (bare && kind == UnitKind::kBytes && value < b.min)  // bare: nothing in `text` to escape
    hint = fmt::format("a plain number is bytes: did you mean \"{}GiB\"?", text);
  return fmt::format("{} must be between {} and {}, got {} ({})", b.what, format_in(kind, b.min),
                     format_in(kind, b.max), format_in(kind, value), hint);
}

}  // namespace osdp::costmodel
