// The exact solver against brute force (issue: "exact" must equal the optimum found by enumerating
// every combination) on random instances, both synthetic knapsacks and ones priced from small models.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <catch2/catch.hpp>

#include "../test_size.hpp"

#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"
#include "search/scheduler.hpp"
#include "search/solvers.hpp"
#include "search/space.hpp"
#include "search/batch_solver.hpp"

namespace {

using namespace osdp;
using search::Instance;
using search::Solution;

constexpr double kRel = 1e-9;  // relative tolerance on objective values (sums in different orders)

bool same_objective(const Solution& a, const Solution& b) {
  if (a.feasible != b.feasible) return false;
  if (!a.feasible) return true;
  return std::abs(a.time_s - b.time_s) <= kRel * std::max(1.0, std::abs(b.time_s));
}

double combinations(const Instance& inst) {
  double c = 1;
  for (const auto& g : inst.groups) c *= static_cast<double>(g.items.size());
  return c;
}

// A random knapsack: values drawn from small grids so that ties, identical groups and equal
// transients (the hard cases for dominance pruning) occur often.
Instance random_instance(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> ngroups(1, 8), nitems(1, 6), grid(0, 12), coin(0, 3);
  Instance inst;
  inst.batch = 1;
  inst.fixed_time_s = 0.5 * grid(rng);
  inst.fixed_memory_bytes = 100.0 * grid(rng);
  const int G = ngroups(rng);
  std::vector<search::Item> shared;
  for (int g = 0; g < G; ++g) {
    search::Group grp;
    grp.name = "g" + std::to_string(g);
    if (!shared.empty() && coin(rng) == 0) {
      grp.items = shared;  // identical to an earlier group
    } else {
      const int I = nitems(rng);
      for (int i = 0; i < I; ++i)
        grp.items.push_back({1.0 + grid(rng) * 0.37, 1000.0 * grid(rng), 250.0 * grid(rng)});
      shared = grp.items;
    }
    inst.groups.push_back(grp);
  }
  // Capacity between the smallest peak (sometimes a little below: infeasible) and a loose bound.
  const double lo = search::min_peak_bytes(inst);
  std::uniform_real_distribution<double> frac(-0.05, 1.0);
  inst.capacity_bytes = lo + frac(rng) * (G * 12000.0);
  return inst;
}

}  // namespace

TEST_CASE("exact equals brute force on 400 random knapsacks", "[exact]") {
  std::mt19937_64 rng(20261122);  // fixed seed: failures reproduce
  int feasible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Instance inst = random_instance(rng);
    INFO("trial " << trial << ", groups " << inst.groups.size());
    const Solution brute = search::solve_brute_force(inst);
    const Solution exact = search::solve_exact(inst);
    REQUIRE(same_objective(exact, brute));
    if (exact.feasible) {
      ++feasible;
      // The reported figures are those of the selection it returns.
      const Solution again = search::evaluate(inst, exact.chosen);
      REQUIRE(again.feasible);
      REQUIRE(again.time_s == Approx(exact.time_s).epsilon(kRel));
      REQUIRE(again.peak_bytes <= inst.capacity_bytes);
    }
  }
  // The generator must exercise both outcomes.
  REQUIRE(feasible > 200);
  REQUIRE(feasible < 400);
}

// Many distinct transients under a tight capacity: many thresholds compete, and the solver's runs of
// consecutive thresholds (one DP over their union, halved when it finds a selection that does not fit
// for real) are exercised on every path: proved at once, found and fitting, found and not fitting.
TEST_CASE("exact equals brute force when many thresholds compete under a tight capacity", "[exact]") {
  std::mt19937_64 rng(20261126);
  std::uniform_int_distribution<int> ngroups(3, 8), nitems(2, 6), grid(0, 12), fine(0, 80);
  std::uniform_real_distribution<double> slack(0.0, 0.4);
  int feasible = 0;
  for (int trial = 0; trial < 500; ++trial) {
    Instance inst;
    inst.batch = 1;
    const int G = ngroups(rng);
    for (int g = 0; g < G; ++g) {
      search::Group grp;
      grp.name = "g" + std::to_string(g);
      const int I = nitems(rng);
      for (int i = 0; i < I; ++i)
        grp.items.push_back({1.0 + grid(rng) * 0.37, 1000.0 * grid(rng), 50.0 * fine(rng)});
      inst.groups.push_back(grp);
    }
    inst.capacity_bytes = search::min_peak_bytes(inst) + slack(rng) * (G * 6000.0);
    INFO("trial " << trial << ", groups " << G);
    const Solution brute = search::solve_brute_force(inst);
    const Solution exact = search::solve_exact(inst);
    REQUIRE(same_objective(exact, brute));
    REQUIRE(exact.feasible);  // the capacity is at least the smallest peak
    const Solution again = search::evaluate(inst, exact.chosen);
    REQUIRE(again.peak_bytes <= inst.capacity_bytes);
    REQUIRE(again.time_s == Approx(exact.time_s).epsilon(kRel));
    ++feasible;
  }
  REQUIRE(feasible == 500);
}

