// A plan in PyTorch FSDP2's words (issue 15): per operator, the module it maps to and the arguments of
// fully_shard, checkpointing and splitting, for `osdp export PLAN --to fsdp2` and for the torch backend.
//
//   osdp choice                 FSDP2
//   ZDP                         fully_shard(m, mesh=world, reshard_after_forward=True)
//   DP                          fully_shard(m, mesh=world, reshard_after_forward=False)
//   REPLICATE                   fully_shard(m, mesh=replicate) on a (world x 1) mesh: whole copies,
//                               gradients all-reduced
//   node group (HSDP)           fully_shard(m, mesh=node) on a (nodes x per_node) mesh
//   two-level collectives       no FSDP2 form: world mesh, flat collectives (the export notes it)
//   split n, k ZDP              every Linear (and Embedding) of m cut into n slices along its input
//                               (python/osdp/torch: SlicedLinear), each slice its own fully_shard,
//                               the first k with reshard_after_forward=True
//   checkpoint                  torch.distributed._composable.checkpoint(m)
//   selective checkpoint        the same with a selective policy (torch.utils.checkpoint's
//                               create_selective_checkpoint_contexts): GEMM and attention outputs
//                               saved, everything else recomputed (torchtitan's "selective op")
//   mixed precision             MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)
//
// Module paths: operators map to modules by a name mapping, rules of a regular expression over the
// operator name (matched whole) and the module paths it gives, one or several ("$1" for a group): an
// operator's parameters are those of all its modules, which fully_shard takes as one group
// (fully_shard([...])). The default mapping follows the module tree the model is built as:
//   osdp's own model files: osdp's gpt family in PyTorch (python/osdp/torch/gpt.py)
//     embedding -> embedding, layer{i}.attention -> layers.{i}.attention, layer{i}.mlp ->
//     layers.{i}.mlp, stage{k}.projection -> projections.{k}, head -> head;
//   a model read from a Hugging Face config: transformers' *ForCausalLM of its model_type
//     llama, mistral, qwen2, qwen3                 gpt2
//     embedding  model.embed_tokens                transformer.wte, transformer.wpe
//                (tied: + model.norm, lm_head)     (tied: + transformer.ln_f, lm_head)
//     attention  model.layers.{i}.input_layernorm, transformer.h.{i}.ln_1, transformer.h.{i}.attn
//                model.layers.{i}.self_attn
//     mlp        model.layers.{i}.post_attention_layernorm, model.layers.{i}.mlp
//                                                  transformer.h.{i}.ln_2, transformer.h.{i}.mlp
//     head       model.norm, lm_head               transformer.ln_f, lm_head
//   A tied model's LM head multiplies by the token table: the final norm and lm_head (whose weight is
//   embed_tokens') belong to the embedding operator, as osdp lowers it, and shard with it in one group.
// An operator no rule matches, one two rules match, two operators on one module, or one operator's
// module inside another's is an error that names them.
#pragma once

#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/plan.hpp"

namespace osdp::validate {

struct NameRule {
  std::string pattern;               // ECMAScript regular expression, matched against the whole operator name
  std::vector<std::string> modules;  // the module paths, with $1... for the pattern's groups
  std::regex re;
};

struct NameMapping {
  std::string origin;  // the file it came from, or which default mapping
  std::string file;    // the file, empty for a default
  std::vector<NameRule> rules;
  // The default of `osdp export` (no --map): export_fsdp2 takes default_name_mapping(plan.model) instead
  // of these rules (which are the gpt family's).
  bool by_model = false;
};

// The transformers model_type of a model read from a Hugging Face config ("gpt2", "llama", "mistral",
// "qwen2", "qwen3"), or "" for a model of osdp's own files (the gpt family, built as osdp.torch.GPT).
// The model's hf_model_type when it has one; else the families llama, mistral, qwen2 and qwen3,
// which exist only as transformers modules, by their family name, and "" for the gpt family.
std::string transformers_model_type(const costmodel::ModelSpec& model);

// The default mapping: resolved per model by export_fsdp2 (by_model; its own rules are the gpt
// family's, for map_operators on osdp's models).
NameMapping default_name_mapping();
// The default mapping of one model: the gpt family's, or transformers' module tree of its model_type
// (the opening comment).
NameMapping default_name_mapping(const costmodel::ModelSpec& model);
// {"schema_version": 1, "rules": [{"operator": REGEX, "module": PATH or [PATH, ...]}, ...]}; errors
// name the file and the JSON pointer (an invalid regular expression too).
NameMapping load_name_mapping(const std::string& path);

// The module paths of every operator of `operators`, in order; throws InputError (UsageError for a
// default mapping) naming the operator that is unmapped, doubly mapped, or on a module shared with (or
// nested in) another's.
std::vector<std::vector<std::string>> map_operators(const NameMapping& m,
                                                    const std::vector<std::string>& operators);

// The export: {schema_version 1, kind "osdp-fsdp2", source {...}, model, transformers, micro_batch_size,
// world_size, nodes, per_node, mixed_precision, modules [{operator, paths, path?, mesh,
// reshard_after_forward, checkpoint, split, parameters, note?}], notes [...]}. `paths` lists the
// operator's modules (`path` too, when it is one, as exports before lists wrote it); `transformers` is
// {"model_type"} for a model read from a Hugging Face config (transformers_model_type), else null.
// `mapping` by_model: default_name_mapping(plan.model). `plan_file` is recorded in the source.
nlohmann::json export_fsdp2(const costmodel::Plan& plan, const std::string& plan_file,
                            const NameMapping& mapping);

// The same as a Python module: a comment header (which plan, model and cluster), PLAN = {...} and
// apply(model, mesh=None), which calls osdp.torch.apply_plan.
std::string fsdp2_python(const nlohmann::json& spec);

}  // namespace osdp::validate
