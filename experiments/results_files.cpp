// The sweep's result files: reading rows.jsonl back (for --resume) and the CSV tables, whose text
// is deterministic (no timing) so that two runs of the same experiment give the same bytes.
#include <algorithm>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "experiments/sweep.hpp"

namespace osdp::experiments {
namespace {

std::string number(double v) {
  return fmt::format("{:.9g}", v);
}
std::string whole(double v) {
  return fmt::format("{:.0f}", v);
}

}  // namespace

StoredRows read_rows(const std::string& path, const std::vector<std::string>& keys,
                     const std::vector<EvaluatorKind>& evaluators) {
  StoredRows out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::optional<UnitResult> r;
    try {  // a torn line (kill -9 mid-write) does not parse: it is dropped and its unit runs again
      r = unit_result_from_json(nlohmann::json::parse(line));
    } catch (const std::exception&) {
    }
    bool good = r && r->index >= 0 && r->index < static_cast<int>(keys.size()) &&
                r->key == keys[static_cast<std::size_t>(r->index)] && !out.rows.count(r->index) &&
                r->evaluations.size() == evaluators.size();
    for (std::size_t i = 0; good && i < evaluators.size(); ++i)
      good = r->evaluations[i].evaluator == evaluators[i];
    if (good)
      out.rows.emplace(r->index, std::move(*r));
    else
      ++out.dropped;
  }
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string results_csv(std::vector<UnitResult> rows, int strategies, int baseline) {
  std::sort(rows.begin(), rows.end(),
            [](const UnitResult& a, const UnitResult& b) { return a.index < b.index; });
  std::map<int, const UnitResult*> by_index;
  for (const auto& r : rows) by_index[r.index] = &r;
  std::string out =
      "index,model,cluster,world_size,memory_limit_bytes,strategy,evaluator,feasible,batch_size,"
      "throughput_samples_per_s,iteration_time_s,peak_memory_bytes,min_fit_memory_bytes,plan_summary,"
      "speedup_over_baseline,micro_batches,pp,global_batch,iteration_time_low_s,iteration_time_high_s,"
      "throughput_low,throughput_high\n";
  for (const auto& r : rows) {
    const UnitResult* base = nullptr;
    if (baseline >= 0 && strategies > 0) {
      const auto it = by_index.find(r.index / strategies * strategies + baseline);
      if (it != by_index.end()) base = it->second;
    }
    for (const auto& ev : r.evaluations) {
      const Evaluation* b = nullptr;
      if (base)
        for (const auto& x : base->evaluations)
          if (x.evaluator == ev.evaluator) b = &x;
      const bool speedup = ev.feasible && b && b->feasible && b->throughput > 0;
      // The 90% interval of the step time, and of the throughput (the global batch over its ends).
      const bool interval = ev.feasible && ev.interval.known();
      const double gb = ev.throughput * ev.time_s;
      out += fmt::format(
          "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.index, csv_field(r.model),
          csv_field(r.cluster), r.world_size, whole(r.memory_limit_bytes), csv_field(r.strategy),
          to_string(ev.evaluator), ev.feasible ? "true" : "false",
          ev.feasible ? std::to_string(r.batch_size) : "", ev.feasible ? number(ev.throughput) : "",
          ev.feasible ? number(ev.time_s) : "", ev.feasible ? whole(ev.peak_bytes) : "",
          r.feasible ? "" : whole(r.min_fit_bytes), csv_field(r.plan_summary),
          speedup ? number(ev.throughput / b->throughput) : "",
          ev.feasible ? std::to_string(r.micro_batches) : "", ev.feasible ? std::to_string(r.pp) : "",
          ev.feasible ? std::to_string(r.global_batch) : "", interval ? number(ev.interval.low) : "",
          interval ? number(ev.interval.high) : "", interval ? number(gb / ev.interval.high) : "",
          interval ? number(gb / ev.interval.low) : "");
    }
  }
  return out;
}

std::string candidates_csv(std::vector<UnitResult> rows) {
  std::sort(rows.begin(), rows.end(),
            [](const UnitResult& a, const UnitResult& b) { return a.index < b.index; });
  std::string out =
      "index,model,strategy,memory_limit_bytes,batch_size,iteration_time_s,peak_memory_bytes,"
      "throughput_samples_per_s\n";
  for (const auto& r : rows)
    for (const auto& c : r.candidates)
      out += fmt::format("{},{},{},{},{},{},{},{}\n", r.index, csv_field(r.model), csv_field(r.strategy),
                         whole(r.memory_limit_bytes), c.batch, number(c.time_s), whole(c.peak_bytes),
                         number(c.throughput));
  return out;
}

}  // namespace osdp::experiments
