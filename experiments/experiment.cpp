#include "experiments/experiment.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/units.hpp"
#include "search/strategy.hpp"

namespace osdp::experiments {
namespace {

using costmodel::JsonReader;
using costmodel::power_of_two;

const std::vector<std::string> kAxes = {
    "model",    "cluster",       "world_size",          "memory",   "split_max", "checkpoint",
    "prefetch", "tier",          "checkpoint_regather", "batch",    "groups",    "pp",
    "tp",       "micro_batches", "global_batch",        "schedule", "seq"};

std::string known_keys() {
  std::string out;
  for (const auto& k : kAxes) out += (out.empty() ? "" : ", ") + k;
  return out;
}

[[noreturn]] void bad(const std::string& file, const std::string& pointer, const std::string& msg) {
  throw InputError(file, pointer, msg);
}

// Sets one field of a configuration from a JSON value, checking it; `pointer` names it in errors.
void apply(Config& c, const std::string& key, const nlohmann::json& v, const std::string& file,
           const std::string& pointer) {
  auto integer = [&](std::int64_t lo, std::int64_t hi) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi)
      bad(file, pointer,
          fmt::format("expected an integer in [{}, {}], got {}", lo, hi, costmodel::brief_json(v)));
    return static_cast<int>(v.get<std::int64_t>());
  };
  auto text = [&](const std::vector<std::string>& allowed) {
    if (!v.is_string())
      bad(file, pointer, fmt::format("expected a string, got {}", costmodel::brief_json(v)));
    const std::string s = v.get<std::string>();
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
      bad(file, pointer, fmt::format("expected one of {}, got \"{}\"", list, s));
    }
    return s;
  };
  if (key == "model")
    c.model = text({});
  else if (key == "seq")
    c.seq = integer(1, 1 << 20);
  else if (key == "cluster")
    c.cluster = text({});
  else if (key == "world_size")
    c.world_size = integer(1, 1 << 20);
  else if (key == "memory") {
    if (v.is_number()) {
      c.memory = fmt::format("{}", v.get<double>());
    } else {
      c.memory = text({});
    }
    std::string err;
    const auto q = costmodel::parse_quantity(c.memory, costmodel::UnitKind::kBytes, &err);
    if (!q) bad(file, pointer, err);
    const std::string problem =
        costmodel::bound_problem(*q, costmodel::UnitKind::kBytes, costmodel::bounds::kDeviceMemory, c.memory);
    if (!problem.empty()) bad(file, pointer, problem);
  } else if (key == "split_max") {
    c.split_max = integer(1, 64);
    if ((c.split_max & (c.split_max - 1)) != 0)
      bad(file, pointer,
          fmt::format("expected a power of two (slices split in halves), got {}", c.split_max));
  } else if (key == "checkpoint")
    c.checkpoint = text({"off", "on", "auto", "selective"});
  else if (key == "prefetch")
    c.prefetch = integer(0, 64);
  else if (key == "tier")
    c.tier = text({"extended", "paper"});
  else if (key == "checkpoint_regather") {
    if (!v.is_boolean())
      bad(file, pointer, fmt::format("expected true or false, got {}", costmodel::brief_json(v)));
    c.checkpoint_regather = v.get<bool>();
  } else if (key == "groups") {
    if (v.is_boolean())
      c.groups = v.get<bool>() ? "on" : "off";
    else if (v.is_string() && (v == "auto" || v == "on" || v == "off"))
      c.groups = v.get<std::string>();
    else
      bad(file, pointer,
          fmt::format("expected true, false, \"auto\", \"on\" or \"off\", got {}", costmodel::brief_json(v)));
  } else if (key == "pp" || key == "tp") {
    const int d = v.is_string() && v.get<std::string>() == "auto" ? 0 : integer(1, 1 << 20);
    if (d > 0 && !power_of_two(d))
      bad(file, pointer, fmt::format("expected a power of two or \"auto\", got {}", d));
    (key == "pp" ? c.pp : c.tp) = d;
  } else if (key == "micro_batches") {
    c.micro_batches = v.is_string() && v.get<std::string>() == "auto" ? 0 : integer(1, 1024);
  } else if (key == "global_batch") {
    c.global_batch = v.is_string() && v.get<std::string>() == "auto" ? 0 : integer(1, 1 << 24);
  } else if (key == "schedule") {
    c.schedule = text({"1f1b", "gpipe", "both"});
  } else if (key == "batch") {
    if (v.is_string() && v.get<std::string>() == "auto")
      c.batch.reset();
    else
      c.batch = integer(1, 1 << 24);
  } else {
    bad(file, pointer, fmt::format("unknown key \"{}\"", key));
  }
}

}  // namespace

