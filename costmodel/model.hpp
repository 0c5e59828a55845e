// Model descriptions: a GPT-style transformer given by its sizes. A model is one or more stages of
// identical layers (one stage for ordinary GPTs; several of different hidden sizes for the
// "inconsistent & consecutive" family, joined by a projection between stages).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace osdp::costmodel {

enum class Precision { kFp32, kMixed };

// Bytes per element for each kind of state (DESIGN.md section 3).
//   fp32:  gathered weight 4, gradient 4, Adam m+v 8                        -> 16 B/param at rest
//   mixed: gathered weight 2 (bf16), gradient 2, fp32 master + m + v 12      -> 16 B/param at rest
struct PrecisionBytes {
  int weight;      // w: a gathered parameter
  int gradient;    // g: a gradient element
  int optimizer;   // o: optimizer state (and master copy) per parameter
  int activation;  // e: an activation element
};
PrecisionBytes precision_bytes(Precision p);
const char* to_string(Precision p);

struct StageSpec {
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int ffn = 0;  // MLP inner size (4 x hidden unless given)
};

struct ModelSpec {
  std::string name;
  std::string description;
  std::string family = "gpt";
  std::vector<StageSpec> stages;
  int seq = 0;
  int vocab = 0;
  bool tied_embeddings = true;
  Precision precision = Precision::kFp32;
  bool dropout = true;  // dropout masks are saved activations (1 byte per element)

  int total_layers() const;
  int first_hidden() const { return stages.front().hidden; }
  int last_hidden() const { return stages.back().hidden; }
};

// Reads a model description (schema_version 1). `file` names the source in errors.
// The most layers a model may have, in all its stages together (the per-stage limit too): the
// search and the simulator hold a few records per operator, and past this a model file of a few
// kilobytes could ask for gigabytes (22,000 stages of 100,000 layers once grew 600 MB/s).
inline constexpr int kMaxLayers = 100000;

ModelSpec read_model(const nlohmann::json& doc, const std::string& file, const std::string& pointer = "");
nlohmann::json to_json(const ModelSpec& model);

}  // namespace osdp::costmodel
