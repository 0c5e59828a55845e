// osdp export: a plan in another framework's words (FSDP2 today; validate/torch/fsdp2_export.hpp).
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/units.hpp"
#include "validate/torch/fsdp2_export.hpp"

namespace osdp::cli {
namespace {

struct ExportArgs {
  std::string plan, to = "fsdp2", out, map;
  bool json = false;
};

// plan.json -> plan.fsdp2 beside it.
std::string default_out(const std::string& plan) {
  std::filesystem::path p(plan);
  p.replace_extension(".fsdp2");
  return p.string();
}

int run_export(const ExportArgs& a) {
  const costmodel::Plan plan = costmodel::read_plan(costmodel::load_json_file(a.plan), a.plan);
  const validate::NameMapping mapping =
      a.map.empty() ? validate::default_name_mapping() : validate::load_name_mapping(a.map);
  const nlohmann::json spec = validate::export_fsdp2(plan, a.plan, mapping);
  const std::string dir = a.out.empty() ? default_out(a.plan) : a.out;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UsageError(fmt::format("--out {}: cannot create the directory: {}", dir, ec.message()));
  const std::string json_file = (std::filesystem::path(dir) / "fsdp2_plan.json").string();
  const std::string py_file = (std::filesystem::path(dir) / "fsdp2_plan.py").string();
  costmodel::write_file_atomic(json_file, spec.dump(1) + "\n");
  costmodel::write_file_atomic(py_file, validate::fsdp2_python(spec));
  if (a.json) {
    std::cout << nlohmann::json{{"json", json_file}, {"python", py_file}, {"export", spec}}.dump(2) << "\n";
    return kExitOk;
  }
  // One line per kind of choice: how many, osdp's label, FSDP2's words.
  std::map<std::string, std::pair<int, std::string>> kinds;
  for (const auto& m : spec["modules"]) {
    const std::string mesh = m["mesh"];
    std::string words =
        fmt::format("fully_shard(mesh={}{})", mesh,
                    mesh == "replicate"                      ? ""
                    : m["reshard_after_forward"].get<bool>() ? ", reshard_after_forward=True"
                                                             : ", reshard_after_forward=False");
    if (!m["split"].is_null())
      words = fmt::format("{} slices of each Linear, the first {} resharded after forward; ",
                          m["split"]["slices"].get<int>(), m["split"]["resharded"].get<int>()) +
              words;
    if (m["recompute"] == "full") words += " + checkpoint";
    if (m["recompute"] == "selective") words += " + selective checkpoint";
    auto& k = kinds[m["choice"].get<std::string>()];
    ++k.first;
    k.second = words;
  }
  std::cout << fmt::format("osdp export: {} ({} on {}, {} ranks, micro-batch {}) to FSDP2 by {}\n", a.plan,
                           plan.model.name, plan.cluster.name, plan.cluster.world_size(), plan.batch_size,
                           spec["source"]["name_mapping"].get<std::string>());
  for (const auto& [label, k] : kinds)
    std::cout << fmt::format("  {:>4} x {:<22} {}\n", k.first, label, k.second);
  for (const auto& n : spec["notes"]) std::cout << "  note: " << n.get<std::string>() << "\n";
  std::cout << fmt::format("  wrote {} and {}\n", json_file, py_file);
  return kExitOk;
}

}  // namespace

Action add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  app.description(
      "Write a plan in PyTorch FSDP2's words: per operator the module path, fully_shard's mesh and\n"
      "reshard_after_forward (ZDP True, DP False; REPLICATE a world x 1 mesh; node groups an HSDP mesh),\n"
      "checkpointing, and splitting into slices (osdp.torch.SlicedLinear), plus the micro-batch size.\n"
      "Writes DIR/fsdp2_plan.json (for tools and osdp.torch.apply_plan) and DIR/fsdp2_plan.py (the same,\n"
      "with a header naming the plan, model and cluster, and apply(model)).\n"
      "Module paths by default follow the module tree the model is built as: osdp's own model files\n"
      "as osdp's gpt family in PyTorch (python/osdp/torch/gpt.py: embedding, layers.{i}.attention,\n"
      "layers.{i}.mlp, projections.{k}, head); a model read from a Hugging Face config.json as\n"
      "transformers' *ForCausalLM of its model_type (model.embed_tokens, model.layers.{i}.self_attn with\n"
      "its input_layernorm, model.layers.{i}.mlp with its post_attention_layernorm, model.norm and\n"
      "lm_head; GPT-2's transformer.wte/wpe, transformer.h.{i}.*); a tied embedding shards with the\n"
      "final norm and lm_head in one fully_shard([...]). --map maps other module trees.\n"
      "Exit codes: 0 written; 2 bad input or usage (an unmapped or doubly mapped operator is named).");
  app.add_option("plan", a->plan, "Plan file written by `osdp plan --out`")->required();
  app.add_option("--to", a->to, "Target framework")->check(CLI::IsMember({"fsdp2"}))->capture_default_str();
  app.add_option("--out", a->out, "Directory to write (default: the plan's path with .fsdp2 for .json)");
  app.add_option(
      "--map", a->map,
      "Name mapping file: {\"schema_version\": 1, \"rules\": [{\"operator\": REGEX, \"module\": PATH or "
      "[PATH, ...]}]}; REGEX matches a whole operator name, PATH may use $1...; every operator must match "
      "one rule; an operator of several paths is one fully_shard([...]) group");
  app.add_flag("--json", a->json, "Print the export as one JSON object instead of the summary");
  return [a]() { return run_export(*a); };
}

}  // namespace osdp::cli
