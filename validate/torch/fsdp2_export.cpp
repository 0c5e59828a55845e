#include "validate/torch/fsdp2_export.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/workload.hpp"

namespace osdp::validate {
namespace {

NameRule make_rule(std::string pattern, std::vector<std::string> modules) {
  NameRule r{std::move(pattern), std::move(modules), {}};
  r.re = std::regex(r.pattern, std::regex::ECMAScript);
  return r;
}

// Python literal of a JSON value (JSON's strings and numbers are Python's; true/false/null are not).
void python_literal(const nlohmann::json& v, int indent, std::string& out) {
  const std::string pad(static_cast<std::size_t>(indent) * 4, ' ');
  const std::string inner(static_cast<std::size_t>(indent + 1) * 4, ' ');
  if (v.is_object()) {
    if (v.empty()) {
      out += "{}";
      return;
    }
    out += "{\n";
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += inner + nlohmann::json(it.key()).dump() + ": ";
      python_literal(it.value(), indent + 1, out);
      out += ",\n";
    }
    out += pad + "}";
  } else if (v.is_array()) {
    if (v.empty()) {
      out += "[]";
      return;
    }
    out += "[\n";
    for (const auto& e : v) {
      out += inner;
      python_literal(e, indent + 1, out);
      out += ",\n";
    }
    out += pad + "]";
  } else if (v.is_boolean()) {
    out += v.get<bool>() ? "True" : "False";
  } else if (v.is_null()) {
    out += "None";
  } else {
    out += v.dump();
  }
}

// An error of the mapping: in its file, or (the default mapping) a usage error that says how to map.
[[noreturn]] void mapping_error(const NameMapping& m, const std::string& message) {
  if (m.file.empty())
    throw UsageError(message +
                     "; a model whose modules are neither osdp's gpt family nor the transformers model of a "
                     "Hugging Face config needs a name mapping (osdp export --map FILE)");
  throw InputError(m.file, "/rules", message);
}

bool inside(const std::string& inner, const std::string& outer) {
  return inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
         inner[outer.size()] == '.';
}

NameMapping gpt_name_mapping() {
  NameMapping m;
  m.origin = "the gpt family's default mapping";
  m.rules.push_back(make_rule("embedding", {"embedding"}));
  m.rules.push_back(make_rule(R"(layer(\d+)\.attention)", {"layers.$1.attention"}));
  m.rules.push_back(make_rule(R"(layer(\d+)\.mlp)", {"layers.$1.mlp"}));
  m.rules.push_back(make_rule(R"(stage(\d+)\.projection)", {"projections.$1"}));
  m.rules.push_back(make_rule("head", {"head"}));
  return m;
}

}  // namespace

std::string transformers_model_type(const costmodel::ModelSpec& model) {
  if (!model.hf_model_type.empty()) return model.hf_model_type;
  if (model.family == "gpt") return "";  // osdp.torch.GPT
  if (model.mla.enabled()) return "deepseek_v3";
  if (model.moe.enabled() && (model.family == "mistral" || model.family == "qwen3"))
    return model.family == "mistral" ? "mixtral" : "qwen3_moe";  // the family's block with experts
  return model.family;  // llama, mistral, qwen2, qwen3: transformers' names
}

NameMapping default_name_mapping() {
  NameMapping m = gpt_name_mapping();
  m.origin = "the default mapping of the model's module tree";
  m.by_model = true;
  return m;
}

