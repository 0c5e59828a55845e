#include "sim/report.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <tuple>

#include <fmt/format.h>

#include "costmodel/uncertainty.hpp"
#include "costmodel/workload.hpp"

namespace osdp::sim {
namespace {

constexpr double kTicksPerMicrosecond = kTicksPerSecond / 1e6;
constexpr double kExactIntegerLimit = 9007199254740992.0;  // 2^53

double to_microseconds(Tick t) {
  return static_cast<double>(t) / kTicksPerMicrosecond;
}

// Bytes are whole numbers in practice: print them as integers, anything else in shortest form.
std::string format_number(double x) {
  if (std::isfinite(x) && std::fabs(x) < kExactIntegerLimit && x == std::floor(x))
    return fmt::format("{:.0f}", x);
  return fmt::format("{}", x);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The rank whose peak is highest (the first of equals).
int peak_rank_index(const SimResult& r) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(r.ranks.size()); ++i)
    if (r.ranks[i].peak_bytes > r.ranks[best].peak_bytes) best = i;
  return best;
}

nlohmann::json categories_json(const std::array<double, kMemoryCategories>& bytes, double reserve) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kMemoryCategories; ++c) j[to_string(static_cast<MemoryCategory>(c))] = bytes[c];
  j["reserve"] = reserve;
  return j;
}

// A trace event with the key it is sorted by: (time, rank, track, task).
struct Keyed {
  Tick time;
  int rank;
  int track;  // the stream (0: compute, 1: comm, 2 and 3: sends), kStreams: the memory counter
  int index;  // task, or position in the memory timeline
  nlohmann::json event;
};

}  // namespace

std::string format_tick_seconds(Tick t) {
  const auto per_second = static_cast<Tick>(kTicksPerSecond);
  const Tick whole = std::llabs(t) / per_second;
  const Tick frac = std::llabs(t) % per_second;
  std::string out = fmt::format("{}{}", t < 0 ? "-" : "", whole);
  if (frac != 0) {
    std::string digits = fmt::format("{:012}", frac);
    digits.erase(digits.find_last_not_of('0') + 1);
    out += "." + digits;
  }
  return out;
}

SimOptions trace_options(SimOptions base) {
  base.record_tasks = true;
  base.memory_rank = SimOptions::kAllRanks;
  return base;
}

nlohmann::json summary_json(const Schedule& schedule, const SimResult& r) {
  nlohmann::json j;
  const RankStats none{};
  const RankStats& crit = r.ranks.empty() ? none : r.ranks[r.critical_rank];
  const int peak = r.ranks.empty() ? 0 : peak_rank_index(r);
  const RankStats& pr = r.ranks.empty() ? none : r.ranks[peak];
  j["world_size"] = r.world_size;
  j["ranks_simulated"] = r.ranks_simulated;
  j["batch_size"] = schedule.batch;
  j["micro_batches"] = schedule.micro_batches;
  j["pp"] = schedule.pp;
  j["prefetch"] = schedule.prefetch;
  j["tasks"] = schedule.tasks.size();
  j["iteration_time_s"] = to_seconds(r.iteration);
  j["critical_rank"] = r.critical_rank;
  j["compute_busy_s"] = to_seconds(crit.compute_busy);
  j["comm_busy_s"] = to_seconds(crit.comm_busy);
  j["exposed_comm_s"] = to_seconds(r.iteration - crit.compute_busy);
  j["peak_memory_bytes"] = pr.peak_bytes;
  j["peak_time_s"] = to_seconds(pr.peak_time);
  j["peak_rank"] = peak;
  j["peak_breakdown"] = categories_json(pr.peak_breakdown, r.reserve_bytes);
  // Per stage (its first simulated rank): the compute stream's busy time and the bubble it leaves.
  nlohmann::json stages = nlohmann::json::array();
  double busy = 0;
  const int per_stage = schedule.world_size / std::max(1, schedule.pp);
  for (int s = 0; s < schedule.pp && s * per_stage < r.ranks_simulated; ++s) {
    const RankStats& rs = r.ranks[static_cast<std::size_t>(s * per_stage)];
    busy += to_seconds(rs.compute_busy);
    stages.push_back({{"stage", s},
                      {"first_rank", s * per_stage},
                      {"compute_busy_s", to_seconds(rs.compute_busy)},
                      {"comm_busy_s", to_seconds(rs.comm_busy)},
                      {"send_busy_s", to_seconds(rs.send_busy)},
                      {"max_micro_batches_in_flight", rs.max_in_flight},
                      {"peak_memory_bytes", rs.peak_bytes}});
  }
  j["stages"] = stages;
  j["bubble_fraction"] = r.iteration > 0 && static_cast<int>(stages.size()) == schedule.pp
                             ? 1.0 - busy / (schedule.pp * to_seconds(r.iteration))
                             : 0.0;
  j["events"] = r.events;
  j["queue_events"] = r.queue_events;
  j["wall_time_s"] = r.wall_seconds;
  j["events_per_second"] = r.wall_seconds > 0 ? static_cast<double>(r.events) / r.wall_seconds : 0.0;
  return j;
}

