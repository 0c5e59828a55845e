// Hugging Face `config.json` files as model descriptions: the model_types gpt2, llama, mistral, qwen2
// and qwen3 (docs/models.md lists the keys each reads). A config has no training sequence length:
// it is kHfDefaultSeq (at most max_position_embeddings) until --seq or an experiment sets it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/model.hpp"

namespace osdp::costmodel {

inline constexpr int kHfDefaultSeq = 8192;

const std::vector<std::string>& hf_model_types();
// Whether a JSON document looks like a Hugging Face config (a "model_type" key, no "schema_version").
bool is_hf_config(const nlohmann::json& doc);
// The model of a config; `file` names it in errors and gives the model its name (the file's stem, or
// its directory's name for a file called config.json). Throws InputError for an unsupported
// model_type (naming the supported ones) or a missing or malformed key.
ModelSpec read_hf_config(const nlohmann::json& doc, const std::string& file);

// Sets the sequence length of a model (--seq, an experiment's "seq"): checks it against a learned
// position table. `what` names the source in errors.
void set_sequence_length(ModelSpec& model, int seq, const std::string& what);

}  // namespace osdp::costmodel
