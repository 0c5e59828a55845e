// Unit strings (costmodel/units.hpp): every expected value is derived by hand in a comment from the
// definitions of the prefixes, independently of the parser's suffix table:
//   binary  Ki = 2^10 = 1024, Mi = 2^20 = 1048576, Gi = 2^30 = 1073741824, Ti = 2^40 = 1099511627776
//   decimal k = 1e3, M = 1e6, G = 1e9, T = 1e12, P = 1e15; a bit is 1/8 byte.
// Products of small integers and these factors are exact in a double, so those are compared with ==;
// decimal fractions (1.5e-3, 16.3e12) are compared within a relative 1e-12.
#include <catch2/catch.hpp>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/units.hpp"

using osdp::costmodel::format_bandwidth;
using osdp::costmodel::format_bytes;
using osdp::costmodel::format_seconds;
using osdp::costmodel::parse_quantity;
using osdp::costmodel::unit_help;
using osdp::costmodel::UnitKind;

namespace {

constexpr double kKi = 1024.0;
constexpr double kMi = 1048576.0;
constexpr double kGi = 1073741824.0;
constexpr double kTi = 1099511627776.0;

// Parses and requires success; the error text is reported when it fails.
double parse_ok(const std::string& text, UnitKind kind) {
  std::string error;
  const std::optional<double> v = parse_quantity(text, kind, &error);
  INFO("text \"" << text << "\": " << error);
  REQUIRE(v.has_value());
  return *v;
}

// Parses and requires a rejection; returns the error sentence.
std::string parse_error(const std::string& text, UnitKind kind) {
  std::string error;
  const std::optional<double> v = parse_quantity(text, kind, &error);
  INFO("text \"" << text << "\" parsed as " << (v ? *v : 0.0));
  REQUIRE_FALSE(v.has_value());
  return error;
}

Approx rel(double expected) {
  return Approx(expected).epsilon(1e-12).margin(0.0);
}

}  // namespace

TEST_CASE("byte sizes keep binary and decimal prefixes apart", "[units]") {
  const UnitKind b = UnitKind::kBytes;
  CHECK(parse_ok("8GiB", b) == 8589934592.0);       // 8 * 2^30
  CHECK(parse_ok("16GB", b) == 16000000000.0);      // 16 * 1e9
  CHECK(parse_ok("512MiB", b) == 536870912.0);      // 512 * 2^20
  CHECK(parse_ok("800MB", b) == 800000000.0);       // 800 * 1e6
  CHECK(parse_ok("4KiB", b) == 4096.0);             // 4 * 2^10
  CHECK(parse_ok("1kB", b) == 1000.0);              // 1 * 1e3
  CHECK(parse_ok("1TiB", b) == 1099511627776.0);    // 2^40
  CHECK(parse_ok("2TB", b) == 2000000000000.0);     // 2 * 1e12
  CHECK(parse_ok("123B", b) == 123.0);              // bytes
  CHECK(parse_ok("1.5GiB", b) == 1610612736.0);     // 1.5 * 2^30 = 3 * 2^29
  CHECK(parse_ok("81559MiB", b) == 85520809984.0);  // 81559 * 1048576 (an H100 as the driver reports)
  // The two families differ: 1 GiB - 1 GB = 1073741824 - 1000000000 = 73741824 bytes.
  CHECK(parse_ok("1GiB", b) - parse_ok("1GB", b) == 73741824.0);
}

TEST_CASE("a plain number is a number of bytes", "[units]") {
  const UnitKind b = UnitKind::kBytes;
  CHECK(parse_ok("4096", b) == 4096.0);
  CHECK(parse_ok("0", b) == 0.0);
  CHECK(parse_ok("2.5", b) == 2.5);
  CHECK(parse_ok("1e9", b) == 1e9);
}

TEST_CASE("times take ns, us, ms and s", "[units]") {
  const UnitKind t = UnitKind::kSeconds;
  CHECK(parse_ok("10us", t) == rel(1e-5));     // 10 * 1e-6
  CHECK(parse_ok("1.5ms", t) == rel(1.5e-3));  // 1.5 * 1e-3
  CHECK(parse_ok("2s", t) == 2.0);
  CHECK(parse_ok("300ns", t) == rel(3e-7));  // 300 * 1e-9
  CHECK(parse_ok("0.5s", t) == 0.5);
  CHECK(parse_ok("0us", t) == 0.0);
}

