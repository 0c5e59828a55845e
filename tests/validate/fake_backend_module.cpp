// A stand-in backend module for tests/validate/test_backend_module.cpp, built like the nccl module
// (osdp_add_backend_module: hidden visibility, its own copy of the static osdp code) but with no
// CUDA: a CPU device and a one-rank communicator, and errors thrown from inside on request.
//   FAKE_OTHER_BUILD  a build key not the program's: a module "of another build";
//   FAKE_NO_ENTRY     no entry point at all.
#include <cstring>
#include <memory>

#include "costmodel/error.hpp"
#include "validate/backends.hpp"
#include "validate/cpu/cpu_device.hpp"
#include "validate/executor/self_communicator.hpp"

#ifdef FAKE_OTHER_BUILD
#define FAKE_ABI_SUFFIX " (another build)"
#else
#define FAKE_ABI_SUFFIX ""
#endif

namespace {

using namespace osdp::validate;

class FakeSession final : public BackendSession {
 public:
  Communicator& comm() override { return comm_; }
  std::unique_ptr<Device> make_device(bool comm_stream) override {
    return std::make_unique<CpuDevice>(CpuDeviceOptions{0, comm_stream, 0});
  }
  std::string device_name() const override { return "fake: " + device_.name(); }

 private:
  CpuDevice device_{CpuDeviceOptions{0, false, 0}};
  SelfCommunicator comm_{device_};
};

// open() throws by the timeout asked for: -1 OutOfMemory, -2 BackendFailure, -3 UsageError.
class FakeModule final : public BackendModule {
 public:
  std::string unavailable_reason() const override { return ""; }
  std::vector<std::pair<std::string, std::string>> versions() const override { return {{"FAKE", "1.0"}}; }
  std::unique_ptr<BackendSession> open(const BackendOptions& options) const override {
    if (options.timeout_s == -1) throw OutOfMemory("fake module: out of memory");
    if (options.timeout_s == -2) throw BackendFailure("fake module: backend failure");
    if (options.timeout_s == -3) throw osdp::UsageError("fake module: usage error");
    return std::make_unique<FakeSession>();
  }
};

}  // namespace

#ifndef FAKE_NO_ENTRY
extern "C" __attribute__((visibility("default"))) const osdp::validate::BackendModule* osdp_backend_module(
    const char* program_abi, const char** module_abi) {
  static const FakeModule module;
  static const char* const abi = OSDP_BACKEND_ABI FAKE_ABI_SUFFIX;
  if (module_abi != nullptr) *module_abi = abi;
  if (program_abi == nullptr || std::strcmp(program_abi, abi) != 0) return nullptr;
  return &module;
}
#else
// Something to export, so that the module is otherwise a valid one.
extern "C" __attribute__((visibility("default"))) int osdp_fake_backend_without_entry() {
  return 0;
}
#endif
