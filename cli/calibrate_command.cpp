// osdp calibrate: measure collectives, GEMMs, elementwise kernels and overlap on this machine
// (validate/calibrate.hpp does the work) and write a calibration file. Outside mpirun it relaunches
// itself under mpirun with the same arguments; inside, every rank measures and rank 0 writes.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "cli/calibrate_probes.hpp"
#include "cli/calibrate_summary.hpp"
#include "cli/calibrate_torch.hpp"
#include "cli/commands.hpp"
#include "cli/mpi_args.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/collective.hpp"
#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/provenance.hpp"
#include "costmodel/units.hpp"
#include "experiments/probes.hpp"
#include "validate/calibrate/calibrate.hpp"
#include "validate/executor/backend.hpp"
#include "validate/torch/torch_job.hpp"
#ifdef OSDP_HAVE_MPI_BACKEND
#include "validate/backends.hpp"
#include "validate/mpi/mpi_backend.hpp"
#endif

namespace osdp::cli {
namespace {

using costmodel::format_bytes;
using costmodel::format_seconds;

struct CalibrateArgs {
  std::string backend = "mpi", out, min_size, max_size, mpirun_args;  // sizes: empty for the default
  std::string gemm = "fp32", python;                                  // python: --backend torch's interpreter
  std::vector<std::string> np;  // "-np N" arrives as {"p", "N"} (CLI11 has no multi-letter short names)
  std::vector<std::string> models{"nd-48x1024"};
  int repeats = 0;   // 0: the default (7, or 2 with --quick)
  int per_node = 0;  // 0: no per-level rings
  double timeout_s = 120;
  bool quick = false, no_comm_thread = false, quiet = false;
  std::string compute = "real", compute_from;  // --compute emulate: collectives only (--compute-from FILE)
  std::string probes = "auto", probe_cluster;  // cli/calibrate_probes.hpp
  std::vector<int> probe_batches;              // the --model models probed at these micro-batches
};

// Whether the probes run: auto, unless --quick, --compute emulate, --per-node or a single rank.
bool probes_wanted(const CalibrateArgs& a, int np) {
  if (a.probes == "off") return false;
  if (a.probes == "on") return true;
  return !a.quick && a.compute == "real" && a.per_node == 0 && np >= 2;
}

std::string probe_cluster(const CalibrateArgs& a) {
  if (!a.probe_cluster.empty()) return a.probe_cluster;
  return a.backend == "nccl" ? "h100-8" : "cpu-2";
}

// The probes of a calibration written to `path` on `world` ranks (cli/calibrate_probes.hpp).
ProbeRun probe_run(const CalibrateArgs& a, const std::string& path, int world) {
  return {path, a.quiet, {probe_cluster(a), world, probes_dir(path), a.quick, a.models, a.probe_batches}};
}

double parse_size(const std::string& text, const char* option) {
  std::string err;
  auto v = costmodel::parse_quantity(text, costmodel::UnitKind::kBytes, &err);
  if (!v || *v < 4) throw UsageError(fmt::format("{}: {}", option, v ? "must be at least 4 bytes" : err));
  return *v;
}

// The arguments the ranks get: everything given here, spelled out.
std::vector<std::string> child_args(const CalibrateArgs& a, int np) {
  std::vector<std::string> r{"calibrate",        "--backend", a.backend,
                             "--gemm",           a.gemm,      "--np",
                             std::to_string(np), "--timeout", fmt::format("{}", a.timeout_s)};
  if (!a.min_size.empty()) r.insert(r.end(), {"--min-size", a.min_size});
  if (!a.max_size.empty()) r.insert(r.end(), {"--max-size", a.max_size});
  if (!a.out.empty()) r.insert(r.end(), {"--out", a.out});
  if (a.repeats > 0) r.insert(r.end(), {"--repeats", std::to_string(a.repeats)});
  if (a.per_node > 0) r.insert(r.end(), {"--per-node", std::to_string(a.per_node)});
  for (const auto& m : a.models) r.insert(r.end(), {"--model", m});
  if (a.models.empty()) r.push_back("--no-models");
  if (a.quick) r.push_back("--quick");
  if (a.no_comm_thread) r.push_back("--no-comm-thread");
  if (a.quiet) r.push_back("--quiet");
  r.insert(r.end(), {"--compute", a.compute});
  if (!a.compute_from.empty()) r.insert(r.end(), {"--compute-from", a.compute_from});
  r.insert(r.end(), {"--probes", a.probes});
  if (!a.probe_cluster.empty()) r.insert(r.end(), {"--probe-cluster", a.probe_cluster});
  for (const int b : a.probe_batches) r.insert(r.end(), {"--probe-batch", std::to_string(b)});
  return r;
}

// --compute-from FILE: another calibration's compute figures (and timed GEMM shapes), read once.
std::optional<costmodel::Calibration> compute_source(const CalibrateArgs& a) {
  if (a.compute_from.empty()) return std::nullopt;
  if (a.compute != "emulate")
    throw UsageError(
        "--compute-from: only with --compute emulate (a full calibration measures its own compute)");
  costmodel::Calibration c = costmodel::load_calibration(a.compute_from, costmodel::ComputeSpec{});
  if (!c.compute)
    throw UsageError(
        fmt::format("--compute-from {}: the calibration has no compute figures", a.compute_from));
  return c;
}

// Collectives only: the compute figures of --compute-from, if given, with their fits' residuals.
void take_compute(costmodel::Calibration& cal, const std::optional<costmodel::Calibration>& from,
                  const std::string& file) {
  if (!from) return;
  cal.compute = from->compute;
  cal.gemm_times = from->gemm_times;
  cal.interference = from->interference;
  cal.provenance["compute"] = fmt::format("from {} (osdp calibrate --compute-from)", file);
  if (from->provenance.contains("fit") && from->provenance["fit"].is_object()) {
    nlohmann::json& fit = cal.provenance["fit"];
    for (const auto& [k, v] : from->provenance["fit"].items())
      if (!fit.contains(k) || k == "compute") fit[k] = v;
    fit.erase("compute");
    fit.erase("composition");  // measured by that calibration's probes, on its own collectives
    if (from->provenance["fit"].contains("repeat_spread") && fit["repeat_spread"].is_object())
      fit["repeat_spread"]["compute"] = from->provenance["fit"]["repeat_spread"].value("compute", 0.0);
  }
}

// `probes`: the probes will run, so their model's GEMMs are timed too (they are priced as a
// validation's plans are: from their own measured shapes).
validate::CalibrateOptions make_options(const CalibrateArgs& a, bool probes) {
  validate::CalibrateOptions o = a.quick ? validate::quick_options() : validate::CalibrateOptions{};
  if (!a.min_size.empty()) o.min_bytes = parse_size(a.min_size, "--min-size");
  if (!a.max_size.empty()) o.max_bytes = parse_size(a.max_size, "--max-size");
  if (o.min_bytes > o.max_bytes)
    throw UsageError(fmt::format("--min-size {} is larger than --max-size {}", format_bytes(o.min_bytes),
                                 format_bytes(o.max_bytes)));
  if (a.repeats > 0) o.repeats = a.repeats;
  o.per_node = a.per_node;
  o.collectives_only = a.compute == "emulate";
  o.gemm_math = gemm_math(a.gemm);
  o.tool_version = costmodel::tool_version();
  if (!a.quick && !a.models.empty() && !o.collectives_only) {
    std::vector<costmodel::ModelSpec> models;
    for (const auto& m : a.models) models.push_back(costmodel::load_model(m));
    if (probes)
      for (const std::string& m : experiments::kProbeModels) models.push_back(costmodel::load_model(m));
    o.gemm_shapes = validate::generic_gemm_shapes(false);
    // On CPU ranks shapes past 8 GFLOP would take seconds each and are priced by the fitted formula.
    // A GPU times every shape in milliseconds, and a shape left to the formula is priced unlike its
    // timed slices: on an H100 the formula priced an unsplit MLP 4-8% above its time in a step, and
    // the timed halves took 13-22% longer in a step than timed alone, so the search split every MLP:
    // predicted 2% faster than FSDP's plan, measured 9% slower
    // (data/results/gpu/h100-1gpu-2026-11-27).
    const double max_flops = a.backend == "nccl" ? 1e12 : 8e9;
    std::vector<int> batches{1, 2, 4};  // and those the --model models are probed at
    for (const int b : a.probe_batches)
      if (std::find(batches.begin(), batches.end(), b) == batches.end()) batches.push_back(b);
    for (auto& s : validate::model_gemm_shapes(models, batches, max_flops)) o.gemm_shapes.push_back(s);
  }
  return o;
}

std::string out_path(const CalibrateArgs& a, int world) {
  return a.out.empty() ? fmt::format("calibration-{}-{}.json", a.backend, world) : a.out;
}

// The measured points go to their CSV before the fit, so that a fit that fails loses none of them.
void keep_points(const costmodel::CalibrationRun& run, const std::string& path) {
  costmodel::write_file_atomic(csv_path(path), costmodel::measurements_csv(run));
}

// Why a fit failed, and where its measured points are.
std::string fit_failure(const osdp::Error& e, const std::string& path) {
  return fmt::format("{} (the measured points are in {})", e.what(), csv_path(path));
}

// Where the results go must be writable before minutes of measuring, not after: "" or why not.
std::string unwritable(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::absolute(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::filesystem::path probe = dir / ".osdp-calibrate-probe";
  if (!std::ofstream(probe)) return fmt::format("{}: cannot write in {}", path, dir.string());
  std::filesystem::remove(probe, ec);
  return "";
}

#ifdef OSDP_HAVE_MPI_BACKEND
int run_ranks(const CalibrateArgs& a, int np) {
  validate::MpiSession session;
  std::unique_ptr<validate::BackendSession> backend;
  try {
    backend = validate::open_backend(a.backend, {a.timeout_s, gemm_math(a.gemm)});
  } catch (const osdp::Error& e) {
    validate::abort_job(fmt::format("osdp calibrate: {}", e.what()));
  }
  validate::Communicator& comm = backend->comm();
  const bool root = comm.rank() == 0;
  if (np > 0 && comm.size() != np) {
    if (root)
      std::cerr << fmt::format("osdp calibrate: error: -np {} but mpirun started {} ranks\n", np,
                               comm.size());
    return kExitInput;
  }
  if (a.per_node > 0 && comm.size() % a.per_node != 0) {
    if (root)
      std::cerr << fmt::format(
          "osdp calibrate: error: --per-node {}: nodes of {} ranks do not divide the job's {}\n", a.per_node,
          a.per_node, comm.size());
    return kExitInput;
  }
  const bool probes = probes_wanted(a, comm.size());
  validate::CalibrateOptions o = make_options(a, probes);
  const std::string path = out_path(a, comm.size());
  const std::string why = root ? unwritable(path) : "";
  if (comm.all_values(why.empty() ? 0.0 : 1.0).front() > 0) {
    if (root) std::cerr << "osdp calibrate: error: " << why << "\n";
    return kExitInput;
  }
  o.name = std::filesystem::path(path).stem().string();
  o.extra_provenance["measurements_file"] = std::filesystem::path(csv_path(path)).filename().string();
  const std::unique_ptr<validate::Device> dev = backend->make_device(!a.no_comm_thread);
  validate::Device& device = *dev;
  validate::ProgressFn progress;
  if (!a.quiet)
    progress = [](const validate::CalibrationProgress& p) {
      std::cerr << fmt::format("calibrate: {} {} [{}/{}] {}\n", p.sweep, p.label, p.index, p.total,
                               format_seconds(p.seconds));
    };
  costmodel::CalibrationRun run;
  try {
    run = validate::run_calibration(device, comm, o, progress,
                                    [&](const costmodel::CalibrationRun& r) { keep_points(r, path); });
  } catch (const validate::BackendFailure& e) {
    validate::abort_job(fmt::format("osdp calibrate: {}", e.what()));  // the message names the rank
  } catch (const validate::OutOfMemory& e) {
    validate::abort_job(fmt::format("osdp calibrate: {}", e.what()));
  } catch (const osdp::Error& e) {
    // Every rank fits the same points (the max over the job) and fails alike: rank 0 says why once,
    // and each rank answers through its status file, so that mpirun adds no abort banner.
    if (root) std::cerr << "osdp calibrate: error: " << fit_failure(e, path) << "\n";
    return kExitInput;
  }
  if (root) {
    take_compute(run.calibration, compute_source(a), a.compute_from);
    costmodel::write_file_atomic(path, costmodel::to_json(run.calibration).dump(2) + "\n");
    print_summary(run, path);
  }
  if (!probes) return kExitOk;
  (void)comm.all_values(0.0);  // the file is written before any rank reads it
  try {
    run_probes(probe_run(a, path, comm.size()), *backend, comm);
  } catch (const validate::BackendFailure& e) {
    validate::abort_job(fmt::format("osdp calibrate: probes: {}", e.what()));
  } catch (const validate::OutOfMemory& e) {
    validate::abort_job(fmt::format("osdp calibrate: probes: {}", e.what()));
  }
  return kExitOk;
}
#endif

// The torch backend: torchrun's ranks time torch's own collectives and kernels (python/osdp/torch/
// measure.py) and this process fits them as it fits the other backends' points.
int run_torch(const CalibrateArgs& a, int np) {
  if (np < 1) throw UsageError("--backend torch: give the number of ranks, -np N");
  if (a.per_node > 0) throw UsageError("--per-node: the torch backend measures the world's rings only");
  if (a.gemm != "fp32") throw UsageError("--gemm bf16: the torch backend times fp32 GEMMs only");
  if (!a.mpirun_args.empty())
    throw UsageError("--mpirun-args: the torch backend starts its ranks with torchrun");
  const bool probes = probes_wanted(a, np);
  validate::CalibrateOptions o = make_options(a, probes);
  if (o.gemm_shapes.empty()) o.gemm_shapes = validate::generic_gemm_shapes(o.quick);
  // gloo's collectives through FSDP2 spread 10-30% between repetitions on a shared CPU machine, and a
  // reduce-scatter is a difference of two timings: a segment of 3 points fits that noise (slopes of
  // a few MB/s over 4 KiB), one of 5 holds.
  o.segments.min_points = 5;
  const std::string path = out_path(a, np);
  if (const std::string why = unwritable(path); !why.empty()) throw UsageError(why);
  o.name = std::filesystem::path(path).stem().string();
  validate::TorchJobOptions t;
  t.python = a.python.empty() ? validate::default_torch_python() : a.python;
  t.nproc = np;
  t.timeout_s = a.timeout_s;
  t.progress = !a.quiet;
  if (const std::string why = validate::torch_unavailable_reason(t.python); !why.empty())
    throw UsageError(fmt::format("--backend torch: {}", why));
  nlohmann::json job = o.to_json();
  job["kind"] = "calibrate";
  const auto load_at_start = costmodel::load_average();
  const auto start = std::chrono::steady_clock::now();
  nlohmann::json out;
  try {
    out = validate::run_torch_job(job, t);
  } catch (const validate::BackendFailure& e) {
    std::cerr << "osdp calibrate: error: " << e.what() << "\n";
    return kExitJobFailed;
  }
  costmodel::CalibrationRun run;
  try {
    run = torch_measurements(out, np);
  } catch (const nlohmann::json::exception& e) {
    std::cerr << "osdp calibrate: error: the torch job's result is not what osdp expects: " << e.what()
              << "\n";
    return kExitJobFailed;
  }
  keep_points(run, path);
  try {
    costmodel::fit_measurements(run, o.name, o.segments);
  } catch (const osdp::Error& e) {
    throw osdp::Error(fit_failure(e, path));
  }
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  set_torch_provenance(run, out, t, o, load_at_start,
                       std::filesystem::path(csv_path(path)).filename().string());
  costmodel::write_file_atomic(path, costmodel::to_json(run.calibration).dump(2) + "\n");
  print_summary(run, path);
  if (!probes) return kExitOk;
  try {
    run_torch_probes(probe_run(a, path, np), t);
  } catch (const validate::BackendFailure& e) {
    std::cerr << "osdp calibrate: error: probes: " << e.what() << "\n";
    return kExitJobFailed;
  }
  return kExitOk;
}

int run_calibrate(const CalibrateArgs& a) {
  const int np = parse_np(a.np);
  if (np > 0 && a.per_node > 0 && np % a.per_node != 0)
    throw UsageError(
        fmt::format("--per-node {}: nodes of {} ranks do not divide -np {}", a.per_node, a.per_node, np));
  if (a.timeout_s <= 0) throw UsageError("--timeout: must be positive");
  (void)gemm_math(a.gemm);
  if (a.compute != "real" && a.backend != "mpi")
    throw UsageError(
        fmt::format("--compute emulate: collectives only, for osdp validate --compute emulate on "
                    "the mpi backend (not --backend {})",
                    a.backend));
  (void)compute_source(a);  // read and checked before any launch
  for (const int b : a.probe_batches) {
    if (b < 1 || b > 1024) throw UsageError(fmt::format("--probe-batch: expected 1 to 1024, got {}", b));
    if (a.models.empty()) throw UsageError("--probe-batch: probes the --model models, and there are none");
    if (!probes_wanted(a, np))
      throw UsageError(
          "--probe-batch: the probes do not run (--probes off, or auto with --quick, --compute emulate, "
          "--per-node or one rank; --probes on runs them)");
  }
  if (a.backend == "torch") return run_torch(a, np);
  if (!a.python.empty()) throw UsageError("--python: only for --backend torch");
  check_backend(a.backend);
  make_options(a, probes_wanted(a, np));  // checks the options (and the model names) before any launch
  if (probes_wanted(a, np)) (void)costmodel::load_cluster(probe_cluster(a));
#ifdef OSDP_HAVE_MPI_BACKEND
  return launch_or_run("calibrate", np, child_args(a, np), a.mpirun_args, [&] { return run_ranks(a, np); });
#else
  return launch_or_run("calibrate", np, {}, a.mpirun_args, [] { return kExitInput; });
#endif
}

}  // namespace

Action add_calibrate_command(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  app.description(
      "Measure this machine and fit a calibration file: alpha and bandwidth per collective and\n"
      "message-size segment, GEMM peak and small-GEMM efficiency, memory bandwidth, kernel overhead and\n"
      "overlap interference, which `osdp plan --calibration FILE` (or a cluster file naming it) uses\n"
      "instead of spec-sheet figures.\n"
      "Sweeps: all-gather, reduce-scatter, all-reduce and all-to-all from --min-size to --max-size (the "
      "full\n"
      "buffer);\n"
      "GEMMs (squares, skinny shapes, and the --model kernels at batch 1, 2 and 4, every split up to 4); "
      "elementwise passes and the\n"
      "Adam kernel from 64 KiB to 256 MiB; GEMMs alone and beside all-gathers. Each point: warm-up, then\n"
      "timed batches, each the max over ranks; the median is fitted by least squares on relative error.\n"
      "Run it as `osdp calibrate -np N`: it starts itself under mpirun (or run it under mpirun yourself).\n"
      "--backend torch measures PyTorch instead (ranks started by torchrun: gloo on CPUs, NCCL on GPUs):\n"
      "the collectives as FSDP2 runs them (with its copies and gradient division), elementwise passes,\n"
      "Adam and GEMMs in torch's kernels, for `osdp validate --backend torch`.\n"
      "Rank 0 shows progress on stderr, writes FILE, and the raw points beside it as\n"
      "<FILE without .json>.measurements.csv, and prints a summary. Then, unless --probes off, whole steps\n"
      "of a few plans are timed and predicted (--probes): the step's level (every price scaled by it)\n"
      "and the model's composition error between strategies.\n"
      "A full run on 2 ranks takes two to three minutes, its probes included, on an idle 2-core machine\n"
      "(longer on a busy one, whose fits are noisy too); --quick a few seconds.\n"
      "Exit codes: 0 done; 2 bad input or usage; 4 a rank failed or timed out (the job is aborted);\n"
      "otherwise mpirun's.");
  app.add_option(
         "--backend", a->backend,
         "mpi (CPU ranks, Open MPI), nccl (one GPU per rank: CUDA, cuBLAS, NCCL; see osdp --version) or "
         "torch "
         "(PyTorch's own collectives and kernels, ranks started by torchrun: gloo on CPUs, NCCL on GPUs)")
      ->check(CLI::IsMember({"mpi", "nccl", "torch"}))
      ->capture_default_str();
  app.add_option(
      "--python", a->python,
      "--backend torch: the Python with torch and the osdp package (default: $OSDP_PYTHON, else the "
      "build's venv, else python3)");
  app.add_option("-n,--np", a->np, "Number of ranks (written -np N, as for mpirun)")
      ->expected(1, 2)
      ->type_name("N");
  app.add_option("--out", a->out, "Calibration file to write (default: calibration-<backend>-<N>.json here)");
  app.add_option(
         "--per-node", a->per_node,
         "Also fit the rings of nodes of G ranks (ranks numbered node by node): each collective\n"
         "within every node at once and across nodes at every local index at once, per size segment,\n"
         "as node groups (HSDP) and two-level collectives run them; the file's \"levels\" block,\n"
         "which prices those rings in osdp plan and simulate. G must divide N")
      ->type_name("G")
      ->check(CLI::Range(1, 1 << 20));
  app.add_flag("--quick", a->quick,
               "A few seconds: sizes up to 1 MiB at powers of two, 3 repeats, small GEMMs (for tests)");
  app.add_option("--min-size", a->min_size, "Smallest collective buffer (default 1KiB)");
  app.add_option("--max-size", a->max_size, "Largest collective buffer (default 256MiB; --quick: 1MiB)");
  app.add_option("--repeats", a->repeats,
                 "Timed repetitions per point (default 7, --quick 3; at most 5 for points of 20 ms or more)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--model", a->models,
                 "Also time the GEMMs of this model's IR (name or file; repeatable; on CPU ranks kernels "
                 "above 8 GFLOP are left out, on GPUs those above 1 TFLOP)")
      ->capture_default_str();
  app.add_flag_callback(
      "--no-models", [a] { a->models.clear(); }, "Only the generic GEMM shapes");
  app.add_flag("--no-comm-thread", a->no_comm_thread,
               "Run collectives on the compute thread (no overlap: interference is not measured)");
  app.add_option("--mpirun-args", a->mpirun_args, "Extra mpirun arguments, e.g. \"--mca btl self,vader\"");
  app.add_option("--timeout", a->timeout_s, "Seconds before a collective that does not finish fails the job")
      ->capture_default_str();
  app.add_flag("--quiet,-q", a->quiet, "No progress lines");
  app.add_option("--compute", a->compute,
                 "real, or emulate: only the collectives (world and --per-node rings), for `osdp validate "
                 "--compute emulate`, whose compute tasks wait for their priced time: with 4 or 8 ranks on 2 "
                 "cores the GEMM sweeps would time contention for the cores. The file then has no compute "
                 "figures (the cluster's price them) unless --compute-from gives them")
      ->check(CLI::IsMember({"real", "emulate"}))
      ->capture_default_str();
  app.add_option("--compute-from", a->compute_from,
                 "With --compute emulate: take the compute figures, timed GEMM shapes and interference of "
                 "this calibration (one measured without contention, e.g. 2 ranks on 2 cores)");
  app.add_option(
         "--probes", a->probes,
         "Whole steps timed after the sweeps (auto: unless --quick, --compute emulate, --per-node or one "
         "rank): plans of probe-3x320, four strategies uniform (fsdp, zero2, ddp, checkpointed fsdp) and "
         "the exact search without and with splits under 70 and 95 MiB caps, and the uniform ones of "
         "probe-8x192 (deep, narrow) and probe-2x448 (wide, shallow), at micro-batches 1, 2 and 4, those of "
         "a model and micro-batch run side by side and predicted from the calibration just fitted. Their "
         "mean over the models of ln(measured / predicted) is the step's level: every price is scaled by "
         "it, and the spread a further model's level may take (over three models, a Student t of 2 "
         "degrees of freedom) is drawn for the whole step in place of the repeats' drift. How far their "
         "residuals spread between strategies beyond the steps' noise and the "
         "calibration's own errors is the model's composition error, which intervals and speedups then "
         "draw (provenance fit.composition; rows in <FILE without .json>.probes/). About a minute and a "
         "half on 2 CPU ranks over shared memory, three to five minutes in the lab or torch; with --quick "
         "(for tests) micro-batch 2 only and 5 timed steps")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--probe-batch", a->probe_batches,
                 "Also probe every --model at this micro-batch (repeatable): its four uniform strategies, "
                 "side by side, so that its plans are priced at its own level rather than the probe models' "
                 "(its spread that of a further micro-batch of it). Pick micro-batches its plans will not "
                 "use (e.g. 3): steps of the plans to be validated must not calibrate them. Each adds about "
                 "half a minute on 2 CPU ranks for a model of val-4x384's size");
  app.add_option(
      "--probe-cluster", a->probe_cluster,
      "The probes' cluster (its figures replaced by the calibration's; default cpu-2, nccl: h100-8)");
  app.add_option("--gemm", a->gemm,
                 "fp32, or bf16: time GEMMs on bf16-rounded operands with fp32 sums (tensor cores on a GPU), "
                 "for validate --gemm bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  return [a]() { return run_calibrate(*a); };
}

}  // namespace osdp::cli
