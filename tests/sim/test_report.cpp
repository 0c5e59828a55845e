// What users see of a simulation (sim/report.hpp): the summary, the Chrome trace and the memory CSV,
// on a real plan (nd-48x1024 on titan-rtx-8, the exact strategy, prefetch 1 so the streams overlap);
// and its interval: each draw of a calibration's errors simulated as the analytic model prices it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "costmodel/catalog.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/plan_cost.hpp"
#include "costmodel/uncertainty.hpp"
#include "costmodel/workload.hpp"
#include "search/batch_solver.hpp"
#include "search/report.hpp"
#include "search/scheduler.hpp"
#include "sim/engine.hpp"
#include "sim/network.hpp"
#include "sim/replay.hpp"
#include "sim/report.hpp"
#include "sim/schedule.hpp"

#include "../search/recorded_request.hpp"

namespace osdp::sim {
namespace {

struct Run {
  Schedule schedule;
  SimResult result;
};

// The plan the search picks at a fixed batch size, simulated with every task and every rank's
// memory recorded.
Run simulate_plan(int batch, int prefetch, bool symmetric) {
  search::PlanContext ctx;
  ctx.model = costmodel::load_model("nd-48x1024");
  ctx.cluster = costmodel::load_cluster("titan-rtx-8");
  ctx.cost_options.prefetch = prefetch;
  const costmodel::Workload w = costmodel::lower(ctx.model);
  const costmodel::CostModel model(ctx.cluster, nullptr, ctx.model.precision, ctx.cost_options);
  search::SearchOptions opt;
  opt.space.split_max = 2;
  opt.batch = batch;
  opt.memory_limit_bytes = ctx.cluster.memory_bytes;
  opt.reserve_bytes = ctx.cluster.reserve_bytes;
  const auto registry = search::default_solvers();
  const search::SearchResult r = search::run_search(w, model, registry.get("exact"), opt);
  REQUIRE(r.feasible);
  const costmodel::Plan plan = search::make_plan(ctx, w, r);
  Run run;
  run.schedule = build_schedule(plan, w, sim::plan_cost_model(plan));
  SimOptions so;
  so.symmetric = symmetric;
  so.interference = model.interference();
  so.overlap = model.overlap();
  run.result = simulate(run.schedule, RingLinks(ctx.cluster, nullptr), trace_options(so));
  return run;
}

const Run& shared_run() {
  static const Run run = simulate_plan(2, 1, false);
  return run;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(s);
  while (std::getline(in, field, sep)) out.push_back(field);
  return out;
}

}  // namespace

TEST_CASE("the summary: iteration, streams and the peak with its breakdown", "[report]") {
  const Run& run = shared_run();
  const SimResult& r = run.result;
  const nlohmann::json j = summary_json(run.schedule, r);
  for (const char* key :
       {"iteration_time_s", "exposed_comm_s", "compute_busy_s", "comm_busy_s", "peak_memory_bytes",
        "peak_time_s", "peak_rank", "peak_breakdown", "events", "queue_events", "wall_time_s",
        "events_per_second", "world_size", "ranks_simulated", "critical_rank"})
    CHECK(j.contains(key));
  CHECK(j["world_size"] == 8);
  CHECK(j["ranks_simulated"] == 8);
  CHECK(j["iteration_time_s"].get<double>() == to_seconds(r.iteration));
  // exposed communication = iteration - compute busy on the critical rank
  const RankStats& crit = r.ranks[r.critical_rank];
  CHECK(j["exposed_comm_s"].get<double>() == to_seconds(r.iteration - crit.compute_busy));
  CHECK(j["exposed_comm_s"].get<double>() >= 0);
  CHECK(j["exposed_comm_s"].get<double>() < j["comm_busy_s"].get<double>());  // prefetch 1 overlaps
  CHECK(j["peak_memory_bytes"].get<double>() == r.peak_rank().peak_bytes);
  // The breakdown names every category plus the reserve and sums to the peak.
  double sum = 0;
  for (const char* cat :
       {"shards", "optimizer", "gathered_weights", "gradients", "activations", "workspace", "reserve"}) {
    REQUIRE(j["peak_breakdown"].contains(cat));
    sum += j["peak_breakdown"][cat].get<double>();
  }
  CHECK(j["peak_breakdown"].size() == 7);
  CHECK(sum == Approx(j["peak_memory_bytes"].get<double>()).epsilon(1e-12));
  CHECK(j["peak_breakdown"]["reserve"].get<double>() == run.schedule.reserve_bytes);
}

TEST_CASE("the Chrome trace: a process per rank, compute and comm threads, events and counters", "[report]") {
  const Run& run = shared_run();
  // Valid JSON once written out.
  const nlohmann::json j = nlohmann::json::parse(chrome_trace(run.schedule, run.result).dump());
  REQUIRE(j.contains("traceEvents"));
  REQUIRE(j["traceEvents"].is_array());
  std::map<int, std::set<int>> thread_names;  // pid -> tids named
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans;  // (pid, tid) -> (ts, dur)
  std::size_t complete = 0, counters = 0;
  std::map<int, std::size_t> per_rank;
  for (const auto& e : j["traceEvents"]) {
    REQUIRE(e.contains("ph"));
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "thread_name") {
        CHECK(thread_names[e["pid"]].insert(e["tid"].get<int>()).second);
        CHECK(e["args"]["name"] == (e["tid"] == 0 ? "compute" : "comm"));
      }
      if (e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
    } else if (ph == "X") {
      ++complete;
      for (const char* key : {"pid", "tid", "ts", "dur", "name", "cat"}) REQUIRE(e.contains(key));
      CHECK(e["ts"].is_number_float());
      CHECK(e["dur"].get<double>() >= 0);
      spans[{e["pid"], e["tid"]}].emplace_back(e["ts"].get<double>(), e["dur"].get<double>());
      if (e["tid"] == 1) CHECK(e["args"].contains("bytes"));
      ++per_rank[e["pid"]];
    } else if (ph == "C") {
      ++counters;
      CHECK(e["name"] == "memory");
      CHECK(e["args"].size() == 7);
      CHECK(e["args"].contains("activations"));
    } else {
      FAIL("unexpected phase " << ph);
    }
  }
  CHECK(process_names.size() == 8);
  CHECK(process_names[3] == "rank 3");
  REQUIRE(thread_names.size() == 8);
  for (const auto& [pid, tids] : thread_names) CHECK(tids == std::set<int>{0, 1});
  // Every task on every rank, once.
  CHECK(complete == run.schedule.tasks.size() * 8);
  for (const auto& [pid, n] : per_rank) CHECK(n == run.schedule.tasks.size());
  CHECK(counters > 0);
  // Within a thread: start times never decrease and an event ends before the next starts (up to the
  // rounding of picoseconds to microsecond doubles).
  for (const auto& [thread, list] : spans) {
    for (std::size_t i = 1; i < list.size(); ++i) {
      CHECK(list[i].first >= list[i - 1].first);
      CHECK(list[i].first >= list[i - 1].first + list[i - 1].second - 1e-6);
    }
  }
}

