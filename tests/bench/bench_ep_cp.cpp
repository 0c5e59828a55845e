// bench_ep_cp: the exact layout search with expert and context parallelism in its space (issue 35's
// targets: a dense model's plan within 100 ms, DeepSeek-V3 on 1,024 GPUs within 1 s), side by side
// with the uniform choices users make by hand: for an MoE model the same search with one EP degree for
// every MoE layer (--ep e), for each e that divides the experts, the best of them named; for a dense
// model the same search at the smallest CP degree that fits (--cp c, c = 1, 2, 4, ...). Wall time of
// each search (median of --repeat runs, minimum in parentheses) and the throughput it finds, priced by
// the same model.
//
//   build-bench/tests/bench/bench_ep_cp [--repeat N] [--json FILE]
//
// Cases: llama3.1-8b on h100-8 and h100-2x8 at 4,096 tokens, and on h100-8 at 32,768 and 131,072;
// mixtral-8x7b and qwen3-30b-a3b on h100-2x8 and 64 H100s (h100-2x8 resized to 8 nodes), deepseek-v3
// on 1,024 H100s (128 nodes of 8), at 4,096. The load average is printed with every row: the machine
// is shared. Not a test: it reports figures and checks no thresholds; a row is marked when a target is
// missed.

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "costmodel/catalog.hpp"
#include "costmodel/provenance.hpp"
#include "search/request.hpp"

namespace {

using namespace osdp;

struct Case {
  std::string model, cluster;
  int world;  // 0: the cluster's
  int seq;
  double target_s;
};

struct Run {
  double median_s = 0, min_s = 0, throughput = 0;
  std::string layout;
};

Run time_search(const Case& c, const std::vector<int>& ep, const std::vector<int>& cp, int repeat) {
  search::PlanRequest r;
  r.model = c.model;
  r.cluster = c.cluster;
  r.world_size = c.world;
  r.seq = c.seq;
  r.ep = ep;
  r.cp = cp;
  r.draws = 0;
  r.baselines = {"none"};
  std::vector<double> times;
  Run out;
  for (int i = 0; i < repeat; ++i) {
    const auto p = search::prepare_search(r);
    const auto t0 = std::chrono::steady_clock::now();
    const search::PlanOutcome o = search::run_strategy(*p, *p->strategy);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    out.throughput = o.feasible ? o.evaluation.throughput : 0;
    out.layout = o.feasible ? o.plan.layout_summary() : "no plan fits";
  }
  std::sort(times.begin(), times.end());
  out.median_s = times[times.size() / 2];
  out.min_s = times.front();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 3;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::cerr << "usage: bench_ep_cp [--repeat N] [--json FILE]\n";
      return 2;
    }
  }
  const std::vector<Case> cases{
      {"llama3.1-8b", "h100-8", 0, 4096, 0.100},    {"llama3.1-8b", "h100-2x8", 0, 4096, 0.100},
      {"llama3.1-8b", "h100-8", 0, 32768, 0.100},   {"llama3.1-8b", "h100-8", 0, 131072, 0.100},
      {"mixtral-8x7b", "h100-2x8", 0, 4096, 1.0},   {"mixtral-8x7b", "h100-2x8", 64, 4096, 1.0},
      {"qwen3-30b-a3b", "h100-2x8", 0, 4096, 1.0},  {"qwen3-30b-a3b", "h100-2x8", 64, 4096, 1.0},
      {"deepseek-v3", "h100-2x8", 1024, 4096, 1.0},
  };
  std::cout << fmt::format("{:<14} {:>5} {:>7} {:>16} {:>10} {:>18} {:>10} {:>7} {:>5}  {}\n", "model",
                           "gpus", "seq", "exact ms", "thr", "best uniform ms", "thr", "ratio", "load",
                           "exact's layout");
  nlohmann::json rows = nlohmann::json::array();
  for (const Case& c : cases) {
    const costmodel::ModelSpec m = costmodel::load_model(c.model);
    const int world = c.world > 0 ? c.world : costmodel::load_cluster(c.cluster).world_size();
    const Run free = time_search(c, {}, {}, repeat);
    // The uniform choices: an MoE model's one EP degree e for every MoE layer, e a power of two dividing
    // the experts, the best of them; a dense model's smallest CP degree that fits.
    Run best;
    std::string uniform = "-";
    double uniform_s = 0;
    if (m.moe.enabled()) {
      for (int e = 1; e <= m.moe.experts && e <= world; e *= 2) {
        if (m.moe.experts % e != 0) continue;
        const Run u = time_search(c, {e}, {}, repeat);
        uniform_s += u.median_s;
        if (u.throughput > best.throughput) {
          best = u;
          uniform = fmt::format("ep {}", e);
        }
      }
    } else {
      for (int cp = 1; cp <= 16 && cp <= world; cp *= 2) {
        best = time_search(c, {1}, {cp}, repeat);
        uniform_s += best.median_s;
        uniform = fmt::format("cp {}", cp);
        if (best.throughput > 0) break;
      }
    }
    const auto load = costmodel::load_average();
    const bool missed = free.median_s > c.target_s;
    std::cout << fmt::format(
        "{:<14} {:>5} {:>7} {:>8.1f} ({:>5.1f}) {:>10.3f} {:>8.1f} ({:<7}) {:>10.3f} {:>7.3f} {:>5}  {}{}\n",
        c.model, world, c.seq, 1e3 * free.median_s, 1e3 * free.min_s, free.throughput, 1e3 * best.median_s,
        uniform, best.throughput, best.throughput > 0 ? free.throughput / best.throughput : 0.0,
        load ? fmt::format("{:.2f}", (*load)[0]) : std::string("?"), free.layout,
        missed ? fmt::format("  MISSED the {:.0f} ms target", 1e3 * c.target_s) : "");
    rows.push_back({{"model", c.model},
                    {"cluster", c.cluster},
                    {"devices", world},
                    {"seq", c.seq},
                    {"exact_median_s", free.median_s},
                    {"exact_min_s", free.min_s},
                    {"exact_throughput", free.throughput},
                    {"exact_layout", free.layout},
                    {"uniform", uniform},
                    {"uniform_median_s", best.median_s},
                    {"uniform_throughput", best.throughput},
                    {"uniform_layout", best.layout},
                    {"uniform_all_median_s", uniform_s},
                    {"target_s", c.target_s},
                    {"load_average", load ? (*load)[0] : -1.0}});
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << nlohmann::json{{"repeat", repeat}, {"rows", rows}}.dump(1) << "\n";
  }
  return 0;
}