TEST_CASE("the smallest peak and the LP bound agree with brute force", "[exact]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    Instance inst = random_instance(rng);
    // Brute-force smallest peak over all selections.
    Instance loose = inst;
    loose.capacity_bytes = 1e300;
    double best_peak = 1e300;
    std::vector<int> sel(inst.groups.size(), 0);
    while (true) {
      best_peak = std::min(best_peak, search::evaluate(loose, sel).peak_bytes);
      std::size_t g = 0;
      while (g < sel.size() && ++sel[g] == static_cast<int>(inst.groups[g].items.size())) sel[g++] = 0;
      if (g == sel.size()) break;
    }
    REQUIRE(search::min_peak_bytes(inst) == Approx(best_peak).epsilon(kRel));
    // The LP relaxation never exceeds the optimum.
    const Solution brute = search::solve_brute_force(inst);
    if (brute.feasible)
      REQUIRE(search::lower_bound_time(inst) <= brute.time_s * (1 + kRel));
    else
      REQUIRE(std::isinf(search::lower_bound_time(inst)));
    // The quick bound (one LP) never exceeds the tight one (one LP per threshold).
    const double quick = search::quick_lower_bound_time(inst);
    if (!std::isinf(search::lower_bound_time(inst)))
      REQUIRE(quick <= search::lower_bound_time(inst) * (1 + kRel));
    if (std::isinf(quick)) REQUIRE_FALSE(brute.feasible);
  }
}

TEST_CASE("the quick LP bound and the tight one on an instance derived by hand", "[exact]") {
  // One group, capacity 350, nothing fixed:
  //   A: time 2, persistent 100, transient 10  (peak 110: fits)
  //   B: time 1, persistent 300, transient 100 (peak 400: does not)
  // Optimum: A, 2.
  // Tight (one LP per threshold): threshold 10 allows A alone under 350 - 10 = 340: 2. Threshold
  // 100 allows both under 250: start at A (100 bytes), B's increment is +200 bytes for -1 s, of
  // which 150 bytes fit: 2 - 150/200 = 1.25. The bound is min(2, 1.25) = 1.25.
  // Quick (one LP): every selection's largest transient is at least 10 (the group's smallest),
  // so the budget is 340 with both items allowed: B's 300 fits whole, 1.
  Instance inst;
  inst.capacity_bytes = 350;
  search::Group g;
  g.name = "op";
  g.items = {{2.0, 100.0, 10.0}, {1.0, 300.0, 100.0}};
  inst.groups.push_back(g);
  CHECK(search::solve_brute_force(inst).time_s == Approx(2.0));
  CHECK(search::lower_bound_time(inst) == Approx(1.25));
  CHECK(search::quick_lower_bound_time(inst) == Approx(1.0));
  // With a smallest transient of 10, 100 + 10 > 105: nothing fits, and the quick bound knows it.
  inst.capacity_bytes = 105;
  CHECK(std::isinf(search::quick_lower_bound_time(inst)));
}

TEST_CASE("a time cutoff only hides selections that are not faster", "[exact]") {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    Instance inst = random_instance(rng);
    const Solution brute = search::solve_brute_force(inst);
    if (!brute.feasible) continue;
    // Just above the optimum: still found. At the optimum: nothing strictly faster exists.
    REQUIRE(same_objective(search::solve_exact(inst, brute.time_s * (1 + 1e-6) + 1e-9), brute));
    REQUIRE_FALSE(search::solve_exact(inst, brute.time_s * (1 - 1e-6)).feasible);
  }
}

TEST_CASE("dfs with an unbounded budget equals brute force; a small budget reports itself", "[exact][dfs]") {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    Instance inst = random_instance(rng);
    const Solution dfs = search::solve_dfs(inst, std::int64_t{1} << 40);
    REQUIRE(dfs.complete);
    REQUIRE(same_objective(dfs, search::solve_brute_force(inst)));
  }
  Instance big;
  big.capacity_bytes = 1e18;
  for (int g = 0; g < 30; ++g)
    big.groups.push_back({"g", {{1.0, 1.0, 0.0}, {1.0 + 1e-3 * g, 0.5, 0.0}, {2.0, 0.0, 0.0}}, nullptr});
  const Solution cut = search::solve_dfs(big, 10);
  REQUIRE_FALSE(cut.complete);
  REQUIRE(cut.nodes >= 10);
}

