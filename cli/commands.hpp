// The osdp subcommands. Each registers its options on the CLI11 app and returns the action to run;
// actions return the process exit code: 0 success, 2 bad input or usage, 3 no plan fits.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "costmodel/plan.hpp"
#include "search/report.hpp"
#include "search/request.hpp"
#include "search/scheduler.hpp"
#include "sim/engine.hpp"
#include "sim/schedule.hpp"

namespace osdp::cli {

constexpr int kExitOk = 0;
constexpr int kExitInput = 2;
constexpr int kExitNoFit = 3;
constexpr int kExitJobFailed = 4;  // a rank (or the torch job) failed or timed out

using Action = std::function<int()>;

Action add_models_command(CLI::App& app);
Action add_clusters_command(CLI::App& app);
Action add_plan_command(CLI::App& app);
Action add_simulate_command(CLI::App& app);
Action add_collective_command(CLI::App& app);
Action add_sweep_command(CLI::App& app);
Action add_calibrate_command(CLI::App& app);  // cli/calibrate_command.cpp
Action add_validate_command(CLI::App& app);   // cli/validate_command.cpp
Action add_export_command(CLI::App& app);     // cli/export_command.cpp

std::string version_string();

// A CLI11 check: a power of two from 1 to `max` (slice counts: an operator splits in halves).
inline CLI::Validator PowerOfTwo(int max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        long long v = 0;
        try {
          std::size_t used = 0;
          v = std::stoll(text, &used);
          if (used != text.size()) return "expected a power of two, got \"" + text + "\"";
        } catch (const std::exception&) {
          return "expected a power of two, got \"" + text + "\"";
        }
        if (v < 1 || v > max || (v & (v - 1)) != 0)
          return "expected a power of two from 1 to " + std::to_string(max) +
                 " (slices split in halves), got " + text;
        return "";
      },
      "POWER OF TWO in [1 - " + std::to_string(max) + "]");
}

// Test hooks: the milliseconds in environment variable `name` (OSDP_SWEEP_TEST_DELAY_MS: each unit of
// a sweep waits that long first; OSDP_VALIDATE_TEST_DELAY_MS: each group of plans of a validation),
// so that the tests can interrupt a run part-way; 0 when unset. Not meant for anything else.
int test_delay_ms(const char* name);

// --- simulation of plans (cli/evaluate.cpp) --------------------------------------------------------

// One batch size of `osdp plan --evaluate sim`: its best plan, priced and simulated.
struct EvaluatedBatch {
  int batch = 0;
  double analytic_time_s = 0, analytic_peak_bytes = 0, analytic_throughput = 0;
  double simulated_time_s = 0, simulated_peak_bytes = 0, simulated_throughput = 0;
};

// The batch sizes of a data-parallel outcome at which a plan fits (solved, or bounded out by the
// scheduler) are searched again one at a time by its solver (the batch fixed); the `top` best by
// analytic throughput (0: all) are simulated (symmetric ranks: exact on the homogeneous clusters a plan
// runs on). Sorted by batch size.
std::vector<EvaluatedBatch> evaluate_by_simulation(const search::PreparedSearch& prepared,
                                                   const search::PlanOutcome& outcome, int top);

}  // namespace osdp::cli
