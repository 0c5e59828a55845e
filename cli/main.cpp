// osdp: plan sharded data-parallel training (thin entry point; the work is in the libraries).
#include <iostream>
#include <map>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "costmodel/error.hpp"

int main(int argc, char** argv) {
  using namespace osdp::cli;
  CLI::App app{
      "osdp: plan and simulate sharded data-parallel training, sweep experiments, and calibrate and\n"
      "validate the predictions by running the plans for real on MPI ranks.\n"
      "Per operator DP, ZDP (ZeRO-3) or REPLICATE, operator splitting, checkpointing and the\n"
      "batch size, chosen to maximise throughput under a device memory limit."};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version, the commit and the compiled-in backends");
  std::map<CLI::App*, Action> actions;
  auto add = [&](const char* name, const char* help, Action (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    actions[sub] = fn(*sub);
  };
  add("models", "List the built-in models", add_models_command);
  add("clusters", "List the built-in clusters", add_clusters_command);
  add("plan", "Find the best sharding plan and batch size for a model on a cluster", add_plan_command);
  add("simulate", "Replay a plan file in the discrete-event simulator (summary, Perfetto trace, memory CSV)",
      add_simulate_command);
  add("collective", "Price one ring collective: closed form beside the simulator", add_collective_command);
  add("sweep", "Run an experiment file: every configuration and strategy, resumable, in threads or MPI ranks",
      add_sweep_command);
  add("calibrate", "Measure collectives, GEMMs and overlap on this machine and fit a calibration file",
      add_calibrate_command);
  add("validate",
      "Run every plan of an experiment for real and compare measured time and memory with the prediction",
      add_validate_command);
  add("export", "Write a plan for PyTorch FSDP2: fully_shard per module, checkpointing, slices, micro-batch",
      add_export_command);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // The subcommand the arguments were for, as every other error of osdp names it.
    std::string command = "osdp";
    for (int i = 1; i < argc && command == "osdp"; ++i)
      for (const auto& entry : actions)
        if (entry.first->get_name() == argv[i]) command += " " + entry.first->get_name();
    std::cerr << command << ": error: " << e.what() << "\nRun `" << command << " --help` for the options.\n";
    return kExitInput;
  }
  if (show_version) {
    std::cout << version_string() << "\n";
    return kExitOk;
  }
  for (auto& [sub, action] : actions) {
    if (!sub->parsed()) continue;
    try {
      return action();
    } catch (const osdp::Error& e) {
      std::cerr << "osdp " << sub->get_name() << ": error: " << e.what() << "\n";
      return kExitInput;
    }
  }
  std::cout << app.help();
  return kExitOk;
}