nlohmann::json chrome_trace(const Schedule& schedule, const SimResult& r) {
  nlohmann::json events = nlohmann::json::array();
  const int per_stage = schedule.world_size / std::max(1, schedule.pp);
  for (int rank = 0; rank < r.ranks_simulated; ++rank) {
    const std::string name = schedule.pp > 1 ? fmt::format("rank {} (stage {})", rank, rank / per_stage)
                                             : fmt::format("rank {}", rank);
    events.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", name}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", rank},
                      {"tid", 0},
                      {"args", {{"sort_index", rank}}}});
    for (int tid = 0; tid < (schedule.pp > 1 ? kStreams : 2); ++tid)
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", rank},
                        {"tid", tid},
                        {"args", {{"name", to_string(static_cast<Stream>(tid))}}}});
  }

  std::vector<Keyed> timed;
  timed.reserve(r.tasks.size() + r.memory.size());
  for (const TaskRecord& rec : r.tasks) {
    const Task& t = schedule.tasks[rec.task];
    const int tid = static_cast<int>(t.stream);
    nlohmann::json args = {{"op", t.op}, {"slice", t.slice}};
    if (schedule.micro_batches > 1) args["micro_batch"] = t.micro_batch;
    if (is_collective(t.kind)) {
      args["bytes"] = t.bytes;
      args["level"] = costmodel::to_string(t.level);  // world, intra (within a node), inter (across)
      args["payload"] = to_string(t.payload);
      args["ranks"] = t.group.resolved(schedule.world_size).size;
    } else if (t.kind == TaskKind::kSend) {
      args["bytes"] = t.bytes;
    }
    timed.push_back({rec.start,
                     rec.rank,
                     tid,
                     rec.task,
                     {{"ph", "X"},
                      {"name", t.name},
                      {"cat", to_string(t.kind)},
                      {"pid", rec.rank},
                      {"tid", tid},
                      {"ts", to_microseconds(rec.start)},
                      {"dur", to_microseconds(rec.end - rec.start)},
                      {"args", std::move(args)}}});
  }

  // The memory counter: per rank, the bytes per category after the last event of each instant.
  std::vector<int> order(r.memory.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::tie(r.memory[a].rank, r.memory[a].time) < std::tie(r.memory[b].rank, r.memory[b].time);
  });
  std::array<double, kMemoryCategories> in_use{};
  for (std::size_t i = 0; i < order.size(); ++i) {
    const MemoryEvent& e = r.memory[order[i]];
    if (i == 0 || r.memory[order[i - 1]].rank != e.rank) in_use.fill(0);
    in_use[static_cast<int>(schedule.buffers[e.buffer].category())] += e.delta;
    const bool last_of_instant = i + 1 == order.size() || r.memory[order[i + 1]].rank != e.rank ||
                                 r.memory[order[i + 1]].time != e.time;
    if (!last_of_instant) continue;
    timed.push_back({e.time,
                     e.rank,
                     kStreams,
                     static_cast<int>(i),
                     {{"ph", "C"},
                      {"name", "memory"},
                      {"pid", e.rank},
                      {"tid", 0},
                      {"ts", to_microseconds(e.time)},
                      {"args", categories_json(in_use, r.reserve_bytes)}}});
  }

  std::sort(timed.begin(), timed.end(), [](const Keyed& a, const Keyed& b) {
    return std::tie(a.time, a.rank, a.track, a.index) < std::tie(b.time, b.rank, b.track, b.index);
  });
  for (Keyed& k : timed) events.push_back(std::move(k.event));

  nlohmann::json j;
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  j["otherData"] = {{"generator", "osdp simulate"},
                    {"world_size", r.world_size},
                    {"ranks_simulated", r.ranks_simulated},
                    {"iteration_time_s", to_seconds(r.iteration)}};
  return j;
}

