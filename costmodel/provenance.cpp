#include "costmodel/provenance.hpp"

#include <cstdlib>
#include <ctime>
#include <thread>

#include <sys/utsname.h>
#include <unistd.h>

#include <fmt/format.h>

namespace osdp::costmodel {

std::string tool_version() {
  return OSDP_TOOL_VERSION;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::optional<std::array<double, 3>> load_average() {
  std::array<double, 3> load{};
  if (::getloadavg(load.data(), 3) != 3) return std::nullopt;
  return load;
}

nlohmann::json machine(int ranks, int jobs) {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  utsname u{};
  ::uname(&u);
  nlohmann::json j = {{"hostname", host},
                      {"nproc", std::thread::hardware_concurrency()},
                      {"os", fmt::format("{} {} {}", u.sysname, u.release, u.machine)},
                      {"mpi_ranks", ranks},
                      {"jobs_per_rank", jobs}};
  if (const auto load = load_average()) j["load_average"] = *load;
  return j;
}

}  // namespace osdp::costmodel
