#include "costmodel/model.hpp"

#include <fmt/format.h>

#include "costmodel/json_reader.hpp"

namespace osdp::costmodel {

PrecisionBytes precision_bytes(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return {4, 4, 8, 4};
    case Precision::kMixed:
      return {2, 2, 12, 2};
  }
  return {4, 4, 8, 4};
}

const char* to_string(Precision p) {
  return p == Precision::kFp32 ? "fp32" : "mixed";
}

int ModelSpec::total_layers() const {
  int n = 0;
  for (const auto& s : stages) n += s.layers;
  return n;
}

namespace {

constexpr std::int64_t kMaxDim = 1 << 20;

StageSpec read_stage(JsonReader& r) {
  StageSpec s;
  s.layers = static_cast<int>(r.integer("layers", 1, kMaxLayers));
  s.hidden = static_cast<int>(r.integer("hidden", 1, kMaxDim));
  s.heads = static_cast<int>(r.integer("heads", 1, kMaxDim));
  s.ffn = static_cast<int>(r.integer_or("ffn", 1, 4 * kMaxDim, 4LL * s.hidden));
  if (s.hidden % s.heads != 0)
    r.fail("heads", fmt::format("hidden size {} is not divisible by {} heads", s.hidden, s.heads));
  return s;
}

}  // namespace

ModelSpec read_model(const nlohmann::json& doc, const std::string& file, const std::string& pointer) {
  JsonReader r(doc, file, pointer);
  r.expect_kind(FileKind::kModel);
  r.expect_schema_version(1);
  ModelSpec m;
  m.name = r.name("name");
  m.description = r.string_or("description", "");
  m.family = r.choice_or("family", {"gpt"}, "gpt");
  m.seq = static_cast<int>(r.integer("seq", 1, kMaxDim));
  m.vocab = static_cast<int>(r.integer("vocab", 1, 64 * kMaxDim));
  m.tied_embeddings = r.boolean_or("tied_embeddings", true);
  m.precision =
      r.choice_or("precision", {"fp32", "mixed"}, "fp32") == "fp32" ? Precision::kFp32 : Precision::kMixed;
  m.dropout = r.boolean_or("dropout", true);
  const bool uniform = r.has("layers") || r.has("hidden") || r.has("heads") || r.has("ffn");
  if (r.has("stages")) {
    if (uniform)
      r.fail("stages", "give either \"stages\" or \"layers\"/\"hidden\"/\"heads\"/\"ffn\", not both");
    std::int64_t total = 0;
    for (auto& s : r.objects("stages")) {
      m.stages.push_back(read_stage(s));
      s.finish();
      total += m.stages.back().layers;
      if (total > kMaxLayers)
        r.fail("stages", fmt::format("more than {} layers in all (reached at stage {}), more than osdp plans",
                                     kMaxLayers, m.stages.size() - 1));
    }
  } else {
    if (!uniform)
      r.fail("layers", "required key is missing (expected \"layers\", \"hidden\", \"heads\" or \"stages\")");
    m.stages.push_back(read_stage(r));
  }
  if (m.tied_embeddings && m.first_hidden() != m.last_hidden())
    r.fail("tied_embeddings",
           fmt::format("the token table ({} wide) cannot be tied to an LM head on hidden size {}; "
                       "set \"tied_embeddings\": false",
                       m.first_hidden(), m.last_hidden()));
  r.finish();
  return m;
}

nlohmann::json to_json(const ModelSpec& m) {
  nlohmann::json j;
  j["schema_version"] = 1;
  j["name"] = m.name;
  if (!m.description.empty()) j["description"] = m.description;
  j["family"] = m.family;
  j["seq"] = m.seq;
  j["vocab"] = m.vocab;
  j["tied_embeddings"] = m.tied_embeddings;
  j["precision"] = to_string(m.precision);
  j["dropout"] = m.dropout;
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : m.stages)
    stages.push_back({{"layers", s.layers}, {"hidden", s.hidden}, {"heads", s.heads}, {"ffn", s.ffn}});
  j["stages"] = stages;
  return j;
}

}  // namespace osdp::costmodel
