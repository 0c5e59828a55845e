#include "validate/torch/torch_job.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "validate/executor/backend.hpp"
#include "validate/mpi/launcher.hpp"

namespace osdp::validate {
namespace {

namespace fs = std::filesystem;

// PYTHONPATH with this osdp's python/ first, when the source tree is still there.
std::string python_path() {
  std::string path;
  const fs::path source = OSDP_PYTHON_SOURCE_DIR;
  std::error_code ec;
  if (fs::exists(source / "osdp" / "torch" / "measure.py", ec)) path = source.string();
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0')
    path = path.empty() ? std::string(old) : path + ":" + old;
  return path;
}

// The child's words: env with the variables the ranks need, then the program.
std::vector<std::string> with_env(const std::vector<std::string>& program) {
  std::vector<std::string> words{"env"};
  if (const std::string p = python_path(); !p.empty()) words.push_back("PYTHONPATH=" + p);
  // One thread per CPU rank unless the user says otherwise (torchrun would set it, with a warning).
  if (std::getenv("OMP_NUM_THREADS") == nullptr) words.push_back("OMP_NUM_THREADS=1");
  words.insert(words.end(), program.begin(), program.end());
  return words;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

ScratchDir::ScratchDir() {
  std::string pattern = (fs::temp_directory_path() / "osdp-torch-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr)
    throw Error(
        fmt::format("cannot make a directory for the torch job in {}", fs::temp_directory_path().string()));
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string default_torch_python() {
  if (const char* p = std::getenv("OSDP_PYTHON"); p != nullptr && *p != '\0') return p;
  const fs::path venv = fs::path(OSDP_VENV_DIR) / "bin" / "python";
  std::error_code ec;
  if (fs::exists(venv, ec)) return venv.string();
  return "python3";
}

std::string torch_unavailable_reason(const std::string& python) {
  std::vector<std::string> words =
      with_env({python, "-c", "import torch, torch.distributed, osdp.torch.measure"});
  // Quietly: the interpreter's own traceback is not the message.
  std::string line;
  for (const auto& w : words) line += fmt::format(" '{}'", w);
  const int status = run_child({"sh", "-c", "exec" + line + " >/dev/null 2>&1"}, "sh");
  if (status == 0) return "";
  return fmt::format(
      "the torch backend needs a Python with torch and the osdp package: \"{}\" cannot import torch and "
      "osdp.torch (exit {}); make one with `bash .ci/setup-python.sh` (build/venv), or name one with "
      "--python or OSDP_PYTHON (`pip install torch ./python` into it)",
      python, status);
}

nlohmann::json run_torch_job(nlohmann::json job, const TorchJobOptions& o) {
  if (o.nproc < 1) throw UsageError(fmt::format("the torch job needs at least 1 rank, not {}", o.nproc));
  const ScratchDir dir;
  const std::string job_path = dir.path() + "/job.json", out_path = dir.path() + "/result.json",
                    status_path = dir.path() + "/status.txt";
  job["timeout_s"] = o.timeout_s;
  job["progress"] = o.progress;
  job["status_file"] = status_path;
  costmodel::write_file_atomic(job_path, job.dump());
  const std::string python = o.python.empty() ? default_torch_python() : o.python;
  const int status =
      run_child(with_env({python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                          std::to_string(o.nproc), "-m", "osdp.torch.measure", job_path, out_path}),
                "torchrun", " (--python or OSDP_PYTHON names the interpreter)");
  if (forwarded_signal() != 0)
    throw BackendFailure(fmt::format("the torch job was interrupted (signal {})", forwarded_signal()));
  std::error_code ec;
  if (status != 0 || !fs::exists(out_path, ec)) {
    std::string last = read_text(status_path);
    while (!last.empty() && (last.back() == '\n' || last.back() == '\r')) last.pop_back();
    throw BackendFailure(fmt::format(
        "the torch job ({} rank{}, {}) failed with exit status {}{}; the ranks' messages are above", o.nproc,
        o.nproc == 1 ? "" : "s", python, status, last.empty() ? "" : fmt::format(", rank 0 at: {}", last)));
  }
  try {
    return nlohmann::json::parse(read_text(out_path));
  } catch (const nlohmann::json::exception& e) {
    throw BackendFailure(fmt::format("the torch job's result {} does not parse: {}", out_path, e.what()));
  }
}

}  // namespace osdp::validate
