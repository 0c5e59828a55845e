#include "costmodel/json_reader.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
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

// Levenshtein distance, for near misses among keys (short strings only).
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// A near miss: at most 1 edit for keys up to 4 characters, 2 beyond.
bool near_miss(std::string_view typed, std::string_view wanted) {
  if (typed == wanted || typed.size() > 64 || wanted.size() > 64) return false;
  return edit_distance(typed, wanted) <= (wanted.size() <= 4 ? 1u : 2u);
}

// Text safe to quote in a message: control and non-ASCII bytes as \xNN, cut at `limit` characters.
std::string printable(std::string_view text, std::size_t limit = 40) {
  std::string out;
  for (const char ch : text) {
    if (out.size() >= limit) return out + "...";
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
      out += fmt::format("\\x{:02x}", c);
    else
      out += ch;
  }
  return out;
}

}  // namespace

std::string brief_json(const nlohmann::json& v) {
  if (v.is_array()) return fmt::format("an array of {} element{}", v.size(), v.size() == 1 ? "" : "s");
  if (v.is_object()) return fmt::format("an object with {} key{}", v.size(), v.size() == 1 ? "" : "s");
  if (v.is_string()) return "\"" + printable(v.get_ref<const std::string&>()) + "\"";
  return printable(v.dump());
}

std::string name_problem(std::string_view text) {
  if (text.empty()) return "a name must not be empty";
  if (text.size() > kMaxNameBytes)
    return fmt::format("a name is at most {} bytes, this one has {}", kMaxNameBytes, text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f)
      return fmt::format("a name must not contain control characters (byte 0x{:02x} at {})", c, i);
    std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > text.size()) return fmt::format("a name must be valid UTF-8 (byte {})", i);
    std::uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc >> 6) != 2) return fmt::format("a name must be valid UTF-8 (byte {})", i + k);
      cp = (cp << 6) | (cc & 0x3f);
    }
    const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return fmt::format("a name must be valid UTF-8 (byte {})", i);
    if (cp >= 0x80 && cp < 0xa0)
      return fmt::format("a name must not contain control characters (U+{:04X} at byte {})", cp, i);
    if (cp == 0x200e || cp == 0x200f || cp == 0x061c || (cp >= 0x202a && cp <= 0x202e) ||
        (cp >= 0x2066 && cp <= 0x2069))
      return fmt::format("a name must not contain bidirectional controls (U+{:04X} at byte {})", cp, i);
    i += len;
  }
  return "";
}

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
      case E::array_start:
        if (frames_.size() >= static_cast<std::size_t>(kMaxJsonDepth))
          throw InputError(origin_, pointer(),
                           fmt::format("nested deeper than {} levels (osdp's limit; its files nest a "
                                       "few levels)",
                                       kMaxJsonDepth));
        frames_.push_back({event == E::object_start, {}, ""});
        break;
      case E::object_end:
      case E::array_end:
        frames_.pop_back();
        break;
      case E::key: {
        auto& f = frames_.back();
        f.last = parsed.get<std::string>();
        if (!f.keys.insert(f.last).second)
          throw InputError(origin_, pointer(), fmt::format("duplicate key \"{}\"", printable(f.last)));
        break;
      }
      case E::value:
        break;
    }
    return true;
  }

  std::string pointer() const {
    std::string p;
    for (const auto& fr : frames_) p += fr.is_object ? "/" + printable(fr.last) : "/-";
    return p;
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
  if (text.size() > kMaxJsonBytes)
    throw InputError(origin, "",
                     fmt::format("{} is larger than osdp reads ({}; its files are far smaller)",
                                 format_bytes(static_cast<double>(text.size())),
                                 format_bytes(static_cast<double>(kMaxJsonBytes))));
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
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status)) throw InputError(path, "", "is a directory, not a JSON file");
  if (std::filesystem::exists(status) && std::filesystem::is_regular_file(status)) {
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec && size > kMaxJsonBytes)
      throw InputError(path, "",
                       fmt::format("{} is larger than osdp reads ({}; its files are far smaller)",
                                   format_bytes(static_cast<double>(size)),
                                   format_bytes(static_cast<double>(kMaxJsonBytes))));
  }
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
  if (!v) {
    std::string hint;
    for (auto it = node_.begin(); it != node_.end() && hint.empty(); ++it)
      if (near_miss(it.key(), key))
        hint = fmt::format("; the file has \"{}\" here: did you mean \"{}\"?", printable(it.key()), key);
    fail(key, fmt::format("required key is missing (expected {}){}", expected, hint));
  }
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
  if (!v.is_number_integer()) fail(key, fmt::format("expected an integer, got {}", brief_json(v)));
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max))
    fail(key, fmt::format("expected an integer in [{}, {}], got {}", min, max, brief_json(v)));
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
    std::string list, hint;
    for (const auto& k : known_) {
      list += (list.empty() ? "" : ", ") + k;
      if (hint.empty() && near_miss(it.key(), k)) hint = fmt::format("did you mean \"{}\"? ", k);
    }
    throw InputError(
        file_, pointer_of(printable(it.key())),
        fmt::format("unknown key \"{}\" ({}known keys here: {})", printable(it.key()), hint, list));
  }
}