// The DP's memory budget: with room for it, the instance below is solved exactly; with a budget of a
// few states it stops, says so (complete false), and still returns a feasible selection (the greedy
// LP rounding) no faster than the optimum. 30 groups of 3 items whose Pareto fronts keep growing.
TEST_CASE("exact stops at its DP-state budget, says so, and keeps a feasible plan", "[exact]") {
  Instance big;
  for (int g = 0; g < 30; ++g)
    big.groups.push_back(
        {"g",
         {{1.0, 1.0 + 0.01 * g, 0.0}, {1.0 + 1e-3 * g, 0.5 + 0.001 * g, 0.0}, {2.0, 0.1, 0.0}},
         nullptr});
  big.capacity_bytes = 20.0;  // room for some groups at their fast, large items, not all
  const Solution full = search::solve_exact(big);
  REQUIRE(full.feasible);
  REQUIRE(full.complete);
  REQUIRE(full.nodes >= 30);  // at least a state per group: more than the 10 allowed below
  const Solution cut = search::solve_exact(big, std::numeric_limits<double>::infinity(), 10);
  REQUIRE_FALSE(cut.complete);
  REQUIRE(cut.feasible);
  REQUIRE(cut.peak_bytes <= big.capacity_bytes);
  REQUIRE(cut.time_s >= full.time_s * (1 - kRel));
}