TEST_CASE("the memory CSV: header, a row per event, totals follow the deltas", "[report]") {
  const Run& run = shared_run();
  const std::string csv = memory_csv(run.schedule, run.result);
  const auto lines = split(csv, '\n');
  REQUIRE(!lines.empty());
  CHECK(lines[0] == "time_s,rank,buffer,category,delta_bytes,total_bytes");
  CHECK(lines.size() == run.result.memory.size() + 1);
  CHECK(csv.back() == '\n');
  std::map<int, double> total;  // per rank, starting from the reserve
  std::map<int, double> last_time;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto f = split(lines[i], ',');
    REQUIRE(f.size() == 6);
    const int rank = std::stoi(f[1]);
    const double t = std::stod(f[0]), delta = std::stod(f[4]), tot = std::stod(f[5]);
    if (!total.count(rank)) total[rank] = run.schedule.reserve_bytes;
    total[rank] += delta;
    CHECK(tot == Approx(total[rank]).epsilon(1e-12));
    CHECK(t >= last_time[rank]);
    last_time[rank] = t;
  }
  CHECK(total.size() == 8);
  // Every buffer allocated is freed, except the resident states.
  for (const auto& [rank, bytes] : total)
    CHECK(bytes == Approx(run.schedule.reserve_bytes + run.schedule.resident_bytes()).epsilon(1e-12));
}

TEST_CASE("the same input gives the same bytes", "[report]") {
  const Run a = simulate_plan(2, 1, false);
  const Run b = simulate_plan(2, 1, false);
  nlohmann::json sa = summary_json(a.schedule, a.result), sb = summary_json(b.schedule, b.result);
  for (auto* s : {&sa, &sb}) {
    s->erase("wall_time_s");
    s->erase("events_per_second");
  }
  CHECK(sa.dump() == sb.dump());
  CHECK(chrome_trace(a.schedule, a.result).dump() == chrome_trace(b.schedule, b.result).dump());
  CHECK(memory_csv(a.schedule, a.result) == memory_csv(b.schedule, b.result));
}