std::string Unit::key() const {
  nlohmann::json j = to_json(config);
  j["strategy"] = strategy.strategy;
  j["label"] = strategy.label;
  if (strategy.split_max) j["strategy_split_max"] = *strategy.split_max;
  if (strategy.checkpoint) j["strategy_checkpoint"] = *strategy.checkpoint;
  if (!strategy.pp.empty())
    j["strategy_pp"] = strategy.pp.size() == 1 ? nlohmann::json(strategy.pp[0]) : nlohmann::json(strategy.pp);
  if (!strategy.tp.empty())
    j["strategy_tp"] = strategy.tp.size() == 1 ? nlohmann::json(strategy.tp[0]) : nlohmann::json(strategy.tp);
  if (strategy.micro_batches) j["strategy_micro_batches"] = *strategy.micro_batches;
  return j.dump();
}

nlohmann::json to_json(const Config& c) {
  nlohmann::json j{{"model", c.model},           {"cluster", c.cluster},
                   {"world_size", c.world_size}, {"memory", c.memory},
                   {"split_max", c.split_max},   {"checkpoint", c.checkpoint},
                   {"prefetch", c.prefetch},     {"tier", c.tier}};
  j["batch"] = c.batch ? nlohmann::json(*c.batch) : nlohmann::json("auto");
  j["checkpoint_regather"] = c.checkpoint_regather;
  // Only when set: the keys of earlier results stay as they were.
  if (c.groups != "auto") j["groups"] = c.groups == "on";
  if (c.pp > 0) j["pp"] = c.pp;
  if (c.tp > 0) j["tp"] = c.tp;
  if (c.micro_batches > 0) j["micro_batches"] = c.micro_batches;
  if (c.global_batch > 0) j["global_batch"] = c.global_batch;
  if (c.schedule != "1f1b") j["schedule"] = c.schedule;
  if (c.seq > 0) j["seq"] = c.seq;
  return j;
}

