#include "search/space.hpp"

#include <map>

namespace osdp::search {

using costmodel::Choice;

const char* to_string(CheckpointPolicy p) {
  switch (p) {
    case CheckpointPolicy::kOff:
      return "off";
    case CheckpointPolicy::kOn:
      return "on";
    case CheckpointPolicy::kAuto:
      return "auto";
  }
  return "?";
}

std::vector<Choice> choices_for(const costmodel::Operator& op, const SpaceOptions& space) {
  std::vector<bool> ckpts;
  if (!op.checkpointable || space.checkpoint == CheckpointPolicy::kOff)
    ckpts = {false};
  else if (space.checkpoint == CheckpointPolicy::kOn)
    ckpts = {true};
  else
    ckpts = {false, true};
  std::vector<Choice> out;
  for (bool c : ckpts) {
    for (int n : op.splits(space.split_max))
      for (int k = 0; k <= n; ++k) {
        out.push_back(Choice{false, n, k, c});
        if (space.groups) {
          out.push_back(Choice{false, n, k, c, /*node_group=*/true, /*two_level=*/false});
          out.push_back(Choice{false, n, k, c, /*node_group=*/false, /*two_level=*/true});
        }
      }
    if (space.replicate) out.push_back(Choice{true, 1, 0, c});
  }
  return out;
}

BatchCosts price_batch(const costmodel::Workload& w, const costmodel::CostModel& model,
                       const SpaceOptions& space, int batch, double memory_limit_bytes,
                       double reserve_bytes) {
  BatchCosts bc;
  bc.batch = batch;
  bc.world_size = model.world_size();
  bc.capacity_bytes = memory_limit_bytes;
  bc.fixed_memory_bytes = reserve_bytes + costmodel::prefetch_reserve_bytes(w, model.options().prefetch);
  bc.fixed_time_s = 0;
  std::map<int, std::shared_ptr<const ShapePrices>> of_shape;
  bc.ops.reserve(w.operators.size());
  for (const auto& op : w.operators) {
    std::shared_ptr<const ShapePrices>& shared = of_shape[op.shape_id];
    if (!shared) {
      auto prices = std::make_shared<ShapePrices>();
      prices->choices = choices_for(op, space);
      prices->costs.reserve(prices->choices.size());
      auto labels = std::make_shared<std::vector<std::string>>();
      std::map<int, costmodel::CostModel::PhaseTimes> phases;  // per split: every choice of it shares them
      for (const auto& c : prices->choices) {
        const int n = c.replicate ? 1 : c.split;
        auto it = phases.find(n);
        if (it == phases.end()) it = phases.emplace(n, model.phases(op, batch, n)).first;
        prices->costs.push_back(model.cost(op, c, batch, w.bytes, it->second));
        labels->push_back(c.label());
      }
      prices->labels = std::move(labels);
      shared = std::move(prices);
    }
    bc.ops.push_back(PricedOperator{&op, shared});
  }
  return bc;
}

Instance empty_instance(const BatchCosts& costs) {
  Instance inst;
  inst.batch = costs.batch;
  inst.capacity_bytes = costs.capacity_bytes;
  inst.fixed_memory_bytes = costs.fixed_memory_bytes;
  inst.fixed_time_s = costs.fixed_time_s;
  return inst;
}

Instance to_instance(const BatchCosts& costs) {
  Instance inst = empty_instance(costs);
  inst.groups.reserve(costs.ops.size());
  for (const auto& po : costs.ops) {
    Group g;
    g.name = po.op->name;
    g.labels = po.labels();
    g.items.reserve(po.costs().size());
    for (const auto& c : po.costs()) g.items.push_back({c.time_s, c.persistent_bytes, c.transient_bytes});
    inst.groups.push_back(std::move(g));
    inst.group_class.push_back(po.op->shape_id);
  }
  return inst;
}

}  // namespace osdp::search
