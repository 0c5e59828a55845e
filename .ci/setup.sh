#!/usr/bin/env bash
# Installs what is missing (Debian packages), then configures and builds osdp into build/.
# Usage: bash .ci/setup.sh [--sanitize]   (--sanitize: a Debug build at -O1 with ASan+UBSan in build-asan/)
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
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DOSDP_SANITIZE=ON -DOSDP_BUILD_BENCHMARKS=OFF \
    -DOSDP_VENV="$PWD/build/venv" >/dev/null
  cmake --build build-asan -j"$jobs"
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$jobs"
fi
