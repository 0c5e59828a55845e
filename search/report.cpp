#include "search/report.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "search/strategy.hpp"

namespace osdp::search {

std::vector<std::string> summarize_choices(const costmodel::Workload& w,
                                           const std::vector<costmodel::Choice>& choices) {
  std::vector<std::string> kinds;
  std::map<std::string, std::vector<std::pair<std::string, int>>> counts;
  for (std::size_t i = 0; i < choices.size() && i < w.operators.size(); ++i) {
    const std::string kind = to_string(w.operators[i].kind);
    if (!counts.count(kind)) kinds.push_back(kind);
    auto& v = counts[kind];
    const std::string label = choices[i].label();
    auto it = std::find_if(v.begin(), v.end(), [&](const auto& p) { return p.first == label; });
    if (it == v.end())
      v.emplace_back(label, 1);
    else
      ++it->second;
  }
  std::vector<std::string> out;
  for (const auto& k : kinds) {
    std::string line = k + ":";
    bool first = true;
    for (const auto& [label, n] : counts[k]) {
      line += fmt::format("{} {} x {}", first ? "" : ",", label, n);
      first = false;
    }
    out.push_back(line);
  }
  return out;
}

namespace {

// Runs of equal values over consecutive names: "layer0..layer15 tp2".
std::string runs(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  std::string out;
  std::size_t i = 0;
  while (i < names.size()) {
    std::size_t j = i;
    while (j + 1 < names.size() && values[j + 1] == values[i]) ++j;
    if (!out.empty()) out += ", ";
    out += i == j ? fmt::format("{} {}", names[i], values[i])
                  : fmt::format("{}..{} {}", names[i], names[j], values[i]);
    i = j + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> stage_degrees(const costmodel::Workload& w, const costmodel::Plan& plan) {
  std::vector<std::string> lines;
  for (int s = 0; s < plan.pp; ++s) {
    const int first = plan.stage_first_unit[static_cast<std::size_t>(s)];
    const int end = s + 1 < plan.pp ? plan.stage_first_unit[static_cast<std::size_t>(s + 1)]
                                    : static_cast<int>(w.units.size());
    std::vector<std::string> names, degrees;
    for (int u = first; u < end; ++u) {
      names.push_back(w.units[static_cast<std::size_t>(u)].name);
      degrees.push_back(fmt::format("tp{}", plan.unit_tp[static_cast<std::size_t>(u)]));
    }
    lines.push_back(runs(names, degrees));
  }
  return lines;
}

void stamp(costmodel::Plan& p, const PlanContext& ctx, const std::string& strategy,
           double memory_limit_bytes) {
  p.tool_version = ctx.tool_version;
  p.strategy = strategy;
  p.model = ctx.model;
  p.cluster = ctx.cluster;
  p.calibration = ctx.calibration;
  p.cost_options = ctx.cost_options;
  p.prefetch = ctx.cost_options.prefetch;
  p.memory_limit_bytes = memory_limit_bytes;
}

costmodel::Plan make_plan(const PlanContext& ctx, const costmodel::Workload& w, const SearchResult& r) {
  costmodel::Plan p;
  p.batch_size = r.batch;
  costmodel::set_data_parallel(p, w, r.choices);
  stamp(p, ctx, r.strategy, r.memory_limit_bytes);
  p.predicted_iteration_time_s = r.time_s;
  p.predicted_peak_memory_bytes = r.peak_bytes;
  p.predicted_throughput_samples_per_s = r.throughput;
  return p;
}

nlohmann::json outcome_json(const PlanOutcome& o) {
  nlohmann::json j;
  j["feasible"] = o.feasible;
  j["strategy"] = o.strategy;
  j["complete"] = o.complete;
  j["memory_limit_bytes"] = o.memory_limit_bytes;
  j["search_seconds"] = o.search_seconds;
  if (o.feasible) {
    const costmodel::Plan& p = o.plan;
    j["batch_size"] = p.batch_size;
    j["micro_batches"] = p.micro_batches;
    j["pp"] = p.pp;
    j["global_batch"] = o.evaluation.global_batch;
    j["throughput_samples_per_s"] = o.evaluation.throughput;
    j["iteration_time_s"] = o.evaluation.time_s;
    j["peak_memory_bytes"] = o.evaluation.peak_bytes;
    j["bubble_fraction"] = o.evaluation.bubble_fraction;
    j["choices"] = summarize_choices(*o.workload, p.choices);
    j["stages"] = stage_degrees(*o.workload, p);
    j["plan"] = to_json(p, &o.evaluation);
    if (o.robust_throughput > 0) j["robust_throughput_samples_per_s"] = o.robust_throughput;
    if (!o.drawn_time_s.empty()) {
      j["iteration_time_interval_s"] = costmodel::to_json(time_interval(o));
      j["throughput_interval"] = costmodel::to_json(throughput_interval(o));
      j["interval_level"] = costmodel::kIntervalLevel;
      j["draws"] = o.drawn_time_s.size();
    }
  } else {
    j["batch_size"] = nullptr;
    j["throughput_samples_per_s"] = 0.0;
    j["iteration_time_s"] = nullptr;
    j["peak_memory_bytes"] = nullptr;
    j["plan"] = nullptr;
    j["min_fit_memory_bytes"] = o.min_fit_bytes;
  }
  if (o.batches) {
    const SearchResult& r = *o.batches;
    nlohmann::json cands = nlohmann::json::array();
    for (const auto& c : r.candidates) {
      nlohmann::json cj{{"batch_size", c.batch}, {"feasible", c.feasible}, {"skipped", c.skipped}};
      if (c.feasible) {
        cj["throughput_samples_per_s"] = c.throughput;
        cj["iteration_time_s"] = c.time_s;
        cj["peak_memory_bytes"] = c.peak_bytes;
      }
      cj["nodes"] = c.nodes;
      cj["complete"] = c.complete;
      cands.push_back(cj);
    }
    j["candidates"] = cands;
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& range : r.skipped_ranges)
      skipped.push_back(
          {{"from", range.from}, {"to", range.to}, {"max_throughput_samples_per_s", range.max_throughput}});
    j["skipped_ranges"] = skipped;
  }
  if (o.layouts)
    j["layouts"] = {{"priced", o.layouts->layouts},
                    {"solved", o.layouts->solved},
                    {"labels", o.layouts->labels},
                    {"skipped", o.layouts->skipped}};
  return j;
}

costmodel::Interval time_interval(const PlanOutcome& o) {
  return costmodel::central_interval(o.drawn_time_s);
}

costmodel::Interval throughput_interval(const PlanOutcome& o) {
  const costmodel::Interval t = time_interval(o);  // the global batch over its ends
  if (!t.known()) return {};
  return {o.evaluation.global_batch / t.high, o.evaluation.global_batch / t.low};
}

costmodel::Interval speedup_interval(const PlanOutcome& a, const PlanOutcome& b) {
  // (G_a / t_a) / (G_b / t_b) in each draw
  return costmodel::ratio_interval(
      b.drawn_time_s, a.drawn_time_s,
      static_cast<double>(a.evaluation.global_batch) / b.evaluation.global_batch);
}

bool within_error(const costmodel::Interval& speedup) {
  return speedup.known() && speedup.low <= 1.0 && speedup.high >= 1.0;
}

}  // namespace osdp::search
