#include "search/space.hpp"

#include <algorithm>
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
    case CheckpointPolicy::kSelective:
      return "selective";
  }
  return "?";
}

std::vector<costmodel::Recompute> recompute_policy(const SpaceOptions& space) {
  using costmodel::Recompute;
  switch (space.checkpoint) {
    case CheckpointPolicy::kOff:
      return {Recompute::kNone};
    case CheckpointPolicy::kOn:
      return {Recompute::kFull};
    case CheckpointPolicy::kSelective:
      return {space.selective ? Recompute::kSelective : Recompute::kNone};
    case CheckpointPolicy::kAuto:
      break;
  }
  if (space.selective) return {Recompute::kNone, Recompute::kFull, Recompute::kSelective};
  return {Recompute::kNone, Recompute::kFull};
}

std::vector<costmodel::Recompute> recompute_options(const costmodel::Operator& op,
                                                    const SpaceOptions& space) {
  using costmodel::Recompute;
  if (!op.checkpointable) return {Recompute::kNone};
  std::vector<Recompute> out;
  for (Recompute r : recompute_policy(space)) {
    if (r == Recompute::kSelective && !op.selectable()) r = Recompute::kNone;
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  }
  return out;
}

std::vector<int> ep_degrees(const costmodel::Operator& op, const SpaceOptions& space, int group_ranks) {
  std::vector<int> out{1};
  if (op.experts == 0 || group_ranks < 2) return out;
  const auto offered = [&](int e) {
    return space.ep.empty() || std::find(space.ep.begin(), space.ep.end(), e) != space.ep.end();
  };
  for (int e = 2; e <= group_ranks; e *= 2)
    if (offered(e) && costmodel::ep_allowed(op, e, group_ranks)) out.push_back(e);
  // Degrees asked for without 1: EP wherever one of them fits (1 only where none does).
  if (out.size() > 1 && !offered(1)) out.erase(out.begin());
  return out;
}

std::vector<Choice> choices_for(const costmodel::Operator& op, const SpaceOptions& space, int group_ranks) {
  std::vector<Choice> out;
  const std::vector<int> eps = ep_degrees(op, space, group_ranks);
  for (const int e : eps) {
    const costmodel::Operator sliced = e > 1 ? costmodel::ep_slice(op, e, 1.0) : costmodel::Operator{};
    const costmodel::Operator& cut = e > 1 ? sliced : op;
    for (const costmodel::Recompute r : recompute_options(op, space)) {
      auto add = [&](Choice c) {
        c.set_recompute(r);
        c.ep = e;
        out.push_back(c);
      };
      for (int n : cut.splits(space.split_max)) {
        // A split operator is not checkpointed selectively: in PyTorch its slices are FSDP2 units inside
        // the checkpointed region, whose all-gathers a selective recompute cannot replay.
        if (n > 1 && r == costmodel::Recompute::kSelective) continue;
        for (int k = 0; k <= n; ++k) {
          add(Choice{false, n, k});
          if (space.groups && e == 1) {
            add(Choice{false, n, k, false, /*node_group=*/true, /*two_level=*/false});
            add(Choice{false, n, k, false, /*node_group=*/false, /*two_level=*/true});
          }
        }
      }
      if (space.replicate) add(Choice{true, 1, 0});
    }
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
