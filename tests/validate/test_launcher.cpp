// relaunch_under_mpirun against a stand-in mpirun (a shell script written here) that records its
// arguments and then exits with a given status, kills itself, or waits for SIGINT.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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
  const std::vector<std::string> expected = {"-np",      "4",       "--oversubscribe", self_executable(),
                                             "validate", "--steps", "2 words"};
  CHECK(fake.args() == expected);
  CHECK(fs::path(self_executable()).filename() == "test_validate");

  setenv("FAKE_MPIRUN_MODE", "exit0", 1);
  CHECK(relaunch_under_mpirun(1, {}) == 0);
  CHECK(fake.args() == std::vector<std::string>{"-np", "1", self_executable()});
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
