#!/usr/bin/env bash
# Installs what is missing (Debian packages), then configures and builds osdp into build/.
# Usage: bash .ci/setup.sh [--sanitize]
#   --sanitize: build-asan/, a clang Debug build at -O1 with ASan+UBSan whose libraries are also
#   instrumented for libFuzzer, so that the fuzz harnesses (tests/fuzz/run.sh --build build-asan) link
#   the same objects the sanitized suite ran: one build for both. No CUDA there: CI has no GPU, and
#   the plain build compiles the CUDA code.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake git python3 python3-dev python3-venv python3-matplotlib libeigen3-dev libboost-graph-dev
          nlohmann-json3-dev catch2 libopenmpi-dev openmpi-bin libcli11-dev libfmt-dev procps)
bash .ci/install-packages.sh setup "${packages[@]}"

# build/venv: torch and the osdp package (before configuring: the torch tests are registered when it
# is there).
bash .ci/setup-python.sh

jobs=$(nproc 2>/dev/null || echo 2)
if [ "${1:-}" = "--sanitize" ]; then
  bash .ci/install-packages.sh setup clang libclang-rt-dev
  CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DOSDP_SANITIZE=ON -DOSDP_BUILD_FUZZERS=ON \
    -DOSDP_ENABLE_CUDA=OFF -DOSDP_BUILD_BENCHMARKS=OFF -DOSDP_VENV="$PWD/build/venv" >/dev/null
  cmake --build build-asan -j"$jobs"
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$jobs"
fi