TEST_CASE("symmetric ranks report what the full run reports for its ranks", "[report]") {
  const Run& all = shared_run();
  const Run sym = simulate_plan(2, 1, true);
  nlohmann::json sa = summary_json(all.schedule, all.result), ss = summary_json(sym.schedule, sym.result);
  CHECK(ss["ranks_simulated"] == 1);
  for (const char* key : {"iteration_time_s", "exposed_comm_s", "compute_busy_s", "comm_busy_s",
                          "peak_memory_bytes", "peak_time_s", "peak_breakdown"})
    CHECK(sa[key] == ss[key]);
  // Rank 0's rows of the full run's CSV are the symmetric run's CSV.
  std::string rank0 = "time_s,rank,buffer,category,delta_bytes,total_bytes\n";
  for (const auto& line : split(memory_csv(all.schedule, all.result), '\n'))
    if (split(line, ',')[1] == "0") rank0 += line + "\n";
  CHECK(rank0 == memory_csv(sym.schedule, sym.result));
}

TEST_CASE("tick seconds are written exactly", "[report]") {
  CHECK(format_tick_seconds(0) == "0");
  CHECK(format_tick_seconds(1) == "0.000000000001");
  CHECK(format_tick_seconds(1'500'000'000'000) == "1.5");
  CHECK(format_tick_seconds(12'345'678'901'234) == "12.345678901234");
  CHECK(format_tick_seconds(-2'000'000'000'000) == "-2");
}

namespace {

// val-4x384 on 2 CPU ranks at batch 2 under one uniform strategy, priced by a recorded calibration whose
// fits carry errors.
search::PlanOutcome uniform_plan(const std::string& strategy) {
  search::PlanReport report = search::run_request(testing::recorded_request(strategy));
  REQUIRE(report.outcome.feasible);
  return report.outcome;
}

}  // namespace

TEST_CASE("a draw of the calibration's errors: the simulator prices each draw as the analytic model does",
          "[sim][intervals]") {
  // A data-parallel plan on one level simulates to the analytic step (its collectives are calibrated
  // segments, its compute the same kernels): so must every draw, the collectives' drawn residuals and
  // drift included, or the simulator's interval (the one osdp validate checks coverage on) would
  // leave out what the analytic one has.
  for (const std::string strategy : {"zero2", "fsdp"}) {
    INFO(strategy);
    const search::PlanOutcome o = uniform_plan(strategy);
    SimOptions opt;
    opt.symmetric = true;
    opt.memory_rank = SimOptions::kNoRanks;
    const double nominal = to_seconds(replay_plan(o.plan, *o.workload, opt).result.iteration);
    REQUIRE(nominal == Approx(o.evaluation.time_s).epsilon(1e-6));
    constexpr int kDraws = 24;
    const std::vector<double> simulated = simulated_step_times(o.plan, *o.workload, kDraws, opt);
    const std::vector<double> analytic = costmodel::drawn_step_times(*o.workload, o.plan, kDraws);
    REQUIRE(simulated.size() == kDraws);
    REQUIRE(analytic.size() == kDraws);
    // The draws move the step (by several percent: the collectives' residuals are 1-30%).
    const auto [lo, hi] = std::minmax_element(analytic.begin(), analytic.end());
    CHECK(*hi / *lo > 1.05);
    for (int d = 0; d < kDraws; ++d) CHECK(simulated[d] == Approx(analytic[d]).epsilon(1e-6));
  }
}

TEST_CASE("the step's level: the simulated step scaled by it, nominal and drawn as the analytic model",
          "[sim][intervals]") {
  // The recorded calibration with a step level of 1.25 (spread 0.1) in its provenance: every price
  // it gives (this plan's compute and collectives) scaled by 1.25, so the simulated step is 1.25
  // times the one without, to the tick; each draw still simulates to the analytic draw.
  search::PlanOutcome o = uniform_plan("fsdp");
  REQUIRE(o.plan.calibration);
  SimOptions opt;
  opt.symmetric = true;
  opt.memory_rank = SimOptions::kNoRanks;
  const double bare = to_seconds(replay_plan(o.plan, *o.workload, opt).result.iteration);
  o.plan.calibration->provenance["fit"]["composition"] = {{"level", 1.25}, {"level_sigma", 0.1}};
  const double level = to_seconds(replay_plan(o.plan, *o.workload, opt).result.iteration);
  CHECK(level / bare == Approx(1.25).epsilon(1e-6));
  const double analytic = costmodel::plan_cost_model(o.plan).evaluate(*o.workload, o.plan).time_s;
  CHECK(level == Approx(analytic).epsilon(1e-6));
  constexpr int kDraws = 24;
  const std::vector<double> simulated = simulated_step_times(o.plan, *o.workload, kDraws, opt);
  const std::vector<double> drawn = costmodel::drawn_step_times(*o.workload, o.plan, kDraws);
  REQUIRE(simulated.size() == kDraws);
  for (int d = 0; d < kDraws; ++d) CHECK(simulated[d] == Approx(drawn[d]).epsilon(1e-6));
}

}  // namespace osdp::sim