std::string memory_csv(const Schedule& schedule, const SimResult& r) {
  std::string out = "time_s,rank,buffer,category,delta_bytes,total_bytes\n";
  for (const MemoryEvent& e : r.memory) {
    const Buffer& b = schedule.buffers[e.buffer];
    out += fmt::format("{},{},{},{},{},{}\n", format_tick_seconds(e.time), e.rank, csv_field(b.name),
                       to_string(b.category()), format_number(e.delta), format_number(e.total));
  }
  return out;
}

void add_intervals(nlohmann::json& j, const costmodel::Plan& plan, int draws, SimOptions options) {
  options.record_tasks = false;
  options.progress = nullptr;
  options.memory_rank = SimOptions::kNoRanks;
  const costmodel::Workload w = costmodel::lower(plan.model, plan.pp);
  const std::vector<double> simulated = simulated_step_times(plan, w, draws, options);
  j["iteration_time_interval_s"] = costmodel::to_json(costmodel::central_interval(simulated));
  j["analytic"]["iteration_time_interval_s"] =
      costmodel::to_json(costmodel::central_interval(costmodel::drawn_step_times(w, plan, draws)));
  j["interval_level"] = costmodel::kIntervalLevel;
  j["draws"] = simulated.size();
}

nlohmann::json simulation_json(const costmodel::Plan& plan, const Replay& run, const std::string& source,
                               const std::string& ranks_mode, const std::vector<std::string>& stragglers,
                               bool repriced) {
  const double an_time = repriced ? run.analytic_time_s : plan.predicted_iteration_time_s;
  const double an_peak = repriced ? run.analytic_peak_bytes : plan.predicted_peak_memory_bytes;
  const double samples = plan.global_batch(plan.cluster.world_size());
  const auto relative = [](double simulated, double analytic) {
    return analytic > 0 ? (simulated - analytic) / analytic : 0.0;
  };
  nlohmann::json j;
  j["plan"] = source;
  j["model"] = plan.model.name;
  j["cluster"] = plan.cluster.name;
  j["ranks_mode"] = ranks_mode;
  j["stragglers"] = stragglers;
  j.update(summary_json(run.schedule, run.result));
  const double time = j["iteration_time_s"].get<double>();
  const double peak = j["peak_memory_bytes"].get<double>();
  j["global_batch"] = samples;
  j["throughput_samples_per_s"] = time > 0 ? samples / time : 0.0;
  j["analytic"] = {{"iteration_time_s", an_time},
                   {"peak_memory_bytes", an_peak},
                   {"throughput_samples_per_s", an_time > 0 ? samples / an_time : 0.0},
                   {"source", repriced ? "cost model" : "plan"}};
  j["relative_difference"] = {{"iteration_time", relative(time, an_time)},
                              {"peak_memory", relative(peak, an_peak)}};
  return j;
}

}  // namespace osdp::sim
