#include "experiments/results_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/files.hpp"

namespace osdp::experiments {

namespace {

bool has_rows(const std::string& rows) {
  std::error_code ec;
  return std::filesystem::exists(rows, ec) && std::filesystem::file_size(rows, ec) > 0;
}

// rows.rankR.jsonl files of `dir`, sorted.
std::vector<std::string> rank_logs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rows.rank", 0) == 0 && name.size() > 15 && name.substr(name.size() - 6) == ".jsonl")
      out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool has_any_rows(const std::string& dir) {
  if (has_rows(dir + "/rows.jsonl")) return true;
  for (const auto& f : rank_logs(dir))
    if (has_rows(f)) return true;
  return false;
}

// One write() of the whole line (retried where short or interrupted), then fsync.
void write_line(int fd, const std::string& path, const std::string& json_line) {
  const std::string line = json_line + "\n";
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw InputError(path, "", "writing a row failed");
    done += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
}

// Removes what an interrupted write_file_atomic left: FILE.tmp.PID whose process is gone (kill -9
// between the write and the rename). Called with the directory's lock held, so no live run of osdp
// is writing there; a live PID (another program's file that happens to match) is left alone.
void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (const std::string& d : {dir, dir + "/tasks"}) {
    if (!std::filesystem::is_directory(d, ec)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(d, ec)) {
      const std::string name = entry.path().filename().string();
      const auto at = name.rfind(".tmp.");
      if (at == std::string::npos || at + 5 >= name.size()) continue;
      const std::string pid_text = name.substr(at + 5);
      if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
      if (pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH)) continue;
      std::filesystem::remove(entry.path(), ec);
    }
  }
}

}  // namespace

std::string ResultsDir::refusal(const std::string& dir, const ResultsDirOptions& o) {
  const std::string rows = dir + "/rows.jsonl";
  if (!has_any_rows(dir) || o.resume || o.force) return "";
  return fmt::format(
      "{} holds the finished rows of an earlier run: pass --resume to continue it, or --force to start again "
      "(its rows are then deleted; or remove the directory {})",
      rows, dir);
}

ResultsDir::ResultsDir(std::string dir, const ResultsDirOptions& o) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_))
    throw InputError(dir_, "", "cannot create the output directory");
  lock_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ < 0) throw InputError(dir_, "", "cannot open the output directory");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    throw UsageError(fmt::format("{}: another run is writing this directory", dir_));
  }
  remove_stale_temporaries(dir_);
  const bool earlier = has_any_rows(dir_);
  if (const std::string why = refusal(dir_, o); !why.empty()) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw UsageError(why);
  }
  if (earlier && o.force) {
    std::filesystem::remove(rows_path(), ec);
    remove_rank_rows();
    for (const auto& f : o.final_files) std::filesystem::remove(dir_ + "/" + f, ec);
  }
  resuming_ = earlier && o.resume && !o.force;
  if (!resuming_) open_log();
}

ResultsDir::~ResultsDir() {
  if (log_fd_ >= 0) ::close(log_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void ResultsDir::open_log() {
  log_fd_ = ::open(rows_path().c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (log_fd_ < 0) throw InputError(rows_path(), "", "cannot open for appending");
}

void ResultsDir::keep(const std::vector<std::string>& lines) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string kept;
  for (const auto& l : lines) kept += l + "\n";
  if (log_fd_ >= 0) ::close(log_fd_);
  log_fd_ = -1;
  costmodel::write_file_atomic(rows_path(), kept);
  open_log();
}

void ResultsDir::append(const std::string& json_line) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (log_fd_ < 0) open_log();
  write_line(log_fd_, rows_path(), json_line);
}

std::string ResultsDir::rank_rows_path(const std::string& dir, int rank) {
  return fmt::format("{}/rows.rank{}.jsonl", dir, rank);
}

std::vector<std::string> ResultsDir::rank_rows_paths() const {
  return rank_logs(dir_);
}

void ResultsDir::remove_rank_rows() const {
  std::error_code ec;
  for (const auto& f : rank_logs(dir_)) std::filesystem::remove(f, ec);
}

RowLog::RowLog(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError(path_, "", "cannot open for appending");
}

RowLog::~RowLog() {
  if (fd_ >= 0) ::close(fd_);
}

void RowLog::append(const std::string& json_line) {
  std::lock_guard<std::mutex> lock(mutex_);
  write_line(fd_, path_, json_line);
}

}  // namespace osdp::experiments
