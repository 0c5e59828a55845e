// How much of a data-driven test's product to run. The sanitizer pass of CI (.ci/test.sh --sanitize
// sets OSDP_SANITIZER_PASS) looks for memory errors, which the same code paths show on a smaller
// product; the plain pass runs the whole of it.
#pragma once

#include <cstdlib>

namespace osdp::testing {

inline bool sanitizer_pass() {
  return std::getenv("OSDP_SANITIZER_PASS") != nullptr;
}

// `full` in the plain pass, `reduced` in the sanitizer pass.
template <class T>
T test_size(T full, T reduced) {
  return sanitizer_pass() ? reduced : full;
}

}  // namespace osdp::testing
