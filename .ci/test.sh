#!/usr/bin/env bash
# Runs the whole test suite of a build made by .ci/setup.sh; "no tests" is a failure.
# Usage: bash .ci/test.sh [--sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  # Tests that sweep every bundled model and cluster take a smaller product here (the plain pass
  # runs the whole of it): the sanitizers look for memory errors, which the same paths show.
  export OSDP_SANITIZER_PASS=1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
count=$(ctest --test-dir "$dir" -N | sed -n 's/^Total Tests: \([0-9]*\)$/\1/p')
if [ -z "$count" ] || [ "$count" -eq 0 ]; then
  echo "test: no tests were collected in $dir: failing" >&2
  exit 1
fi
# The torch tests register only where build/venv has torch: on CI they must be there.
torch_tests=$(ctest --test-dir "$dir" -N -L torch | sed -n 's/^Total Tests: \([0-9]*\)$/\1/p')
if [ -z "$torch_tests" ] || [ "$torch_tests" -eq 0 ]; then
  echo "test: the torch tests are not registered in $dir (no torch in build/venv?): failing" >&2
  exit 1
fi
ctest --test-dir "$dir" --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" --timeout 900
