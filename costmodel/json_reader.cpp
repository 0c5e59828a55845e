#include "costmodel/json_reader.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "costmodel/error.hpp"

namespace osdp::costmodel {
namespace {

std::string escape_pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string type_name(const nlohmann::json& v) {
  return v.type_name();
}

}  // namespace

namespace {

// Rejects duplicate keys (nlohmann keeps the last one silently): a stack of the keys seen in each
// open object, and the path of keys for the message.
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(const std::string& origin) : origin_(origin) {}
  bool operator()(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
        frames_.push_back({true, {}, ""});
        break;
      case E::array_start:
        frames_.push_back({false, {}, ""});
        break;
      case E::object_end:
      case E::array_end:
        frames_.pop_back();
        break;
      case E::key: {
        auto& f = frames_.back();
        f.last = parsed.get<std::string>();
        if (!f.keys.insert(f.last).second) {
          std::string pointer;
          for (const auto& fr : frames_) pointer += fr.is_object ? "/" + fr.last : "/-";
          throw InputError(origin_, pointer, fmt::format("duplicate key \"{}\"", f.last));
        }
        break;
      }
      case E::value:
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool is_object;
    std::set<std::string> keys;
    std::string last;
  };
  std::string origin_;
  std::vector<Frame> frames_;
};

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& origin) {
  try {
    return nlohmann::json::parse(text, DuplicateKeyCheck(origin));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number outside the range of a double (e.g. 1e400).
    std::string msg = e.what();
    const auto pos = msg.find("number overflow");
    throw InputError(origin, "", "invalid JSON: " + (pos == std::string::npos ? msg : msg.substr(pos)));
  } catch (const nlohmann::json::parse_error& e) {
    // Turn the byte offset into a line and column.
    std::size_t line = 1, column = 1;
    const std::size_t end = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    for (std::size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string msg = e.what();
    const auto pos = msg.find("syntax error");
    if (pos != std::string::npos) msg = msg.substr(pos);
    throw InputError(origin, "", fmt::format("line {} column {}: invalid JSON: {}", line, column, msg));
  }
}

nlohmann::json load_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the file for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), path);
}

JsonReader::JsonReader(const nlohmann::json& node, std::string file, std::string pointer)
    : node_(node), file_(std::move(file)), pointer_(std::move(pointer)) {
  if (!node_.is_object())
    throw InputError(file_, pointer_.empty() ? "/" : pointer_,
                     fmt::format("expected a JSON object, got {}", type_name(node_)));
}

std::string JsonReader::pointer_of(std::string_view key) const {
  return pointer_ + "/" + escape_pointer_token(key);
}

void JsonReader::fail(std::string_view key, const std::string& message) const {
  throw InputError(file_, pointer_of(key), message);
}

void JsonReader::fail_here(const std::string& message) const {
  throw InputError(file_, pointer_.empty() ? "/" : pointer_, message);
}

const nlohmann::json* JsonReader::find(std::string_view key) {
  known_.emplace(key);
  auto it = node_.find(std::string(key));
  return it == node_.end() ? nullptr : &*it;
}

const nlohmann::json& JsonReader::at(std::string_view key, const char* expected) {
  const nlohmann::json* v = find(key);
  if (!v) fail(key, fmt::format("required key is missing (expected {})", expected));
  return *v;
}

bool JsonReader::has(std::string_view key) const {
  return node_.contains(std::string(key));
}

const nlohmann::json* JsonReader::raw(std::string_view key) {
  return find(key);
}

void JsonReader::expect_schema_version(int expected) {
  const auto v = integer("schema_version", 0, std::numeric_limits<int>::max());
  if (v != expected)
    fail("schema_version", fmt::format("unsupported schema_version {} (this osdp reads {})", v, expected));
}

std::string JsonReader::string(std::string_view key) {
  const auto& v = at(key, "a string");
  if (!v.is_string()) fail(key, fmt::format("expected a string, got {}", type_name(v)));
  return v.get<std::string>();
}

std::string JsonReader::string_or(std::string_view key, std::string fallback) {
  return has(key) ? string(key) : (known_.emplace(key), fallback);
}

