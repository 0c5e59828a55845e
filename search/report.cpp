#include "search/report.hpp"

#include <map>

#include <fmt/format.h>

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

costmodel::Plan make_plan(const PlanContext& ctx, const costmodel::Workload& w, const SearchResult& r) {
  costmodel::Plan p;
  p.tool_version = ctx.tool_version;
  p.strategy = r.strategy;
  p.model = ctx.model;
  p.cluster = ctx.cluster;
  p.calibration = ctx.calibration;
  p.cost_options = ctx.cost_options;
  p.memory_limit_bytes = r.memory_limit_bytes;
  p.batch_size = r.batch;
  p.prefetch = ctx.cost_options.prefetch;
  for (std::size_t i = 0; i < r.choices.size(); ++i)
    p.operators.push_back({w.operators[i].name, r.choices[i]});
  p.predicted_iteration_time_s = r.time_s;
  p.predicted_peak_memory_bytes = r.peak_bytes;
  p.predicted_throughput_samples_per_s = r.throughput;
  return p;
}

nlohmann::json result_json(const PlanContext& ctx, const costmodel::Workload& w, const SearchResult& r) {
  nlohmann::json j;
  j["feasible"] = r.feasible;
  j["strategy"] = r.strategy;
  j["memory_limit_bytes"] = r.memory_limit_bytes;
  j["search_seconds"] = r.search_seconds;
  j["complete"] = r.complete;
  if (r.feasible) {
    j["batch_size"] = r.batch;
    j["throughput_samples_per_s"] = r.throughput;
    j["iteration_time_s"] = r.time_s;
    j["peak_memory_bytes"] = r.peak_bytes;
    j["choices"] = summarize_choices(w, r.choices);
    j["plan"] = to_json(make_plan(ctx, w, r));
  } else {
    j["batch_size"] = nullptr;
    j["throughput_samples_per_s"] = 0.0;
    j["iteration_time_s"] = nullptr;
    j["peak_memory_bytes"] = nullptr;
    j["plan"] = nullptr;
    j["min_fit_memory_bytes"] = r.min_fit_bytes;
  }
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
  return j;
}

}  // namespace osdp::search
