#!/usr/bin/env bash
# Builds osdp's libFuzzer harnesses (clang, ASan+UBSan, in build-fuzz/) and runs each reader's for a
# bounded time, starting from seed corpora of osdp's own files; fails on any finding (a crash, a
# sanitizer report, a leak, an input over the time or memory limit, a written file that does not
# read back). Findings are kept as build-fuzz/findings/<kind>-*; run a harness on one to reproduce.
#
#   bash tests/fuzz/run.sh [--seconds N] [--build DIR]
#
# --seconds: per harness (5 of them), default 12: about a minute in all, as CI runs it. Longer runs
# are the same command: --seconds 600. The corpora grow in DIR/corpus/<kind>/ between runs.
# --build: a folder configured here the first time (clang, RelWithDebInfo, the harnesses alone), or
# one already configured with OSDP_BUILD_FUZZERS=ON, used as it is: CI passes build-asan, the
# sanitizer build of .ci/setup.sh --sanitize, whose libraries are instrumented for both.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=12
build=build-fuzz
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tests/fuzz/run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$seconds" in ''|*[!0-9]*) echo "tests/fuzz/run.sh: --seconds wants a whole number" >&2; exit 2 ;; esac

# clang and its libFuzzer runtime (Debian: clang, libclang-rt-dev).
bash .ci/install-packages.sh fuzz clang libclang-rt-dev

kinds=(model cluster calibration plan experiment)
if [ -f "$build/CMakeCache.txt" ] && ! grep -q '^OSDP_BUILD_FUZZERS:BOOL=ON$' "$build/CMakeCache.txt"; then
  echo "tests/fuzz/run.sh: $build is a build without OSDP_BUILD_FUZZERS=ON: pass another --build" >&2
  exit 2
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOSDP_BUILD_FUZZERS=ON \
    -DOSDP_BUILD_TESTS=OFF -DOSDP_BUILD_BENCHMARKS=OFF -DOSDP_ENABLE_MPI=OFF -DOSDP_ENABLE_CUDA=OFF \
    -DOSDP_WARNINGS_AS_ERRORS=OFF >/dev/null
fi
targets=()
for k in "${kinds[@]}"; do targets+=("fuzz_$k"); done
cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}"

# Seeds: the bundled files of each kind (tests/fuzz/seeds/ holds a plan, which nothing bundles).
seeds() {
  case "$1" in
    model) ls data/models/*.json ;;
    cluster) ls data/clusters/*.json ;;
    calibration) ls data/results/lab/*/calibration.json ;;
    plan) ls tests/fuzz/seeds/*.plan.json ;;
    experiment) ls experiments/*.json ;;
  esac
}

failed=0
mkdir -p "$build/findings"
for k in "${kinds[@]}"; do
  corpus="$build/corpus/$k"
  mkdir -p "$corpus"
  seeds "$k" | while read -r f; do cp "$f" "$corpus/seed-$(basename "$(dirname "$f")")-$(basename "$f")"; done
  log="$build/findings/$k.log"
  echo "fuzz: $k for ${seconds} s ($(ls "$corpus" | wc -l) inputs in the corpus)"
  if "$build/tests/fuzz/fuzz_$k" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$build/findings/$k-" "$corpus" >"$log" 2>&1; then
    grep -E "^stat::number_of_executed_units" "$log" | sed "s/^/fuzz: $k: /" || true
  else
    echo "fuzz: $k: FINDING (log: $log)" >&2
    grep -E "osdp fuzz finding|ERROR: |SUMMARY: |Test unit written" "$log" | head -20 >&2 || true
    failed=1
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: findings above; reproduce with $build/tests/fuzz/fuzz_<kind> <file>" >&2
  exit 1
fi
echo "fuzz: no findings"
