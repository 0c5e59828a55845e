// The search problem of one batch size: a multiple-choice knapsack with a max-transient term.
// Pick one item per group; the step takes  T = T0 + sum(time)  and peaks at
//   M = M0 + sum(persistent) + max(transient),  subject to  M <= capacity.
// Minimising T for a fixed batch maximises throughput at that batch.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace osdp::search {

struct Item {
  double time_s = 0;
  double persistent_bytes = 0;
  double transient_bytes = 0;
  std::string label;
};

struct Group {
  std::string name;
  std::vector<Item> items;
};

struct Instance {
  int batch = 1;
  double capacity_bytes = 0;
  double fixed_time_s = 0;
  double fixed_memory_bytes = 0;
  std::vector<Group> groups;
};

struct Solution {
  bool feasible = false;
  std::vector<int> chosen;  // item index per group
  double time_s = std::numeric_limits<double>::infinity();
  double peak_bytes = std::numeric_limits<double>::infinity();
  std::int64_t nodes = 0;  // search nodes or DP states visited
  bool complete = true;    // false when a node budget stopped the search early
};

// Time and peak of a given selection; feasible when the peak fits.
Solution evaluate(const Instance& inst, const std::vector<int>& chosen);

// The smallest peak any selection reaches (the "smallest memory that would fit").
double min_peak_bytes(const Instance& inst);

// The audit format of `osdp plan --emit-costs` (schema_version 1).
nlohmann::json to_costs_json(const Instance& inst, const Solution& sol);

}  // namespace osdp::search
