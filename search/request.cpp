#include "search/request.hpp"

#include <iostream>
#include <stdexcept>

#include <fmt/format.h>

#include "costmodel/bounds.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/units.hpp"

namespace osdp::search {

double parse_memory_option(const std::string& text, const char* option) {
  std::string err;
  auto v = costmodel::parse_quantity(text, costmodel::UnitKind::kBytes, &err);
  if (!v) throw UsageError(fmt::format("{}: {}", option, err));
  const std::string problem =
      costmodel::bound_problem(*v, costmodel::UnitKind::kBytes, costmodel::bounds::kDeviceMemory, text);
  if (!problem.empty()) throw UsageError(fmt::format("{}: {}", option, problem));
  return *v;
}

std::unique_ptr<PreparedSearch> prepare_search(const PlanRequest& a, const std::string& tool_version) {
  auto p = std::make_unique<PreparedSearch>();
  PlanContext& ctx = p->ctx;
  ctx.tool_version = tool_version;
  ctx.model = costmodel::load_model(a.model);
  ctx.cluster = costmodel::load_cluster(a.cluster);
  const std::string cal_name = !a.calibration.empty() ? a.calibration : ctx.cluster.calibration;
  if (!cal_name.empty()) ctx.calibration = costmodel::load_calibration(cal_name, ctx.cluster.compute);
  if (a.tier != "extended" && a.tier != "paper")
    throw UsageError(fmt::format("--tier: expected extended or paper, got \"{}\"", a.tier));
  ctx.cost_options.tier = a.tier == "paper" ? costmodel::Tier::kPaper : costmodel::Tier::kExtended;
  ctx.cost_options.checkpoint_regather = a.regather;
  if (a.prefetch < 0 || a.prefetch > 64)
    throw UsageError(fmt::format("--prefetch: expected 0 to 64, got {}", a.prefetch));
  ctx.cost_options.prefetch = a.prefetch;

  p->workload = costmodel::lower(ctx.model);
  p->model.emplace(ctx.cluster, ctx.calibration ? &*ctx.calibration : nullptr, ctx.model.precision,
                   ctx.cost_options);
  SearchOptions& opt = p->options;
  if (a.split_max < 1 || a.split_max > 64 || (a.split_max & (a.split_max - 1)) != 0)
    throw UsageError(fmt::format(
        "--split-max: expected a power of two from 1 to 64 (slices split in halves), got {}", a.split_max));
  opt.space.split_max = a.split_max;
  opt.space.groups = a.groups;
  if (a.checkpoint != "auto" && a.checkpoint != "on" && a.checkpoint != "off")
    throw UsageError(fmt::format("--checkpoint: expected auto, on or off, got \"{}\"", a.checkpoint));
  opt.space.checkpoint = a.checkpoint == "on"    ? CheckpointPolicy::kOn
                         : a.checkpoint == "off" ? CheckpointPolicy::kOff
                                                 : CheckpointPolicy::kAuto;
  opt.memory_limit_bytes =
      a.memory.empty() ? ctx.cluster.memory_bytes : parse_memory_option(a.memory, "--memory");
  if (opt.memory_limit_bytes > ctx.cluster.memory_bytes)
    std::cerr << fmt::format(
        "osdp plan: warning: --memory {} is more than the {} of a {} device in cluster {}: the plan "
        "is for a device that large\n",
        costmodel::format_bytes(opt.memory_limit_bytes), costmodel::format_bytes(ctx.cluster.memory_bytes),
        ctx.cluster.device_name, ctx.cluster.name);
  opt.reserve_bytes = ctx.cluster.reserve_bytes;
  if (a.batch != "auto") {
    try {
      std::size_t used = 0;
      const int b = std::stoi(a.batch, &used);
      if (used != a.batch.size() || b < 1) throw std::invalid_argument("batch");
      opt.batch = b;
    } catch (const std::exception&) {
      throw UsageError(fmt::format("--batch: expected a positive integer or \"auto\", got \"{}\"", a.batch));
    }
  }
  p->registry = default_strategies({a.dfs_budget});
  p->strategy = &p->registry.get(a.strategy);
  return p;
}

}  // namespace osdp::search
