#include "costmodel/plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "costmodel/bounds.hpp"
#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/workload.hpp"

namespace osdp::costmodel {

const char* to_string(PipelineSchedule s) {
  return s == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
}

std::optional<PipelineSchedule> schedule_from_string(const std::string& s) {
  if (s == "gpipe") return PipelineSchedule::kGpipe;
  if (s == "1f1b") return PipelineSchedule::k1F1B;
  return std::nullopt;
}

int Plan::stage_of_unit(int unit) const {
  const auto it = std::upper_bound(stage_first_unit.begin(), stage_first_unit.end(), unit);
  return static_cast<int>(it - stage_first_unit.begin()) - 1;
}

bool Plan::data_parallel() const {
  return pp == 1 && micro_batches == 1 && cp == 1 &&
         std::all_of(unit_tp.begin(), unit_tp.end(), [](int t) { return t == 1; }) &&
         std::all_of(choices.begin(), choices.end(), [](const Choice& c) { return c.ep == 1; });
}

std::string Plan::layout_summary() const {
  const int t_max = unit_tp.empty() ? 1 : *std::max_element(unit_tp.begin(), unit_tp.end());
  const int t_min = unit_tp.empty() ? 1 : *std::min_element(unit_tp.begin(), unit_tp.end());
  int ep_min = 0, ep_max = 1;  // over the expert-parallel operators
  for (const Choice& c : choices)
    if (c.ep > 1) {
      ep_min = ep_min == 0 ? c.ep : std::min(ep_min, c.ep);
      ep_max = std::max(ep_max, c.ep);
    }
  const std::string ep = ep_min == 0        ? ""
                         : ep_min == ep_max ? fmt::format(", EP {}", ep_max)
                                            : fmt::format(", EP {} to {} by MoE layer", ep_min, ep_max);
  const std::string context =
      cp > 1 ? fmt::format(", CP {} ({})", cp, cp_all_to_all ? "all-to-all" : "ring") : std::string();
  return fmt::format(
      "{} stage{}{}, {} micro-batch{}, TP {}{}{}", pp, pp > 1 ? "s" : "",
      pp > 1 ? fmt::format(" ({})", to_string(schedule)) : "", micro_batches, micro_batches > 1 ? "es" : "",
      t_min == t_max ? std::to_string(t_max) : fmt::format("{} to {} by unit", t_min, t_max), ep, context);
}

void set_data_parallel(Plan& plan, const Workload& w, std::vector<Choice> choices) {
  plan.pp = 1;
  plan.micro_batches = 1;
  plan.sequence_parallel = false;
  plan.cp = 1;
  plan.stage_first_unit = {0};
  plan.unit_tp.assign(w.units.size(), 1);
  plan.choices = std::move(choices);
}

nlohmann::json choice_json(const Choice& c) {
  nlohmann::json op = {
      {"mode", c.mode_name()},
      {"split", c.split},
      {"zdp_slices", c.zdp_slices},
      {"checkpoint", c.selective ? nlohmann::json("selective") : nlohmann::json(c.checkpoint)}};
  // Written only when not the default, so that single-level plans stay as they were.
  if (c.node_group) op["group"] = c.group_name();
  if (c.two_level) op["comm"] = c.comm_name();
  if (c.ep > 1) op["ep"] = c.ep;
  return op;
}

Choice read_choice(JsonReader& o, const Operator& oper, const ClusterSpec& cluster) {
  Choice choice;
  const std::string mode = o.choice("mode", {"dp", "zdp", "mixed", "replicate"});
  choice.replicate = mode == "replicate";
  choice.split = static_cast<int>(o.integer_or("split", 1, 1 << 16, 1));
  choice.zdp_slices =
      static_cast<int>(o.integer_or("zdp_slices", 0, choice.split, mode == "zdp" ? choice.split : 0));
  // true (full), false, or "none", "full", "selective".
  if (const nlohmann::json* ck = o.raw("checkpoint"); ck != nullptr && ck->is_string()) {
    const std::string how = o.choice("checkpoint", {"none", "full", "selective"});
    choice.checkpoint = how == "full";
    choice.selective = how == "selective";
  } else {
    choice.checkpoint = o.boolean_or("checkpoint", false);
  }
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
  choice.ep = static_cast<int>(o.integer_or("ep", 1, 1 << 16, 1));
  if (choice.ep > 1) {
    if (oper.experts == 0)
      o.fail("ep",
             fmt::format("operator \"{}\" has no experts to place over {} ranks", oper.name, choice.ep));
    if ((choice.ep & (choice.ep - 1)) != 0 || oper.experts % choice.ep != 0)
      o.fail("ep", fmt::format("expected a power of two dividing the {} experts of \"{}\", got {}",
                               oper.experts, oper.name, choice.ep));
    if (choice.node_group || choice.two_level)
      o.fail("ep", "an expert-parallel operator shards over the world, with flat collectives");
  }
  if (choice.mode_name() != mode)
    o.fail("mode", fmt::format("\"{}\" contradicts split {} with {} ZDP slices", mode, choice.split,
                               choice.zdp_slices));
  const auto allowed = oper.splits(choice.split);
  if (allowed.back() != choice.split)
    o.fail("split", fmt::format("operator \"{}\" cannot be split {} ways", oper.name, choice.split));
  if ((choice.checkpoint || choice.selective) && !oper.checkpointable)
    o.fail("checkpoint", fmt::format("operator \"{}\" cannot be checkpointed", oper.name));
  if (choice.selective && !oper.selectable())
    o.fail("checkpoint",
           fmt::format("operator \"{}\" has no selective checkpointing (attention that materializes its "
                       "scores, or not a layer's operator); use true or false",
                       oper.name));
  return choice;
}

nlohmann::json to_json(const Plan& p, const Evaluation* ev) {
  const Workload w = lower(p.model, p.pp);
  nlohmann::json j;
  j["schema_version"] = 2;
  j["kind"] = "osdp-plan";
  j["tool_version"] = p.tool_version;
  j["strategy"] = p.strategy;
  j["model"] = to_json(p.model);
  // The dtypes and bytes per parameter at rest and in flight that the model's precision implies (for
  // people and other tools; read back as derived, never as input).
  j["precision"] = precision_json(p.model.precision);
  j["cluster"] = to_json(p.cluster);
  if (p.calibration) j["calibration"] = to_json(*p.calibration);
  j["cost_model"] = {{"tier", to_string(p.cost_options.tier)},
                     {"checkpoint_regather", p.cost_options.checkpoint_regather}};
  if (p.cost_options.expert_imbalance != 1.0)
    j["cost_model"]["expert_imbalance"] = p.cost_options.expert_imbalance;
  j["memory_limit_bytes"] = p.memory_limit_bytes;
  j["batch_size"] = p.batch_size;
  j["prefetch"] = p.prefetch;
  j["pipeline"] = {{"stages", p.pp},
                   {"micro_batches", p.micro_batches},
                   {"schedule", to_string(p.schedule)},
                   {"sequence_parallel", p.sequence_parallel}};
  if (p.cp > 1)
    j["pipeline"]["context_parallel"] = {{"degree", p.cp},
                                         {"variant", p.cp_all_to_all ? "all-to-all" : "ring"}};
  nlohmann::json units = nlohmann::json::array();
  for (std::size_t u = 0; u < w.units.size(); ++u)
    units.push_back({{"name", w.units[u].name},
                     {"stage", p.stage_of_unit(static_cast<int>(u))},
                     {"tp", u < p.unit_tp.size() ? p.unit_tp[u] : 1}});
  j["units"] = units;
  nlohmann::json ops = nlohmann::json::array();
  for (std::size_t i = 0; i < p.choices.size() && i < w.operators.size(); ++i) {
    nlohmann::json op = {{"name", w.operators[i].name}};
    op.update(choice_json(p.choices[i]));
    ops.push_back(std::move(op));
  }
  j["operators"] = ops;
  nlohmann::json predicted = {{"iteration_time_s", p.predicted_iteration_time_s},
                              {"peak_memory_bytes", p.predicted_peak_memory_bytes},
                              {"throughput_samples_per_s", p.predicted_throughput_samples_per_s},
                              {"global_batch", p.global_batch(p.cluster.world_size())}};
  if (ev != nullptr) {
    predicted["bubble_fraction"] = ev->bubble_fraction;
    nlohmann::json stages = nlohmann::json::array();
    for (std::size_t s = 0; s < ev->stages.size(); ++s) {
      const StageCost& st = ev->stages[s];
      stages.push_back({{"stage", s},
                        {"time_per_micro_batch_s", st.time_s},
                        {"peak_memory_bytes", st.peak_bytes},
                        {"micro_batches_in_flight", st.in_flight},
                        {"compute_s", st.compute_s},
                        {"dp_comm_s", st.dp_comm_s},
                        {"tp_comm_s", st.tp_comm_s},
                        {"p2p_s", st.p2p_s},
                        {"relayout_s", st.relayout_s}});
    }
    predicted["stages"] = stages;
  }
  j["predicted"] = predicted;
  return j;
}

namespace {

// What every plan file carries before its plan: the tool and strategy that made it, the model, the
// cluster, the calibration (when one priced it) and the cost model's tier.
void read_origin(JsonReader& r, const nlohmann::json& doc, const std::string& file, Plan& p,
                 bool cost_model_required) {
  p.tool_version = r.string_or("tool_version", "");
  p.strategy = r.string_or("strategy", "");
  r.object("model");  // type check
  p.model = read_model(doc.at("model"), file, "/model");
  r.object("cluster");
  p.cluster = read_cluster(doc.at("cluster"), file, "/cluster");
  if (r.object_if("calibration"))
    p.calibration = read_calibration(doc.at("calibration"), file, p.cluster.compute, "/calibration");
  std::optional<JsonReader> c =
      cost_model_required ? std::optional<JsonReader>(r.object("cost_model")) : r.object_if("cost_model");
  if (!c) return;
  p.cost_options.tier = c->choice("tier", {"paper", "extended"}) == "paper" ? Tier::kPaper : Tier::kExtended;
  p.cost_options.checkpoint_regather = c->boolean_or("checkpoint_regather", false);
  p.cost_options.expert_imbalance = c->number_or("expert_imbalance", 1.0, 64.0, 1.0);
  c->finish();
}

int read_pipeline_degree(JsonReader& r, const char* key, const ClusterSpec& cluster) {
  const int N = cluster.world_size();
  const int pp = static_cast<int>(r.integer(key, 1, N));
  if (!power_of_two(pp) || N % pp != 0)
    r.fail(key,
           fmt::format("pipeline degree {} is not a power of two dividing the cluster's {} devices", pp, N));
  return pp;
}

int read_tp(JsonReader& u, const Plan& p, const Unit& unit, const Workload& w) {
  const int Ns = p.cluster.world_size() / p.pp;
  const int t = static_cast<int>(u.integer("tp", 1, Ns));
  if (!valid_degrees(p.cluster, p.pp, t))
    u.fail("tp",
           fmt::format("TP degree {} is not a power of two dividing the stage's {} devices within a node "
                       "of {}",
                       t, Ns, p.cluster.devices_per_node));
  for (const int oi : unit.ops) {
    const Operator& op = w.operators[static_cast<std::size_t>(oi)];
    if (!tp_allowed(op, t)) u.fail("tp", fmt::format("operator {} cannot run at TP degree {}", op.name, t));
  }
  return t;
}

// The operators of a plan file, exactly those of the lowering in order.
void read_operators(JsonReader& r, const Workload& w, Plan& p) {
  auto ops = r.objects("operators");
  if (ops.size() != w.operators.size())
    r.fail("operators",
           fmt::format("the model has {} operators, the plan lists {}", w.operators.size(), ops.size()));
  p.choices.clear();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    JsonReader& o = ops[i];
    const std::string name = o.name("name");
    if (name != w.operators[i].name)
      o.fail("name", fmt::format("expected operator \"{}\" here, got \"{}\"", w.operators[i].name, name));
    p.choices.push_back(read_choice(o, w.operators[i], p.cluster));
    o.finish();
  }
}

void read_predicted(JsonReader& r, Plan& p) {
  auto pr = r.object_if("predicted");
  if (!pr) return;
  p.predicted_iteration_time_s = pr->number_or("iteration_time_s", 0, kInf, 0);
  p.predicted_peak_memory_bytes = pr->number_or("peak_memory_bytes", 0, kInf, 0);
  p.predicted_throughput_samples_per_s = pr->number_or("throughput_samples_per_s", 0, kInf, 0);
  for (const char* k : {"global_batch", "bubble_fraction", "stages"}) (void)pr->raw(k);
  pr->finish();
}

// Version 1 of the hybrid plan file (`osdp plan --hybrid --out` before plans were one): kind "hybrid",
// the layout in a "hybrid" block with the operators' choices inside their units.
Plan read_hybrid_v1(JsonReader& r, const nlohmann::json& doc, const std::string& file) {
  Plan p;
  read_origin(r, doc, file, p, false);  // written before the calibration and tier were: optional
  p.memory_limit_bytes = r.quantity("memory_limit_bytes", UnitKind::kBytes, 1.0, kInf);
  JsonReader h = r.object("hybrid");
  p.pp = read_pipeline_degree(h, "pp", p.cluster);
  p.micro_batches = static_cast<int>(h.integer("micro_batches", 1, 1 << 20));
  p.batch_size = static_cast<int>(h.integer("micro_batch_per_device", 1, 1 << 24));
  p.schedule = *schedule_from_string(h.choice("schedule", {"gpipe", "1f1b"}));
  p.sequence_parallel = h.boolean_or("sequence_parallel", false);
  p.predicted_iteration_time_s = h.number_or("predicted_iteration_time_s", 0, kInf, 0);
  p.predicted_peak_memory_bytes = h.number_or("predicted_peak_memory_bytes", 0, kInf, 0);
  p.predicted_throughput_samples_per_s = h.number_or("predicted_throughput_samples_per_s", 0, kInf, 0);
  (void)h.raw("global_batch");
  (void)h.raw("bubble_fraction");
  const Workload w = lower(p.model, p.pp);
  auto stages = h.objects("stages");
  if (static_cast<int>(stages.size()) != p.pp)
    h.fail("stages", fmt::format("pipeline degree {} but {} stages", p.pp, stages.size()));
  p.unit_tp.assign(w.units.size(), 1);
  p.choices.assign(w.operators.size(), Choice{});
  p.stage_first_unit.clear();
  std::size_t next = 0;  // the next unit of the workload
  for (int s = 0; s < p.pp; ++s) {
    JsonReader& st = stages[static_cast<std::size_t>(s)];
    if (st.integer("stage", 0, p.pp - 1) != s) st.fail("stage", fmt::format("expected stage {} here", s));
    p.stage_first_unit.push_back(static_cast<int>(next));
    for (JsonReader& u : st.objects("units")) {
      if (next >= w.units.size())
        u.fail("name",
               fmt::format("the model at pipeline degree {} has only {} units", p.pp, w.units.size()));
      const Unit& unit = w.units[next];
      const std::string name = u.name("name");
      if (name != unit.name)
        u.fail("name", fmt::format("expected unit \"{}\" here, got \"{}\"", unit.name, name));
      p.unit_tp[next] = read_tp(u, p, unit, w);
      auto ops = u.objects("operators");
      if (ops.size() != unit.ops.size())
        u.fail("operators", fmt::format("unit {} has {} operators, the plan lists {}", unit.name,
                                        unit.ops.size(), ops.size()));
      for (std::size_t i = 0; i < ops.size(); ++i) {
        JsonReader& o = ops[i];
        const Operator& op = w.operators[static_cast<std::size_t>(unit.ops[i])];
        const std::string oname = o.name("name");
        if (oname != op.name)
          o.fail("name", fmt::format("expected operator \"{}\" here, got \"{}\"", op.name, oname));
        (void)o.raw("choice");  // the label, for people
        p.choices[static_cast<std::size_t>(unit.ops[i])] = read_choice(o, op, p.cluster);
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
  if (next != w.units.size())
    h.fail("stages", fmt::format("the stages hold {} of the model's {} units", next, w.units.size()));
  h.finish();
  return p;
}

// Versions 1 (data-parallel) and 2 of "osdp-plan".
Plan read_osdp_plan(JsonReader& r, const nlohmann::json& doc, const std::string& file, int version) {
  Plan p;
  read_origin(r, doc, file, p, true);
  p.memory_limit_bytes = r.quantity("memory_limit_bytes", UnitKind::kBytes, 1.0, kInf);
  p.batch_size = static_cast<int>(r.integer("batch_size", 1, 1 << 24));
  p.prefetch = static_cast<int>(r.integer_or("prefetch", 0, 64, 0));
  p.cost_options.prefetch = p.prefetch;
  if (version >= 2) {
    JsonReader pl = r.object("pipeline");
    p.pp = read_pipeline_degree(pl, "stages", p.cluster);
    p.micro_batches = static_cast<int>(pl.integer("micro_batches", 1, 1 << 20));
    p.schedule = *schedule_from_string(pl.choice("schedule", {"gpipe", "1f1b"}));
    p.sequence_parallel = pl.boolean_or("sequence_parallel", false);
    if (auto cp = pl.object_if("context_parallel")) {
      p.cp = static_cast<int>(cp->integer("degree", 1, p.cluster.world_size()));
      p.cp_all_to_all = cp->choice_or("variant", {"ring", "all-to-all"}, "ring") == "all-to-all";
      cp->finish();
    }
    pl.finish();
  }
  const Workload w = lower(p.model, p.pp);
  read_operators(r, w, p);
  if (version >= 2) {
    auto units = r.objects("units");
    if (units.size() != w.units.size())
      r.fail("units", fmt::format("the model at pipeline degree {} has {} units, the plan lists {}", p.pp,
                                  w.units.size(), units.size()));
    p.unit_tp.clear();
    p.stage_first_unit.clear();
    for (std::size_t u = 0; u < units.size(); ++u) {
      JsonReader& ur = units[u];
      const Unit& unit = w.units[u];
      const std::string name = ur.name("name");
      if (name != unit.name)
        ur.fail("name", fmt::format("expected unit \"{}\" here, got \"{}\"", unit.name, name));
      const int stage = static_cast<int>(ur.integer("stage", 0, p.pp - 1));
      const int expected = static_cast<int>(p.stage_first_unit.size()) - 1;  // the stage so far
      if (stage == expected + 1)
        p.stage_first_unit.push_back(static_cast<int>(u));
      else if (u == 0)
        ur.fail("stage",
                fmt::format("the first unit, {}, is in stage {}: it opens stage 0", unit.name, stage));
      else if (stage != expected)
        ur.fail("stage",
                fmt::format("unit {} in stage {} after a unit of stage {}: stages hold consecutive units, "
                            "each at least one",
                            unit.name, stage, expected));
      p.unit_tp.push_back(read_tp(ur, p, unit, w));
      ur.finish();
    }
    if (static_cast<int>(p.stage_first_unit.size()) != p.pp)
      r.fail("units", fmt::format("the units fill {} of the {} stages", p.stage_first_unit.size(), p.pp));
  } else {
    p.unit_tp.assign(w.units.size(), 1);
  }
  read_predicted(r, p);
  (void)r.raw("precision");  // derived from the model's
  return p;
}

}  // namespace

Plan read_plan(const nlohmann::json& doc, const std::string& file) {
  JsonReader r(doc, file, "");
  const bool hybrid_v1 = doc.is_object() && doc.contains("kind") && doc["kind"] == "hybrid";
  if (!hybrid_v1) r.expect_kind(FileKind::kPlan);
  const int version = doc.is_object() && doc.contains("schema_version") && doc["schema_version"] == 1 ? 1 : 2;
  r.expect_schema_version(version);
  if (hybrid_v1 && version == 1) {
    r.choice("kind", {"hybrid"});
    Plan p = read_hybrid_v1(r, doc, file);
    r.finish();
    return p;
  }
  r.choice("kind", {"osdp-plan"});
  Plan p = read_osdp_plan(r, doc, file, version);
  r.finish();
  return p;
}

}  // namespace osdp::costmodel
