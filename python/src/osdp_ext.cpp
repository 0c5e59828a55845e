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
#include "costmodel/provenance.hpp"
#include "costmodel/workload.hpp"
#include "search/report.hpp"
#include "search/request.hpp"
#include "sim/replay.hpp"
#include "sim/report.hpp"

namespace nb = nanobind;
using nlohmann::json;

namespace {

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

// A model (name or file) lowered to the workload IR (costmodel::lower) -> {model, pp, parameters,
// operators: [{name, kind, layer, hidden, parameters, weights: [{name, rows, cols}]}]}: the operators
// a plan chooses for, with the parameters osdp counts in each.
std::string workload(const std::string& name_or_path, int pp) {
  using namespace osdp::costmodel;
  const ModelSpec model = load_model(name_or_path);
  if (pp < 1 || pp > kMaxLayers) throw osdp::UsageError("workload(): pp must be a positive pipeline degree");
  const Workload w = lower(model, pp);
  json ops = json::array();
  for (const Operator& op : w.operators) {
    json weights = json::array();
    for (const Weight& x : op.weights)
      weights.push_back({{"name", x.name}, {"rows", x.rows}, {"cols", x.cols}});
    ops.push_back({{"name", op.name},
                   {"kind", to_string(op.kind)},
                   {"layer", op.layer},
                   {"hidden", op.hidden},
                   {"parameters", op.parameters()},
                   {"weights", std::move(weights)}});
  }
  return json{
      {"model", model.name}, {"pp", pp}, {"parameters", w.parameters()}, {"operators", std::move(ops)}}
      .dump();
}

// {model, cluster, ...PlanRequest's fields} -> what `osdp plan --json` prints (search::report_json).
std::string plan(const std::string& request_json) {
  const json q = osdp::costmodel::parse_json_text(request_json, "plan() arguments");
  const osdp::search::PlanRequest r = osdp::search::read_plan_request(q, "plan() arguments");
  nb::gil_scoped_release release;
  return osdp::search::report_json(osdp::search::run_request(r)).dump();
}

// A plan file's JSON, read and checked against its model as `osdp simulate` reads it -> the plan as
// this osdp writes it.
std::string read_plan(const std::string& plan_json, const std::string& origin) {
  using namespace osdp;
  return costmodel::to_json(costmodel::read_plan(costmodel::parse_json_text(plan_json, origin), origin))
      .dump();
}

// A plan file's JSON -> what `osdp simulate --json` prints (sim::simulation_json).
std::string simulate(const std::string& plan_json, const std::string& origin, bool symmetric, int draws) {
  using namespace osdp;
  const costmodel::Plan p = costmodel::read_plan(costmodel::parse_json_text(plan_json, origin), origin);
  sim::SimOptions options;
  options.symmetric = symmetric;
  nb::gil_scoped_release release;
  const sim::Replay run = sim::replay_plan(p, options);
  nlohmann::json j = sim::simulation_json(p, run, origin, symmetric ? "symmetric" : "all", {},
                                          p.predicted_iteration_time_s <= 0);
  sim::add_intervals(j, p, draws, options);
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
  m.def("version", &osdp::costmodel::tool_version, "osdp's version and commit");
  m.def("catalog", &catalog, nb::arg("kind"), "Built-in names of a kind: models, clusters or calibrations");
  m.def("load", &load, nb::arg("kind"), nb::arg("name_or_path"), nb::arg("cluster") = "",
        "A model, cluster or calibration (name or file) as normalised JSON text");
  m.def("workload", &workload, nb::arg("name_or_path"), nb::arg("pp") = 1,
        "A model lowered to osdp's operators (per operator its parameters and weight shapes) as JSON text");
  m.def("plan", &plan, nb::arg("request_json"),
        "Search a plan; returns osdp plan --json's object as JSON text");
  m.def("read_plan", &read_plan, nb::arg("plan_json"), nb::arg("origin"),
        "Read and check a plan file's JSON; returns it as this osdp writes it");
  m.def("simulate", &simulate, nb::arg("plan_json"), nb::arg("origin"), nb::arg("symmetric") = false,
        nb::arg("draws") = osdp::costmodel::kDefaultDraws,
        "Simulate a plan; returns osdp simulate --json's object as JSON text");
}