NameMapping default_name_mapping(const costmodel::ModelSpec& model) {
  const std::string type = transformers_model_type(model);
  if (type.empty()) return gpt_name_mapping();
  NameMapping m;
  m.origin = fmt::format("transformers' module tree of model_type {}", type);
  const bool tied = model.tied_embeddings;
  if (type == "gpt2") {
    std::vector<std::string> embedding{"transformer.wte", "transformer.wpe"};
    if (tied) embedding.insert(embedding.end(), {"transformer.ln_f", "lm_head"});
    m.rules.push_back(make_rule("embedding", embedding));
    m.rules.push_back(
        make_rule(R"(layer(\d+)\.attention)", {"transformer.h.$1.ln_1", "transformer.h.$1.attn"}));
    m.rules.push_back(make_rule(R"(layer(\d+)\.mlp)", {"transformer.h.$1.ln_2", "transformer.h.$1.mlp"}));
    m.rules.push_back(make_rule("head", {"transformer.ln_f", "lm_head"}));
  } else {
    std::vector<std::string> embedding{"model.embed_tokens"};
    if (tied) embedding.insert(embedding.end(), {"model.norm", "lm_head"});
    m.rules.push_back(make_rule("embedding", embedding));
    m.rules.push_back(make_rule(R"(layer(\d+)\.attention)",
                                {"model.layers.$1.input_layernorm", "model.layers.$1.self_attn"}));
    m.rules.push_back(
        make_rule(R"(layer(\d+)\.mlp)", {"model.layers.$1.post_attention_layernorm", "model.layers.$1.mlp"}));
    m.rules.push_back(make_rule("head", {"model.norm", "lm_head"}));
  }
  return m;
}

NameMapping load_name_mapping(const std::string& path) {
  const nlohmann::json doc = costmodel::load_json_file(path);
  if (!doc.is_object())
    throw InputError(path, "",
                     fmt::format("expected a name mapping object {{\"schema_version\": 1, \"rules\": "
                                 "[...]}}, got {}",
                                 costmodel::brief_json(doc)));
  costmodel::JsonReader r(doc, path, "");
  r.expect_schema_version(1);
  NameMapping m;
  m.origin = path;
  m.file = path;
  for (auto& rule : r.objects("rules")) {
    const std::string pattern = rule.string("operator");
    std::vector<std::string> modules;
    const nlohmann::json* v = rule.raw("module");
    if (v == nullptr) rule.fail("module", "required key is missing (a module path, or a list of them)");
    if (v->is_string()) {
      modules.push_back(v->get<std::string>());
    } else if (v->is_array() && !v->empty() &&
               std::all_of(v->begin(), v->end(), [](const nlohmann::json& e) { return e.is_string(); })) {
      for (const auto& e : *v) modules.push_back(e.get<std::string>());
    } else {
      rule.fail("module", fmt::format("expected a module path or a non-empty list of them, got {}",
                                      costmodel::brief_json(*v)));
    }
    for (const auto& module : modules)
      if (module.empty()) rule.fail("module", "expected a module path (\"layers.$1.attention\"), got \"\"");
    try {
      m.rules.push_back(make_rule(pattern, modules));
    } catch (const std::regex_error& e) {
      rule.fail("operator", fmt::format("\"{}\" is not a regular expression: {}", pattern, e.what()));
    }
    rule.finish();
  }
  r.finish();
  return m;
}

std::vector<std::vector<std::string>> map_operators(const NameMapping& m,
                                                    const std::vector<std::string>& operators) {
  std::vector<std::vector<std::string>> paths;
  std::map<std::string, std::string> owner;  // module path -> operator
  for (const std::string& op : operators) {
    std::vector<std::size_t> hits;
    for (std::size_t i = 0; i < m.rules.size(); ++i)
      if (std::regex_match(op, m.rules[i].re)) hits.push_back(i);
    if (hits.empty())
      mapping_error(m, fmt::format("operator {} is not mapped: no rule of {} matches it", op, m.origin));
    if (hits.size() > 1)
      mapping_error(
          m, fmt::format("operator {} is mapped twice: rules {} (\"{}\") and {} (\"{}\") of {} both "
                         "match it",
                         op, hits[0], m.rules[hits[0]].pattern, hits[1], m.rules[hits[1]].pattern, m.origin));
    const NameRule& rule = m.rules[hits[0]];
    std::vector<std::string> mine;
    for (const std::string& module : rule.modules) {
      const std::string path =
          std::regex_replace(op, rule.re, module, std::regex_constants::format_first_only);
      for (const auto& [other, other_op] : owner) {
        if (other == path)
          mapping_error(m, other_op == op
                               ? fmt::format("operator {} names module {} twice ({})", op, path, m.origin)
                               : fmt::format("operators {} and {} both map to module {} ({}): each operator "
                                             "needs modules of its own",
                                             other_op, op, path, m.origin));
        if (inside(path, other) || inside(other, path))
          mapping_error(m,
                        fmt::format("operator {} maps to module {}, and operator {} to module {}, one inside "
                                    "the other ({}): operators map to disjoint modules",
                                    op, path, other_op, other, m.origin));
      }
      owner[path] = op;
      mine.push_back(path);
    }
    paths.push_back(std::move(mine));
  }
  return paths;
}

