// The one durable results directory of `osdp sweep` and `osdp validate`: whatever runs the units,
// finished rows reach it the same way.
//
//   DIR/rows.jsonl   one JSON line per finished unit, appended with one write() and fsync'd as each
//                    unit finishes, so kill -9 loses only the units in flight;
//   the final files  (results.csv, summary.json, validation.csv, ...) written atomically by the
//                    command once every unit is done (costmodel::write_file_atomic).
//
// Opening it creates DIR and takes an exclusive lock on it (flock: a second writer is refused while
// the first runs). A rows.jsonl that holds finished rows is never thrown away silently:
//   neither resume nor force  refused (UsageError naming both flags), nothing touched;
//   resume                    the caller reads the rows back and keeps what still matches its units
//                             (keep(): torn and stale lines dropped, rows.jsonl rewritten to them);
//   force                     rows.jsonl and the command's final files are removed: a fresh start.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace osdp::experiments {

struct ResultsDirOptions {
  bool resume = false;
  bool force = false;
  std::vector<std::string> final_files;  // removed by force, e.g. {"results.csv", "summary.json"}
};

class ResultsDir {
 public:
  // Throws InputError for a directory that cannot be made, UsageError when another process holds
  // it or when finished rows would be overwritten (see above).
  ResultsDir(std::string dir, const ResultsDirOptions& options);
  ~ResultsDir();
  ResultsDir(const ResultsDir&) = delete;
  ResultsDir& operator=(const ResultsDir&) = delete;

  // Why opening `dir` with `options` would be refused for its finished rows ("" when it would not):
  // for a command to say so before it starts any work. The constructor checks it again.
  static std::string refusal(const std::string& dir, const ResultsDirOptions& options);

  const std::string& dir() const { return dir_; }
  std::string rows_path() const { return dir_ + "/rows.jsonl"; }
  // The row logs of an MPI sweep's other ranks (rows.rankR.jsonl), which they append to as their
  // units finish; rank 0 folds them into rows.jsonl at the end, or on --resume after a kill.
  static std::string rank_rows_path(const std::string& dir, int rank);
  std::vector<std::string> rank_rows_paths() const;
  // Removes the ranks' row logs (once their rows are in rows.jsonl).
  void remove_rank_rows() const;
  // Whether rows.jsonl held rows when opened with resume (the caller then reads them back).
  bool resuming() const { return resuming_; }

  // Replaces rows.jsonl by `lines` (the rows the caller keeps), atomically; call before appending.
  void keep(const std::vector<std::string>& lines);
  // Thread-safe: one write() of the whole line, then fsync.
  void append(const std::string& json_line);

 private:
  void open_log();
  std::string dir_;
  bool resuming_ = false;
  int lock_fd_ = -1;
  int log_fd_ = -1;
  std::mutex mutex_;
};

// An append-only row log without the directory's lock: what an MPI sweep's rank other than 0 writes
// its finished rows to (ResultsDir::rank_rows_path), one fsync'd line per row, so that a kill -9 of
// the job loses only the units in flight. The directory is made when missing.
class RowLog {
 public:
  explicit RowLog(std::string path);
  ~RowLog();
  RowLog(const RowLog&) = delete;
  RowLog& operator=(const RowLog&) = delete;
  void append(const std::string& json_line);  // thread-safe

 private:
  std::string path_;
  int fd_ = -1;
  std::mutex mutex_;
};

}  // namespace osdp::experiments
