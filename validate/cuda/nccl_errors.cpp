// The nccl backend's error mapping (nccl_backend.hpp): NCCL results to names, messages and osdp's
// exceptions, and NCCL's version codes to text. Pure: no GPU and no communicator needed.
#include "validate/cuda/nccl_backend.hpp"

#include <utility>

#include <fmt/format.h>

namespace osdp::validate {

std::string nccl_result_name(ncclResult_t r) {
  static constexpr std::pair<ncclResult_t, const char*> kNames[] = {
      {ncclSuccess, "ncclSuccess"},
      {ncclUnhandledCudaError, "ncclUnhandledCudaError"},
      {ncclSystemError, "ncclSystemError"},
      {ncclInternalError, "ncclInternalError"},
      {ncclInvalidArgument, "ncclInvalidArgument"},
      {ncclInvalidUsage, "ncclInvalidUsage"},
      {ncclRemoteError, "ncclRemoteError"},
      {ncclInProgress, "ncclInProgress"},
      {ncclNumResults, "ncclNumResults"}};
  for (const auto& [result, name] : kNames) {
    if (result == r) return name;
  }
  return fmt::format("ncclResult_t({})", static_cast<int>(r));
}

std::string nccl_failure_message(ncclResult_t r, std::string_view call, std::string_view what, int rank,
                                 std::string_view last_error) {
  const char* text = ncclGetErrorString(r);
  std::string message = fmt::format("rank {}: {} failed during {}: {}: {}", rank, call, what,
                                    nccl_result_name(r), text != nullptr ? text : "no description");
  if (!last_error.empty()) message += fmt::format(" (last NCCL error: {})", last_error);
  return message;
}

void check_nccl(ncclResult_t r, std::string_view call, std::string_view what, int rank,
                std::string_view last_error) {
  if (r == ncclSuccess) return;
  std::string message = nccl_failure_message(r, call, what, rank, last_error);
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) throw UsageError(message);
  throw BackendFailure(message);
}

std::string format_nccl_version(int code) {
  if (code <= 0) return fmt::format("unknown (version code {})", code);
  // nccl.h: NCCL_VERSION(X,Y,Z) is X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z from 2.9 on.
  // The old codes stay below 10000 (2.8.x is 28xx) and the new ones start at 20900.
  if (code < 10000) return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
}

}  // namespace osdp::validate
