#include "search/instance.hpp"

#include <algorithm>
#include <cassert>
#include <set>

namespace osdp::search {

Solution evaluate(const Instance& inst, const std::vector<int>& chosen) {
  assert(chosen.size() == inst.groups.size());
  Solution s;
  s.chosen = chosen;
  double time = inst.fixed_time_s, pers = inst.fixed_memory_bytes, trans = 0;
  for (std::size_t g = 0; g < chosen.size(); ++g) {
    const Item& it = inst.groups[g].items.at(static_cast<std::size_t>(chosen[g]));
    time += it.time_s;
    pers += it.persistent_bytes;
    trans = std::max(trans, it.transient_bytes);
  }
  s.time_s = time;
  s.peak_bytes = pers + trans;
  s.feasible = s.peak_bytes <= inst.capacity_bytes;
  return s;
}

double min_peak_bytes(const Instance& inst) {
  // For each threshold T on the largest transient, take each group's smallest persistent item
  // among those with transient <= T; the best over all T is exact.
  std::set<double> thresholds;
  for (const auto& g : inst.groups)
    for (const auto& it : g.items) thresholds.insert(it.transient_bytes);
  double best = std::numeric_limits<double>::infinity();
  for (double t : thresholds) {
    double pers = inst.fixed_memory_bytes;
    bool ok = true;
    for (const auto& g : inst.groups) {
      double m = std::numeric_limits<double>::infinity();
      for (const auto& it : g.items)
        if (it.transient_bytes <= t) m = std::min(m, it.persistent_bytes);
      if (m == std::numeric_limits<double>::infinity()) {
        ok = false;
        break;
      }
      pers += m;
    }
    if (ok) best = std::min(best, pers + t);
  }
  return best;
}

nlohmann::json to_costs_json(const Instance& inst, const Solution& sol) {
  nlohmann::json j;
  j["schema_version"] = 1;
  j["batch_size"] = inst.batch;
  j["memory_capacity_bytes"] = inst.capacity_bytes;
  j["fixed"] = {{"time_s", inst.fixed_time_s}, {"memory_bytes", inst.fixed_memory_bytes}};
  nlohmann::json ops = nlohmann::json::array();
  for (std::size_t g = 0; g < inst.groups.size(); ++g) {
    nlohmann::json choices = nlohmann::json::array();
    for (const auto& it : inst.groups[g].items)
      choices.push_back({{"label", it.label},
                         {"time_s", it.time_s},
                         {"persistent_bytes", it.persistent_bytes},
                         {"transient_bytes", it.transient_bytes}});
    nlohmann::json op{{"name", inst.groups[g].name}, {"choices", choices}};
    if (sol.feasible) op["chosen"] = sol.chosen[g];
    ops.push_back(op);
  }
  j["operators"] = ops;
  if (sol.feasible) j["objective"] = {{"time_s", sol.time_s}, {"peak_memory_bytes", sol.peak_bytes}};
  return j;
}

}  // namespace osdp::search
