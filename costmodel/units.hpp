// Unit strings, parsed in exactly one place.
//   bytes:      "8GiB" (2^30), "16GB" (1e9), "512MiB", "800MB", "4KiB", "1kB", "123B", or a plain number
//   time:       "10us", "1.5ms", "2s", "300ns"
//   bandwidth:  "12GB/s" (1e9 B/s), "11GiB/s", "400Gb/s" or "400Gbit/s" (bits: /8)
//   flop rate:  "16.3TFLOP/s", "989TFLOP/s", "90GFLOP/s"
// Binary (Ki, Mi, Gi, Ti) and decimal (k, M, G, T) prefixes are never mixed: "GB" is 1e9 and "GiB" 2^30.
// Interfaces carry seconds, bytes, bytes per second and flop per second as doubles/integers whose
// names say the unit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace osdp::costmodel {

enum class UnitKind { kBytes, kSeconds, kBytesPerSecond, kFlopsPerSecond };

// Parses `text` as a quantity of `kind`; returns the value in base units (B, s, B/s, FLOP/s) or
// std::nullopt with `error` set to a sentence saying what was expected.
std::optional<double> parse_quantity(std::string_view text, UnitKind kind, std::string* error);

// Describes the accepted forms for messages ("a size like \"8GiB\" or \"16GB\"").
std::string unit_help(UnitKind kind);

// Human-readable formatting (binary units for bytes, SI for rates and times).
std::string format_bytes(double bytes);                 // "7.45 GiB"
std::string format_seconds(double seconds);             // "12.30 ms"
std::string format_bandwidth(double bytes_per_second);  // "12.00 GB/s"

}  // namespace osdp::costmodel
