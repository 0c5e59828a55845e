// Rank status files (job_status.hpp): fixed offsets in a 1 KiB file, mapped shared by the rank.
#include "validate/job_status.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "costmodel/error.hpp"

namespace osdp::validate {

namespace {

// The file's layout: the state byte at 0, the answer byte at 1, the context and the operation as
// NUL-terminated text.
constexpr std::size_t kStateAt = 0;
constexpr std::size_t kAnswerAt = 1;
constexpr std::size_t kContextAt = 64;
constexpr std::size_t kContextBytes = 448;
constexpr std::size_t kOperationAt = 512;
constexpr std::size_t kOperationBytes = 512;
constexpr std::size_t kFileBytes = 1024;

constexpr char kRunning = 'R', kStopped = 'S', kFinished = 'F';

// This rank's file, mapped shared: a store is a write to the page cache, cheap enough to make before
// and after every collective (tens of nanoseconds against a pwrite's microsecond, which small-message
// calibration would see), and it outlives the process, kill -9 included. The SIGTERM handler reads it.
std::atomic<char*> g_map{nullptr};
int g_rank = -1;

void on_sigterm(int sig) {
  // Async-signal-safe only. SA_RESETHAND restored the default action and SA_NODEFER lets the raise
  // through at once, so the rank still dies of SIGTERM, as mpirun expects.
  if (char* map = g_map.load(std::memory_order_relaxed); map != nullptr) map[kStateAt] = kStopped;
  raise(sig);
}

// Writes "<a><b>" into the field at `at` (truncated to fit), NUL-terminated.
void put(std::size_t at, std::size_t size, std::string_view a, std::string_view b = {}) {
  char* map = g_map.load(std::memory_order_relaxed);
  if (map == nullptr) return;
  char* out = map + at;
  const std::size_t na = std::min(a.size(), size - 1);
  const std::size_t nb = std::min(b.size(), size - 1 - na);
  // An empty string_view may hold a null pointer, which memcpy must not be given even for 0 bytes.
  if (na > 0) std::memcpy(out, a.data(), na);
  if (nb > 0) std::memcpy(out + na, b.data(), nb);
  out[na + nb] = '\0';
}

std::string field(const char* data, std::size_t size) {
  return std::string(data, strnlen(data, size));
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    out += fmt::format("{}{}", i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ", ranks[i]);
  return out;
}

}  // namespace

void job_status_open(int rank) {
  const char* dir = std::getenv(kJobStatusEnv);
  if (dir == nullptr || *dir == '\0' || g_rank == rank) return;
  const std::string path = fmt::format("{}/rank.{}", dir, rank);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;  // best effort: the launcher then says only what mpirun said
  void* map = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(kFileBytes)) == 0)
    map = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) return;
  static_cast<char*>(map)[kStateAt] = kRunning;
  if (char* old = g_map.exchange(static_cast<char*>(map)); old != nullptr) ::munmap(old, kFileBytes);
  g_rank = rank;
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  action.sa_flags = SA_RESETHAND | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
}

void job_status_context(std::string_view context) {
  put(kContextAt, kContextBytes, context);
}

void job_status_operation(std::string_view verb, std::string_view operation) {
  put(kOperationAt, kOperationBytes, verb, operation);
}

void job_status_finished() {
  if (char* map = g_map.load(std::memory_order_relaxed); map != nullptr) map[kStateAt] = kFinished;
}

bool job_status_answer(int code) {
  char* map = g_map.load(std::memory_order_relaxed);
  if (map == nullptr || code < 1 || code > 127) return false;
  map[kAnswerAt] = static_cast<char>(code);
  return true;
}

std::string make_job_status_dir() {
  const char* env = std::getenv("TMPDIR");
  const std::string tmp = env != nullptr && *env != '\0' ? env : "/tmp";
  // Directories left by launchers that were killed (kill -9 runs no clean-up) go first: the name
  // carries the launcher's pid, and a pid that no longer exists leaves nothing to wait for.
  std::error_code ec;
  for (std::filesystem::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int pid = 0;
    if (std::sscanf(name.c_str(), "osdp-job-%d-", &pid) == 1 && pid > 0 && ::kill(pid, 0) != 0 &&
        errno == ESRCH)
      remove_job_status_dir(it->path().string());
  }
  std::string pattern = fmt::format("{}/osdp-job-{}-XXXXXX", tmp, ::getpid());
  if (::mkdtemp(pattern.data()) == nullptr)
    throw Error(fmt::format("cannot make the job's status directory {}: {}", pattern, std::strerror(errno)));
  return pattern;
}

std::vector<RankStatus> read_job_status(const std::string& dir, int np) {
  std::vector<RankStatus> out;
  for (int r = 0; r < np; ++r) {
    RankStatus s;
    s.rank = r;
    const std::string path = fmt::format("{}/rank.{}", dir, r);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::array<char, kFileBytes> data{};
      const ssize_t n = pread(fd, data.data(), data.size(), 0);
      ::close(fd);
      if (n == static_cast<ssize_t>(data.size())) {
        s.state = data[kStateAt] == kFinished  ? RankState::kFinished
                  : data[kStateAt] == kStopped ? RankState::kStopped
                                               : RankState::kRunning;
        s.answer = static_cast<unsigned char>(data[kAnswerAt]);
        s.context = field(data.data() + kContextAt, kContextBytes);
        s.operation = field(data.data() + kOperationAt, kOperationBytes);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

void remove_job_status_dir(const std::string& dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

int job_answer(const std::vector<RankStatus>& statuses) {
  int answer = 0;
  for (const auto& s : statuses) answer = std::max(answer, s.answer);
  return answer;
}

std::string describe_job_end(const std::vector<RankStatus>& statuses) {
  std::vector<const RankStatus*> first;
  std::vector<int> stopped;
  for (const auto& s : statuses) {
    if (s.state == RankState::kRunning) first.push_back(&s);
    if (s.state == RankState::kStopped) stopped.push_back(s.rank);
  }
  if (first.empty()) return {};
  std::string out;
  for (std::size_t i = 0; i < first.size(); ++i) {
    const RankStatus& s = *first[i];
    out += fmt::format(
        "{}rank {} ended {}", i == 0 ? "" : "; ", s.rank,
        s.operation.empty() ? std::string("before its first collective") : fmt::format("{}", s.operation));
    if (!s.context.empty()) out += fmt::format(" ({})", s.context);
  }
  if (!stopped.empty())
    out += fmt::format("; mpirun then stopped rank{} {}", stopped.size() == 1 ? "" : "s", rank_list(stopped));
  return out;
}

}  // namespace osdp::validate
