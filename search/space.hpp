// The decision space of a search and its prices for one batch size.
#pragma once

#include <chrono>

#include <memory>
#include <string>
#include <vector>

#include "costmodel/choice.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"
#include "search/instance.hpp"

namespace osdp::search {

// off: none; on: full checkpointing of every operator that can be; selective: selective where an
// operator has the form (Operator::selectable), else none; auto: searched per operator among none,
// full and selective.
enum class CheckpointPolicy { kOff, kOn, kAuto, kSelective };
const char* to_string(CheckpointPolicy p);

struct SpaceOptions {
  int split_max = 1;  // slices per operator: 1, 2, 4, ... up to this
  CheckpointPolicy checkpoint = CheckpointPolicy::kOff;
  // Offer selective checkpointing at all (false: plans for osdp's executor, which runs none or full).
  bool selective = true;
  bool replicate = true;  // offer REPLICATE (classic DDP) per operator
  // Also offer every sharded choice node-sharded (HSDP) and with two-level collectives (issue 14);
  // only on a cluster of several nodes of several devices (CostModel::two_levels()).
  bool groups = false;
  // Expert-parallel degrees offered an MoE layer's MLP (Choice::ep): empty, every power of two that
  // divides its data-parallel group and its experts; {1}: none. Only where the caller gives the group
  // (choices_for's group_ranks), and with world shards and flat collectives.
  std::vector<int> ep;
};

// The recompute kinds the space's checkpoint policy (and `selective`) offers an operator that has
// every form, and those it offers `op` (selective becomes none where op has no selective form).
std::vector<costmodel::Recompute> recompute_policy(const SpaceOptions& space);
std::vector<costmodel::Recompute> recompute_options(const costmodel::Operator& op, const SpaceOptions& space);

// Every choice of one operator within the space: REPLICATE, and for each split n every k in 0..n
// (with `groups`, each of those also node-sharded and two-level), for each recompute kind offered;
// selective only unsplit (split 1 or REPLICATE). An MoE operator's TP slice `op` in a data-parallel
// group of group_ranks > 0 ranks also takes each expert-parallel degree e > 1 the space offers
// (costmodel::ep_allowed) with REPLICATE and the world/flat choices of every split of its EP slice.
std::vector<costmodel::Choice> choices_for(const costmodel::Operator& op, const SpaceOptions& space,
                                           int group_ranks = 0);
// The expert-parallel degrees (ascending) `space` offers the TP slice `op` in a group of group_ranks:
// 1, and those of space.ep that ep_allowed admits; without 1 when space.ep lacks it and another fits.
std::vector<int> ep_degrees(const costmodel::Operator& op, const SpaceOptions& space, int group_ranks);

// The choices of one operator shape and their prices at one batch size, shared by every operator of
// the shape (the layers of a model), so that a pricing costs a pointer per operator, not a copy.
struct ShapePrices {
  std::vector<costmodel::Choice> choices;
  std::vector<costmodel::ChoiceCost> costs;
  std::shared_ptr<const std::vector<std::string>> labels;  // choice labels
};

struct PricedOperator {
  const costmodel::Operator* op = nullptr;
  std::shared_ptr<const ShapePrices> prices;
  const std::vector<costmodel::Choice>& choices() const { return prices->choices; }
  const std::vector<costmodel::ChoiceCost>& costs() const { return prices->costs; }
  const std::shared_ptr<const std::vector<std::string>>& labels() const { return prices->labels; }
};

struct BatchCosts {
  // Past it a solver returns the best selection it has (complete false): the search's time budget.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  int batch = 1;
  int world_size = 1;
  double capacity_bytes = 0;
  double fixed_memory_bytes = 0;
  double fixed_time_s = 0;
  std::vector<PricedOperator> ops;
};

// Prices every choice of every operator (once per shape: identical layers share the work).
BatchCosts price_batch(const costmodel::Workload& w, const costmodel::CostModel& model,
                       const SpaceOptions& space, int batch, double memory_limit_bytes, double reserve_bytes);

// The instance of the batch's fixed terms and capacity, without groups (solvers that build their
// own groups start from it).
Instance empty_instance(const BatchCosts& costs);

// The instance with every priced choice as an item (group = operator).
Instance to_instance(const BatchCosts& costs);

}  // namespace osdp::search
