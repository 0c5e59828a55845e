#include "costmodel/provenance.hpp"

#include <ctime>
#include <thread>

#include <sys/utsname.h>
#include <unistd.h>

#include <fmt/format.h>

namespace osdp::costmodel {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json machine(int ranks, int jobs) {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  utsname u{};
  ::uname(&u);
  return {{"hostname", host},
          {"nproc", std::thread::hardware_concurrency()},
          {"os", fmt::format("{} {} {}", u.sysname, u.release, u.machine)},
          {"mpi_ranks", ranks},
          {"jobs_per_rank", jobs}};
}

}  // namespace osdp::costmodel
