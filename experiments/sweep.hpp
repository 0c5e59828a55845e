// Running every unit of an experiment: resumable, in threads, optionally across MPI ranks.
//
// The output directory holds
//   rows.jsonl      one JSON line per finished unit (to_json(UnitResult)), appended with one write()
//                   and fsync'd as each unit finishes, so a kill loses only the units in flight;
//                   --resume reads it back and runs only the missing units;
//   results.csv     one line per unit and evaluator, sorted by unit index then evaluator order, no
//                   timing: the same experiment gives the same bytes whatever the threads or ranks;
//   candidates.csv  one line per unit and feasible batch size (the analytic best plan of each);
//   summary.json    provenance: tool version and commit, the experiment as read, the machine, times,
//                   failed units with their messages.
// The three final files are written atomically once every unit is done; the directory and its row
// log are experiments/results_dir.hpp's, shared with `osdp validate`. An interrupted sweep
// (SIGINT) lets the units in flight finish, writes none of them and says how to resume.
//
// MPI (when compiled in and the process was started by mpirun with more than one rank): rank r runs
// the units with index % size == r; the results are gathered to rank 0, which alone writes files.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "experiments/experiment.hpp"
#include "experiments/run.hpp"

namespace osdp::experiments {

struct SweepOptions {
  std::string out_dir;       // empty: the experiment's "output"
  int jobs = 1;              // worker threads (per rank)
  bool resume = false;       // continue from rows.jsonl (without it or force, finished rows are an error)
  bool force = false;        // start again: rows.jsonl and the final files of an earlier run are deleted
  bool progress = true;      // show progress on stderr when it is a terminal
  int unit_delay_ms = 0;     // test hook: each unit sleeps this long first (OSDP_SWEEP_TEST_DELAY_MS)
};

struct FailedUnit {
  int index = 0;
  std::string key;
  std::string message;
};

struct SweepOutcome {
  bool root = true;          // false on MPI ranks other than 0 (they write and report nothing)
  bool interrupted = false;  // SIGINT: nothing but rows.jsonl was written
  int units = 0;             // in the experiment
  int resumed = 0;           // read back from rows.jsonl
  int ran = 0;               // finished by this run (all ranks)
  int ranks = 1;
  std::vector<FailedUnit> failed;
  std::string out_dir;
  double wall_s = 0;
  std::string error;  // not rank 0: rank 0 could not set up the directory (it reports why)
};

// Throws osdp::Error for an unusable output directory, finished rows without `resume` or `force`
// (experiments/results_dir.hpp), or an experiment with an evaluator that runs plans on ranks
// ("measured": `osdp validate`).
SweepOutcome run_sweep(const Experiment& e, const SweepOptions& options);

// --- the pieces, exposed for the tests ---------------------------------------------------------------

// What rows.jsonl holds: index -> result, keeping the first line per index whose "key" is keys[index]
// (the unit's key at that index) and whose evaluators are `evaluators`. Malformed lines (a kill -9
// mid-write) and stale ones are counted in `dropped`. A missing file is empty. `osdp sweep` and
// `osdp validate` both read their rows back with it.
struct StoredRows {
  std::map<int, UnitResult> rows;
  int dropped = 0;
};
StoredRows read_rows(const std::string& path, const std::vector<std::string>& keys,
                     const std::vector<EvaluatorKind>& evaluators);

// One CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma, quote or line break.
std::string csv_field(const std::string& s);

// results.csv. `strategies`: strategies per configuration (units index / strategies is the
// configuration); `baseline`: the position of the baseline among them, or -1 (no speedup column
// values). Rows may come in any order; the output is sorted by index, then evaluator order.
std::string results_csv(std::vector<UnitResult> rows, int strategies, int baseline);
std::string candidates_csv(std::vector<UnitResult> rows);

}  // namespace osdp::experiments
