#include "costmodel/plan.hpp"

#include <limits>

#include <fmt/format.h>

#include "costmodel/json_reader.hpp"
#include "costmodel/workload.hpp"

namespace osdp::costmodel {

nlohmann::json choice_json(const Choice& c) {
  nlohmann::json op = {{"mode", c.mode_name()},
                       {"split", c.split},
                       {"zdp_slices", c.zdp_slices},
                       {"checkpoint", c.checkpoint}};
  // Written only when not the default, so that single-level plans stay as they were.
  if (c.node_group) op["group"] = c.group_name();
  if (c.two_level) op["comm"] = c.comm_name();
  return op;
}

Choice read_choice(JsonReader& o, const Operator& oper, const ClusterSpec& cluster) {
  Choice choice;
  const std::string mode = o.choice("mode", {"dp", "zdp", "mixed", "replicate"});
  choice.replicate = mode == "replicate";
  choice.split = static_cast<int>(o.integer_or("split", 1, 1 << 16, 1));
  choice.zdp_slices =
      static_cast<int>(o.integer_or("zdp_slices", 0, choice.split, mode == "zdp" ? choice.split : 0));
  choice.checkpoint = o.boolean_or("checkpoint", false);
  choice.node_group = o.choice_or("group", {"world", "node"}, "world") == "node";
  choice.two_level = o.choice_or("comm", {"flat", "two-level"}, "flat") == "two-level";
  if ((choice.node_group || choice.two_level) && choice.replicate)
    o.fail(choice.node_group ? "group" : "comm",
           "a REPLICATE operator is not sharded: it has no group or comm");
  if (choice.node_group && choice.two_level)
    o.fail("comm",
           "a node-sharded operator's collectives are within the node: two-level applies to world shards");
  if ((choice.node_group || choice.two_level) &&
      (cluster.nodes < 2 || cluster.devices_per_node < 2 || !cluster.inter))
    o.fail(choice.node_group ? "group" : "comm",
           fmt::format("needs a cluster of several nodes with several devices each and an inter-node link "
                       "(this one has {} x {})",
                       cluster.nodes, cluster.devices_per_node));
  if (choice.mode_name() != mode)
    o.fail("mode", fmt::format("\"{}\" contradicts split {} with {} ZDP slices", mode, choice.split,
                               choice.zdp_slices));
  const auto allowed = oper.splits(choice.split);
  if (allowed.back() != choice.split)
    o.fail("split", fmt::format("operator \"{}\" cannot be split {} ways", oper.name, choice.split));
  if (choice.checkpoint && !oper.checkpointable)
    o.fail("checkpoint", fmt::format("operator \"{}\" cannot be checkpointed", oper.name));
  return choice;
}

nlohmann::json to_json(const Plan& p) {
  nlohmann::json j;
  j["schema_version"] = 1;
  j["kind"] = "osdp-plan";
  j["tool_version"] = p.tool_version;
  j["strategy"] = p.strategy;
  j["model"] = to_json(p.model);
  j["cluster"] = to_json(p.cluster);
  if (p.calibration) j["calibration"] = to_json(*p.calibration);
  j["cost_model"] = {{"tier", to_string(p.cost_options.tier)},
                     {"checkpoint_regather", p.cost_options.checkpoint_regather}};
  j["memory_limit_bytes"] = p.memory_limit_bytes;
  j["batch_size"] = p.batch_size;
  j["prefetch"] = p.prefetch;
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& o : p.operators) {
    nlohmann::json op = {{"name", o.name}};
    op.update(choice_json(o.choice));
    ops.push_back(std::move(op));
  }
  j["operators"] = ops;
  j["predicted"] = {{"iteration_time_s", p.predicted_iteration_time_s},
                    {"peak_memory_bytes", p.predicted_peak_memory_bytes},
                    {"throughput_samples_per_s", p.predicted_throughput_samples_per_s}};
  return j;
}

Plan read_plan(const nlohmann::json& doc, const std::string& file) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  JsonReader r(doc, file, "");
  r.expect_kind(FileKind::kPlan);
  r.expect_schema_version(1);
  r.choice("kind", {"osdp-plan"});
  Plan p;
  p.tool_version = r.string_or("tool_version", "");
  p.strategy = r.string_or("strategy", "");
  r.object("model");  // type check
  p.model = read_model(doc.at("model"), file, "/model");
  r.object("cluster");
  p.cluster = read_cluster(doc.at("cluster"), file, "/cluster");
  if (r.object_if("calibration"))
    p.calibration = read_calibration(doc.at("calibration"), file, p.cluster.compute, "/calibration");
  {
    JsonReader c = r.object("cost_model");
    p.cost_options.tier = c.choice("tier", {"paper", "extended"}) == "paper" ? Tier::kPaper : Tier::kExtended;
    p.cost_options.checkpoint_regather = c.boolean_or("checkpoint_regather", false);
    c.finish();
  }
  p.memory_limit_bytes = r.quantity("memory_limit_bytes", UnitKind::kBytes, 1.0, kInf);
  p.batch_size = static_cast<int>(r.integer("batch_size", 1, 1 << 24));
  p.prefetch = static_cast<int>(r.integer_or("prefetch", 0, 64, 0));
  p.cost_options.prefetch = p.prefetch;
  const Workload w = lower(p.model);
  auto ops = r.objects("operators");
  if (ops.size() != w.operators.size())
    r.fail("operators",
           fmt::format("the model has {} operators, the plan lists {}", w.operators.size(), ops.size()));
  for (std::size_t i = 0; i < ops.size(); ++i) {
    JsonReader& o = ops[i];
    OperatorPlan op;
    op.name = o.name("name");
    if (op.name != w.operators[i].name)
      o.fail("name", fmt::format("expected operator \"{}\" here, got \"{}\"", w.operators[i].name, op.name));
    op.choice = read_choice(o, w.operators[i], p.cluster);
    o.finish();
    p.operators.push_back(op);
  }
  if (auto pr = r.object_if("predicted")) {
    p.predicted_iteration_time_s = pr->number_or("iteration_time_s", 0, kInf, 0);
    p.predicted_peak_memory_bytes = pr->number_or("peak_memory_bytes", 0, kInf, 0);
    p.predicted_throughput_samples_per_s = pr->number_or("throughput_samples_per_s", 0, kInf, 0);
    pr->finish();
  }
  r.finish();
  return p;
}

}  // namespace osdp::costmodel