TEST_CASE("a bare number is not a time, a bandwidth or a flop rate", "[units]") {
  CHECK(parse_error("5", UnitKind::kSeconds) ==
        "expected a time like \"10us\", \"1.5ms\" or \"2s\", got \"5\"");
  CHECK(parse_error("0.001", UnitKind::kSeconds) ==
        "expected a time like \"10us\", \"1.5ms\" or \"2s\", got \"0.001\"");
  CHECK(parse_error("12e9", UnitKind::kBytesPerSecond) ==
        "expected a bandwidth like \"12GB/s\", \"11GiB/s\" or \"400Gb/s\" (bits), got \"12e9\"");
  CHECK(parse_error("1e12", UnitKind::kFlopsPerSecond) ==
        "expected a compute rate like \"16.3TFLOP/s\", got \"1e12\"");
}

TEST_CASE("bandwidths: bytes per second, binary or decimal, and bits per second divided by 8", "[units]") {
  const UnitKind bw = UnitKind::kBytesPerSecond;
  CHECK(parse_ok("12GB/s", bw) == 12000000000.0);     // 12 * 1e9
  CHECK(parse_ok("11GiB/s", bw) == 11811160064.0);    // 11 * 2^30
  CHECK(parse_ok("400Gb/s", bw) == 50000000000.0);    // 400e9 bits / 8 = 50e9 bytes
  CHECK(parse_ok("400Gbit/s", bw) == 50000000000.0);  // the same, spelled out
  CHECK(parse_ok("370GB/s", bw) == 370000000000.0);   // 370 * 1e9
  CHECK(parse_ok("3.35TB/s", bw) == rel(3.35e12));    // 3.35 * 1e12
  CHECK(parse_ok("100Mbit/s", bw) == 12500000.0);     // 100e6 / 8
  CHECK(parse_ok("1Tb/s", bw) == 125000000000.0);     // 1e12 / 8
  CHECK(parse_ok("512KiB/s", bw) == 524288.0);        // 512 * 2^10
  CHECK(parse_ok("64B/s", bw) == 64.0);
  // "Gb" (bits) and "GB" (bytes) differ by exactly 8.
  CHECK(parse_ok("25GB/s", bw) == 8.0 * parse_ok("25Gb/s", bw));
  // A size is not a bandwidth.
  CHECK_FALSE(parse_quantity("12GB", bw, nullptr).has_value());
}

TEST_CASE("flop rates", "[units]") {
  const UnitKind f = UnitKind::kFlopsPerSecond;
  CHECK(parse_ok("16.3TFLOP/s", f) == rel(16.3e12));      // 16.3 * 1e12
  CHECK(parse_ok("989TFLOP/s", f) == 989000000000000.0);  // 989 * 1e12
  CHECK(parse_ok("90GFLOP/s", f) == 90000000000.0);       // 90 * 1e9
  CHECK(parse_ok("2PFLOP/s", f) == 2e15);
  CHECK(parse_ok("500MFLOP/s", f) == 500000000.0);
  CHECK(parse_ok("7FLOP/s", f) == 7.0);
  CHECK_FALSE(parse_quantity("16.3TFLOPS", f, nullptr).has_value());
  CHECK_FALSE(parse_quantity("16.3TB/s", f, nullptr).has_value());
}

TEST_CASE("whitespace around the number and between number and unit is ignored", "[units]") {
  CHECK(parse_ok("  8GiB  ", UnitKind::kBytes) == 8589934592.0);
  CHECK(parse_ok("8 GiB", UnitKind::kBytes) == 8589934592.0);
  CHECK(parse_ok("\t16\tGB\n", UnitKind::kBytes) == 16000000000.0);
  CHECK(parse_ok(" 4096 ", UnitKind::kBytes) == 4096.0);
  CHECK(parse_ok(" 1.5 ms ", UnitKind::kSeconds) == rel(1.5e-3));
  CHECK(parse_ok(" 400 Gb/s", UnitKind::kBytesPerSecond) == 50000000000.0);
  CHECK(parse_ok("16.3 TFLOP/s ", UnitKind::kFlopsPerSecond) == rel(16.3e12));
}