namespace {

// A cluster with figures in the range of real ones.
costmodel::ClusterSpec random_cluster(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> ranks(2, 16), coin(0, 1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  costmodel::ClusterSpec c;
  c.name = "random";
  c.devices_per_node = ranks(rng);
  c.memory_bytes = 1e12;
  c.reserve_bytes = 1e8;
  c.compute.fp32_flops_per_s = 1e12 * (1 + 20 * u(rng));
  c.compute.bf16_flops_per_s = 4 * c.compute.fp32_flops_per_s;
  c.compute.gemm_efficiency = 0.5 + 0.4 * u(rng);
  c.compute.gemm_half_efficiency_dim = 64 * u(rng);
  c.compute.memory_bandwidth_bytes_per_s = 1e11 * (1 + 5 * u(rng));
  c.compute.kernel_overhead_s = 1e-5 * u(rng);
  c.intra = {1e-5 * u(rng), 1e9 * (1 + 50 * u(rng))};
  c.overlap.enabled = coin(rng) == 1;
  c.overlap.interference = 1 + 0.3 * u(rng);
  return c;
}

costmodel::ModelSpec random_model(std::mt19937_64& rng, int layers) {
  std::uniform_int_distribution<int> hid(1, 6), coin(0, 1);
  costmodel::ModelSpec m;
  m.name = "random";
  const int h = 64 * hid(rng);
  m.stages = {{layers, h, 4, 4 * h}};
  m.seq = 128 * (1 + coin(rng));
  m.vocab = 1000 + 17 * hid(rng);
  m.tied_embeddings = coin(rng) == 1;
  m.precision = coin(rng) ? costmodel::Precision::kFp32 : costmodel::Precision::kMixed;
  return m;
}

// Sets a capacity that binds: between the smallest peak and the peak of the fastest selection, at one
// of 7 points chosen by the trial number.
void bind_capacity(Instance& inst, int trial) {
  Instance loose = inst;
  loose.capacity_bytes = 1e300;
  const double fastest_peak = search::solve_brute_force(loose).peak_bytes;
  const double lo = search::min_peak_bytes(inst);
  inst.capacity_bytes = lo + (fastest_peak - lo) * (0.1 + 0.8 * (trial % 7) / 6.0);
}

}  // namespace

TEST_CASE("exact equals brute force on instances priced from random small models", "[exact][model]") {
  std::mt19937_64 rng(31337);
  int checked = 0, feasible = 0;
  for (int trial = 0; checked < 200; ++trial) {
    const int layers = 1 + trial % 3;
    const costmodel::ModelSpec m = random_model(rng, layers);
    const costmodel::ClusterSpec c = random_cluster(rng);
    const costmodel::Workload w = costmodel::lower(m);
    const costmodel::CostModel model(c, nullptr, m.precision, {});
    search::SpaceOptions space;
    space.split_max = layers <= 2 ? 2 : 1;
    space.checkpoint = search::CheckpointPolicy::kAuto;
    const int batch = 1 + trial % 4;
    const search::BatchCosts costs = search::price_batch(w, model, space, batch, 1e12, c.reserve_bytes);
    Instance inst = search::to_instance(costs);
    if (combinations(inst) > 2e6) continue;
    bind_capacity(inst, trial);
    INFO("trial " << trial << " layers " << layers << " ops " << inst.groups.size());
    const Solution brute = search::solve_brute_force(inst);
    const Solution exact = search::solve_exact(inst);
    REQUIRE(same_objective(exact, brute));
    feasible += exact.feasible ? 1 : 0;
    ++checked;
  }
  REQUIRE(feasible == checked);  // capacities were chosen at or above the smallest peak
}

// Issue 14: the same with node groups and two-level collectives in the space, on random clusters of
// 2-4 nodes whose inter-node link is 2-50x slower than the intra-node one. The sanitizer pass
// (test_size.hpp) takes 30 instances of up to 2e5 combinations instead of 120 of up to 2e6.
TEST_CASE("exact equals brute force with node groups and two-level collectives", "[exact][model][groups]") {
  std::mt19937_64 rng(1414);
  std::uniform_int_distribution<int> nodes(2, 4);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int checked = 0, grouped = 0;
  const int instances = testing::test_size(120, 30);
  const double max_combinations = testing::test_size(2e6, 2e5);
  for (int trial = 0; checked < instances; ++trial) {
    const costmodel::ModelSpec m = random_model(rng, 1 + trial % 2);
    costmodel::ClusterSpec c = random_cluster(rng);
    c.nodes = nodes(rng);
    c.devices_per_node = std::max(2, c.devices_per_node / 2);
    c.inter = costmodel::LinkSpec{c.intra.alpha_s * (1 + 4 * u(rng)),
                                  c.intra.bandwidth_bytes_per_s / (2 + 48 * u(rng))};
    const costmodel::Workload w = costmodel::lower(m);
    const costmodel::CostModel model(c, nullptr, m.precision, {});
    REQUIRE(model.two_levels());
    search::SpaceOptions space;
    space.checkpoint = search::CheckpointPolicy::kAuto;
    space.groups = true;
    const search::BatchCosts costs =
        search::price_batch(w, model, space, 1 + trial % 3, 1e12, c.reserve_bytes);
    Instance inst = search::to_instance(costs);
    if (combinations(inst) > max_combinations) continue;
    bind_capacity(inst, trial);
    INFO("trial " << trial << " ops " << inst.groups.size() << " nodes " << c.nodes << " x "
                  << c.devices_per_node);
    const Solution brute = search::solve_brute_force(inst);
    const Solution exact = search::solve_exact(inst);
    REQUIRE(same_objective(exact, brute));
    REQUIRE(search::lower_bound_time(inst) <= brute.time_s * (1 + kRel));
    for (std::size_t g = 0; g < inst.groups.size(); ++g) {
      const costmodel::Choice& ch = costs.ops[g].choices()[static_cast<std::size_t>(exact.chosen[g])];
      grouped += (ch.node_group || ch.two_level) ? 1 : 0;
    }
    ++checked;
  }
  REQUIRE(grouped > 0);  // the optimum does use the new choices in some of them
}

TEST_CASE("the batch-size scheduler finds the best throughput over all batch sizes", "[exact][scheduler]") {
  std::mt19937_64 rng(4242);
  for (int trial = 0; trial < 12; ++trial) {
    const costmodel::ModelSpec m = random_model(rng, 1 + trial % 2);
    costmodel::ClusterSpec c = random_cluster(rng);
    const costmodel::Workload w = costmodel::lower(m);
    const costmodel::CostModel model(c, nullptr, m.precision, {});
    search::SearchOptions opt;
    opt.space.split_max = trial % 2 == 0 ? 2 : 1;  // one layer with splits, two without
    opt.space.checkpoint = search::CheckpointPolicy::kAuto;
    opt.reserve_bytes = c.reserve_bytes;
    // A memory limit that allows a handful of batch sizes.
    const auto one = search::to_instance(search::price_batch(w, model, opt.space, 1, 1e300, c.reserve_bytes));
    const auto two = search::to_instance(search::price_batch(w, model, opt.space, 2, 1e300, c.reserve_bytes));
    const double per_sample = search::min_peak_bytes(two) - search::min_peak_bytes(one);
    opt.memory_limit_bytes = search::min_peak_bytes(one) + per_sample * (3 + trial);
    const auto registry = search::default_solvers();
    const search::SearchResult r = search::run_search(w, model, registry.get("exact"), opt);
    REQUIRE(r.feasible);
    // Brute force: every batch size that fits, each solved by enumeration.
    double best = 0;
    for (int b = 1;; ++b) {
      Instance inst = search::to_instance(
          search::price_batch(w, model, opt.space, b, opt.memory_limit_bytes, c.reserve_bytes));
      if (search::min_peak_bytes(inst) > opt.memory_limit_bytes) break;
      REQUIRE(combinations(inst) <= 5e6);
      const Solution s = search::solve_brute_force(inst);
      best = std::max(best, model.world_size() * b / s.time_s);
    }
    INFO("trial " << trial);
    REQUIRE(r.throughput == Approx(best).epsilon(kRel));
  }
}
