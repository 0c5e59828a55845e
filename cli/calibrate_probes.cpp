// osdp calibrate's probes (calibrate_probes.hpp).
#include "cli/calibrate_probes.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "costmodel/calibration.hpp"
#include "costmodel/files.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/provenance.hpp"
#include "experiments/measured.hpp"
#include "experiments/probes.hpp"
#include "experiments/torch_measured.hpp"
#include "validate/cpu/cpu_device.hpp"
#include "validate/executor/self_communicator.hpp"

namespace osdp::cli {
namespace {

experiments::ValidationOptions probe_options(const ProbeRun& run) {
  experiments::ValidationOptions o;
  o.calibration = run.calibration;
  o.out_dir = run.set.output;
  o.force = true;   // the probes belong to this calibration: a new one times them again
  o.check = false;  // what is wanted is the steps' time
  o.selective = false;
  if (!run.quiet)
    o.progress = [](const std::string& line) { std::cerr << "calibrate: probes: " << line << "\n"; };
  return o;
}

std::string freedom(int dof) {
  return fmt::format("{} degree{} of freedom", dof, dof == 1 ? "" : "s");
}

// The step's level (costmodel/composition.hpp), a line of the summary.
void print_level(const nlohmann::json& fit) {
  const auto pct = [](double factor) { return fmt::format("{:+.1f}%", 100 * (factor - 1)); };
  if (!fit["level"].is_number()) {
    std::cout << fmt::format(
        "  step level     not fitted: the probes ran {} group(s) of a model and micro-batch, two are "
        "needed; the repeats' drift is drawn\n",
        fit["level_groups"].size());
    return;
  }
  std::vector<double> groups;
  for (const auto& [k, v] : fit["level_groups"].items()) groups.push_back(v.get<double>());
  const auto [lo, hi] = std::minmax_element(groups.begin(), groups.end());
  std::cout << fmt::format(
      "  step level     {} (whole steps against the calibrated prices; {} groups of {} models, {} to {}): "
      "every price is scaled by it, its spread {:.1f}% (a further model's, to {}) drawn for the whole "
      "step in place of the repeats' drift\n",
      pct(fit["level"].get<double>()), groups.size(), fit.value("level_workloads", 0), pct(*lo), pct(*hi),
      100 * fit["level_sigma"].get<double>(), freedom(fit.value("level_dof", 0)));
  // The planned models' own levels (--probe-batch): each prices that model's plans.
  if (!fit.contains("level_models")) return;
  for (const auto& [model, own] : fit["level_models"].items()) {
    if (std::find(experiments::kProbeModels.begin(), experiments::kProbeModels.end(), model) !=
        experiments::kProbeModels.end())
      continue;
    std::cout << fmt::format(
        "  model level    {} {} ({} micro-batch{}): its plans are priced at it, its spread {:.1f}% (a "
        "further micro-batch's, to {})\n",
        model, pct(own["level"].get<double>()), own.value("groups", 0),
        own.value("groups", 0) == 1 ? "" : "es", 100 * own["level_sigma"].get<double>(),
        freedom(own.value("level_dof", 0)));
  }
}

// Rank 0: the probes' validation.csv and summary.json beside their rows, the fit into the calibration
// file's provenance, and a line of the summary.
void record(const ProbeRun& run, const experiments::MeasuredJob& job,
            const std::vector<experiments::UnitResult>& rows) {
  nlohmann::json prov = costmodel::machine(run.set.world_size, 1);
  prov["probes_of"] = std::filesystem::path(run.calibration).filename().string();
  (void)experiments::write_validation_outputs(run.set.output, job, rows,
                                              experiments::summarize(rows, job.validation), prov);
  nlohmann::json fit = experiments::composition_fit(rows);
  fit["models"] = experiments::kProbeModels;
  if (!run.set.batches.empty()) fit["planned"] = {{"models", run.set.models}, {"batches", run.set.batches}};
  fit["cluster"] = run.set.cluster;
  fit["rows"] = std::filesystem::path(run.set.output).filename().string() + "/rows.jsonl";
  nlohmann::json cal = costmodel::load_json_file(run.calibration);
  cal["provenance"]["fit"]["composition"] = fit;
  costmodel::write_file_atomic(run.calibration, cal.dump(2) + "\n");
  // A variance as the standard deviation it is, in percent.
  const auto pct = [](double v) { return fmt::format("{:.1f}%", 100 * std::sqrt(std::max(0.0, v))); };
  print_level(fit);
  if (fit.value("dof", 0) == 0) {
    std::cout << fmt::format("  composition    not fitted: no two probes of a group ran ({} plans)\n",
                             fit.value("plans", 0));
    return;
  }
  std::cout << fmt::format(
      "  composition    {} between strategies, drawn per strategy ({} probes of {} in {} groups: their "
      "residuals spread {}, of which the steps' noise {} and the calibration's errors {})\n",
      fmt::format("{:.1f}%", 100 * fit["sigma"].get<double>()), fit.value("plans", 0),
      fmt::join(experiments::kProbeModels, ", "), fit.value("groups", 0), pct(fit.value("variance", 0.0)),
      pct(fit.value("noise", 0.0)), pct(fit.value("drawn", 0.0)));
}

}  // namespace

std::string probes_dir(const std::string& calibration) {
  std::filesystem::path p(calibration);
  return (p.parent_path() / (p.stem().string() + ".probes")).string();
}

#ifdef OSDP_HAVE_MPI_BACKEND
void run_probes(const ProbeRun& run, validate::BackendSession& backend, validate::Communicator& comm) {
  const experiments::MeasuredJob job = experiments::probe_job(run.set);
  experiments::ValidationOptions o = probe_options(run);
  o.one_at_a_time = backend.plans_one_at_a_time();
  const experiments::DeviceFactory make_device = [&backend](const costmodel::Plan& plan) {
    return backend.make_device(plan.cluster.overlap.enabled && plan.prefetch > 0);
  };
  const auto rows = experiments::run_measured(job, comm, make_device, o);
  if (comm.rank() == 0) record(run, job, rows);
}
#endif

void run_torch_probes(const ProbeRun& run, validate::TorchJobOptions torch) {
  const experiments::MeasuredJob job = experiments::probe_job(run.set);
  experiments::ValidationOptions o = probe_options(run);
  torch.check = false;
  o.run_group = experiments::torch_group_runner(torch);
  validate::CpuDevice device;
  validate::SelfCommunicator self(device);
  const experiments::DeviceFactory no_device =
      [](const costmodel::Plan&) -> std::unique_ptr<validate::Device> {
    throw osdp::Error("the torch backend makes no osdp device");
  };
  record(run, job, experiments::run_measured(job, self, no_device, o));
}

}  // namespace osdp::cli