TEST_CASE("garbage sizes are rejected with a sentence naming the accepted forms and the input", "[units]") {
  const std::string help = "a size like \"8GiB\", \"16GB\", \"512MiB\" or a number of bytes";
  CHECK(unit_help(UnitKind::kBytes) == help);
  CHECK(parse_error("8 GiBs", UnitKind::kBytes) == "expected " + help + ", got \"8 GiBs\"");
  CHECK(parse_error("GiB", UnitKind::kBytes) == "expected " + help + ", got \"GiB\"");
  CHECK(parse_error("", UnitKind::kBytes) == "expected " + help + ", got \"\"");
  CHECK(parse_error("   ", UnitKind::kBytes) == "expected " + help + ", got \"   \"");
  // 1e400 does not fit in a double.
  CHECK(parse_error("1e400GB", UnitKind::kBytes) == "expected " + help + ", got \"1e400GB\"");
  for (const char* text : {"abc", "8GiB8", "8 G iB", "--8GiB", "+8GiB", "0x10", "1,5GB", "inf", "nan",
                           "infGB", "nanB", "8 GiB/s", "B", "8 8GiB"}) {
    const std::string error = parse_error(text, UnitKind::kBytes);
    CHECK(error == "expected " + help + ", got \"" + text + "\"");
  }
}

TEST_CASE("unit symbols are case-sensitive: only the spellings in the header are accepted", "[units]") {
  // Header: binary Ki, Mi, Gi, Ti and decimal k, M, G, T, with B for bytes, b or bit for bits.
  for (const char* text : {"8gib", "8GIB", "8giB", "16gb", "16Gb", "1KB", "1kiB", "4kib", "800mb", "123b"})
    CHECK_FALSE(parse_quantity(text, UnitKind::kBytes, nullptr).has_value());
  for (const char* text : {"10US", "1.5MS", "2S", "300NS"})
    CHECK_FALSE(parse_quantity(text, UnitKind::kSeconds, nullptr).has_value());
  for (const char* text : {"12gb/s", "11gib/s", "400GBIT/s", "12GB/S"})
    CHECK_FALSE(parse_quantity(text, UnitKind::kBytesPerSecond, nullptr).has_value());
  for (const char* text : {"16.3tflop/s", "16.3TFlop/s", "90GFLOP/S"})
    CHECK_FALSE(parse_quantity(text, UnitKind::kFlopsPerSecond, nullptr).has_value());
  // The error sentence quotes the input as given.
  CHECK(parse_error("8gib", UnitKind::kBytes) ==
        "expected a size like \"8GiB\", \"16GB\", \"512MiB\" or a number of bytes, got \"8gib\"");
}

TEST_CASE("garbage times, bandwidths and rates are rejected", "[units]") {
  for (const char* text :
       {"", "s", "ms", "10 u s", "10usec", "1.5 mss", "10µs", "1e400s", "inf s", "10 GB/s"})
    CHECK(parse_error(text, UnitKind::kSeconds) ==
          std::string("expected a time like \"10us\", \"1.5ms\" or \"2s\", got \"") + text + "\"");
  for (const char* text : {"", "GB/s", "12 GB / s", "12GBps", "12GB/sec", "1e400GB/s"})
    CHECK(parse_error(text, UnitKind::kBytesPerSecond) ==
          std::string("expected a bandwidth like \"12GB/s\", \"11GiB/s\" or \"400Gb/s\" (bits), got \"") +
              text + "\"");
  for (const char* text : {"", "TFLOP/s", "16.3 T FLOP/s", "1e400TFLOP/s"})
    CHECK(parse_error(text, UnitKind::kFlopsPerSecond) ==
          std::string("expected a compute rate like \"16.3TFLOP/s\", got \"") + text + "\"");
}

