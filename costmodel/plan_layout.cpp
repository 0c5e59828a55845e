// A plan's layout checked against its workload and cluster (plan.hpp: valid_degrees, check_layout).
#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"

namespace osdp::costmodel {

bool valid_degrees(const ClusterSpec& cluster, int pp, int t) {
  const int n = cluster.world_size(), g = cluster.devices_per_node;
  if (!power_of_two(pp) || !power_of_two(t) || n % pp != 0) return false;
  const int ns = n / pp;
  if (t > g || ns % t != 0) return false;
  if (ns > g && (ns % g != 0 || g % t != 0)) return false;
  return true;
}

void check_layout(const Plan& plan, const Workload& w, const ClusterSpec& cluster) {
  const int pp = plan.pp, units = static_cast<int>(w.units.size());
  if ((pp > 1) != (w.pp > 1))  // a pipeline's lowering (a tied table untied) serves every degree above 1
    throw UsageError(fmt::format("a plan of {} stages priced on a workload lowered for {}", pp, w.pp));
  if (!valid_degrees(cluster, pp, 1))
    throw UsageError(fmt::format("pipeline degree {} is not a power of two dividing the {} devices", pp,
                                 cluster.world_size()));
  if (plan.micro_batches < 1 || plan.batch_size < 1)
    throw UsageError(fmt::format("a plan of {} micro-batches of {} samples per device", plan.micro_batches,
                                 plan.batch_size));
  if (static_cast<int>(plan.stage_first_unit.size()) != pp || plan.unit_tp.size() != w.units.size() ||
      plan.choices.size() != w.operators.size())
    throw UsageError(fmt::format(
        "the plan has {} stages, {} TP degrees and {} choices for {} stages, {} units and {} operators",
        plan.stage_first_unit.size(), plan.unit_tp.size(), plan.choices.size(), pp, units,
        w.operators.size()));
  if (plan.stage_first_unit.front() != 0) throw UsageError("the first stage must start at the first unit");
  if (!power_of_two(plan.cp) || (cluster.world_size() / pp) % plan.cp != 0)
    throw UsageError(
        fmt::format("context-parallel degree {} is not a power of two dividing the stage's {} devices",
                    plan.cp, cluster.world_size() / pp));
  if (plan.cp > 1 && w.seq % (2 * plan.cp) != 0)
    throw UsageError(
        fmt::format("context-parallel degree {}: the sequence of {} tokens does not cut into {} "
                    "chunks (2 per rank, for the causal balance)",
                    plan.cp, w.seq, 2 * plan.cp));
  for (int s = 1; s < pp; ++s)
    if (plan.stage_first_unit[static_cast<std::size_t>(s)] <=
        plan.stage_first_unit[static_cast<std::size_t>(s - 1)])
      throw UsageError(fmt::format("stage {} is empty", s - 1));
  if (plan.stage_first_unit.back() >= units) throw UsageError(fmt::format("stage {} is empty", pp - 1));
  for (int u = 0; u < units; ++u) {
    const Unit& unit = w.units[static_cast<std::size_t>(u)];
    const int t = plan.unit_tp[static_cast<std::size_t>(u)];
    if (!valid_degrees(cluster, pp, t))
      throw UsageError(
          fmt::format("{}: TP degree {} is not a power of two dividing the stage's {} devices "
                      "within a node of {}",
                      unit.name, t, cluster.world_size() / pp, cluster.devices_per_node));
    for (const int oi : unit.ops) {
      const Operator& op = w.operators[static_cast<std::size_t>(oi)];
      if (!tp_allowed(op, t)) throw UsageError(fmt::format("{} cannot run at TP degree {}", op.name, t));
      if ((cluster.world_size() / pp) % (t * plan.cp) != 0)
        throw UsageError(fmt::format("{}: TP {} x CP {} ranks do not divide the stage's {}", op.name, t,
                                     plan.cp, cluster.world_size() / pp));
      if (!cp_allowed(tp_slice(op, t, false, w), plan.cp, plan.cp_all_to_all))
        throw UsageError(
            fmt::format("{}: its key/value heads at TP {} do not divide over {} context-parallel "
                        "ranks (the all-to-all variant splits heads)",
                        op.name, t, plan.cp));
      const Choice& c = plan.choices[static_cast<std::size_t>(oi)];
      if (c.ep == 1) continue;
      const int d = cluster.world_size() / pp / t;
      const Operator sliced = tp_slice(op, t, false, w);
      if (!ep_allowed(sliced, c.ep, d))
        throw UsageError(fmt::format(
            "{}: expert-parallel degree {} must be a power of two dividing its data-parallel group of {} "
            "ranks and the {} experts of its TP slice at degree {}",
            op.name, c.ep, d, sliced.experts > 0 ? sliced.split_units : 0, t));
      if (!c.replicate && ep_slice(sliced, c.ep, 1.0).splits(c.split).back() != c.split)
        throw UsageError(fmt::format("{}: its {} experts per rank at EP {} cannot be split {} ways", op.name,
                                     sliced.split_units / c.ep, c.ep, c.split));
    }
  }
}

}  // namespace osdp::costmodel
