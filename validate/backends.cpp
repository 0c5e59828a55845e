// The backends by name: the mpi backend here, the nccl backend in its module (loaded with dlopen on
// first use; the search order is in backends.hpp).
#include "validate/backends.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#ifdef OSDP_HAVE_MPI_BACKEND
#include "validate/cpu/cpu_device.hpp"
#include "validate/mpi/mpi_backend.hpp"
#endif

// Set by validate/CMakeLists.txt for this file; the defaults keep a build without them honest.
#ifndef OSDP_BACKEND_ABI
#define OSDP_BACKEND_ABI "unknown"
#endif
#ifndef OSDP_BUILD_ROOT
#define OSDP_BUILD_ROOT ""
#endif
#ifndef OSDP_MODULE_BUILD_DIR
#define OSDP_MODULE_BUILD_DIR ""
#endif
#ifndef OSDP_MODULE_INSTALL_DIR
#define OSDP_MODULE_INSTALL_DIR ""
#endif
#ifndef OSDP_MODULE_INSTALL_RELATIVE_DIR
#define OSDP_MODULE_INSTALL_RELATIVE_DIR ""
#endif

namespace osdp::validate {
namespace {

namespace fs = std::filesystem;

#ifdef OSDP_HAVE_MPI_BACKEND
class MpiBackend final : public BackendSession {
 public:
  explicit MpiBackend(const BackendOptions& o)
      : options_(o), comm_(MpiCommunicatorOptions{o.timeout_s, {}}) {}
  Communicator& comm() override { return comm_; }
  std::unique_ptr<Device> make_device(bool comm_stream) override {
    auto dev = std::make_unique<CpuDevice>(CpuDeviceOptions{0, comm_stream, comm_.rank()});
    // Longer than the collectives' own timeout, so that a stuck collective is reported by name.
    dev->set_timeout(2 * options_.timeout_s + 5);
    return dev;
  }
  std::string device_name() const override {
    return CpuDevice(CpuDeviceOptions{0, false, comm_.rank()}).name();
  }

 private:
  BackendOptions options_;
  MpiCommunicator comm_;
};
#endif

// ---- finding and loading a module ----------------------------------------------------------------

struct Loaded {
  const BackendModule* module = nullptr;
  std::string why;  // when module is null
};

// The directory of the running executable; empty when /proc/self/exe cannot be read.
fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

bool inside(const fs::path& dir, const fs::path& root) {
  if (dir.empty() || root.empty()) return false;
  const std::string d = dir.lexically_normal().string() + "/", r = root.lexically_normal().string() + "/";
  return d.compare(0, r.size(), r) == 0;
}

// The places to look, in order (backends.hpp), without repeats.
std::vector<fs::path> module_candidates(const std::string& file) {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("OSDP_BACKEND_DIR"); env != nullptr && *env != '\0') {
    dirs.emplace_back(env);
  } else {
    const fs::path exe_dir = executable_dir();
    if (!exe_dir.empty()) dirs.push_back(exe_dir);
    if (inside(exe_dir, OSDP_BUILD_ROOT) && *OSDP_MODULE_BUILD_DIR != '\0')
      dirs.emplace_back(OSDP_MODULE_BUILD_DIR);
    if (!exe_dir.empty() && *OSDP_MODULE_INSTALL_RELATIVE_DIR != '\0')
      dirs.push_back(exe_dir / OSDP_MODULE_INSTALL_RELATIVE_DIR);
    if (*OSDP_MODULE_INSTALL_DIR != '\0') dirs.emplace_back(OSDP_MODULE_INSTALL_DIR);
  }
  std::vector<fs::path> files;
  for (const fs::path& d : dirs) {
    const fs::path f = (d / file).lexically_normal();
    bool seen = false;
    for (const fs::path& g : files) seen = seen || g == f;
    if (!seen) files.push_back(f);
  }
  return files;
}

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlerror";
}