nlohmann::json export_fsdp2(const costmodel::Plan& plan, const std::string& plan_file,
                            const NameMapping& given) {
  const NameMapping mapping = given.by_model ? default_name_mapping(plan.model) : given;
  if (!plan.data_parallel())
    throw UsageError(
        fmt::format("{}: the FSDP2 export takes data-parallel plans (one stage, one micro-batch, TP "
                    "1); this one is {} (plan one with osdp plan --data-parallel)",
                    plan_file, plan.layout_summary()));
  const costmodel::Workload w = costmodel::lower(plan.model);
  std::vector<std::string> names;
  for (const auto& op : w.operators) names.push_back(op.name);
  const std::vector<std::vector<std::string>> paths = map_operators(mapping, names);
  const int world = plan.cluster.world_size();
  nlohmann::json modules = nlohmann::json::array();
  bool two_level = false, split = false;
  for (std::size_t i = 0; i < plan.choices.size(); ++i) {
    const costmodel::Choice& c = plan.choices[i];
    nlohmann::json m;
    m["operator"] = w.operators[i].name;
    m["paths"] = paths[i];
    if (paths[i].size() == 1) m["path"] = paths[i].front();
    m["choice"] = c.label();
    m["mesh"] = c.replicate ? "replicate" : c.node_group ? "node" : "world";
    // A split operator's own parameters (norms, biases) are resharded when any of its slices is.
    m["reshard_after_forward"] = !c.replicate && c.zdp_slices > 0;
    // "checkpoint": whether it is checkpointed at all; "recompute": none, full or selective.
    const costmodel::Recompute rc = w.operators[i].recompute(c);
    m["checkpoint"] = rc != costmodel::Recompute::kNone;
    m["recompute"] = costmodel::to_string(rc);
    if (rc == costmodel::Recompute::kSelective && c.split > 1 && !c.replicate)
      throw UsageError(fmt::format(
          "{}: {} is split into {} slices and checkpointed selectively, which has no FSDP2 form (its slices "
          "are FSDP2 units inside the checkpointed region, whose all-gathers a selective recompute cannot "
          "replay); osdp plan does not choose it",
          plan_file, w.operators[i].name, c.split));
    m["split"] = c.split > 1 && !c.replicate
                     ? nlohmann::json{{"slices", c.split}, {"resharded", c.zdp_slices}}
                     : nlohmann::json(nullptr);
    m["parameters"] = w.operators[i].parameters();
    split = split || !m["split"].is_null();
    if (c.two_level) {
      m["note"] =
          "two-level collectives have no FSDP2 form: sharded over the world mesh with flat collectives";
      two_level = true;
    }
    modules.push_back(std::move(m));
  }
  nlohmann::json notes = nlohmann::json::array();
  if (two_level)
    notes.push_back(
        "operators the plan gives two-level collectives shard over the world mesh with FSDP2's flat ones: "
        "the same memory, more traffic on the inter-node links than osdp predicted");
  if (split)
    notes.push_back(
        "split operators: every Linear (and transformers' Conv1D) and Embedding of the operator's modules is "
        "cut into slices along its input (osdp.torch.SlicedLinear), each slice gathered on its own");
  nlohmann::json j;
  j["schema_version"] = 1;
  j["kind"] = "osdp-fsdp2";
  j["source"] = {{"plan", plan_file},
                 {"model", plan.model.name},
                 {"cluster", plan.cluster.name},
                 {"strategy", plan.strategy},
                 {"tool_version", plan.tool_version},
                 {"name_mapping", mapping.origin},
                 {"predicted",
                  {{"iteration_time_s", plan.predicted_iteration_time_s},
                   {"peak_memory_bytes", plan.predicted_peak_memory_bytes},
                   {"throughput_samples_per_s", plan.predicted_throughput_samples_per_s}}}};
  j["model"] = costmodel::to_json(plan.model);  // enough to build osdp.torch.GPT without osdp itself
  // ... or the transformers model (osdp.torch.hf builds its config from the model's fields).
  const std::string type = transformers_model_type(plan.model);
  j["transformers"] = type.empty() ? nlohmann::json(nullptr) : nlohmann::json{{"model_type", type}};
  j["micro_batch_size"] = plan.batch_size;
  j["world_size"] = world;
  j["nodes"] = plan.cluster.nodes;
  j["per_node"] = plan.cluster.devices_per_node;
  // FSDP2's MixedPrecisionPolicy: bf16 and bf16-reduce-bf16 as model.hpp says; mixed (Megatron's bf16
  // parameters beside an fp32 master) has no FSDP2 form: the nearest, bf16 compute with fp32 reduction.
  switch (plan.model.precision) {
    case costmodel::Precision::kFp32:
      j["mixed_precision"] = nullptr;
      break;
    case costmodel::Precision::kMixed:
      j["mixed_precision"] = {{"param_dtype", "bfloat16"}, {"reduce_dtype", "float32"}};
      break;
    default:
      j["mixed_precision"] = {{"param_dtype", costmodel::param_dtype(plan.model.precision)},
                              {"reduce_dtype", costmodel::reduce_dtype(plan.model.precision)}};
  }
  j["modules"] = std::move(modules);
  j["notes"] = std::move(notes);
  return j;
}

