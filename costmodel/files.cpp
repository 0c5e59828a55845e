#include "costmodel/files.hpp"

#include <cerrno>
#include <filesystem>

#include <fcntl.h>
#include <unistd.h>

#include "costmodel/error.hpp"

namespace osdp::costmodel {
namespace {

bool write_all(int fd, const std::string& contents) {
  std::size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// The rename is durable once the directory holding the file is synced too.
void sync_directory_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(path, "", "cannot open the file for writing");
  const bool good = write_all(fd, contents) && ::fsync(fd) == 0;
  ::close(fd);
  std::error_code ec;
  if (!good) {
    std::filesystem::remove(tmp, ec);
    throw InputError(path, "", "writing failed");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw InputError(path, "", "cannot move the finished file into place");
  }
  sync_directory_of(path);
}

}  // namespace osdp::costmodel
