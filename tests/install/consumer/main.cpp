// Plans nd-48x1024 on titan-rtx-8 at 16 GiB with the exact search and with FSDP (osdp::search),
// replays the exact plan in the simulator (osdp::sim), and prints one line per figure for
// tests/install/test_install.sh to check.
#include <cstdio>
#include <exception>

#include "costmodel/catalog.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"
#include "search/report.hpp"
#include "search/scheduler.hpp"
#include "search/batch_solver.hpp"
#include "sim/replay.hpp"

int main() {
  using namespace osdp;
  try {
    search::PlanContext ctx;
    ctx.tool_version = "osdp_consumer";
    ctx.model = costmodel::load_model("nd-48x1024");
    ctx.cluster = costmodel::load_cluster("titan-rtx-8");
    const costmodel::Workload w = costmodel::lower(ctx.model);
    const costmodel::CostModel model(ctx.cluster, nullptr, ctx.model.precision, ctx.cost_options);
    search::SearchOptions options;
    options.memory_limit_bytes = 16.0 * (1 << 30);
    options.reserve_bytes = ctx.cluster.reserve_bytes;
    const search::SolverRegistry registry = search::default_solvers();
    const search::SearchResult exact = search::run_search(w, model, registry.get("exact"), options);
    const search::SearchResult fsdp = search::run_search(w, model, registry.get("fsdp"), options);
    std::printf("exact feasible %d batch %d throughput %.6g\n", exact.feasible ? 1 : 0, exact.batch,
                exact.throughput);
    std::printf("fsdp feasible %d batch %d throughput %.6g\n", fsdp.feasible ? 1 : 0, fsdp.batch,
                fsdp.throughput);
    if (!exact.feasible) return 1;
    const sim::Replay replay = sim::replay_plan(search::make_plan(ctx, w, exact), sim::SimOptions{});
    std::printf("simulated iteration %.6g s analytic %.6g s\n", sim::to_seconds(replay.result.iteration),
                replay.analytic_time_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "osdp_consumer: %s\n", e.what());
    return 2;
  }
  return 0;
}
