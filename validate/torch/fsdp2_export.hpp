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
//   mixed precision             MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)
//
// Module paths: operators map to modules by a name mapping, rules of a regular expression over the
// operator name (matched whole) and the module path it gives ("$1" for a group). The default is the
// convention of osdp's gpt family in PyTorch (python/osdp/torch/gpt.py):
//   embedding -> embedding, layer{i}.attention -> layers.{i}.attention, layer{i}.mlp ->
//   layers.{i}.mlp, stage{k}.projection -> projections.{k}, head -> head.
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
  std::string pattern;  // ECMAScript regular expression, matched against the whole operator name
  std::string module;   // the module path, with $1... for the pattern's groups
  std::regex re;
};

struct NameMapping {
  std::string origin;  // the file it came from, or "the gpt family's default mapping"
  std::string file;    // the file, empty for the default
  std::vector<NameRule> rules;
};

NameMapping default_name_mapping();
// {"schema_version": 1, "rules": [{"operator": REGEX, "module": PATH}, ...]}; errors name the file and
// the JSON pointer (an invalid regular expression too).
NameMapping load_name_mapping(const std::string& path);

// The module path of every operator of `operators`, in order; throws InputError naming the operator
// that is unmapped, doubly mapped, or on a module shared with (or nested in) another's.
std::vector<std::string> map_operators(const NameMapping& m, const std::vector<std::string>& operators);

// The export: {schema_version 1, kind "osdp-fsdp2", source {...}, model, micro_batch_size, world_size, nodes,
// per_node, mixed_precision, modules [{operator, path, mesh, reshard_after_forward, checkpoint, split,
// parameters, note?}], notes [...]}. `plan_file` is recorded in the source.
nlohmann::json export_fsdp2(const costmodel::Plan& plan, const std::string& plan_file,
                            const NameMapping& mapping);

// The same as a Python module: a comment header (which plan, model and cluster), PLAN = {...} and
// apply(model, mesh=None), which calls osdp.torch.apply_plan.
std::string fsdp2_python(const nlohmann::json& spec);

}  // namespace osdp::validate
