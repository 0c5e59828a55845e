#include "search/instance.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <map>

#include "costmodel/bounds.hpp"

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

std::vector<int> group_classes(const Instance& inst) {
  if (inst.group_class.size() == inst.groups.size()) return inst.group_class;
  std::map<std::vector<std::array<double, 3>>, int> ids;
  std::vector<int> out;
  out.reserve(inst.groups.size());
  for (const auto& g : inst.groups) {
    std::vector<std::array<double, 3>> key;
    key.reserve(g.items.size());
    for (const auto& it : g.items) key.push_back({it.time_s, it.persistent_bytes, it.transient_bytes});
    out.push_back(ids.emplace(std::move(key), static_cast<int>(ids.size())).first->second);
  }
  return out;
}

double min_peak_bytes(const Instance& inst) {
  // For each threshold T on the largest transient, take each group's smallest persistent item
  // among those with transient <= T; the best over all T is exact. Identical groups count once,
  // times their number.
  using costmodel::kInf;
  const std::vector<int> cls = group_classes(inst);
  std::vector<int> count, rep;
  for (std::size_t g = 0; g < cls.size(); ++g) {
    if (cls[g] >= static_cast<int>(count.size())) {
      count.resize(cls[g] + 1, 0);
      rep.resize(cls[g] + 1, -1);
    }
    if (count[cls[g]]++ == 0) rep[cls[g]] = static_cast<int>(g);
  }
  std::vector<double> thresholds;
  for (int r : rep)
    for (const auto& it : inst.groups[r].items) thresholds.push_back(it.transient_bytes);
  std::sort(thresholds.begin(), thresholds.end());
  thresholds.erase(std::unique(thresholds.begin(), thresholds.end()), thresholds.end());
  double best = kInf;
  for (double t : thresholds) {
    double pers = inst.fixed_memory_bytes;
    for (std::size_t c = 0; c < rep.size() && pers < kInf; ++c) {
      double m = kInf;
      for (const auto& it : inst.groups[rep[c]].items)
        if (it.transient_bytes <= t) m = std::min(m, it.persistent_bytes);
      pers += count[c] * m;
    }
    best = std::min(best, pers + t);
  }
  if (inst.groups.empty()) best = inst.fixed_memory_bytes;
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
    const auto& items = inst.groups[g].items;
    const auto* labels = inst.groups[g].labels.get();
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& it = items[i];
      choices.push_back({{"label", labels && i < labels->size() ? (*labels)[i] : std::string()},
                         {"time_s", it.time_s},
                         {"persistent_bytes", it.persistent_bytes},
                         {"transient_bytes", it.transient_bytes}});
    }
    nlohmann::json op{{"name", inst.groups[g].name}, {"choices", choices}};
    if (sol.feasible) op["chosen"] = sol.chosen[g];
    ops.push_back(op);
  }
  j["operators"] = ops;
  if (sol.feasible) j["objective"] = {{"time_s", sol.time_s}, {"peak_memory_bytes", sol.peak_bytes}};
  return j;
}

}  // namespace osdp::search
