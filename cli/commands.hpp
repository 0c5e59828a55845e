// The osdp subcommands. Each registers its options on the CLI11 app and returns the action to run;
// actions return the process exit code: 0 success, 2 bad input or usage, 3 no plan fits.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace osdp::cli {

constexpr int kExitOk = 0;
constexpr int kExitInput = 2;
constexpr int kExitNoFit = 3;

using Action = std::function<int()>;

Action add_models_command(CLI::App& app);
Action add_clusters_command(CLI::App& app);
Action add_plan_command(CLI::App& app);

std::string version_string();

}  // namespace osdp::cli
