#!/usr/bin/env bash
# Packs osdp for a GPU machine that lacks this one's build dependencies (fmt, Open MPI's C++ library):
# a portable build (no -march=native) of the program and its nccl backend module, the two shared
# libraries such a machine may lack, and run.sh, which finds CUDA, cuBLAS and NCCL there (the CUDA
# toolkit's, else a Python wheel's) and runs validate/gpu-smoke.sh from the tree beside the bundle.
#
#   validate/gpu-bundle.sh [BUNDLE_DIR]       (default: .gpu, about 6 MB; a folder at the tree's root:
#                                              run.sh takes the tree to be its parent)
#
# On the GPU machine, from a copy of this tree with the bundle at BUNDLE_DIR:
#
#   BUNDLE_DIR/run.sh OUT_DIR [LIMIT_S]       (default LIMIT_S 530: osdp validate is stopped with
#                                              SIGINT then, its finished rows kept for --resume)
#
# run.sh writes OUT_DIR/smoke/provenance.txt (date, load, GPU, driver, mpirun, the libraries found,
# osdp --version), smoke.log (timestamped), and validate/gpu-smoke.sh's outputs under OUT_DIR/smoke/run,
# then packs OUT_DIR/smoke into OUT_DIR/smoke.tgz. The target needs mpirun (Open MPI 4), a CUDA 13
# driver and runtime, cuBLAS 13 and NCCL 2; python3 for the tables.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${1:-$ROOT/.gpu}
BUILD=$ROOT/build-portable
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DOSDP_NATIVE=OFF -DOSDP_BUILD_BENCHMARKS=OFF \
  -DOSDP_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target osdp osdp_backend_nccl
"$BUILD/cli/osdp" --version | grep -q '^backends:.*nccl' ||
  { echo "gpu-bundle: this build has no nccl backend (CUDA, NCCL and MPI are needed)" >&2; exit 2; }
mkdir -p "$BUNDLE/lib"
cp "$BUILD/cli/osdp" "$BUILD/cli/osdp_backend_nccl.so" "$BUNDLE/"
strip "$BUNDLE/osdp" "$BUNDLE/osdp_backend_nccl.so"
for lib in libfmt.so libmpi_cxx.so; do
  path=$(ldd "$BUILD/cli/osdp" | awk -v l="$lib" 'index($1, l) == 1 { print $3 }')
  [ -n "$path" ] && cp -L "$path" "$BUNDLE/lib/"
done
cat >"$BUNDLE/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs validate/gpu-smoke.sh with this bundle's osdp (see validate/gpu-bundle.sh). Usage: run.sh OUT_DIR [LIMIT_S]
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$G/.." && pwd)
OUT_DIR=${1:?usage: run.sh OUT_DIR [LIMIT_S]}
S=$OUT_DIR/smoke
mkdir -p "$S" "$ROOT/build/cli"
cp "$G/osdp" "$G/osdp_backend_nccl.so" "$ROOT/build/cli/"
libdir() {  # the CUDA toolkit's copy of a library, else the first one found
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
    [ -e "$d/$1" ] && { echo "$d"; return; }
  done
  find /opt /usr/local /usr/lib -name "$1" 2>/dev/null | head -1 | xargs -r dirname
}
L=""
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  d=$(libdir "$lib")
  echo "$lib: ${d:-not found}"
  [ -n "$d" ] && L="$L:$d"
done >"$S/libraries.txt"
export LD_LIBRARY_PATH="${L#:}:${LD_LIBRARY_PATH:-}:$G/lib" OSDP_DATA_DIR=$ROOT/data PYTHONUNBUFFERED=1
{
  echo "date: $(date -u +%FT%TZ)"
  echo "uptime: $(uptime)"
  echo "cores: $(nproc); kernel: $(uname -r)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  command -v mpirun && mpirun --version | head -1
  cat "$S/libraries.txt"
  ldd "$ROOT/build/cli/osdp" "$ROOT/build/cli/osdp_backend_nccl.so" | grep "not found"
  "$ROOT/build/cli/osdp" --version
} >"$S/provenance.txt" 2>&1
cat "$S/provenance.txt"
start=$(date +%s)
OSDP_SMOKE_TESTS=${OSDP_SMOKE_TESTS:-0} OSDP_SMOKE_BATCHES=${OSDP_SMOKE_BATCHES:-1,2} \
  timeout --signal=INT --kill-after=15 "${2:-530}" "$ROOT/validate/gpu-smoke.sh" "$ROOT/build" "$S/run" 2>&1 |
  tee "$S/smoke.log"
rc=${PIPESTATUS[0]}
{ echo "exit: $rc"; echo "seconds: $(($(date +%s) - start))"; echo "end: $(date -u +%FT%TZ)"; echo "uptime: $(uptime)"; } |
  tee -a "$S/provenance.txt"
tar czf "$OUT_DIR/smoke.tgz" -C "$OUT_DIR" smoke && rm -rf "$S"
exit "$rc"
RUN
chmod +x "$BUNDLE/run.sh"
echo "gpu-bundle: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)): copy the tree with it, then run $BUNDLE/run.sh OUT_DIR"
