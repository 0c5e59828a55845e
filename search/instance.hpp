// The search problem of one batch size: a multiple-choice knapsack with a max-transient term.
// Pick one item per group; the step takes  T = T0 + sum(time)  and peaks at
//   M = M0 + sum(persistent) + max(transient),  subject to  M <= capacity.
// Minimising T for a fixed batch maximises throughput at that batch.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace osdp::search {

struct Item {
  double time_s = 0;
  double persistent_bytes = 0;
  double transient_bytes = 0;
};

struct Group {
  std::string name;
  std::vector<Item> items;
  // What each item means ("ZDP+ckpt"); shared by groups of the same shape, may be null.
  std::shared_ptr<const std::vector<std::string>> labels;
};

struct Instance {
  int batch = 1;
  double capacity_bytes = 0;
  double fixed_time_s = 0;
  double fixed_memory_bytes = 0;
  std::vector<Group> groups;
  // Optional: groups with the same class have identical items (every layer of a model). Solvers
  // compute it when it is left empty.
  std::vector<int> group_class;
};

// group_class when given, else classes found by comparing the groups' items.
std::vector<int> group_classes(const Instance& inst);

struct Solution {
  bool feasible = false;
  std::vector<int> chosen;  // item index per group
  double time_s = std::numeric_limits<double>::infinity();
  double peak_bytes = std::numeric_limits<double>::infinity();
  std::int64_t nodes = 0;  // search nodes or DP states visited
  bool complete = true;    // false when a node budget stopped the search early
  bool bounded = false;    // selections fit, but none is faster than the time cutoff it was given
};

// Time and peak of a given selection; feasible when the peak fits.
Solution evaluate(const Instance& inst, const std::vector<int>& chosen);

// The smallest peak any selection reaches (the "smallest memory that would fit").
double min_peak_bytes(const Instance& inst);

// The audit format of `osdp plan --emit-costs` (schema_version 1).
nlohmann::json to_costs_json(const Instance& inst, const Solution& sol);

}  // namespace osdp::search
