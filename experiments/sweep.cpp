#include "experiments/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/provenance.hpp"
#include "experiments/results_dir.hpp"

#if OSDP_WITH_MPI
#include <mpi.h>

#include "validate/mpi/mpi_check.hpp"
#endif

namespace osdp::experiments {
namespace {

// costmodel::tool_version() ("0.1.0+1dce72d33146") as summary.json records it: version and commit.
nlohmann::json tool_json() {
  const std::string v = costmodel::tool_version();
  const auto plus = v.find('+');
  return {{"name", "osdp"},
          {"version", v.substr(0, plus)},
          {"git_hash", plus == std::string::npos ? std::string("unknown") : v.substr(plus + 1)}};
}


using Clock = std::chrono::steady_clock;

// --- SIGINT: the workers finish their unit and stop taking new ones ------------------------------

std::atomic<bool> g_interrupted{false};  // the one global: a signal handler can reach nothing else

extern "C" void on_sigint(int) {
  g_interrupted.store(true);
}

class SigintGuard {  // installs the handler for the sweep, restores the previous one after
 public:
  SigintGuard() {
    g_interrupted.store(false);
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C kills at once
    sigaction(SIGINT, &sa, &previous_);
  }
  ~SigintGuard() { sigaction(SIGINT, &previous_, nullptr); }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  struct sigaction previous_ {};
};

// --- this process's place among the MPI ranks ----------------------------------------------------

int launched_ranks() {  // the world size mpirun announces, 1 when not started by mpirun
  const char* s = std::getenv("OMPI_COMM_WORLD_SIZE");
  return s && std::atoi(s) > 1 ? std::atoi(s) : 1;
}

#if OSDP_WITH_MPI
// The one MPI check of osdp (validate/mpi/mpi_check.hpp), naming the call and this rank.
#define OSDP_MPI_CHECK(call) \
  validate::check_mpi((call), #call, "the sweep's division of units among ranks", rank_)
#endif

class Ranks {
 public:
  Ranks() {
    if (launched_ranks() == 1) return;
#if OSDP_WITH_MPI
    int initialized = 0;
    OSDP_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      int provided = 0;  // only the main thread calls MPI
      OSDP_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
      owner_ = true;
    }
    mpi_ = true;
    OSDP_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    OSDP_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
#else
    throw UsageError(fmt::format(
        "started by mpirun with {} ranks, but this osdp was built without MPI: run it without mpirun "
        "(--jobs runs units in threads)",
        launched_ranks()));
#endif
  }
  ~Ranks() {
#if OSDP_WITH_MPI
    if (owner_) MPI_Finalize();
#endif
  }
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  int rank() const {
    return rank_;
  }
  int size() const {
    return size_;
  }

  // Rank 0's `s` on every rank.
  void broadcast([[maybe_unused]] std::string& s) const {
    if (!mpi_) return;
#if OSDP_WITH_MPI
    int n = static_cast<int>(s.size());
    OSDP_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD));
    s.resize(static_cast<std::size_t>(n));
    OSDP_MPI_CHECK(MPI_Bcast(s.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD));
#endif
  }

  // At rank 0: every rank's `s`, by rank; elsewhere empty.
  std::vector<std::string> gather(const std::string& s) const {
    if (!mpi_) return {s};
    std::vector<std::string> out;
#if OSDP_WITH_MPI
    int n = static_cast<int>(s.size());
    std::vector<int> counts(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
    OSDP_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[static_cast<std::size_t>(r)] = total;
      total += counts[static_cast<std::size_t>(r)];
    }
    std::string all(static_cast<std::size_t>(rank_ == 0 ? total : 0), '\0');
    OSDP_MPI_CHECK(MPI_Gatherv(s.data(), n, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, 0,
                               MPI_COMM_WORLD));
    if (rank_ == 0)
      for (int r = 0; r < size_; ++r)
        out.push_back(all.substr(static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]),
                                 static_cast<std::size_t>(counts[static_cast<std::size_t>(r)])));
