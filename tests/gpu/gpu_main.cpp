// The main of the tests that need a GPU: without one (no device, no driver) it prints why and exits
// 77, which CTest reports as skipped (SKIP_RETURN_CODE); with one it runs the Catch2 session.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "validate/cuda/cuda_device.hpp"

int main(int argc, char** argv) {
  const std::string why = osdp::validate::cuda_unavailable_reason();
  if (!why.empty()) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
