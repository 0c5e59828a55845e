// Relaunching this executable under mpirun, and any other child (run_child): fork and exec with the
// caller's stdio, then waitpid, forwarding SIGINT/SIGTERM to the child meanwhile. The child asks the kernel
// for SIGTERM when the launcher dies (PR_SET_PDEATHSIG), so that kill -9 of the launcher takes mpirun, and
// with it the ranks, down too instead of leaving them running.
#include "validate/mpi/launcher.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/job_status.hpp"

extern char** environ;

namespace osdp::validate {

namespace {

// The child that a forwarded signal goes to (0: none). A signal handler reads it, so it is a
// lock-free atomic rather than state passed around.
std::atomic<pid_t> g_child{0};
static_assert(std::atomic<pid_t>::is_always_lock_free);
std::atomic<int> g_forwarded{0};  // the last signal forwarded to the child (0: none)

void forward_signal(int sig, siginfo_t* info, void* /*context*/) {
  // A signal typed at the terminal (SI_KERNEL) reached the child's process group already.
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  const int saved_errno = errno;  // kill may set it; the interrupted code may be reading it
  const pid_t child = g_child.load();
  if (child > 0) kill(child, sig);
  g_forwarded.store(sig);
  errno = saved_errno;
}

constexpr int kForwarded[] = {SIGINT, SIGTERM};

// Installs forward_signal for the forwarded signals (except those this process ignores, which the
// child then inherits as ignored) and puts the previous actions back on destruction.
class SignalForwarding {
 public:
  SignalForwarding() {
    for (std::size_t i = 0; i < std::size(kForwarded); ++i) {
      sigaction(kForwarded[i], nullptr, &old_[i]);
      if (old_[i].sa_handler == SIG_IGN) continue;
      struct sigaction action {};
      action.sa_sigaction = forward_signal;
      action.sa_flags = SA_SIGINFO | SA_RESTART;
      sigemptyset(&action.sa_mask);
      sigaction(kForwarded[i], &action, nullptr);
      installed_[i] = true;
    }
  }
  ~SignalForwarding() {
    for (std::size_t i = 0; i < std::size(kForwarded); ++i) {
      if (installed_[i]) sigaction(kForwarded[i], &old_[i], nullptr);
    }
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  struct sigaction old_[std::size(kForwarded)]{};
  bool installed_[std::size(kForwarded)] = {};
};

// Blocks the forwarded signals in this thread while the child is being started and g_child set.
class BlockSignals {
 public:
  BlockSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (const int sig : kForwarded) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~BlockSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockSignals(const BlockSignals&) = delete;
  BlockSignals& operator=(const BlockSignals&) = delete;
  const sigset_t& old_mask() const { return old_; }

 private:
  sigset_t old_{};
};

}  // namespace

int forwarded_signal() {
  return g_forwarded.load();
}

std::string mpirun_path() {
  const char* env = std::getenv("OSDP_MPIRUN");
  if (env != nullptr && *env != '\0') return env;
#ifdef OSDP_MPIEXEC
  const std::string configured = OSDP_MPIEXEC;
  if (!configured.empty()) return configured;
#endif
  return "mpirun";
}

std::string self_executable() {
  std::string path(256, '\0');
  for (;;) {
    const ssize_t n = readlink("/proc/self/exe", path.data(), path.size());
    if (n < 0) throw Error(fmt::format("cannot resolve /proc/self/exe: {}", std::strerror(errno)));
    if (static_cast<std::size_t>(n) < path.size()) {
      path.resize(static_cast<std::size_t>(n));
      return path;
    }
    path.resize(path.size() * 2);
  }
}

int relaunch_under_mpirun(int np, const std::vector<std::string>& args,
                          const std::vector<std::string>& mpirun_args, std::vector<RankStatus>* statuses) {
  if (np < 1) throw UsageError(fmt::format("relaunch under mpirun: {} ranks asked, at least 1 needed", np));
  const std::string mpirun = mpirun_path();
  // The ranks' status files (job_status.hpp), read when the job ends and removed with the directory.
  struct StatusDir {
    std::string path = make_job_status_dir();
    ~StatusDir() { remove_job_status_dir(path); }
  } status_dir;
  std::vector<std::string> words = {mpirun, "-np", std::to_string(np), "-x",
                                    fmt::format("{}={}", kJobStatusEnv, status_dir.path)};
  words.insert(words.end(), mpirun_args.begin(), mpirun_args.end());
  words.push_back(self_executable());
  words.insert(words.end(), args.begin(), args.end());
  const int status = run_child(words, "mpirun", " (set OSDP_MPIRUN to the mpirun to use)");
  if (statuses != nullptr) *statuses = read_job_status(status_dir.path, np);
  return status;
}

int run_child(std::vector<std::string> words, const std::string& what, const std::string& hint) {
  if (words.empty()) throw UsageError("run_child: no program");
  const std::string program = words.front();
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);

  const SignalForwarding forwarding;
  const bool search_path = program.find('/') == std::string::npos;
  const pid_t parent = getpid();
  pid_t pid = 0;
  int exec_error[2] = {-1, -1};  // the child reports a failed exec through this pipe (closed on exec)
  if (pipe2(exec_error, O_CLOEXEC) != 0)
    throw Error(fmt::format("cannot start {} \"{}\": pipe: {}", what, program, std::strerror(errno)));
  {
    const BlockSignals blocked;  // a signal now waits until g_child names the child
    pid = fork();
    if (pid == 0) {
      // The child: only async-signal-safe calls until exec.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(127);  // the launcher died before the request took effect
      sigprocmask(SIG_SETMASK, &blocked.old_mask(), nullptr);
      if (search_path)
        execvp(argv[0], argv.data());
      else
        execv(argv[0], argv.data());
      const int error = errno;
      ssize_t ignored = write(exec_error[1], &error, sizeof error);
      (void)ignored;
      _exit(127);
    }
    if (pid < 0) {
      const int error = errno;
      close(exec_error[0]);
      close(exec_error[1]);
      throw Error(fmt::format("cannot start {} \"{}\": fork: {}", what, program, std::strerror(error)));
    }
    g_child = pid;
  }
  close(exec_error[1]);
  int child_error = 0;
  ssize_t got = 0;
  do {
    got = read(exec_error[0], &child_error, sizeof child_error);
  } while (got < 0 && errno == EINTR);
  close(exec_error[0]);
  if (got == static_cast<ssize_t>(sizeof child_error)) {
    int ignored_status = 0;
    waitpid(pid, &ignored_status, 0);
    g_child = 0;
    throw Error(fmt::format("cannot start {} \"{}\": {}{}", what, program, std::strerror(child_error), hint));
  }
  // Polled rather than a blocking waitpid, so a forwarded signal never waits on the wait (some
  // runtimes, ThreadSanitizer's among them, defer signal handlers until a blocking call returns).
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      const int error = errno;
      g_child = 0;
      throw Error(
          fmt::format("waiting for {} \"{}\" (pid {}): {}", what, program, pid, std::strerror(error)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  g_child = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 128;
}

}  // namespace osdp::validate
