// Strict reading of versioned JSON descriptions.
// Every getter records the key as known; finish() rejects any key that no getter asked for, so a
// misspelled key is an error, never silently ignored, and both errors name a near miss ("hiden":
// did you mean "hidden"?). Every error names the file, the JSON pointer
// (RFC 6901, e.g. /links/inter/bandwidth) and what was expected.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/bounds.hpp"
#include "costmodel/units.hpp"

namespace osdp::costmodel {

// Limits on every JSON document osdp reads, in one place: no file of osdp's nests deeper than a
// dozen levels or comes near 64 MiB, and past these a hostile file could exhaust the stack or the
// memory of whatever reads or prints it.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr std::size_t kMaxJsonBytes = std::size_t{64} << 20;
// Longest name (of a model, cluster, device, strategy label...) in bytes.
inline constexpr std::size_t kMaxNameBytes = 128;

// Reads and parses a JSON file; syntax errors name the file, line and column. A directory, a file
// over kMaxJsonBytes or a document nested deeper than kMaxJsonDepth is an InputError.
nlohmann::json load_json_file(const std::string& path);
// Parses JSON text; `origin` names it in errors. The same limits.
nlohmann::json parse_json_text(const std::string& text, const std::string& origin);

// A value as an error message shows it: scalars as JSON, cut at 40 characters; arrays and objects
// by their size ("an array of 3 elements"), never printed whole.
std::string brief_json(const nlohmann::json& v);

// Why `text` is not a valid name (see JsonReader::name), or "" when it is.
std::string name_problem(std::string_view text);

// The kinds of file osdp reads. expect_kind() names the kind a document looks like when it is not
// the one asked for ("this is a cluster file, not a model file").
enum class FileKind { kModel, kCluster, kCalibration, kPlan, kExperiment };

class JsonReader {
 public:
  JsonReader(const nlohmann::json& node, std::string file, std::string pointer);

  // Checks `schema_version` (required, an integer equal to `expected`).
  void expect_schema_version(int expected);
  // Fails when the object has none of the keys of `kind` and the keys of another kind of file.
  void expect_kind(FileKind kind) const;

  bool has(std::string_view key) const;
  std::string string(std::string_view key);
  std::string string_or(std::string_view key, std::string fallback);
  // A name: 1 to kMaxNameBytes bytes of valid UTF-8 without control characters (NUL, newline, tab,
  // DEL, C1) or bidirectional overrides and isolates (U+200E, U+200F, U+202A-U+202E,
  // U+2066-U+2069), which would corrupt CSV rows and terminals or disguise one name as another.
  std::string name(std::string_view key);
  std::string name_or(std::string_view key, std::string fallback);
  std::string choice(std::string_view key, const std::vector<std::string>& allowed);
  std::string choice_or(std::string_view key, const std::vector<std::string>& allowed, std::string fallback);
  bool boolean(std::string_view key);
  bool boolean_or(std::string_view key, bool fallback);
  double number(std::string_view key, double min, double max);
  double number_or(std::string_view key, double min, double max, double fallback);
  std::int64_t integer(std::string_view key, std::int64_t min, std::int64_t max);
  std::int64_t integer_or(std::string_view key, std::int64_t min, std::int64_t max, std::int64_t fallback);
  // A quantity: a unit string of `kind` or a plain number in base units; must be within [min, max].
  double quantity(std::string_view key, UnitKind kind, double min, double max);
  double quantity_or(std::string_view key, UnitKind kind, double min, double max, double fallback);
  // A quantity within a physical bound (bounds.hpp); the message says the range in units.
  double quantity(std::string_view key, UnitKind kind, const Bound& b);
  double quantity_or(std::string_view key, UnitKind kind, const Bound& b, double fallback);
  double number(std::string_view key, const Bound& b);
  double number_or(std::string_view key, const Bound& b, double fallback);

  JsonReader object(std::string_view key);
  std::optional<JsonReader> object_if(std::string_view key);
  std::vector<JsonReader> objects(std::string_view key);  // an array of objects (non-empty)
  // Marks a key as known without reading it (free-form metadata such as "provenance").
  const nlohmann::json* raw(std::string_view key);

  // Rejects keys that no getter asked for.
  void finish() const;

  [[noreturn]] void fail(std::string_view key, const std::string& message) const;
  [[noreturn]] void fail_here(const std::string& message) const;
  std::string pointer_of(std::string_view key) const;
  const std::string& file() const { return file_; }
  const std::string& pointer() const { return pointer_; }

 private:
  const nlohmann::json& at(std::string_view key, const char* expected);
  const nlohmann::json* find(std::string_view key);

  const nlohmann::json& node_;
  std::string file_;
  std::string pointer_;
  std::set<std::string, std::less<>> known_;
};

}  // namespace osdp::costmodel