#endif
    return out;
  }

 private:
  bool mpi_ = false;
  [[maybe_unused]] bool owner_ = false;
  int rank_ = 0, size_ = 1;
};

// --- progress on a terminal ----------------------------------------------------------------------

std::string format_duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  return fmt::format("{}h{:02d}m", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
}

class Progress {  // "\r[done/total] rate, ETA" on stderr when it is a terminal, at most 5 times a second
 public:
  Progress(bool wanted, int total, int already)
      : on_(wanted && ::isatty(STDERR_FILENO)), total_(total), already_(already), start_(Clock::now()) {}
  void show(int finished_now, bool force = false) {  // units finished by this run so far
    const auto now = Clock::now();
    if (!on_ || (!force && shown_ && now - last_ < std::chrono::milliseconds(200))) return;
    const double dt = std::chrono::duration<double>(now - start_).count();
    const double rate = dt > 0 ? finished_now / dt : 0;
    const int left = total_ - already_ - finished_now;
    const std::string eta = rate > 0 ? format_duration(left / rate) : std::string("?");
    std::cerr << fmt::format("\r[{}/{}] {:.1f} units/s, ETA {}    ", already_ + finished_now, total_, rate,
                             eta)
              << std::flush;
    shown_ = true;
    last_ = now;
  }
  void finish() {
    if (on_ && shown_) std::cerr << "\n" << std::flush;
  }

 private:
  bool on_;
  int total_, already_;
  Clock::time_point start_, last_;
  bool shown_ = false;
};

// What the units of this rank produced, as sent to rank 0.
struct Batch {
  std::vector<UnitResult> rows;
  std::vector<FailedUnit> failed;
  bool interrupted = false;
};

std::string to_text(const Batch& b) {
  nlohmann::json j{
      {"rows", nlohmann::json::array()}, {"failed", nlohmann::json::array()}, {"interrupted", b.interrupted}};
  for (const auto& r : b.rows) j["rows"].push_back(to_json(r));
  for (const auto& f : b.failed)
    j["failed"].push_back({{"index", f.index}, {"key", f.key}, {"message", f.message}});
  return j.dump();
}

Batch from_text(const std::string& s, int rank) {
  try {
    const nlohmann::json j = nlohmann::json::parse(s);
    Batch b;
    for (const auto& r : j.at("rows")) b.rows.push_back(unit_result_from_json(r));
    for (const auto& f : j.at("failed"))
      b.failed.push_back(
          {f.at("index").get<int>(), f.at("key").get<std::string>(), f.at("message").get<std::string>()});
    b.interrupted = j.at("interrupted").get<bool>();
    return b;
  } catch (const nlohmann::json::exception& ex) {
    throw Error(fmt::format("the results of MPI rank {} could not be read: {}", rank, ex.what()));
  }
}

