#include "validate/mpi/mpi_check.hpp"

#include <mpi.h>

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "validate/executor/backend.hpp"

namespace osdp::validate {

void check_mpi(int code, std::string_view call, std::string_view what, int rank) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  const std::string message =
      len > 0 ? std::string(text, static_cast<std::size_t>(std::min(len, MPI_MAX_ERROR_STRING)))
              : fmt::format("MPI error code {}", code);
  throw BackendFailure(fmt::format("rank {}: {} failed in {}: {}", rank, call, what, message));
}

}  // namespace osdp::validate
