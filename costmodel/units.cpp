#include "costmodel/units.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace osdp::costmodel {
namespace {

struct Suffix {
  std::string_view text;
  double factor;
};

// Longest suffixes first so that "GiB" is tried before "B".
constexpr std::array kByteSuffixes = {Suffix{"TiB", 1099511627776.0},
                                      Suffix{"GiB", 1073741824.0},
                                      Suffix{"MiB", 1048576.0},
                                      Suffix{"KiB", 1024.0},
                                      Suffix{"TB", 1e12},
                                      Suffix{"GB", 1e9},
                                      Suffix{"MB", 1e6},
                                      Suffix{"kB", 1e3},
                                      Suffix{"B", 1.0}};
constexpr std::array kTimeSuffixes = {Suffix{"ns", 1e-9}, Suffix{"us", 1e-6}, Suffix{"ms", 1e-3},
                                      Suffix{"s", 1.0}};
constexpr std::array kBandwidthSuffixes = {Suffix{"TiB/s", 1099511627776.0},
                                           Suffix{"GiB/s", 1073741824.0},
                                           Suffix{"MiB/s", 1048576.0},
                                           Suffix{"KiB/s", 1024.0},
                                           Suffix{"TB/s", 1e12},
                                           Suffix{"GB/s", 1e9},
                                           Suffix{"MB/s", 1e6},
                                           Suffix{"kB/s", 1e3},
                                           Suffix{"B/s", 1.0},
                                           Suffix{"Tbit/s", 1e12 / 8},
                                           Suffix{"Gbit/s", 1e9 / 8},
                                           Suffix{"Mbit/s", 1e6 / 8},
                                           Suffix{"Tb/s", 1e12 / 8},
                                           Suffix{"Gb/s", 1e9 / 8},
                                           Suffix{"Mb/s", 1e6 / 8}};
constexpr std::array kFlopSuffixes = {Suffix{"PFLOP/s", 1e15}, Suffix{"TFLOP/s", 1e12},
                                      Suffix{"GFLOP/s", 1e9}, Suffix{"MFLOP/s", 1e6}, Suffix{"FLOP/s", 1.0}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

template <std::size_t K>
std::optional<double> parse_with(std::string_view text, const std::array<Suffix, K>& suffixes,
                                 bool bare_number_ok) {
  text = trim(text);
  double factor = 0.0;
  std::string_view number = text;
  for (const Suffix& s : suffixes) {
    if (text.size() > s.text.size() && text.substr(text.size() - s.text.size()) == s.text) {
      factor = s.factor;
      number = trim(text.substr(0, text.size() - s.text.size()));
      break;
    }
  }
  if (factor == 0.0) {
    if (!bare_number_ok) return std::nullopt;
    factor = 1.0;
  }
  double value = 0.0;
  const char* first = number.data();
  const char* last = number.data() + number.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr != last || !std::isfinite(value * factor)) return std::nullopt;
  return value * factor;
}

}  // namespace

std::optional<double> parse_quantity(std::string_view text, UnitKind kind, std::string* error) {
  std::optional<double> v;
  switch (kind) {
    case UnitKind::kBytes:
      v = parse_with(text, kByteSuffixes, true);
      break;
    case UnitKind::kSeconds:
      v = parse_with(text, kTimeSuffixes, false);
      break;
    case UnitKind::kBytesPerSecond:
      v = parse_with(text, kBandwidthSuffixes, false);
      break;
    case UnitKind::kFlopsPerSecond:
      v = parse_with(text, kFlopSuffixes, false);
      break;
  }
  if (!v && error) *error = fmt::format("expected {}, got \"{}\"", unit_help(kind), text);
  return v;
}

std::string unit_help(UnitKind kind) {
  switch (kind) {
    case UnitKind::kBytes:
      return "a size like \"8GiB\", \"16GB\", \"512MiB\" or a number of bytes";
    case UnitKind::kSeconds:
      return "a time like \"10us\", \"1.5ms\" or \"2s\"";
    case UnitKind::kBytesPerSecond:
      return "a bandwidth like \"12GB/s\", \"11GiB/s\" or \"400Gb/s\" (bits)";
    case UnitKind::kFlopsPerSecond:
      return "a compute rate like \"16.3TFLOP/s\"";
  }
  return "a quantity";
}

std::string format_bytes(double bytes) {
  const double a = std::fabs(bytes);
  if (a >= 1073741824.0) return fmt::format("{:.2f} GiB", bytes / 1073741824.0);
  if (a >= 1048576.0) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  if (a >= 1024.0) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{:.0f} B", bytes);
}

std::string format_seconds(double seconds) {
  const double a = std::fabs(seconds);
  if (a >= 1.0) return fmt::format("{:.3f} s", seconds);
  if (a >= 1e-3) return fmt::format("{:.2f} ms", seconds * 1e3);
  if (a >= 1e-6) return fmt::format("{:.2f} us", seconds * 1e6);
  return fmt::format("{:.0f} ns", seconds * 1e9);
}

std::string format_bandwidth(double bytes_per_second) {
  return fmt::format("{:.2f} GB/s", bytes_per_second / 1e9);
}

}  // namespace osdp::costmodel