Experiment read_experiment(const nlohmann::json& doc, const std::string& file) {
  JsonReader r(doc, file, "");
  r.expect_kind(costmodel::FileKind::kExperiment);
  // Version 2 (this osdp): what a file leaves open is the whole space; version 1: the data-parallel one.
  const auto version = r.integer("schema_version", 0, std::numeric_limits<int>::max());
  if (version != 1 && version != 2)
    r.fail("schema_version", fmt::format("unsupported schema_version {} (this osdp reads 1 and 2)", version));
  Experiment e;
  e.base.schema1_space = version == 1;
  e.file = file;
  e.source = doc;
  e.name = r.name("name");
  e.description = r.string_or("description", "");
  {
    (void)r.object("base");  // type check; the keys are read below with their own pointers
    const auto* node = r.raw("base");
    for (auto it = node->begin(); it != node->end(); ++it) {
      const std::string key = it.key();
      if (std::find(kAxes.begin(), kAxes.end(), key) == kAxes.end())
        bad(file, "/base/" + key, fmt::format("unknown key \"{}\" (known: {})", key, known_keys()));
      apply(e.base, key, it.value(), file, "/base/" + key);
    }
  }
  if (const auto* axes = r.raw("axes")) {
    if (!axes->is_object()) bad(file, "/axes", "expected an object of arrays");
    for (auto it = axes->begin(); it != axes->end(); ++it) {
      const std::string key = it.key();
      const std::string ptr = "/axes/" + key;
      if (std::find(kAxes.begin(), kAxes.end(), key) == kAxes.end())
        bad(file, ptr, fmt::format("unknown axis \"{}\" (axes: {})", key, known_keys()));
      if (!it.value().is_array() || it.value().empty()) bad(file, ptr, "expected a non-empty array");
      std::vector<nlohmann::json> values;
      for (std::size_t i = 0; i < it.value().size(); ++i) {
        Config probe = e.base;
        apply(probe, key, it.value()[i], file, ptr + "/" + std::to_string(i));
        values.push_back(it.value()[i]);
      }
      e.axes.emplace_back(key, std::move(values));
    }
  }
  for (auto& s : r.objects("strategies")) {
    StrategyConfig sc;
    sc.strategy = s.choice("strategy", search::default_strategies().names());
    sc.label = s.name_or("label", sc.strategy);
    if (s.has("split_max")) {
      sc.split_max = static_cast<int>(s.integer("split_max", 1, 64));
      if ((*sc.split_max & (*sc.split_max - 1)) != 0)
        s.fail("split_max",
               fmt::format("expected a power of two (slices split in halves), got {}", *sc.split_max));
    } else
      s.raw("split_max");
    if (s.has("checkpoint"))
      sc.checkpoint = s.choice("checkpoint", {"off", "on", "auto", "selective"});
    else
      s.raw("checkpoint");
    for (const auto& [key, out] : {std::pair{"pp", &sc.pp}, std::pair{"tp", &sc.tp}}) {
      const nlohmann::json* v = s.raw(key);  // a degree or a list of degrees
      if (v == nullptr) continue;
      const nlohmann::json list = v->is_array() ? *v : nlohmann::json::array({*v});
      for (const auto& d : list) {
        if (!d.is_number_integer() || !power_of_two(d.get<int>()) || d.get<int>() > (1 << 20))
          s.fail(key,
                 fmt::format("expected a power of two or a list of them, got {}", costmodel::brief_json(*v)));
        out->push_back(d.get<int>());
      }
      if (out->empty()) s.fail(key, "expected a power of two or a non-empty list of them");
    }
    if (s.has("micro_batches"))
      sc.micro_batches = static_cast<int>(s.integer("micro_batches", 1, 1024));
    else
      s.raw("micro_batches");
    if ((!sc.pp.empty() || !sc.tp.empty() || (sc.micro_batches && *sc.micro_batches > 1)) &&
        search::default_strategies().get(sc.strategy).info().data_parallel)
      s.fail(!sc.pp.empty()   ? "pp"
             : !sc.tp.empty() ? "tp"
                              : "micro_batches",
             fmt::format("strategy {} searches data parallelism only", sc.strategy));
    for (const auto& other : e.strategies)
      if (other.label == sc.label) s.fail("label", fmt::format("label \"{}\" is used twice", sc.label));
    s.finish();
    e.strategies.push_back(sc);
  }
  e.baseline = r.string_or("baseline", "");
  if (!e.baseline.empty()) {
    bool found = false;
    for (const auto& s : e.strategies) found = found || s.label == e.baseline;
    if (!found) r.fail("baseline", fmt::format("no strategy is labelled \"{}\"", e.baseline));
  }
  if (const auto* ev = r.raw("evaluators")) {
    if (!ev->is_array() || ev->empty()) bad(file, "/evaluators", "expected a non-empty array");
    for (std::size_t i = 0; i < ev->size(); ++i) {
      const auto& v = (*ev)[i];
      const auto kind = v.is_string() ? evaluator_named(v.get<std::string>()) : std::nullopt;
      if (!kind) {
        std::string names;
        for (const auto& x : evaluators())
          names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", x.name);
        bad(file, "/evaluators/" + std::to_string(i),
            fmt::format("expected one of {}, got {}", names, costmodel::brief_json(v)));
      }
      e.evaluators.push_back(*kind);
    }
  } else {
    e.evaluators = {EvaluatorKind::kAnalytic};
  }
  e.output = r.string_or("output", "results/" + e.name);
  if (auto v = r.object_if("validation")) {
    ValidationSpec& vs = e.validation;
    vs.warmup = static_cast<int>(v->integer_or("warmup", 0, 1000, vs.warmup));
    vs.iterations = static_cast<int>(v->integer_or("iterations", 5, 100000, vs.iterations));
    vs.order = v->boolean_or("order", vs.order);
    if (auto t = v->object_if("tolerance")) {
      vs.time_median = t->number_or("time_median", 0, 1e6, vs.time_median);
      vs.time_max = t->number_or("time_max", 0, 1e6, vs.time_max);
      vs.memory_max = t->number_or("memory_max", 0, 1e6, vs.memory_max);
      t->finish();
    }
    if (v->has("speedups")) {
      for (auto& sp : v->objects("speedups")) {
        SpeedupCheck c;
        c.faster = sp.string("faster");
        c.than = sp.string("than");
        c.tolerance = sp.number_or("tolerance", 0, 1e6, c.tolerance);
        for (const std::string* label : {&c.faster, &c.than}) {
          bool found = false;
          for (const auto& st : e.strategies) found = found || st.label == *label;
          if (!found)
            sp.fail(label == &c.faster ? "faster" : "than",
                    fmt::format("no strategy is labelled \"{}\"", *label));
        }
        sp.finish();
        vs.speedups.push_back(c);
      }
    }
    v->finish();
  }
  // A documented cap on the expansion, checked before anything is expanded: every unit is a search
  // (and a simulation, or a run) and its row is kept, so a few kilobytes of axes could otherwise ask
  // for tens of millions of units and the memory for all of them.
  double units = static_cast<double>(e.strategies.size());
  std::string product = fmt::format("{} strategies", e.strategies.size());
  for (const auto& [key, values] : e.axes) {
    units *= static_cast<double>(values.size());
    product += fmt::format(" x {} {}", values.size(), key);
  }
  if (units > static_cast<double>(kMaxUnits))
    r.fail_here(
        fmt::format("expands to {:.0f} units ({}), more than osdp runs from one file ({}); split the "
                    "experiment into several files",
                    units, product, kMaxUnits));
  r.finish();
  if (e.base.model.empty()) bad(file, "/base/model", "required (a built-in model name or a file)");
  if (e.base.cluster.empty()) bad(file, "/base/cluster", "required (a built-in cluster name or a file)");
  return e;
}

Experiment load_experiment(const std::string& path) {
  return read_experiment(costmodel::load_json_file(path), path);
}

std::vector<Unit> expand(const Experiment& e) {
  std::vector<Config> configs{e.base};
  for (const auto& [key, values] : e.axes) {
    std::vector<Config> next;
    next.reserve(configs.size() * values.size());
    for (const auto& c : configs)
      for (const auto& v : values) {
        Config x = c;
        apply(x, key, v, e.file, "/axes/" + key);
        next.push_back(std::move(x));
      }
    configs = std::move(next);
  }
  std::vector<Unit> units;
  units.reserve(configs.size() * e.strategies.size());
  for (const auto& c : configs)
    for (const auto& s : e.strategies) units.push_back({static_cast<int>(units.size()), c, s});
  return units;
}

}  // namespace osdp::experiments
