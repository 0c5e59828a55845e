// Building a measured job (experiments/measured.hpp): from an experiment's units or from plan files.
#include "experiments/measured.hpp"

#include <cstdint>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/json_reader.hpp"

namespace osdp::experiments {
namespace {

// FNV-1a, 64 bits: a plan file's identity for --resume does not depend on the standard library.
std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

MeasuredJob measured_job(const Experiment& e) {
  MeasuredJob job;
  job.name = e.name;
  job.output = e.output;
  job.validation = e.validation;
  job.source = e.source;
  std::map<std::string, costmodel::ClusterSpec> clusters;  // each cluster file read once
  for (Unit& u : expand(e)) {
    MeasuredItem item;
    item.index = u.index;
    item.key = u.key();
    item.group = to_json(u.config).dump();
    item.label = u.strategy.label;
    auto it = clusters.find(u.config.cluster);
    if (it == clusters.end())
      it = clusters.emplace(u.config.cluster, costmodel::load_cluster(u.config.cluster)).first;
    item.world_size = costmodel::resized(it->second, u.config.world_size).world_size();
    item.origin =
        fmt::format("unit {} ({}, {} on {})", u.index, u.strategy.label, u.config.model, u.config.cluster);
    item.unit = std::move(u);
    job.items.push_back(std::move(item));
  }
  return job;
}

MeasuredJob measured_job(const std::vector<std::string>& plan_files, const ValidationSpec& validation) {
  MeasuredJob job;
  job.name = "plans";
  job.output = "results/validate-plans";
  job.validation = validation;
  job.source = {{"plan_files", plan_files}};
  for (std::size_t i = 0; i < plan_files.size(); ++i) {
    const std::string& path = plan_files[i];
    MeasuredItem item;
    item.index = static_cast<int>(i);
    item.plan = costmodel::read_plan(costmodel::load_json_file(path), path);
    item.key = fmt::format("plan:{}:{:016x}", path, fnv1a(costmodel::to_json(*item.plan).dump()));
    item.group = "plan files";
    item.label = std::filesystem::path(path).stem().string();
    item.origin = fmt::format("plan file {}", path);
    item.world_size = item.plan->cluster.world_size();
    job.items.push_back(std::move(item));
  }
  return job;
}

void check_world_size(const MeasuredJob& job, int ranks) {
  for (const auto& item : job.items)
    if (item.world_size != ranks)
      throw UsageError(fmt::format("{}: the plan is for {} ranks, the job has {}; run it with -np {}",
                                   item.origin, item.world_size, ranks, item.world_size));
}

}  // namespace osdp::experiments