// Runs `todo` (unit indices) in `jobs` threads; each finished row goes to `log` at once.
Batch run_units(const Experiment& e, const std::vector<Unit>& units, const std::vector<int>& todo,
                const SweepOptions& o, const std::function<void(const std::string&)>& log,
                Progress& progress) {
  Batch out;
  std::mutex mutex;
  std::condition_variable cv;
  std::atomic<std::size_t> next{0};
  int finished = 0, running = 0;
  auto worker = [&] {
    while (!g_interrupted.load()) {
      const std::size_t k = next.fetch_add(1);
      if (k >= todo.size()) break;
      const Unit& u = units[static_cast<std::size_t>(todo[k])];
      if (o.unit_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.unit_delay_ms));
      std::optional<UnitResult> r;
      std::string error;
      try {
        r = run_unit(u, e);
        if (log) log(to_json(*r).dump());
      } catch (const Error& ex) {
        error = ex.what();
      } catch (const std::exception& ex) {  // a bug, but one unit must not take the sweep down
        error = fmt::format("internal error: {}", ex.what());
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (error.empty())
        out.rows.push_back(std::move(*r));
      else
        out.failed.push_back({u.index, u.key(), error});
      ++finished;
      cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(mutex);
    --running;
    cv.notify_all();
  };
  const int jobs = std::max(1, std::min<int>(o.jobs, static_cast<int>(todo.size())));
  std::vector<std::thread> threads;
  running = jobs;
  for (int t = 0; t < jobs; ++t) threads.emplace_back(worker);
  {
    std::unique_lock<std::mutex> lock(mutex);
    while (running > 0) {
      progress.show(finished);
      cv.wait_for(lock, std::chrono::milliseconds(200));
    }
    progress.show(finished, /*force=*/true);
  }
  for (auto& t : threads) t.join();
  progress.finish();
  out.interrupted = g_interrupted.load() && out.rows.size() + out.failed.size() < todo.size();
  return out;
}

void write_outputs(const Experiment& e, const SweepOptions& o, const std::string& dir,
                   const std::map<int, UnitResult>& rows, const SweepOutcome& outcome,
                   const std::string& started_at, int ranks) {
  std::vector<UnitResult> all;
  for (const auto& [index, r] : rows) all.push_back(r);
  int baseline = -1;
  for (std::size_t s = 0; s < e.strategies.size(); ++s)
    if (e.strategies[s].label == e.baseline) baseline = static_cast<int>(s);
  costmodel::write_file_atomic(dir + "/results.csv",
                               results_csv(all, static_cast<int>(e.strategies.size()), baseline));
  costmodel::write_file_atomic(dir + "/candidates.csv", candidates_csv(all));
  nlohmann::json failed = nlohmann::json::array();
  for (const auto& f : outcome.failed)
    failed.push_back({{"index", f.index}, {"key", f.key}, {"message", f.message}});
  const nlohmann::json summary{
      {"schema_version", 1},
      {"tool", tool_json()},
      {"experiment", {{"file", e.file}, {"name", e.name}, {"source", e.source}}},
      {"machine", costmodel::machine(ranks, o.jobs)},
      {"seed", nullptr},  // nothing random: the same experiment gives the same results.csv
      {"started_at", started_at},
      {"finished_at", costmodel::utc_now()},
      {"wall_seconds", outcome.wall_s},
      {"units",
       {{"total", outcome.units},
        {"resumed", outcome.resumed},
        {"ran", outcome.ran},
        {"succeeded", static_cast<int>(rows.size())},
        {"failed", static_cast<int>(outcome.failed.size())}}},
      {"failed", failed},
      {"files", {"rows.jsonl", "results.csv", "candidates.csv"}}};
  costmodel::write_file_atomic(dir + "/summary.json", summary.dump(2) + "\n");
}

}  // namespace