std::string JsonReader::choice(std::string_view key, const std::vector<std::string>& allowed) {
  std::string v = string(key);
  for (const auto& a : allowed)
    if (a == v) return v;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
  fail(key, fmt::format("expected one of {}, got \"{}\"", list, v));
}

std::string JsonReader::choice_or(std::string_view key, const std::vector<std::string>& allowed,
                                  std::string fallback) {
  return has(key) ? choice(key, allowed) : (known_.emplace(key), fallback);
}

bool JsonReader::boolean(std::string_view key) {
  const auto& v = at(key, "true or false");
  if (!v.is_boolean()) fail(key, fmt::format("expected true or false, got {}", type_name(v)));
  return v.get<bool>();
}

bool JsonReader::boolean_or(std::string_view key, bool fallback) {
  return has(key) ? boolean(key) : (known_.emplace(key), fallback);
}

double JsonReader::number(std::string_view key, double min, double max) {
  const auto& v = at(key, "a number");
  if (!v.is_number()) fail(key, fmt::format("expected a number, got {}", type_name(v)));
  const double d = v.get<double>();
  if (!(d >= min && d <= max)) fail(key, fmt::format("expected a number in [{}, {}], got {}", min, max, d));
  return d;
}

double JsonReader::number_or(std::string_view key, double min, double max, double fallback) {
  return has(key) ? number(key, min, max) : (known_.emplace(key), fallback);
}

std::int64_t JsonReader::integer(std::string_view key, std::int64_t min, std::int64_t max) {
  const auto& v = at(key, "an integer");
  if (!v.is_number_integer()) fail(key, fmt::format("expected an integer, got {}", v.dump()));
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max))
    fail(key, fmt::format("expected an integer in [{}, {}], got {}", min, max, v.dump()));
  const auto i = v.get<std::int64_t>();
  if (i < min || i > max) fail(key, fmt::format("expected an integer in [{}, {}], got {}", min, max, i));
  return i;
}

std::int64_t JsonReader::integer_or(std::string_view key, std::int64_t min, std::int64_t max,
                                    std::int64_t fallback) {
  return has(key) ? integer(key, min, max) : (known_.emplace(key), fallback);
}

double JsonReader::quantity(std::string_view key, UnitKind kind, double min, double max) {
  const auto& v = at(key, unit_help(kind).c_str());
  double d = 0.0;
  if (v.is_number()) {
    d = v.get<double>();
  } else if (v.is_string()) {
    std::string err;
    auto parsed = parse_quantity(v.get<std::string>(), kind, &err);
    if (!parsed) fail(key, err);
    d = *parsed;
  } else {
    fail(key, fmt::format("expected {}, got {}", unit_help(kind), type_name(v)));
  }
  if (!(d >= min && d <= max))
    fail(key, fmt::format("value {} is out of range [{}, {}] (base units)", d, min, max));
  return d;
}

double JsonReader::quantity_or(std::string_view key, UnitKind kind, double min, double max, double fallback) {
  return has(key) ? quantity(key, kind, min, max) : (known_.emplace(key), fallback);
}

JsonReader JsonReader::object(std::string_view key) {
  const auto& v = at(key, "an object");
  if (!v.is_object()) fail(key, fmt::format("expected an object, got {}", type_name(v)));
  return JsonReader(v, file_, pointer_of(key));
}

std::optional<JsonReader> JsonReader::object_if(std::string_view key) {
  if (!has(key)) {
    known_.emplace(key);
    return std::nullopt;
  }
  return object(key);
}

std::vector<JsonReader> JsonReader::objects(std::string_view key) {
  const auto& v = at(key, "an array of objects");
  if (!v.is_array() || v.empty())
    fail(key, fmt::format("expected a non-empty array of objects, got {}", type_name(v)));
  std::vector<JsonReader> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    out.emplace_back(v[i], file_, pointer_of(key) + "/" + std::to_string(i));
  return out;
}

void JsonReader::finish() const {
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (known_.count(it.key())) continue;
    std::string list;
    for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
    throw InputError(file_, pointer_of(it.key()),
                     fmt::format("unknown key \"{}\" (known keys here: {})", it.key(), list));
  }
}

}  // namespace osdp::costmodel
