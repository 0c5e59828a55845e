// Strict reading of versioned JSON descriptions.
// Every getter records the key as known; finish() rejects any key that no getter asked for, so a
// misspelled key is an error, never silently ignored. Every error names the file, the JSON pointer
// (RFC 6901, e.g. /links/inter/bandwidth) and what was expected.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/units.hpp"

namespace osdp::costmodel {

// Reads and parses a JSON file; syntax errors name the file, line and column.
nlohmann::json load_json_file(const std::string& path);
// Parses JSON text; `origin` names it in errors.
nlohmann::json parse_json_text(const std::string& text, const std::string& origin);

class JsonReader {
 public:
  JsonReader(const nlohmann::json& node, std::string file, std::string pointer);

  // Checks `schema_version` (required, an integer equal to `expected`).
  void expect_schema_version(int expected);

  bool has(std::string_view key) const;
  std::string string(std::string_view key);
  std::string string_or(std::string_view key, std::string fallback);
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