SweepOutcome run_sweep(const Experiment& e, const SweepOptions& o) {
  const auto t0 = Clock::now();
  const std::string started_at = costmodel::utc_now();
  const std::vector<Unit> units = expand(e);
  const std::string dir = o.out_dir.empty() ? e.output : o.out_dir;
  if (std::any_of(e.evaluators.begin(), e.evaluators.end(), [](EvaluatorKind k) { return info(k).needs_ranks; }))
    throw UsageError(fmt::format(
        "{}: the \"measured\" evaluator runs every plan for real on ranks: use `osdp validate {} -np N` "
        "(osdp sweep evaluates with \"analytic\" and \"sim\")",
        e.file, e.file));

  Ranks ranks;
  SweepOutcome outcome;
  outcome.root = ranks.rank() == 0;
  outcome.units = static_cast<int>(units.size());
  outcome.ranks = ranks.size();
  outcome.out_dir = dir;

  // Rank 0 looks at the directory; every rank learns what is done (or what went wrong).
  StoredRows stored;
  std::unique_ptr<ResultsDir> log;
  std::exception_ptr setup_error;
  std::string shared;
  if (outcome.root) {
    try {
      log = std::make_unique<ResultsDir>(
          dir, ResultsDirOptions{o.resume, o.force, {"results.csv", "candidates.csv", "summary.json"}});
      if (log->resuming()) {
        std::vector<std::string> keys;
        for (const auto& u : units) keys.push_back(u.key());
        stored = read_rows(log->rows_path(), keys, e.evaluators);
        // The rows other ranks of a killed MPI sweep had logged on their own.
        for (const auto& path : log->rank_rows_paths()) {
          StoredRows theirs = read_rows(path, keys, e.evaluators);
          for (auto& [index, r] : theirs.rows) stored.rows.emplace(index, std::move(r));
        }
        std::vector<std::string> kept;  // drop stale or torn lines before appending after them
        for (const auto& [index, r] : stored.rows) kept.push_back(to_json(r).dump());
        log->keep(kept);
        log->remove_rank_rows();
      }
      nlohmann::json done = nlohmann::json::array();
      for (const auto& [index, r] : stored.rows) done.push_back(index);
      shared = nlohmann::json{{"done", done}}.dump();
    } catch (const Error& ex) {
      setup_error = std::current_exception();
      shared = nlohmann::json{{"error", ex.what()}}.dump();
    }
  }
  ranks.broadcast(shared);
  const nlohmann::json setup = nlohmann::json::parse(shared);
  if (setup.contains("error")) {
    if (setup_error) std::rethrow_exception(setup_error);
    outcome.error = setup.at("error").get<std::string>();
    return outcome;  // not rank 0: rank 0 reports it
  }
  std::vector<bool> done(units.size(), false);
  for (const auto& i : setup.at("done")) done[i.get<std::size_t>()] = true;
  std::vector<int> todo;
  for (const auto& u : units)
    if (!done[static_cast<std::size_t>(u.index)] && u.index % ranks.size() == ranks.rank())
      todo.push_back(u.index);
  outcome.resumed = static_cast<int>(stored.rows.size());

  Batch mine;
  {
    SigintGuard sigint;
    const bool alone = ranks.size() == 1;  // under MPI rank 0 shows its own share
    Progress progress(o.progress && outcome.root, alone ? outcome.units : static_cast<int>(todo.size()),
                      alone ? outcome.resumed : 0);
    // Rank 0 appends to rows.jsonl; another rank to its own rows.rankR.jsonl beside it, so that its
    // finished rows survive a kill -9 of the job (rank 0 folds them in at the end or on --resume).
    std::unique_ptr<RowLog> own;
    if (!outcome.root) own = std::make_unique<RowLog>(ResultsDir::rank_rows_path(dir, ranks.rank()));
    const std::function<void(const std::string&)> sink = [&](const std::string& line) {
      if (log) log->append(line);
      if (own) own->append(line);
    };
    mine = run_units(e, units, todo, o, sink, progress);
  }
  const std::vector<std::string> batches = ranks.gather(ranks.size() > 1 ? to_text(mine) : std::string());
  if (!outcome.root) return outcome;

  std::map<int, UnitResult> rows = std::move(stored.rows);
  for (int r = 0; r < ranks.size(); ++r) {
    Batch b = r == 0 ? std::move(mine) : from_text(batches[static_cast<std::size_t>(r)], r);
    std::sort(b.rows.begin(), b.rows.end(),
              [](const UnitResult& x, const UnitResult& y) { return x.index < y.index; });
    for (auto& row : b.rows) {
      if (r != 0) log->append(to_json(row).dump());  // rank 0's own rows are there already
      ++outcome.ran;
      const int index = row.index;
      rows.emplace(index, std::move(row));
    }
    outcome.failed.insert(outcome.failed.end(), b.failed.begin(), b.failed.end());
    outcome.interrupted = outcome.interrupted || b.interrupted;
  }
  log->remove_rank_rows();  // their rows are in rows.jsonl now (each append fsync'd)
  std::sort(outcome.failed.begin(), outcome.failed.end(),
            [](const FailedUnit& x, const FailedUnit& y) { return x.index < y.index; });
  outcome.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!outcome.interrupted) write_outputs(e, o, dir, rows, outcome, started_at, ranks.size());
  return outcome;
}

}  // namespace osdp::experiments
