// osdp validate: run every plan of an experiment for real and hold the prediction to the
// experiment's tolerances (validate/validation.hpp does the work). Outside mpirun it relaunches
// itself under mpirun; inside, every rank runs every plan and rank 0 writes the results.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/mpi_args.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/provenance.hpp"
#include "costmodel/uncertainty.hpp"
#include "costmodel/workload.hpp"
#include "experiments/measured.hpp"
#include "experiments/results_dir.hpp"
#include "experiments/torch_measured.hpp"
#include "sim/replay.hpp"
#include "validate/cpu/cpu_device.hpp"
#include "validate/executor/self_communicator.hpp"
#include "validate/torch/torch_job.hpp"
#ifdef OSDP_HAVE_MPI_BACKEND
#include "validate/backends.hpp"
#include "validate/mpi/mpi_backend.hpp"
#endif

namespace osdp::cli {
namespace {

constexpr int kExitTolerance = 5;     // a measured error passed the experiment's tolerance
constexpr int kExitInconclusive = 6;  // the machine's own spread exceeds the time tolerance

std::string load_text() {
  const auto load = costmodel::load_average();
  return load ? fmt::format("{:.2f} {:.2f} {:.2f}", (*load)[0], (*load)[1], (*load)[2])
              : std::string("unknown");
}

struct ValidateArgs {
  std::string file, backend = "mpi", calibration, out, mpirun_args, gemm = "fp32", python, compute = "real";
  std::vector<std::string> plans, np;
  std::optional<int> warmup, iterations;
  double timeout_s = 120;
  bool resume = false, force = false, quiet = false, tasks = false, no_check = false;
};

std::vector<std::string> child_args(const ValidateArgs& a, int np) {
  std::vector<std::string> r{"validate"};
  if (!a.file.empty()) r.push_back(a.file);
  for (const auto& p : a.plans) r.insert(r.end(), {"--plan", p});
  r.insert(r.end(), {"--backend", a.backend, "--gemm", a.gemm, "--compute", a.compute, "--np",
                     std::to_string(np), "--timeout", fmt::format("{}", a.timeout_s)});
  if (!a.calibration.empty()) r.insert(r.end(), {"--calibration", a.calibration});
  if (!a.out.empty()) r.insert(r.end(), {"--out", a.out});
  if (a.warmup) r.insert(r.end(), {"--warmup", std::to_string(*a.warmup)});
  if (a.iterations) r.insert(r.end(), {"--iterations", std::to_string(*a.iterations)});
  if (a.resume) r.push_back("--resume");
  if (a.force) r.push_back("--force");
  if (a.tasks) r.push_back("--tasks");
  if (a.quiet) r.push_back("--quiet");
  if (a.no_check) r.push_back("--no-check");
  return r;
}

// What the command runs: the units of an experiment, or plan files as they are. Reads and checks
// every input (bad input fails here, before any rank starts).
experiments::MeasuredJob make_job(const ValidateArgs& a) {
  if (a.file.empty() == a.plans.empty())
    throw UsageError("give an experiment file or --plan FILE (one or more), not both");
  if (!a.plans.empty() && !a.calibration.empty())
    throw UsageError(
        "--calibration re-plans the units of an experiment; a plan file carries its own calibration");
  experiments::MeasuredJob job = a.file.empty()
                                     ? experiments::measured_job(a.plans, experiments::ValidationSpec{})
                                     : experiments::measured_job(experiments::load_experiment(a.file));
  if (a.warmup) job.validation.warmup = *a.warmup;
  if (a.iterations) job.validation.iterations = *a.iterations;
  return job;
}

// Reads and checks the inputs that every backend needs, into the options.
experiments::ValidationOptions make_options(const ValidateArgs& a, const experiments::MeasuredJob& job) {
  experiments::ValidationOptions o;
  if (!a.calibration.empty()) {  // read once here: bad input fails before anything runs
    const experiments::Experiment e = experiments::load_experiment(a.file);
    (void)costmodel::load_calibration(a.calibration, costmodel::load_cluster(e.base.cluster).compute);
    o.calibration = a.calibration;
  }
  o.check = !a.no_check;
  o.selective = a.backend == "torch";  // osdp's executor runs none or full checkpointing
  o.out_dir = a.out.empty() ? job.output : a.out;
  o.resume = a.resume;
  o.force = a.force;
  o.tasks = a.tasks;
  o.gemm_math = gemm_math(a.gemm);
  o.emulate_compute = a.compute == "emulate";
  o.group_delay_ms = test_delay_ms("OSDP_VALIDATE_TEST_DELAY_MS");
  if (!a.quiet) o.progress = [](const std::string& line) { std::cerr << "validate: " << line << std::endl; };
  return o;
}

// Rank 0 (or the torch backend's launcher): the outputs, the summary lines and the exit code.
int report(const ValidateArgs& a, const experiments::MeasuredJob& job,
           const experiments::ValidationOptions& o, const std::vector<experiments::UnitResult>& rows,
           nlohmann::json prov, int ranks) {
  const experiments::ValidationSummary s = experiments::summarize(rows, job.validation);
  prov["date"] = costmodel::utc_now();
  prov["tool"] = costmodel::tool_version();
  prov["gemm"] = a.gemm;
  prov["compute"] = a.compute == "emulate" ? "emulated" : "real";
  prov["calibration"] = !o.calibration.empty() ? o.calibration
                        : a.plans.empty()      ? std::string("(the clusters' own)")
                                               : std::string("(the plan files' own)");
  const std::string plot = experiments::write_validation_outputs(o.out_dir, job, rows, s, prov);
  std::cout << fmt::format(
      "osdp validate: {}: {} plans on {} ranks{}; step time |error| median {:.1f}%, max {:.1f}%;"
      " {} |error| max {:.2f}%\n",
      job.name, s.plans, ranks, o.emulate_compute ? " (compute emulated)" : "", 100 * s.median_abs_time_error,
      100 * s.max_abs_time_error, a.backend == "torch" ? "memory at rest" : "peak memory",
      100 * s.max_abs_memory_error);
  if (s.checked > 0)
    std::cout << fmt::format(
        "  one step {}, {} plans: loss within {:.1e}, gradients {:.1e}, weights {:.1e}{}\n",
        a.backend == "torch" ? "in torch against the unsharded step" : "against the unsharded step",
        s.checked, s.max_check_loss_error, s.max_check_grad_diff, s.max_check_weight_diff,
        s.numerics_failed ? " (over tolerance)" : "");
  for (const auto& x : s.speedups)
    std::cout << fmt::format("  speedup {} over {}: predicted {:.3f}x, measured {:.3f}x ({:+.1f}%)\n",
                             x.faster, x.than, x.predicted, x.measured, 100 * x.error);
  if (s.with_interval > 0) {
    std::cout << fmt::format(
        "  coverage: {} of {} measured step times inside their predicted {:.0f}% intervals ({:.0f}%), which "
        "reach {:+.1f}% / {:+.1f}% around their predictions (median over the plans)\n",
        s.covered, s.with_interval, 100 * costmodel::kIntervalLevel, 100 * s.coverage(), 100 * s.interval_low,
        100 * s.interval_high);
    if (s.covered_about_level)
      std::cout << fmt::format(
          "  coverage about this run's own level ({:+.1f}%, the composition line's): {} of {} ({:.0f}%); the "
          "plans of a run share most of their error, so a run's coverage is nearly all or far less, and this "
          "count is how well the intervals hold the plans' spread, the level aside\n",
          100 * (s.composition["level"].get<double>() - 1), *s.covered_about_level, s.with_interval,
          100.0 * *s.covered_about_level / s.with_interval);
    if (const auto& x = s.expected_coverage)
      std::cout << fmt::format(
          "  coverage expected of a run: the {} draws, each taken as a run (every plan's drawn step, its "
          "median's "
          "noise resampled from its steps), put {}-{} of {} inside (median {}; {:.0f}% of the draws within "
          "{:.0f}-{:.0f}%); "
          "the draws share the step's level across plans as a run does, so this run's {} is {}\n",
          x->draws, x->low, x->high, s.with_interval, x->median, 100 * x->in_band,
          100 * experiments::kCoverageBand[0], 100 * experiments::kCoverageBand[1], s.covered,
          s.covered < x->low ? "below that range: the intervals miss more than the calibration's errors say"
          : s.covered > x->high ? "above that range: the intervals are wider than the run needed"
                                : "within that range");
    if (s.coverage() > 0.99 && s.interval_high - s.interval_low > 2 * s.median_abs_time_error)
      std::cout << "  (every step inside intervals wider than twice the median error: the calibration's own "
                   "noise, not the model, sets them; calibrate on a quieter machine to narrow them)\n";
  } else
    std::cout << "  coverage: no intervals (the calibration records no fit residuals)\n";
  if (!s.ratios.empty())
    std::cout << fmt::format(
        "  speedups: {} of {} measured ratios of two plans of a configuration inside their predicted {:.0f}% "
        "intervals, allowing for each measured ratio's own spread over its steps ({:.0f}%; {} inside the "
        "drawn intervals alone, which reach +-{:.1f}%, median)\n",
        s.ratios_inside(), s.ratios.size(), 100 * costmodel::kIntervalLevel,
        100.0 * s.ratios_inside() / static_cast<double>(s.ratios.size()), s.ratios_inside(true),
        100 * s.ratio_reach());
  if (!s.composition.is_null()) {
    const auto sd = [&](const char* k) {
      return 100 * std::sqrt(std::max(0.0, s.composition.value(k, 0.0)));
    };
    std::cout << fmt::format(
        "  composition: the plans of a configuration depart from their predictions between strategies by "
        "{:.1f}% beyond their steps' noise and the drawn predictions (residuals {:.1f}%, noise {:.1f}%, "
        "drawn {:.1f}%; the calibration probes' estimator over {} plans){}\n",
        100 * s.composition.value("sigma", 0.0), sd("variance"), sd("noise"), sd("drawn"),
        s.composition.value("plans", 0),
        s.composition["level"].is_number()
            ? fmt::format("; their steps' level against the predictions {:+.1f}% (the probes' estimator, "
                          "configurations as groups)",
                          100 * (s.composition["level"].get<double>() - 1))
            : "");
  }
  std::cout << fmt::format(
      "  order: {} of {} pairs of plans predicted apart (90% intervals apart; without intervals, further "
      "apart than their steps spread) measure in the predicted order ({} pairs in all){}\n",
      std::count_if(s.orders.begin(), s.orders.end(), [](const auto& x) { return x.ok; }), s.orders.size(),
      s.order_pairs, job.validation.order ? "" : "; not required (\"order\": false)");
  std::cout << fmt::format("  results in {0}/validation.csv, {0}/summary.json{1}\n", o.out_dir,
                           plot.empty() ? fmt::format(", {}/predicted_vs_measured.png", o.out_dir) : "");
  if (!plot.empty()) std::cerr << "osdp validate: " << plot << "\n";
  for (const auto& f : s.failures) std::cerr << "osdp validate: over tolerance: " << f << "\n";
  if (s.inconclusive()) {
    std::cerr << fmt::format(
        "osdp validate: inconclusive: the machine's spread {:.1f}% (the median over the plans of the "
        "slowest less the fastest timed step) exceeds the tolerance {:.1f}%: the time errors above are "
        "not evidence either way; run again on a quieter machine (load average {})\n",
        100 * s.spread, 100 * s.spread_tolerance, load_text());
    return kExitInconclusive;
  }
  return s.ok() ? kExitOk : kExitTolerance;
}

// The torch backend: this process prepares the plans and predictions, torchrun runs them (one job per
// group), this process writes the results.
int run_torch(const ValidateArgs& a, const experiments::MeasuredJob& job) {
  experiments::ValidationOptions o = make_options(a, job);
  validate::TorchJobOptions t;
  t.python = a.python.empty() ? validate::default_torch_python() : a.python;
  t.timeout_s = a.timeout_s;
  t.progress = !a.quiet;
  t.check = !a.no_check;
  const auto ran = std::make_shared<nlohmann::json>(nlohmann::json::object());
  o.run_group = experiments::torch_group_runner(t, ran);
  validate::CpuDevice device;
  validate::SelfCommunicator self(device);
  const experiments::DeviceFactory no_device =
      [](const costmodel::Plan&) -> std::unique_ptr<validate::Device> {
    throw osdp::Error("the torch backend makes no osdp device");
  };
  std::vector<experiments::UnitResult> rows;
  try {
    rows = experiments::run_measured(job, self, no_device, o);
  } catch (const validate::BackendFailure& err) {
    std::cerr << "osdp validate: error: " << err.what() << "\n";
    return kExitJobFailed;
  }
  const int ranks = job.items.empty() ? 0 : job.items.front().world_size;
  nlohmann::json prov = costmodel::machine(ranks, 1);
  prov["backend"] = fmt::format("torch ({})", ran->value("backend", "no job ran"));
  prov["backend_version"] = fmt::format("torch {}", ran->value("torch", "?"));
  prov["device"] = fmt::format("{} ({} thread{} per rank)", ran->value("device", "?"),
                               ran->value("threads", 0), ran->value("threads", 0) == 1 ? "" : "s");
  prov["python"] = t.python;
  return report(a, job, o, rows, std::move(prov), ranks);
}

#ifdef OSDP_HAVE_MPI_BACKEND
// The provenance of a measurement on `comm`'s ranks.
nlohmann::json backend_provenance(validate::BackendSession& backend, validate::Communicator& comm) {
  nlohmann::json prov = costmodel::machine(comm.size(), 1);
  prov["backend"] = comm.backend();
  prov["backend_version"] = comm.version();
  prov["device"] = backend.device_name();
  return prov;
}

// Inside mpirun, on every rank: opens the backend, checks the job's size and runs `body`. A backend
// failure or one rank's out-of-memory aborts the job (the others would wait for it); bad input,
// which every rank reads alike, is reported by rank 0.
int on_ranks(const ValidateArgs& a, int np,
             const std::function<int(validate::BackendSession&, validate::Communicator&)>& body) {
  validate::MpiSession session;
  std::unique_ptr<validate::BackendSession> backend;
  try {
    backend = validate::open_backend(a.backend, {a.timeout_s, gemm_math(a.gemm)});
  } catch (const validate::BackendFailure& err) {
    validate::abort_job(err.what());
  } catch (const osdp::Error& err) {
    validate::abort_job(fmt::format("osdp validate: {}", err.what()));
  }
  validate::Communicator& comm = backend->comm();
  try {
    if (np > 0 && comm.size() != np)
      throw UsageError(fmt::format("-np {} but mpirun started {} ranks", np, comm.size()));
    return body(*backend, comm);
  } catch (const validate::BackendFailure& err) {
    validate::abort_job(err.what());
  } catch (const validate::OutOfMemory& err) {
    validate::abort_job(err.what());
  } catch (const osdp::Error& err) {
    if (comm.rank() == 0) std::cerr << "osdp validate: error: " << err.what() << "\n";
    return kExitInput;
  }
}

int run_ranks(const ValidateArgs& a, int np) {
  return on_ranks(a, np, [&](validate::BackendSession& backend, validate::Communicator& comm) {
    const experiments::MeasuredJob job = make_job(a);
    experiments::ValidationOptions o = make_options(a, job);
    o.one_at_a_time = backend.plans_one_at_a_time();
    // prefetch 0 overlaps nothing: one stream runs both (on the CPU, no hand-offs between threads).
    const experiments::DeviceFactory make_device = [&backend](const costmodel::Plan& plan) {
      return backend.make_device(plan.cluster.overlap.enabled && plan.prefetch > 0);
    };
    const auto rows = experiments::run_measured(job, comm, make_device, o);
    if (comm.rank() != 0) return kExitOk;
    return report(a, job, o, rows, backend_provenance(backend, comm), comm.size());
  });
}
#endif

int run_validate(const ValidateArgs& a) {
  (void)gemm_math(a.gemm);
  const int np = parse_np(a.np);
  const bool torch = a.backend == "torch";
  if (torch) {
    if (a.tasks)
      throw UsageError(
          "--tasks: the torch backend does not time single tasks; osdp's executor does (--backend mpi)");
    if (a.gemm != "fp32") throw UsageError("--gemm bf16: the torch backend runs the plan's own precision");
    if (a.compute != "real")
      throw UsageError(
          "--compute emulate: the torch backend computes; osdp's executor emulates (--backend mpi)");
    if (!a.mpirun_args.empty())
      throw UsageError("--mpirun-args: the torch backend starts its ranks with torchrun, not mpirun");
  } else {
    if (a.compute != "real" && a.backend != "mpi")
      throw UsageError(
          fmt::format("--compute emulate: the host waits in place of each kernel, which a GPU's "
                      "stream does not (--backend {}); emulate on the mpi backend",
                      a.backend));
    check_backend(a.backend);
    if (!a.python.empty()) throw UsageError("--python: only for --backend torch");
  }
  // Bad input, and units for another world size, are reported before any rank starts.
  const experiments::MeasuredJob job = make_job(a);
  if (np > 0) experiments::check_world_size(job, np);
  // A plan file whose predictions this osdp does not reproduce is run all the same (the prediction
  // held against the measurement is the simulator's, made now), but not silently.
  const std::string this_version = costmodel::tool_version();
  for (const auto& item : job.items) {
    if (!item.plan) continue;
    const std::string w = sim::edited_plan_warning(
        *item.plan, sim::analytic_figures(*item.plan, costmodel::lower(item.plan->model, item.plan->pp)),
        this_version);
    if (!w.empty())
      std::cerr << fmt::format(
          "osdp validate: warning: {}: {}; the measurement is held to this osdp's own prediction\n",
          item.origin, w);
  }
  if (const std::string why =
          experiments::ResultsDir::refusal(a.out.empty() ? job.output : a.out, {a.resume, a.force, {}});
      !why.empty())
    throw UsageError(why);
  if (torch)
    for (const auto& item : job.items)  // plan files: known now; an experiment's plans once searched
      if (item.plan && !item.plan->data_parallel())
        throw UsageError(
            fmt::format("--backend torch: {}: the FSDP2 export takes data-parallel plans (one stage, one "
                        "micro-batch, TP 1); "
                        "run plans with pipeline stages or TP on --backend mpi (CPU ranks) or nccl (GPUs)",
                        item.origin));
  if (torch) {
    if (const std::string why = validate::torch_unavailable_reason(
            a.python.empty() ? validate::default_torch_python() : a.python);
        !why.empty())
      throw UsageError(fmt::format("--backend torch: {}", why));
    return run_torch(a, job);
  }
#ifdef OSDP_HAVE_MPI_BACKEND
  return launch_or_run("validate", np, child_args(a, np), a.mpirun_args, [&] { return run_ranks(a, np); });
#else
  return launch_or_run("validate", np, {}, a.mpirun_args, [] { return kExitInput; });
#endif
}

}  // namespace

Action add_validate_command(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  app.description(
      "Run plans for real and compare each with the simulator's prediction.\n"
      "  osdp validate EXPERIMENT -np N          every unit of an experiment file: the search picks each\n"
      "                                          plan (with --calibration, or the cluster's own "
      "calibration)\n"
      "  osdp validate --plan a.json [--plan b.json ...] -np N\n"
      "                                          plan files from `osdp plan --out`, run as they are\n"
      "A plan of several stages, micro-batches or TP degrees first runs one step against the unsharded\n"
      "step of one process (loss, gradients, updated weights; --no-check skips it).\n"
      "The simulator predicts each plan's step time and peak memory; the plan then runs on the backend:\n"
      "warm-up steps, then timed ones (each the slowest rank's time); the median is compared. Real\n"
      "arithmetic on real data, the schedule's buffers allocated through a tracking allocator (peak less\n"
      "the executor's own fixed buffers). The plans of one configuration (or all plan files) run side by\n"
      "side, their steps interleaved. A plan for another world size than the job's is refused before\n"
      "anything runs. Rows go to OUT/rows.jsonl as each group finishes (fsync'd; OUT is locked while the\n"
      "job runs; finished rows are never overwritten without --resume or --force), then\n"
      "OUT/validation.csv, OUT/summary.json and OUT/predicted_vs_measured.png.\n"
      "It starts itself under mpirun when given -np N.\n"
      "--backend torch runs the plans in PyTorch instead: each exported for FSDP2 (osdp export --to fsdp2)\n"
      "and applied to the model (osdp's GPT, python/osdp/torch, or for a Hugging Face config.json the\n"
      "transformers *ForCausalLM with random weights), Adam on synthetic tokens, ranks started by torchrun\n"
      "(gloo on CPUs, NCCL on GPUs), one torchrun job per configuration; memory is then compared at rest\n"
      "(the parameters, gradients and optimizer states in the local shards against the plan's). Each\n"
      "fp32 plan also runs one step in FSDP2 whose loss, gradients and updated weights must equal the\n"
      "unsharded step's (fp32 tolerance): osdp's executor's from its weights and tokens, or for a\n"
      "transformers model the same model unsharded on the whole batch.\n"
      "Exit codes: 0 within tolerance; 2 bad input; 4 a rank failed or timed out (the job is aborted);\n"
      "5 an error passed the tolerance (the experiment's \"validation\" block; for plan files 5% median,\n"
      "10% largest step-time error, 1% peak memory); 6 inconclusive: the machine's spread (the median over\n"
      "the plans of the slowest less the fastest timed step, over the median step) exceeds the median\n"
      "tolerance, so the time errors say nothing either way (a peak-memory or numerics failure is still 5).");
  app.add_option("experiment", a->file, "Experiment file with a \"validation\" block");
  app.add_option("--plan", a->plans, "A plan file (osdp plan --out) to run as it is; repeat for more")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--warmup", a->warmup, "Warm-up steps per plan (default: the experiment's, or 2)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--iterations", a->iterations, "Timed steps per plan (default: the experiment's, or 5)")
      ->check(CLI::Range(5, 100000));
  app.add_option(
         "--backend", a->backend,
         "mpi (CPU ranks, Open MPI), nccl (one GPU per rank: CUDA, cuBLAS, NCCL; see osdp --version) or "
         "torch (PyTorch FSDP2 under torchrun)")
      ->capture_default_str();
  app.add_flag("--no-check", a->no_check,
               "Skip the one-step numerics check (--backend torch: against osdp's executor or the unsharded "
               "transformers model; else, for plans that are not data-parallel, against the unsharded step)");
  app.add_option(
      "--python", a->python,
      "--backend torch: the Python with torch and the osdp package (default: $OSDP_PYTHON, else the "
      "build's venv, else python3)");
  app.add_option("-n,--np", a->np, "Number of ranks (written -np N, as for mpirun)");
  app.add_option("--calibration", a->calibration,
                 "Calibration file (from osdp calibrate) to predict with, instead of the clusters' own");
  app.add_option(
      "--out", a->out,
      "Results directory (default: the experiment's \"output\"; for plan files results/validate-plans)");
  CLI::Option* resume =
      app.add_flag("--resume", a->resume, "Keep the plans already in OUT/rows.jsonl and run the rest");
  app.add_flag("--force", a->force,
               "Start again in an OUT that holds finished rows: delete its rows.jsonl and results first")
      ->excludes(resume);
  app.add_option("--mpirun-args", a->mpirun_args, "Extra mpirun arguments, e.g. \"--mca btl self,vader\"");
  app.add_option("--timeout", a->timeout_s, "Seconds before a collective that does not finish fails the job")
      ->capture_default_str();
  app.add_flag(
      "--tasks", a->tasks,
      "Also write OUT/tasks/UNIT.csv (rank 0) and UNIT.rankR.csv (rank R > 0): each task of the rank's "
      "last timed step, predicted (simulator) and measured, to see where a prediction goes wrong");
  app.add_flag("--quiet", a->quiet, "No progress lines");
  app.add_option("--compute", a->compute,
                 "real, or emulate: each compute task waits for the time the calibration gives it (from its "
                 "start, so lateness shows) instead of computing, while collectives, sends and receives move "
                 "real bytes and memory is tracked as the schedule says; so 4 or 8 ranks fit on 2 cores and "
                 "what is measured is the communication, its overlap and the pipeline's bubble. Predicted "
                 "without interference (emulated compute does not slow down beside communication); no "
                 "numerics check; rows say \"compute emulated\" (mpi backend)")
      ->check(CLI::IsMember({"real", "emulate"}))
      ->capture_default_str();
  app.add_option("--gemm", a->gemm,
                 "fp32, or bf16: GEMMs on bf16-rounded operands with fp32 sums (tensor cores on a GPU; "
                 "storage stays fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  return [a] { return run_validate(*a); };
}

}  // namespace osdp::cli