Loaded load_module(const std::string& name) {
  const std::string file = "osdp_backend_" + name + ".so";
  const std::vector<fs::path> candidates = module_candidates(file);
  for (const fs::path& path : candidates) {
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    // Never closed: the CUDA and NCCL libraries it pulls in are not meant to be unloaded.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr)
      return {nullptr,
              fmt::format("the {} backend module {} cannot be loaded: {}", name, path.string(), dl_error())};
    dlerror();
    void* symbol = dlsym(handle, kBackendModuleEntry);
    if (symbol == nullptr)
      return {nullptr, fmt::format("the {} backend module {} has no entry point {}: {}", name, path.string(),
                                   kBackendModuleEntry, dl_error())};
    // POSIX guarantees that a function's address survives the round trip through void*.
    const auto entry = reinterpret_cast<BackendModuleEntry>(symbol);
    const char* module_abi = nullptr;
    const BackendModule* module = entry(backend_module_abi(), &module_abi);
    if (module == nullptr)
      return {
          nullptr,
          fmt::format("the {} backend module {} was built for another osdp ({}) than this program ({}); "
                      "rebuild or reinstall osdp, or point OSDP_BACKEND_DIR at this build's modules",
                      name, path.string(), module_abi != nullptr ? module_abi : "?", backend_module_abi())};
    return {module, ""};
  }
  std::string tried;
  for (const fs::path& p : candidates) tried += (tried.empty() ? "" : ", ") + p.string();
  return {nullptr, fmt::format("the {} backend module {} was not found (looked for {}); build the target "
                               "osdp_backend_{} or install osdp, or set OSDP_BACKEND_DIR to the directory "
                               "that holds it",
                               name, file, tried.empty() ? std::string("nothing") : tried, name)};
}

}  // namespace

const char* backend_module_abi() {
  return OSDP_BACKEND_ABI;
}

const BackendModule* load_backend_module(const std::string& name, std::string& why) {
  static std::mutex mutex;
  static std::map<std::string, Loaded> loaded;  // never emptied: modules stay loaded
  std::lock_guard lock(mutex);
  auto it = loaded.find(name);
  if (it == loaded.end()) it = loaded.emplace(name, load_module(name)).first;
  why = it->second.why;
  return it->second.module;
}

// ---- the backends by name ------------------------------------------------------------------------

std::vector<std::string> compiled_backends() {
  std::vector<std::string> r;
#ifdef OSDP_HAVE_MPI_BACKEND
  r.push_back("mpi");
#endif
#ifdef OSDP_HAVE_NCCL_BACKEND
  r.push_back("nccl");
#endif
  return r;
}

std::string backend_unavailable_reason(const std::string& name) {
  if (name != "mpi" && name != "nccl")
    return fmt::format("unknown backend \"{}\"; expected mpi or nccl", name);
  if (name == "mpi") {
#ifdef OSDP_HAVE_MPI_BACKEND
    return "";
#else
    return "the mpi backend is not built into this osdp (it needs MPI at build time)";
#endif
  }
#ifdef OSDP_HAVE_NCCL_BACKEND
  std::string why;
  const BackendModule* module = load_backend_module("nccl", why);
  return module == nullptr ? why : module->unavailable_reason();
#else
  return "the nccl backend is not built into this osdp (it needs CUDA, NCCL and MPI at build time; see `osdp "
         "--version`)";
#endif
}

std::unique_ptr<BackendSession> open_backend(const std::string& name, const BackendOptions& options) {
  if (const std::string why = backend_unavailable_reason(name); !why.empty()) throw UsageError(why);
#ifdef OSDP_HAVE_MPI_BACKEND
  if (name == "mpi") return std::make_unique<MpiBackend>(options);
#endif
  std::string why;
  const BackendModule* module = load_backend_module(name, why);
  if (module == nullptr) throw UsageError(why);
  return module->open(options);
}

std::vector<std::pair<std::string, std::string>> module_versions() {
#if defined(OSDP_HAVE_NCCL_BACKEND)
  std::string why;
  if (const BackendModule* module = load_backend_module("nccl", why)) return module->versions();
  return {
      {"CUDA", fmt::format("compiled in (toolkit {}), but {}", OSDP_CUDA_TOOLKIT_VERSION, why)},
      {"NCCL", fmt::format("compiled in ({}); the nccl backend module is not loaded", OSDP_NCCL_VERSION)}};
#elif defined(OSDP_CUDA_TOOLKIT_VERSION)
  return {{"CUDA", fmt::format("the CUDA device is built (toolkit {}), for the tests only: the nccl backend "
                               "needs MPI too",
                               OSDP_CUDA_TOOLKIT_VERSION)},
          {"NCCL", "not compiled in (the nccl backend needs MPI too)"}};
#else
  return {{"CUDA", "not compiled in"}, {"NCCL", "not compiled in"}};
#endif
}

}  // namespace osdp::validate
