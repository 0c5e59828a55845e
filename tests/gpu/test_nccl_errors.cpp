// The nccl backend's error mapping and version formatting, without a GPU (or MPI): NCCL's ncclGetErrorString,
// ncclGetLastError and ncclGetVersion need no device (this test runs wherever CUDA is compiled in).
//
// Version codes follow nccl.h's NCCL_VERSION(X, Y, Z): X*1000 + Y*100 + Z while X <= 2 and Y <= 8,
// X*10000 + Y*100 + Z after; so 2.8.4 is 2804 and 2.28.3 is 22803, and the two ranges do not overlap
// (old codes are below 10000, new ones from 20900 on).
#include <iterator>
#include <set>
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "validate/cuda/nccl_backend.hpp"

namespace {

using namespace osdp::validate;

constexpr ncclResult_t kAllResults[] = {ncclSuccess,       ncclUnhandledCudaError, ncclSystemError,
                                        ncclInternalError, ncclInvalidArgument,    ncclInvalidUsage,
                                        ncclRemoteError,   ncclInProgress};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("every NCCL result has its enumerator's name", "[nccl][gpu]") {
  CHECK(nccl_result_name(ncclSuccess) == "ncclSuccess");
  CHECK(nccl_result_name(ncclUnhandledCudaError) == "ncclUnhandledCudaError");
  CHECK(nccl_result_name(ncclSystemError) == "ncclSystemError");
  CHECK(nccl_result_name(ncclInternalError) == "ncclInternalError");
  CHECK(nccl_result_name(ncclInvalidArgument) == "ncclInvalidArgument");
  CHECK(nccl_result_name(ncclInvalidUsage) == "ncclInvalidUsage");
  CHECK(nccl_result_name(ncclRemoteError) == "ncclRemoteError");
  CHECK(nccl_result_name(ncclInProgress) == "ncclInProgress");
  CHECK(nccl_result_name(ncclNumResults) == "ncclNumResults");
  // A value NCCL does not define (a newer library's) still gets a name.
  CHECK(nccl_result_name(static_cast<ncclResult_t>(42)) == "ncclResult_t(42)");

  std::set<std::string> names;
  for (const ncclResult_t r : kAllResults) names.insert(nccl_result_name(r));
  CHECK(names.size() == std::size(kAllResults));
}

TEST_CASE("ncclGetErrorString and ncclGetLastError work without a GPU", "[nccl][gpu]") {
  for (const ncclResult_t r : kAllResults) {
    const char* text = ncclGetErrorString(r);
    REQUIRE(text != nullptr);
    CHECK(std::string(text).size() > 3);
  }
  CHECK(ncclGetLastError(nullptr) != nullptr);
  int version = 0;
  REQUIRE(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version >= NCCL_VERSION(2, 14, 0));
}

TEST_CASE("an NCCL failure message names the rank, the call, the operation and the error", "[nccl][gpu]") {
  const std::string what = "all-gather layer3.mlp slice 0";
  const std::string m = nccl_failure_message(ncclRemoteError, "ncclAllGather", what, 3,
                                             "socketProgress: Connection closed by remote peer");
  CHECK(contains(m, "rank 3"));
  CHECK(contains(m, "ncclAllGather"));
  CHECK(contains(m, what));
  CHECK(contains(m, "ncclRemoteError"));
  CHECK(contains(m, ncclGetErrorString(ncclRemoteError)));
  CHECK(contains(m, "Connection closed by remote peer"));
  CHECK(m.rfind("rank 3: ", 0) == 0);

  // Without a last error there is no empty "()" part.
  const std::string bare = nccl_failure_message(ncclSystemError, "ncclCommInitRankConfig",
                                                "creating the NCCL communicator (world)", 0, "");
  CHECK(contains(bare, "ncclSystemError"));
  CHECK(contains(bare, "creating the NCCL communicator (world)"));
  CHECK_FALSE(contains(bare, "last NCCL error"));
  CHECK_FALSE(contains(bare, "()"));
}

TEST_CASE("check_nccl maps results to osdp's errors", "[nccl][gpu]") {
  CHECK_NOTHROW(check_nccl(ncclSuccess, "ncclAllReduce", "all-reduce x", 0));

  // A bad argument or usage is a bug in the call: UsageError (not a BackendFailure).
  for (const ncclResult_t r : {ncclInvalidArgument, ncclInvalidUsage}) {
    CHECK_THROWS_AS(check_nccl(r, "ncclAllReduce", "all-reduce x", 1), osdp::UsageError);
    bool backend = false;
    try {
      check_nccl(r, "ncclAllReduce", "all-reduce x", 1);
    } catch (const BackendFailure&) {
      backend = true;
    } catch (const osdp::UsageError& e) {
      CHECK(contains(e.what(), "rank 1"));
      CHECK(contains(e.what(), nccl_result_name(r)));
    }
    CHECK_FALSE(backend);
  }
  // Everything else, ncclInProgress included (a nonblocking call is polled before it is checked).
  for (const ncclResult_t r :
       {ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ncclRemoteError, ncclInProgress}) {
    CHECK_THROWS_AS(check_nccl(r, "ncclReduceScatter", "reduce-scatter y", 2), BackendFailure);
    CHECK_THROWS_WITH(check_nccl(r, "ncclReduceScatter", "reduce-scatter y", 2, "peer gone"),
                      Catch::Contains("rank 2") && Catch::Contains("ncclReduceScatter") &&
                          Catch::Contains("reduce-scatter y") && Catch::Contains(nccl_result_name(r)) &&
                          Catch::Contains("peer gone"));
  }
}

TEST_CASE("NCCL version codes format as major.minor.patch", "[nccl][gpu]") {
  CHECK(format_nccl_version(22803) == "2.28.3");
  CHECK(format_nccl_version(22809) == "2.28.9");
  CHECK(format_nccl_version(21003) == "2.10.3");
  CHECK(format_nccl_version(20901) == "2.9.1");
  CHECK(format_nccl_version(30000) == "3.0.0");
  // Old-style codes (up to 2.8): X*1000 + Y*100 + Z.
  CHECK(format_nccl_version(2804) == "2.8.4");
  CHECK(format_nccl_version(2708) == "2.7.8");
  CHECK(format_nccl_version(2406) == "2.4.6");
  // The macro itself, on both sides of the switch, and the header this was built against.
  CHECK(format_nccl_version(NCCL_VERSION(2, 8, 4)) == "2.8.4");
  CHECK(format_nccl_version(NCCL_VERSION(2, 9, 6)) == "2.9.6");
  CHECK(format_nccl_version(NCCL_VERSION(2, 28, 3)) == "2.28.3");
  CHECK(format_nccl_version(NCCL_VERSION_CODE) ==
        fmt::format("{}.{}.{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
  CHECK(contains(format_nccl_version(0), "unknown"));
  CHECK(contains(format_nccl_version(-3), "unknown"));
}

TEST_CASE("local_rank_of_world needs MPI running", "[nccl][gpu]") {
  // This executable never starts MPI: the call says what is missing instead of crashing in MPI.
  CHECK_THROWS_WITH(local_rank_of_world(), Catch::Contains("MPI is not running"));
}