void JsonReader::expect_kind(FileKind kind) const {
  struct Signature {
    FileKind kind;
    const char* name;
    std::vector<const char*> keys;  // keys only this kind of file has at its top level
  };
  static const std::vector<Signature> kSignatures = {
      {FileKind::kModel, "model", {"seq", "vocab", "hidden", "layers", "heads", "ffn", "stages"}},
      {FileKind::kCluster, "cluster", {"devices_per_node", "nodes", "links", "device"}},
      {FileKind::kCalibration, "calibration", {"collectives", "gemm_times", "compute"}},
      {FileKind::kPlan,
       "plan",
       {"operators", "predicted", "memory_limit_bytes", "cost_model", "tool_version"}},
      {FileKind::kExperiment, "experiment", {"strategies", "axes", "evaluators", "base", "baseline"}},
  };
  auto hits = [&](const Signature& sig, std::string* which) {
    int n = 0;
    for (const char* k : sig.keys)
      if (node_.contains(k)) {
        if (which && n < 2) *which += (which->empty() ? "\"" : " and \"") + std::string(k) + "\"";
        ++n;
      }
    return n;
  };
  const Signature* wanted = nullptr;
  for (const auto& sig : kSignatures)
    if (sig.kind == kind) wanted = &sig;
  if (hits(*wanted, nullptr) > 0) return;
  const Signature* best = nullptr;
  int best_hits = 0;
  for (const auto& sig : kSignatures) {
    const int n = sig.kind == kind ? 0 : hits(sig, nullptr);
    if (n > best_hits) best = &sig, best_hits = n;
  }
  if (!best) return;
  std::string which;
  hits(*best, &which);
  fail_here(fmt::format("this is {} {} file (it has {}), not {} {} file",
                        best->kind == FileKind::kExperiment ? "an" : "a", best->name, which,
                        kind == FileKind::kExperiment ? "an" : "a", wanted->name));
}

std::string JsonReader::name(std::string_view key) {
  std::string v = string(key);
  if (const std::string problem = name_problem(v); !problem.empty()) fail(key, problem);
  return v;
}

std::string JsonReader::name_or(std::string_view key, std::string fallback) {
  return has(key) ? name(key) : (known_.emplace(key), fallback);
}

double JsonReader::quantity(std::string_view key, UnitKind kind, const Bound& b) {
  const double d =
      quantity(key, kind, -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity());
  const nlohmann::json& v = node_.at(std::string(key));
  const std::string problem = bound_problem(d, kind, b, v.is_string() ? v.get<std::string>() : v.dump());
  if (!problem.empty()) fail(key, problem);
  return d;
}

double JsonReader::quantity_or(std::string_view key, UnitKind kind, const Bound& b, double fallback) {
  return has(key) ? quantity(key, kind, b) : (known_.emplace(key), fallback);
}

double JsonReader::number(std::string_view key, const Bound& b) {
  const double d = number(key, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
  if (!(d >= b.min && d <= b.max))
    fail(key, fmt::format("{} must be between {:g} and {:g}, got {:g}", b.what, b.min, b.max, d));
  return d;
}

double JsonReader::number_or(std::string_view key, const Bound& b, double fallback) {
  return has(key) ? number(key, b) : (known_.emplace(key), fallback);
}

}  // namespace osdp::costmodel
