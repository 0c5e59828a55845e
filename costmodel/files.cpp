#include "costmodel/files.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "costmodel/error.hpp"

namespace osdp::costmodel {

void write_file_atomic(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, "", "cannot open the file for writing");
    out << contents;
    out.flush();
    if (!out) throw InputError(path, "", "writing failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw InputError(path, "", "cannot move the finished file into place");
  }
}

}  // namespace osdp::costmodel