std::string fsdp2_python(const nlohmann::json& spec) {
  const auto& src = spec.at("source");
  std::string out = fmt::format(
      "# FSDP2 plan exported by osdp {} from {}\n"
      "# model {}, cluster {} ({} ranks: {} node(s) x {}), strategy {}, micro-batch {} per rank\n"
      "# predicted: {:.6g} s a step, {:.0f} bytes peak per rank, {:.6g} samples/s\n"
      "# Apply it to a model of the same operators (osdp.torch.GPT, transformers' model of a Hugging\n"
      "# Face config, or a model mapped by osdp export --map)\n"
      "# inside a torchrun job of {} ranks, before the optimizer is built:\n"
      "#     import fsdp2_plan; fsdp2_plan.apply(model)\n",
      src.at("tool_version").get<std::string>(), src.at("plan").get<std::string>(),
      src.at("model").get<std::string>(), src.at("cluster").get<std::string>(),
      spec.at("world_size").get<int>(), spec.at("nodes").get<int>(), spec.at("per_node").get<int>(),
      src.at("strategy").get<std::string>(), spec.at("micro_batch_size").get<int>(),
      src.at("predicted").at("iteration_time_s").get<double>(),
      src.at("predicted").at("peak_memory_bytes").get<double>(),
      src.at("predicted").at("throughput_samples_per_s").get<double>(), spec.at("world_size").get<int>());
  for (const auto& n : spec.at("notes")) out += "# note: " + n.get<std::string>() + "\n";
  out += "\nPLAN = ";
  python_literal(spec, 0, out);
  out +=
      "\n\nMICRO_BATCH_SIZE = PLAN[\"micro_batch_size\"]\n\n\n"
      "def apply(model, mesh=None):\n"
      "    \"\"\"Applies the plan to `model` in place with FSDP2 (osdp.torch.apply_plan) and returns "
      "it.\"\"\"\n"
      "    from osdp.torch import apply_plan\n\n"
      "    return apply_plan(model, PLAN, mesh)\n";
  return out;
}

}  // namespace osdp::validate