TEST_CASE("a null error pointer is allowed", "[units]") {
  CHECK_FALSE(parse_quantity("garbage", UnitKind::kBytes, nullptr).has_value());
  CHECK(parse_quantity("8GiB", UnitKind::kBytes, nullptr) == std::optional<double>(8589934592.0));
}

TEST_CASE("a value that overflows once scaled by its unit is rejected like one that overflows as written",
          "[units]") {
  // "1e400GB" is rejected because 1e400 is not a double. "1e300TB" is a double, but 1e300 * 1e12 = 1e312
  // is not: the parser returns +inf, which a JSON range check [1, inf] then accepts as a memory size.
  std::string error;
  const std::optional<double> v = parse_quantity("1e300TB", UnitKind::kBytes, &error);
  CHECK_FALSE(v.has_value());
  if (v) CHECK(std::isfinite(*v));
  CHECK_FALSE(parse_quantity("1e300TB/s", UnitKind::kBytesPerSecond, nullptr).has_value());
  CHECK_FALSE(parse_quantity("1e300PFLOP/s", UnitKind::kFlopsPerSecond, nullptr).has_value());
}

TEST_CASE("format_bytes uses binary units", "[units]") {
  CHECK(format_bytes(8e9) == "7.45 GiB");  // the header's example: 8e9 / 2^30 = 7.4506
  CHECK(format_bytes(8.0 * kGi) == "8.00 GiB");
  CHECK(format_bytes(512.0 * kMi) == "512.0 MiB");
  CHECK(format_bytes(1536.0) == "1.5 KiB");  // 1536 / 1024
  CHECK(format_bytes(1023.0) == "1023 B");   // below 1 KiB: whole bytes
  CHECK(format_bytes(1024.0) == "1.0 KiB");
  CHECK(format_bytes(kMi - kKi) == "1023.0 KiB");
  CHECK(format_bytes(kMi) == "1.0 MiB");
  CHECK(format_bytes(kGi) == "1.00 GiB");
  CHECK(format_bytes(2.0 * kTi) == "2048.00 GiB");  // no TiB step
  CHECK(format_bytes(0.0) == "0 B");
}

TEST_CASE("formatted quantities parse back to the value within the digits shown", "[units]") {
  struct Case {
    double value;
    double half_last_digit;  // half a unit in the last printed place, in base units
  };
  // Bytes: GiB with 2 decimals, MiB and KiB with 1, B with none.
  for (const Case& c : std::vector<Case>{{8e9, 0.005 * kGi},
                                         {85520809984.0, 0.005 * kGi},
                                         {123456789.0, 0.05 * kMi},
                                         {5000.0, 0.05 * kKi},
                                         {999.0, 0.5}}) {
    const std::string text = format_bytes(c.value);
    INFO(text);
    CHECK(std::fabs(parse_ok(text, UnitKind::kBytes) - c.value) <= c.half_last_digit);
  }
  // Seconds: s with 3 decimals, ms and us with 2, ns with none.
  for (const Case& c :
       std::vector<Case>{{2.5, 0.0005}, {0.0123, 0.005e-3}, {4.56e-5, 0.005e-6}, {3e-7, 0.5e-9}}) {
    const std::string text = format_seconds(c.value);
    INFO(text);
    CHECK(std::fabs(parse_ok(text, UnitKind::kSeconds) - c.value) <= c.half_last_digit * (1 + 1e-9));
  }
  // Bandwidth: GB/s with 2 decimals.
  for (const Case& c : std::vector<Case>{{12e9, 0.005e9}, {50e9, 0.005e9}, {11.0 * kGi, 0.005e9}}) {
    const std::string text = format_bandwidth(c.value);
    INFO(text);
    CHECK(std::fabs(parse_ok(text, UnitKind::kBytesPerSecond) - c.value) <= c.half_last_digit);
  }
}

TEST_CASE("format_seconds and format_bandwidth print what the header's examples show", "[units]") {
  // units.hpp documents format_seconds -> "12.30 ms" and format_bandwidth -> "12.00 GB/s".
  CHECK(format_seconds(0.0123) == "12.30 ms");
  CHECK(format_bandwidth(12e9) == "12.00 GB/s");
}
