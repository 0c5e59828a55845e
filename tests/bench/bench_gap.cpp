// How far the analytic cost model is from the simulator, on every bundled model and strategy:
// step time and peak memory of the plan each strategy picks, analytic beside simulated.
// One command:
//   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench --target bench_gap -j2
//   && build-bench/tests/bench/bench_gap [--cluster NAME] [--json FILE]
// The simulated peak must never exceed the analytic one (the analytic peak is an upper bound); the
// gap says how loose that bound is. Times: with prefetch 0 both are the sum of compute and
// communication (equal up to tick rounding); with prefetch 1 the simulator is the judge of the
// cost model's per-operator overlap estimate.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/plan_cost.hpp"
#include "search/report.hpp"
#include "search/scheduler.hpp"
#include "sim/engine.hpp"
#include "sim/schedule.hpp"

namespace {

using namespace osdp;

constexpr double kGiB = 1073741824.0;

struct Row {
  std::string model, strategy;
  double memory_gib;
  int prefetch, batch;
  double analytic_s, simulated_s, analytic_peak, simulated_peak;
  double time_gap() const { return simulated_s / analytic_s - 1; }
  double peak_gap() const { return simulated_peak / analytic_peak - 1; }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string cluster_name = "titan-rtx-8", json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cluster" && i + 1 < argc)
      cluster_name = argv[++i];
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--cluster NAME] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  const auto cluster = costmodel::load_cluster(cluster_name);
  const auto registry = search::default_solvers({20000});
  std::vector<Row> rows;
  for (const auto& entry : costmodel::list_catalog("models")) {
    const auto model = costmodel::load_model(entry.path);
    const auto w = costmodel::lower(model);
    for (int prefetch : {0, 1}) {
      costmodel::CostOptions options;
      options.prefetch = prefetch;
      const costmodel::PlanCostModel plan_cost(cluster, nullptr, model.precision, options);
      const costmodel::CostModel& cost = plan_cost.dp_model(1, 1);
      for (double gib : {8.0, 16.0}) {
        for (const std::string name : {"exact", "fsdp", "zero2", "ddp", "osdp-ref"}) {
          search::SearchOptions so;
          so.space.split_max = 4;
          so.space.checkpoint = search::CheckpointPolicy::kAuto;
          so.memory_limit_bytes = gib * kGiB;
          so.reserve_bytes = cluster.reserve_bytes;
          const auto r = search::run_search(w, cost, registry.get(name), so);
          if (!r.feasible) continue;
          const auto plan = search::make_plan({"bench", model, cluster, {}, options}, w, r);
          const auto schedule = sim::build_schedule(plan, w, plan_cost);
          const sim::RingLinks net(cluster, nullptr);
          sim::SimOptions opt;
          opt.overlap = cluster.overlap.enabled;
          opt.interference = cost.interference();
          opt.symmetric = true;
          const auto s = sim::simulate(schedule, net, opt);
          rows.push_back({entry.name, name, gib, prefetch, r.batch, r.time_s, sim::to_seconds(s.iteration),
                          r.peak_bytes, s.peak_rank().peak_bytes});
        }
      }
    }
  }
  std::cout << fmt::format("analytic against simulated on {} ({} plans that fit)\n", cluster_name,
                           rows.size());
  std::cout << fmt::format("{:<22} {:<9} {:>4} {:>3} {:>5} {:>11} {:>11} {:>8} {:>10} {:>10} {:>8}\n",
                           "model", "strategy", "GiB", "pf", "batch", "time", "sim time", "gap", "peak GiB",
                           "sim GiB", "gap");
  for (const auto& r : rows)
    std::cout << fmt::format(
        "{:<22} {:<9} {:>4.0f} {:>3} {:>5} {:>10.4f}s {:>10.4f}s {:>+7.2f}% {:>10.3f} {:>10.3f} {:>+7.2f}%\n",
        r.model, r.strategy, r.memory_gib, r.prefetch, r.batch, r.analytic_s, r.simulated_s,
        100 * r.time_gap(), r.analytic_peak / kGiB, r.simulated_peak / kGiB, 100 * r.peak_gap());
  for (int prefetch : {0, 1}) {
    std::vector<double> tg, pg;
    int over = 0;
    for (const auto& r : rows) {
      if (r.prefetch != prefetch) continue;
      tg.push_back(std::abs(r.time_gap()));
      pg.push_back(-r.peak_gap());
      over += r.simulated_peak > r.analytic_peak ? 1 : 0;
    }
    std::cout << fmt::format(
        "prefetch {}: |time gap| median {:.2f}%, max {:.2f}%; peak below analytic by median {:.2f}%, max "
        "{:.2f}%; "
        "simulated peak above analytic in {} plans\n",
        prefetch, 100 * median(tg), tg.empty() ? 0.0 : 100 * *std::max_element(tg.begin(), tg.end()),
        100 * median(pg), pg.empty() ? 0.0 : 100 * *std::max_element(pg.begin(), pg.end()), over);
  }
  if (!json_path.empty()) {
    nlohmann::json j{{"schema_version", 1}, {"cluster", cluster_name}, {"rows", nlohmann::json::array()}};
    for (const auto& r : rows)
      j["rows"].push_back({{"model", r.model},
                           {"strategy", r.strategy},
                           {"memory_gib", r.memory_gib},
                           {"prefetch", r.prefetch},
                           {"batch_size", r.batch},
                           {"analytic_time_s", r.analytic_s},
                           {"simulated_time_s", r.simulated_s},
                           {"analytic_peak_bytes", r.analytic_peak},
                           {"simulated_peak_bytes", r.simulated_peak}});
    std::ofstream(json_path) << j.dump(1) << "\n";
  }
  return 0;
}
