// relaunch_under_mpirun against a stand-in mpirun (a shell script written here) that records its
// arguments and then exits with a given status, kills itself, or waits for SIGINT.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "costmodel/error.hpp"
#include "validate/mpi/launcher.hpp"

namespace {

namespace fs = std::filesystem;
using namespace osdp::validate;
using namespace std::chrono_literals;

// A temporary folder with the stand-in mpirun; OSDP_MPIRUN points at it while this lives.
class FakeMpirun {
 public:
  FakeMpirun() : dir_(fs::temp_directory_path() / ("osdp-launcher-" + std::to_string(getpid()))) {
    fs::create_directories(dir_);
    script_ = dir_ / "mpirun";
    std::ofstream(script_) << "#!/bin/sh\n"
                              "dir=$(dirname \"$0\")\n"
                              "for a in \"$@\"; do echo \"$a\"; done > \"$dir/args\"\n"
                              "case \"$FAKE_MPIRUN_MODE\" in\n"
                              "  exit*) exit \"${FAKE_MPIRUN_MODE#exit}\" ;;\n"
                              "  kill) kill -TERM $$ ;;\n"
                              "  wait) trap 'exit 42' INT; touch \"$dir/ready\"; i=0\n"
                              "        while [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done; exit 1 ;;\n"
                              "esac\n";
    fs::permissions(script_, fs::perms::owner_all);
    setenv("OSDP_MPIRUN", script_.c_str(), 1);
  }
  ~FakeMpirun() {
    unsetenv("OSDP_MPIRUN");
    unsetenv("FAKE_MPIRUN_MODE");
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  FakeMpirun(const FakeMpirun&) = delete;
  FakeMpirun& operator=(const FakeMpirun&) = delete;

  std::vector<std::string> args() const {
    std::ifstream in(dir_ / "args");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  fs::path ready() const { return dir_ / "ready"; }
  const fs::path& script() const { return script_; }

 private:
  fs::path dir_;
  fs::path script_;
};

}  // namespace

TEST_CASE("mpirun_path prefers OSDP_MPIRUN", "[launcher]") {
  setenv("OSDP_MPIRUN", "/opt/x/bin/mpiexec", 1);
  CHECK(mpirun_path() == "/opt/x/bin/mpiexec");
  unsetenv("OSDP_MPIRUN");
  CHECK_FALSE(mpirun_path().empty());
  CHECK(mpirun_path() != "/opt/x/bin/mpiexec");
}

TEST_CASE("relaunch passes -np, mpirun's options, this executable and the arguments", "[launcher]") {
  FakeMpirun fake;
  setenv("FAKE_MPIRUN_MODE", "exit3", 1);
  const int status = relaunch_under_mpirun(4, {"validate", "--steps", "2 words"}, {"--oversubscribe"});
  CHECK(status == 3);
  // -np N, then the ranks' status directory exported with -x (a fresh one, removed afterwards), then
  // mpirun's options, the executable and the arguments.
  std::vector<std::string> args = fake.args();
  REQUIRE(args.size() == 9);
  CHECK(args[2] == "-x");
  const std::string prefix = std::string(kJobStatusEnv) + "=";
  REQUIRE(args[3].rfind(prefix, 0) == 0);
  const fs::path status_dir = args[3].substr(prefix.size());
  CHECK(status_dir.filename().string().rfind("osdp-job-", 0) == 0);
  CHECK_FALSE(fs::exists(status_dir));
  args.erase(args.begin() + 2, args.begin() + 4);
  const std::vector<std::string> expected = {"-np",      "4",       "--oversubscribe", self_executable(),
                                             "validate", "--steps", "2 words"};
  CHECK(args == expected);
  CHECK(fs::path(self_executable()).filename() == "test_validate");

  setenv("FAKE_MPIRUN_MODE", "exit0", 1);
  CHECK(relaunch_under_mpirun(1, {}) == 0);
  args = fake.args();
  REQUIRE(args.size() == 5);
  args.erase(args.begin() + 2, args.begin() + 4);
  CHECK(args == std::vector<std::string>{"-np", "1", self_executable()});
}

TEST_CASE("a rank's status file says where it was, and whether mpirun stopped it", "[launcher]") {
  // A directory left by a launcher that is gone (kill -9) is removed when the next job's is made.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  const fs::path stale = fs::temp_directory_path() / fmt::format("osdp-job-{}-stale00", gone);
  fs::create_directories(stale);
  std::ofstream(stale / "rank.0") << "x";
  const fs::path dir = make_job_status_dir();
  CHECK_FALSE(fs::exists(stale));
  CHECK(dir.filename().string().rfind(fmt::format("osdp-job-{}-", getpid()), 0) == 0);
  setenv(kJobStatusEnv, dir.c_str(), 1);
  // Each rank is a child process that records its place. Rank 0 then dies of SIGKILL, as a rank killed
  // from outside would; rank 1 is stopped by SIGTERM, as mpirun stops the ranks that outlive a dead
  // one; rank 2 finishes; rank 3 never starts.
  // Rank 2 gives the job's answer (a validation's verdict, 5) and exits 0.
  auto child = [](int rank, int sig, bool finish) {
    const pid_t pid = fork();
    if (pid == 0) {
      job_status_open(rank);
      job_status_context(fmt::format("plan 2 of 4 (exact), timed step {} of 5", rank + 1));
      job_status_operation("in ", fmt::format("backward reduce-scatter of layer {}", rank));
      if (finish) {
        job_status_finished();
        _exit(job_status_answer(5) ? 0 : 98);
      }
      raise(sig);
      _exit(99);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  };
  const int killed = child(0, SIGKILL, false);
  const int stopped = child(1, SIGTERM, false);
  const int answered = child(2, 0, true);
  unsetenv(kJobStatusEnv);
  CHECK((WIFEXITED(answered) && WEXITSTATUS(answered) == 0));  // the answer went into the file
  CHECK_FALSE(job_status_answer(5));  // no file in this process: the caller exits with the code itself
  CHECK((WIFSIGNALED(killed) && WTERMSIG(killed) == SIGKILL));
  CHECK((WIFSIGNALED(stopped) && WTERMSIG(stopped) == SIGTERM));  // the marker does not save it

  const std::vector<RankStatus> s = read_job_status(dir, 4);
  REQUIRE(s.size() == 4);
  CHECK(s[0].state == RankState::kRunning);
  CHECK(s[0].operation == "in backward reduce-scatter of layer 0");
  CHECK(s[0].context == "plan 2 of 4 (exact), timed step 1 of 5");
  CHECK(s[1].state == RankState::kStopped);
  CHECK(s[2].state == RankState::kFinished);
  CHECK(s[2].answer == 5);
  CHECK((s[0].answer == 0 && s[1].answer == 0 && s[3].answer == 0));
  CHECK(job_answer(s) == 5);
  CHECK(job_answer({}) == 0);
  CHECK(s[3].state == RankState::kMissing);
  CHECK(describe_job_end(s) ==
        "rank 0 ended in backward reduce-scatter of layer 0 (plan 2 of 4 (exact), timed step 1 of 5); "
        "mpirun then stopped rank 1");
  remove_job_status_dir(dir);
  CHECK_FALSE(fs::exists(dir));

  // Nothing to say when every rank finished or none wrote a file.
  CHECK(describe_job_end({RankStatus{0, RankState::kFinished, "", "", 0}}).empty());
  CHECK(describe_job_end({RankStatus{0, RankState::kMissing, "", "", 0}}).empty());
  CHECK(describe_job_end(
            {RankStatus{0, RankState::kRunning, "", "", 0}, RankStatus{1, RankState::kRunning, "", "", 0},
             RankStatus{2, RankState::kStopped, "", "", 0}, RankStatus{3, RankState::kStopped, "", "", 0}}) ==
        "rank 0 ended before its first collective; rank 1 ended before its first collective; mpirun then "
        "stopped ranks 2 and 3");
}

TEST_CASE("relaunch returns 128 + the signal that ended mpirun", "[launcher]") {
  FakeMpirun fake;
  setenv("FAKE_MPIRUN_MODE", "kill", 1);
  CHECK(relaunch_under_mpirun(2, {}) == 128 + SIGTERM);
}

TEST_CASE("a SIGINT sent to the launcher while it waits is forwarded to mpirun", "[launcher]") {
  FakeMpirun fake;
  setenv("FAKE_MPIRUN_MODE", "wait", 1);
  std::thread sender([&] {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!fs::exists(fake.ready()) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    kill(getpid(), SIGINT);  // as `kill -INT <launcher>` would
  });
  const int status = relaunch_under_mpirun(2, {});
  sender.join();
  CHECK(status == 42);  // the script's INT trap ran: the signal reached it, and this process lived on
}

TEST_CASE("relaunch names the mpirun it could not start", "[launcher]") {
  setenv("OSDP_MPIRUN", "/nonexistent/bin/mpirun-osdp", 1);
  try {
    relaunch_under_mpirun(2, {});
    FAIL("no error");
  } catch (const osdp::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("/nonexistent/bin/mpirun-osdp"));
  }
  unsetenv("OSDP_MPIRUN");
  CHECK_THROWS_AS(relaunch_under_mpirun(0, {}), osdp::UsageError);
}
