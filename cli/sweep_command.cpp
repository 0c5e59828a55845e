// osdp sweep: every unit of an experiment file (experiments/sweep.hpp does the work).
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "costmodel/error.hpp"
#include "experiments/experiment.hpp"
#include "experiments/sweep.hpp"

namespace osdp::cli {
namespace {

constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as a shell reports a Ctrl-C

struct SweepArgs {
  std::string file, out;
  int jobs = 1;
  bool resume = false, force = false, quiet = false;
};

std::string shell_quote(const std::string& s) {
  if (s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:@+") ==
      std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int run_sweep_command(const SweepArgs& a) {
  const experiments::Experiment e = experiments::load_experiment(a.file);
  experiments::SweepOptions o;
  o.out_dir = a.out;
  o.jobs = a.jobs;
  o.resume = a.resume;
  o.force = a.force;
  o.progress = !a.quiet;
  o.unit_delay_ms = test_delay_ms("OSDP_SWEEP_TEST_DELAY_MS");
  const experiments::SweepOutcome r = experiments::run_sweep(e, o);
  if (!r.root) return r.error.empty() ? kExitOk : kExitInput;  // rank 0 reports for everyone

  for (const auto& f : r.failed)
    std::cerr << fmt::format("osdp sweep: unit {} failed: {}\n", f.index, f.message);
  const int finished = r.resumed + r.ran;
  if (r.interrupted) {
    std::cerr << fmt::format(
        "osdp sweep: interrupted after {} of {} units; the finished ones are in {}/rows.jsonl.\n"
        "  To finish: osdp sweep {} --out {} --resume\n",
        finished, r.units, r.out_dir, shell_quote(a.file), shell_quote(r.out_dir));
    return kExitInterrupted;
  }
  std::cout << fmt::format("osdp sweep: {}: {} units ({} run{}, {} resumed, {} failed) in {:.2f} s\n", e.name,
                           r.units, r.ran, r.ranks > 1 ? fmt::format(" on {} ranks", r.ranks) : "", r.resumed,
                           r.failed.size(), r.wall_s)
            << fmt::format("  results in {0}/results.csv, {0}/candidates.csv, {0}/summary.json\n", r.out_dir);
  if (!r.failed.empty()) {
    std::cerr << fmt::format("osdp sweep: {} of {} units failed (listed above and in {}/summary.json)\n",
                             r.failed.size(), r.units, r.out_dir);
    return kExitInput;
  }
  return kExitOk;
}

}  // namespace

Action add_sweep_command(CLI::App& app) {
  auto a = std::make_shared<SweepArgs>();
  app.description(
      "Run every configuration and strategy of an experiment file (the Cartesian product of its axes).\n"
      "Each finished unit is appended to DIR/rows.jsonl at once (fsync'd; DIR is locked while the sweep\n"
      "runs, and finished rows are never overwritten without --resume or --force); at the end\n"
      "DIR/results.csv (one line per\n"
      "unit and evaluator), DIR/candidates.csv and DIR/summary.json (provenance) are written.\n"
      "Under `mpirun -np K osdp sweep FILE` the units are divided among the ranks; rank 0 writes.\n"
      "Exit codes: 0 done; 2 bad input or usage, or some units failed (their messages are printed and in\n"
      "summary.json); 130 interrupted (Ctrl-C: the units in flight finish; continue with --resume).");
  app.add_option("file", a->file, "Experiment file (JSON, schema_version 1)")->required();
  app.add_option("--out", a->out,
                 "Output directory (default: the experiment's \"output\", relative to here)");
  app.add_option("--jobs,-j", a->jobs, "Units run at once, in threads (per MPI rank)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  CLI::Option* resume = app.add_flag(
      "--resume", a->resume,
      "Continue an interrupted sweep: keep the rows in DIR/rows.jsonl and run only the missing units");
  app.add_flag("--force", a->force,
               "Start again in a DIR that holds finished rows: delete its rows.jsonl and results first "
               "(without --resume or --force such a DIR is refused)")
      ->excludes(resume);
  app.add_flag("--quiet,-q", a->quiet, "No progress line (it is shown only on a terminal anyway)");
  return [a]() { return run_sweep_command(*a); };
}

}  // namespace osdp::cli
