// osdp._osdp: the Python package's native part (nanobind). Every function takes and returns JSON text;
// python/osdp/__init__.py turns it into plain Python objects. The work is the C++ libraries': the same
// loading, search and simulation as `osdp plan` and `osdp simulate`.
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/plan.hpp"
#include "osdp_version.hpp"
#include "search/report.hpp"
#include "search/request.hpp"
#include "sim/replay.hpp"
#include "sim/report.hpp"

namespace nb = nanobind;
using nlohmann::json;

namespace {

std::string tool_version() {
  return std::string(OSDP_VERSION) + "+" + OSDP_GIT_HASH;
}

std::vector<std::string> catalog(const std::string& kind) {
  std::vector<std::string> names;
  for (const auto& e : osdp::costmodel::list_catalog(kind)) names.push_back(e.name);
  return names;
}

std::string load(const std::string& kind, const std::string& name_or_path, const std::string& cluster) {
  using namespace osdp::costmodel;
  if (kind == "model") return to_json(load_model(name_or_path)).dump();
  if (kind == "cluster") return to_json(load_cluster(name_or_path)).dump();
  const ComputeSpec base = cluster.empty() ? ComputeSpec{} : load_cluster(cluster).compute;
  return to_json(load_calibration(name_or_path, base)).dump();
}

// {model, cluster, ...PlanRequest's fields} -> what `osdp plan --json` prints (plan included when one fits).
std::string plan(const std::string& request_json) {
  const json q = osdp::costmodel::parse_json_text(request_json, "plan() arguments");
  osdp::search::PlanRequest r;
  r.model = q.at("model").get<std::string>();
  r.cluster = q.at("cluster").get<std::string>();
  r.calibration = q.value("calibration", std::string());
  r.memory = q.value("memory", std::string());
  r.strategy = q.value("strategy", r.strategy);
  r.batch = q.value("batch", r.batch);
  r.checkpoint = q.value("checkpoint", r.checkpoint);
  r.tier = q.value("tier", r.tier);
  r.split_max = q.value("split_max", r.split_max);
  r.prefetch = q.value("prefetch", r.prefetch);
  r.regather = q.value("checkpoint_regather", r.regather);
  r.groups = q.value("groups", r.groups);
  r.dfs_budget = q.value("dfs_budget", r.dfs_budget);
  const auto p = osdp::search::prepare_search(r, tool_version());
  nb::gil_scoped_release release;
  const osdp::search::SearchResult res =
      osdp::search::run_search(p->workload, *p->model, *p->strategy, p->options);
  json j = osdp::search::result_json(p->ctx, p->workload, res);
  j["model"] = p->ctx.model.name;
  j["cluster"] = p->ctx.cluster.name;
  j["world_size"] = p->ctx.cluster.world_size();
  return j.dump();
}

// A plan file's JSON -> what `osdp simulate --json` prints (summary, analytic figures, difference).
std::string simulate(const std::string& plan_json, const std::string& origin, bool symmetric) {
  using namespace osdp;
  const costmodel::Plan p = costmodel::read_plan(costmodel::parse_json_text(plan_json, origin), origin);
  sim::SimOptions options;
  options.symmetric = symmetric;
  nb::gil_scoped_release release;
  const sim::Replay run = sim::replay_plan(p, options);
  json j = sim::summary_json(run.schedule, run.result);
  const double samples = static_cast<double>(p.cluster.world_size()) * p.batch_size;
  const double time = j["iteration_time_s"].get<double>();
  const double an_time =
      p.predicted_iteration_time_s > 0 ? p.predicted_iteration_time_s : run.analytic_time_s;
  const double an_peak =
      p.predicted_iteration_time_s > 0 ? p.predicted_peak_memory_bytes : run.analytic_peak_bytes;
  j["model"] = p.model.name;
  j["cluster"] = p.cluster.name;
  j["throughput_samples_per_s"] = time > 0 ? samples / time : 0.0;
  j["analytic"] = {{"iteration_time_s", an_time},
                   {"peak_memory_bytes", an_peak},
                   {"throughput_samples_per_s", an_time > 0 ? samples / an_time : 0.0}};
  const double peak = j["peak_memory_bytes"].get<double>();
  j["relative_difference"] = {{"iteration_time", an_time > 0 ? (time - an_time) / an_time : 0.0},
                              {"peak_memory", an_peak > 0 ? (peak - an_peak) / an_peak : 0.0}};
  return j.dump();
}

}  // namespace

NB_MODULE(_osdp, m) {
  m.doc() =
      "osdp's C++ libraries: models, clusters, calibrations, the search and the simulator (JSON in, JSON "
      "out)";
  // osdp's errors: bad input (a file, a JSON pointer) and bad usage, both ValueErrors to Python.
  static nb::exception<osdp::InputError> input_error(m, "InputError", PyExc_ValueError);
  static nb::exception<osdp::UsageError> usage_error(m, "UsageError", PyExc_ValueError);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const osdp::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def("version", &tool_version, "osdp's version and commit");
  m.def("catalog", &catalog, nb::arg("kind"), "Built-in names of a kind: models, clusters or calibrations");
  m.def("load", &load, nb::arg("kind"), nb::arg("name_or_path"), nb::arg("cluster") = "",
        "A model, cluster or calibration (name or file) as normalised JSON text");
  m.def("plan", &plan, nb::arg("request_json"),
        "Search a plan; returns osdp plan --json's object as JSON text");
  m.def("simulate", &simulate, nb::arg("plan_json"), nb::arg("origin"), nb::arg("symmetric") = false,
        "Simulate a plan; returns osdp simulate --json's object as JSON text");
}
