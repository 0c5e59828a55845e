// Backend modules (validate/backends.hpp): loading one with dlopen, calling into it, errors thrown
// inside it caught by type in the program, and the refusals (missing, not a shared object, no entry
// point, another build's), each naming the file. The stand-in modules (fake_backend_module.cpp) are
// built the way the nccl module is, without CUDA; the nccl module itself is loaded where it is built.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "costmodel/error.hpp"
#include "validate/backends.hpp"

namespace {

namespace fs = std::filesystem;
using namespace osdp::validate;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

// Points the module search at the stand-ins (the load of each name is remembered per process, and
// Catch runs every test case in a process of its own under CTest).
void use_fake_modules() {
  setenv("OSDP_BACKEND_DIR", FAKE_MODULE_DIR, 1);
}

const BackendModule& fake() {
  use_fake_modules();
  std::string why;
  const BackendModule* m = load_backend_module("fake", why);
  INFO(why);
  REQUIRE(m != nullptr);
  return *m;
}

}  // namespace

TEST_CASE("a module's objects are used from the program: session, device, communicator", "[module]") {
  const BackendModule& m = fake();
  CHECK(m.unavailable_reason().empty());
  REQUIRE(m.versions().size() == 1);
  CHECK(m.versions()[0].first == "FAKE");
  const std::unique_ptr<BackendSession> session = m.open(BackendOptions{});
  CHECK_THAT(session->device_name(), StartsWith("fake: "));
  CHECK(session->comm().size() == 1);
  const std::unique_ptr<Device> dev = session->make_device(false);
  float* buf = dev->allocate(4 * sizeof(float), "a buffer of the module's device");
  dev->fill(dev->compute_stream(), buf, 4, 2.5f);
  std::vector<float> host(4, 0.0f);
  dev->download(dev->compute_stream(), buf, host.data(), 4);
  dev->deallocate(buf);
  CHECK(host == std::vector<float>(4, 2.5f));
  CHECK(dev->memory().peak_bytes == 4 * sizeof(float));
  // The same module again, without loading it twice.
  std::string why;
  CHECK(load_backend_module("fake", why) == &m);
}

TEST_CASE("errors thrown inside a module are caught by their type in the program", "[module]") {
  const BackendModule& m = fake();
  auto kind_of = [&](double code) -> std::string {
    try {
      (void)m.open(BackendOptions{code, GemmMath::kFp32});
    } catch (const OutOfMemory& e) {
      return std::string("OutOfMemory: ") + e.what();
    } catch (const BackendFailure& e) {
      return std::string("BackendFailure: ") + e.what();
    } catch (const osdp::UsageError& e) {
      return std::string("UsageError: ") + e.what();
    } catch (...) {
      return "something else";
    }
    return "nothing";
  };
  CHECK(kind_of(-1) == "OutOfMemory: fake module: out of memory");
  CHECK(kind_of(-2) == "BackendFailure: fake module: backend failure");
  CHECK(kind_of(-3) == "UsageError: fake module: usage error");
  // And as their base, osdp::Error (what `osdp` catches to print the message and exit 2).
  CHECK_THROWS_AS(m.open(BackendOptions{-2, GemmMath::kFp32}), osdp::Error);
  CHECK_THROWS_WITH(m.open(BackendOptions{-1, GemmMath::kFp32}), "fake module: out of memory");
}

TEST_CASE("a module that cannot be used is refused with its path and the reason", "[module]") {
  use_fake_modules();
  const std::string dir = fs::path(FAKE_MODULE_DIR).lexically_normal().string();
  std::string why;

  CHECK(load_backend_module("absent", why) == nullptr);
  CHECK_THAT(why, Contains("osdp_backend_absent.so was not found") &&
                      Contains(dir + "/osdp_backend_absent.so") && Contains("OSDP_BACKEND_DIR"));

  CHECK(load_backend_module("fake_other_build", why) == nullptr);
  CHECK_THAT(why, Contains(dir + "/osdp_backend_fake_other_build.so was built for another osdp") &&
                      Contains(backend_module_abi()));

  CHECK(load_backend_module("fake_no_entry", why) == nullptr);
  CHECK_THAT(why, Contains(dir + "/osdp_backend_fake_no_entry.so has no entry point osdp_backend_module"));

  // A file of that name that is no shared object: dlopen's own message, with the path.
  const fs::path junk_dir = fs::temp_directory_path() / ("osdp-module-" + std::to_string(getpid()));
  fs::create_directories(junk_dir);
  std::ofstream(junk_dir / "osdp_backend_junk.so") << "not an ELF file\n";
  setenv("OSDP_BACKEND_DIR", junk_dir.c_str(), 1);
  CHECK(load_backend_module("junk", why) == nullptr);
  CHECK_THAT(why, Contains("the junk backend module " + (junk_dir / "osdp_backend_junk.so").string() +
                           " cannot be loaded: ") &&
                      Contains("osdp_backend_junk.so: "));
  fs::remove_all(junk_dir);
}

#ifdef TEST_NCCL_MODULE
// The way test_executor_mpi --backend nccl finds it: a program of the build tree, no OSDP_BACKEND_DIR.
TEST_CASE("the nccl module is found and loaded by a test program of the build tree", "[module][nccl]") {
  unsetenv("OSDP_BACKEND_DIR");
  const auto lines = module_versions();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].first == "CUDA");
  CHECK_THAT(lines[0].second, StartsWith("compiled in (toolkit ") && Contains("runtime"));
  CHECK(lines[1].first == "NCCL");
  CHECK_THAT(lines[1].second, Contains("library"));
  const std::string why = backend_unavailable_reason("nccl");
  CHECK((why.empty() || why.rfind("the nccl backend needs a GPU: ", 0) == 0));
  CHECK(compiled_backends() == std::vector<std::string>{"mpi", "nccl"});
}
#endif
