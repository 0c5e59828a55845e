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

namespace {

// What both kinds of plan file carry before their plan: the tool and strategy that made it, the
// model, the cluster, the calibration (when one priced it) and the cost model's tier. F is Plan or
// HybridPlanFile (the same member names).
template <class F>
void write_origin(nlohmann::json& j, const F& f) {
  j["tool_version"] = f.tool_version;
  j["strategy"] = f.strategy;
  j["model"] = to_json(f.model);
  j["cluster"] = to_json(f.cluster);
  if (f.calibration) j["calibration"] = to_json(*f.calibration);
  j["cost_model"] = {{"tier", to_string(f.cost_options.tier)},
                     {"checkpoint_regather", f.cost_options.checkpoint_regather}};
}

template <class F>
void read_origin(JsonReader& r, const nlohmann::json& doc, const std::string& file, F& f,
                 bool cost_model_required) {
  f.tool_version = r.string_or("tool_version", "");
  f.strategy = r.string_or("strategy", "");
  r.object("model");  // type check
  f.model = read_model(doc.at("model"), file, "/model");
  r.object("cluster");
  f.cluster = read_cluster(doc.at("cluster"), file, "/cluster");
  if (r.object_if("calibration"))
    f.calibration = read_calibration(doc.at("calibration"), file, f.cluster.compute, "/calibration");
  std::optional<JsonReader> c =
      cost_model_required ? std::optional<JsonReader>(r.object("cost_model")) : r.object_if("cost_model");
  if (!c) return;
  f.cost_options.tier = c->choice("tier", {"paper", "extended"}) == "paper" ? Tier::kPaper : Tier::kExtended;
  f.cost_options.checkpoint_regather = c->boolean_or("checkpoint_regather", false);
  c->finish();
}

}  // namespace

nlohmann::json to_json(const Plan& p) {
  nlohmann::json j;
  j["schema_version"] = 1;
  j["kind"] = "osdp-plan";
  write_origin(j, p);
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
  read_origin(r, doc, file, p, true);
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

HybridPlanFile read_hybrid_plan(const nlohmann::json& doc, const std::string& file) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  JsonReader r(doc, file, "");
  r.expect_schema_version(1);
  r.choice("kind", {"hybrid"});
  HybridPlanFile f;
  read_origin(r, doc, file, f, false);  // written before the calibration and tier were: optional
  f.memory_limit_bytes = r.quantity("memory_limit_bytes", UnitKind::kBytes, 1.0, kInf);
  JsonReader h = r.object("hybrid");
  HybridPlan& p = f.plan;
  const int N = f.cluster.world_size();
  p.pp = static_cast<int>(h.integer("pp", 1, N));
  if ((p.pp & (p.pp - 1)) != 0 || N % p.pp != 0)
    h.fail("pp", fmt::format("pipeline degree {} is not a power of two dividing the cluster's {} devices",
                             p.pp, N));
  p.micro_batches = static_cast<int>(h.integer("micro_batches", 1, 1 << 20));
  p.b0 = static_cast<int>(h.integer("micro_batch_per_device", 1, 1 << 24));
  const std::string sched = h.choice("schedule", {"gpipe", "1f1b"});
  p.schedule = *schedule_from_string(sched);
  p.sequence_parallel = h.boolean_or("sequence_parallel", false);
  f.predicted_time_s = h.number_or("predicted_iteration_time_s", 0, kInf, 0);
  f.predicted_peak_bytes = h.number_or("predicted_peak_memory_bytes", 0, kInf, 0);
  f.predicted_throughput = h.number_or("predicted_throughput_samples_per_s", 0, kInf, 0);
  (void)h.raw("global_batch");
  (void)h.raw("bubble_fraction");
  const HybridWorkload hw = hybrid_workload(f.model, p.pp);
  const int Ns = N / p.pp;
  auto stages = h.objects("stages");
  if (static_cast<int>(stages.size()) != p.pp)
    h.fail("stages", fmt::format("pipeline degree {} but {} stages", p.pp, stages.size()));
  p.unit_tp.assign(hw.units.size(), 1);
  p.choices.assign(hw.workload.operators.size(), Choice{});
  std::size_t next = 0;  // the next unit of the workload
  for (int s = 0; s < p.pp; ++s) {
    JsonReader& st = stages[static_cast<std::size_t>(s)];
    if (st.integer("stage", 0, p.pp - 1) != s) st.fail("stage", fmt::format("expected stage {} here", s));
    p.stage_first_unit.push_back(static_cast<int>(next));
    for (JsonReader& u : st.objects("units")) {
      if (next >= hw.units.size())
        u.fail("name",
               fmt::format("the model at pipeline degree {} has only {} units", p.pp, hw.units.size()));
      const HybridUnit& unit = hw.units[next];
      const std::string name = u.name("name");
      if (name != unit.name)
        u.fail("name", fmt::format("expected unit \"{}\" here, got \"{}\"", unit.name, name));
      const int t = static_cast<int>(u.integer("tp", 1, Ns));
      if ((t & (t - 1)) != 0 || Ns % t != 0 || t > f.cluster.devices_per_node)
        u.fail("tp",
               fmt::format(
                   "TP degree {} is not a power of two dividing the stage's {} devices within a node of {}",
                   t, Ns, f.cluster.devices_per_node));
      p.unit_tp[next] = t;
      auto ops = u.objects("operators");
      if (ops.size() != unit.ops.size())
        u.fail("operators", fmt::format("unit {} has {} operators, the plan lists {}", unit.name,
                                        unit.ops.size(), ops.size()));
      for (std::size_t i = 0; i < ops.size(); ++i) {
        JsonReader& o = ops[i];
        const Operator& op = hw.workload.operators[static_cast<std::size_t>(unit.ops[i])];
        const std::string oname = o.name("name");
        if (oname != op.name)
          o.fail("name", fmt::format("expected operator \"{}\" here, got \"{}\"", op.name, oname));
        if (!tp_allowed(op, t))
          u.fail("tp", fmt::format("operator {} cannot run at TP degree {}", op.name, t));
        (void)o.raw("choice");  // the label, for people
        p.choices[static_cast<std::size_t>(unit.ops[i])] = read_choice(o, op, f.cluster);
        o.finish();
      }
      u.finish();
      ++next;
    }
    for (const char* k : {"time_per_micro_batch_s", "peak_memory_bytes", "micro_batches_in_flight",
                          "compute_s", "dp_comm_s", "tp_comm_s", "p2p_s", "relayout_s"})
      (void)st.raw(k);
    if (p.stage_first_unit.back() == static_cast<int>(next)) st.fail("units", "a stage holds no unit");
    st.finish();
  }
  if (next != hw.units.size())
    h.fail("stages", fmt::format("the stages hold {} of the model's {} units", next, hw.units.size()));
  h.finish();
  r.finish();
  return f;
}

nlohmann::json hybrid_plan_file_json(const HybridPlanFile& f, const HybridWorkload& hw,
                                     const HybridEvaluation& ev) {
  nlohmann::json doc{{"schema_version", 1}, {"kind", "hybrid"}};
  write_origin(doc, f);
  doc["memory_limit_bytes"] = f.memory_limit_bytes;
  doc["hybrid"] = to_json(hw, f.plan, ev);
  return doc;
}

}  // namespace osdp::costmodel
