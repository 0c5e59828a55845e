// The model's composition error (composition.hpp).
#include "costmodel/composition.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <set>

#include "costmodel/calibration_fit.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/uncertainty.hpp"

namespace osdp::costmodel {

namespace {

// What a composition factor's key starts with (distinct from the cost model's points).
constexpr std::int64_t kCompositionPoint = 100;

double mean_of(const std::vector<double>& x) {
  double mean = 0;
  for (double v : x) mean += v / static_cast<double>(x.size());
  return mean;
}

// The sum of squares of x about its mean.
double squares_about_mean(const std::vector<double>& x) {
  const double mean = mean_of(x);
  double sum = 0;
  for (double v : x) sum += (v - mean) * (v - mean);
  return sum;
}

double variance(const std::vector<double>& x) {
  return x.size() < 2 ? 0.0 : squares_about_mean(x) / static_cast<double>(x.size() - 1);
}

std::int64_t mix(std::int64_t h, std::int64_t v) {
  auto x = static_cast<std::uint64_t>(h) ^
           (static_cast<std::uint64_t>(v) + 0x9e3779b97f4a7c15ull + (static_cast<std::uint64_t>(h) << 6) +
            (static_cast<std::uint64_t>(h) >> 2));
  return static_cast<std::int64_t>(x & 0x7fffffffffffffffull);
}

// The step's level (composition.hpp): each probe's ln(median step / prediction), averaged per group;
// the groups' means averaged per workload; the level their mean, and the predictive spread of a further
// workload's group with its degrees of freedom.
nlohmann::json level_fit(const std::map<std::string, std::vector<const ProbeStep*>>& groups) {
  std::set<std::string> workloads;
  for (const auto& [name, g] : groups) workloads.insert(g.front()->workload);
  const bool per_group = workloads.size() < 2;  // one workload, or none: each group stands for one
  std::map<std::string, std::vector<double>> by_workload;
  nlohmann::json by_group = nlohmann::json::object();
  for (const auto& [name, g] : groups) {
    std::vector<double> e;
    for (const ProbeStep* p : g) e.push_back(std::log(median(p->steps_s) / p->predicted_s));
    const double m = mean_of(e);
    by_group[name] = std::exp(m);
    const std::string& w = g.front()->workload;
    by_workload[per_group || w.empty() ? name : w].push_back(m);
  }
  if (groups.size() < 2)
    return {{"level", nullptr}, {"level_sigma", nullptr}, {"level_dof", nullptr}, {"level_groups", by_group}};
  std::vector<double> means;  // per workload
  double within = 0, groups_n = 0;
  int within_dof = 0;
  for (const auto& [w, m] : by_workload) {
    means.push_back(mean_of(m));
    within += squares_about_mean(m);
    within_dof += static_cast<int>(m.size()) - 1;
    groups_n += static_cast<double>(m.size());
  }
  const double k = static_cast<double>(means.size()), n = groups_n / k;
  const double within_var = within_dof > 0 ? within / within_dof : 0.0;
  nlohmann::json out{{"level", std::exp(mean_of(means))},
                     {"level_sigma", std::sqrt(variance(means) * (1 + 1 / k) + within_var * (1 - 1 / n))},
                     {"level_dof", static_cast<int>(means.size()) - 1},
                     {"level_workloads", static_cast<int>(means.size())},
                     {"level_groups", by_group}};
  // Each workload's own level, for plans of that model: the mean of its groups, and the spread a further
  // group of it (another micro-batch) may take, s_within^2 (1 + 1 / n_w), known to the pooled
  // within-workload degrees of freedom.
  if (!per_group && within_dof > 0) {
    nlohmann::json own = nlohmann::json::object();
    for (const auto& [w, m] : by_workload) {
      if (!workloads.contains(w)) continue;  // a group standing for a workload of its own
      own[w] = {{"level", std::exp(mean_of(m))},
                {"level_sigma", std::sqrt(within_var * (1 + 1 / static_cast<double>(m.size())))},
                {"level_dof", within_dof},
                {"groups", static_cast<int>(m.size())}};
    }
    out["level_models"] = own;
  }
  return out;
}

}  // namespace

nlohmann::json composition_fit(const std::vector<ProbeStep>& probes) {
  std::map<std::string, std::vector<const ProbeStep*>> groups;
  for (const ProbeStep& p : probes)
    if (p.predicted_s > 0 && !p.steps_s.empty()) groups[p.group].push_back(&p);
  double sum_v = 0, sum_drawn = 0, sum_noise = 0;
  int dof = 0, plans = 0, used_groups = 0;
  nlohmann::json residuals = nlohmann::json::array();
  for (const auto& [name, g] : groups) {
    if (g.size() < 2) continue;
    std::size_t m = g.front()->steps_s.size();
    for (const ProbeStep* p : g) m = std::min(m, p->steps_s.size());
    std::vector<double> pace(m, 0.0);  // mean log over the plans at step j
    for (const ProbeStep* p : g)
      for (std::size_t j = 0; j < m; ++j) pace[j] += std::log(p->steps_s[j]) / static_cast<double>(g.size());
    std::vector<double> r;
    for (const ProbeStep* p : g) {
      std::vector<double> e(m);
      for (std::size_t j = 0; j < m; ++j) e[j] = std::log(p->steps_s[j]) - pace[j];
      r.push_back(median(e) - std::log(p->predicted_s));
      sum_noise += std::numbers::pi / 2 * variance(e) / static_cast<double>(m);
    }
    const double mean_r = mean_of(r);
    for (double v : r) residuals.push_back(v - mean_r);
    sum_v += squares_about_mean(r);
    // The calibration's drawn errors: the same sum of squares over each draw's predictions.
    std::size_t draws = g.front()->drawn_s.size();
    for (const ProbeStep* p : g)
      if (p->drawn_s.size() != draws) draws = 0;
    for (std::size_t d = 0; d < draws; ++d) {
      std::vector<double> x;
      for (const ProbeStep* p : g) x.push_back(std::log(p->drawn_s[d] / p->predicted_s));
      sum_drawn += squares_about_mean(x) / static_cast<double>(draws);
    }
    dof += static_cast<int>(g.size()) - 1;
    plans += static_cast<int>(g.size());
    ++used_groups;
  }
  nlohmann::json out{{"plans", plans}, {"groups", used_groups}, {"dof", dof}, {"residuals", residuals}};
  out.update(level_fit(groups));
  if (dof == 0) {
    out.update({{"sigma", 0.0}, {"variance", 0.0}, {"noise", 0.0}, {"drawn", 0.0}});
    return out;
  }
  const double v = sum_v / dof, drawn = sum_drawn / dof, noise = sum_noise / plans;
  out.update({{"sigma", std::sqrt(std::max(0.0, v - noise - drawn))},
              {"variance", v},
              {"noise", noise},
              {"drawn", drawn}});
  return out;
}

std::vector<std::int64_t> composition_keys(const Plan& plan) {
  std::int64_t layout = mix(plan.pp, plan.micro_batches);
  layout = mix(layout, plan.cp);
  layout = mix(layout, plan.cp_all_to_all ? 1 : 0);
  layout = mix(layout, plan.sequence_parallel ? 1 : 0);
  layout = mix(layout, static_cast<std::int64_t>(plan.schedule));
  for (const int t : plan.unit_tp) layout = mix(layout, t);
  std::vector<std::int64_t> keys;
  for (const Choice& c : plan.choices) {
    std::int64_t k = layout;
    for (const std::int64_t v : {std::int64_t{c.replicate}, std::int64_t{c.split}, std::int64_t{c.zdp_slices},
                                 std::int64_t{c.checkpoint}, std::int64_t{c.node_group},
                                 std::int64_t{c.two_level}, std::int64_t{c.selective}, std::int64_t{c.ep}})
      k = mix(k, v);
    keys.push_back(k);
  }
  return keys;
}

double composition_factor(const std::vector<std::int64_t>& keys, std::uint64_t d, double sigma) {
  if (!(sigma > 0) || keys.empty()) return 1.0;
  double sum = 0;
  for (const std::int64_t k : keys) sum += draw_factor(d, sigma, {kCompositionPoint, k});
  return sum / static_cast<double>(keys.size());
}

}  // namespace osdp::costmodel
