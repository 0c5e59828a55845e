#!/usr/bin/env bash
# Llama-3.1-8B-shaped layers in PyTorch FSDP2 on one GPU against osdp's predictions, in under 10 minutes:
#
#   1. torch's own bf16 GEMMs at the model's linear shapes and its fused attention (SDPA: flash,
#      efficient, cudnn and torch's own choice) at each sequence (validate/gpu_llama/bench.py);
#   2. `osdp calibrate --backend nccl --gemm bf16 -np 1 --model` at the model's shapes, every sequence:
#      osdp's bf16 GEMM calibration (cuBLAS on tensor cores), elementwise passes and Adam;
#   3. `osdp validate experiments/validate-gpu-llama.json --backend torch` with that calibration: 4 of
#      Llama 3.1 8B's layers (experiments/models/llama3.1-8b-4l.json), bf16, micro-batch 1, sequences
#      4096 and 8192, FSDP without and with checkpointing; step time against osdp's simulator, with the
#      spread of the timed steps, and the states at rest;
#   4. the same plans again in validate/gpu_llama/steps.py for what the torch backend does not measure:
#      torch.cuda.max_memory_allocated against osdp's predicted peak, the step split at the optimizer,
#      and (profiled) which attention kernel transformers' model runs;
#   5. `osdp calibrate --backend torch -np 1 --no-models` (torch's elementwise passes and Adam) when time
#      is left, merged with 2's GEMMs; every calibration's prediction of every plan (osdp simulate);
#   6. provenance (nvidia-smi, date, commit, load at the start and the end) and OUT/README.md with the tables.
#
#   validate/gpu-llama.sh [--dry-run] [OUT_DIR]     (default: $OUT when set, else build/gpu-llama)
#
# Needs: the osdp program (build/cli/osdp, or $OSDP), built with CUDA and NCCL for step 2 (without them
# the validation predicts with the h100-8 spec sheet and the README says so); a Python with CUDA torch and
# transformers (build/venv/bin/python, or $OSDP_PYTHON); this tree's python/ (put on PYTHONPATH here).
# No network. Environment:
#   OSDP_GPU_DRY=1 (or --dry-run)  the dry mode, on the CPU: the same phases and command lines on a tiny
#                                  Llama of the same structure (gloo, `calibrate --backend mpi --quick`),
#                                  plus every real plan made, exported and checked against transformers'
#                                  real-size model on the meta device. It measures nothing.
#   OSDP_GPU_LLAMA_CALIBRATION=F   validate with calibration F instead of calibrating (step 2 skipped)
#   OSDP_GPU_LLAMA_BUDGET_S=570    wall-clock seconds for everything: each phase's limit is cut to what is
#                                  left after the later phases' shares, and a phase with no time is skipped
#   OSDP_GPU_LLAMA_CAL_ARGS="..."  more `osdp calibrate` options for step 2 (e.g. "--repeats 3")
#   OSDP_GPU_LLAMA_TORCH_CAL=0     skip step 5's torch calibration
#   OSDP_GPU_LLAMA_COMMIT=HASH     the commit a copy of the tree without .git was made from (provenance)
#
# Exit: osdp validate's (0 within tolerance, 5 over a tolerance, 6 inconclusive: the GPU's spread exceeds
# the tolerance) when every phase ran; 1 when a phase failed or ran out of time (phases.tsv says which);
# 2 when something needed is missing (no GPU, no osdp, no torch with CUDA, no transformers). The dry mode
# exits 0 when every phase ran.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HERE=$ROOT/validate/gpu_llama
DRY=${OSDP_GPU_DRY:-0}
POSITIONAL=()
for arg in "$@"; do
  case $arg in
    --dry-run) DRY=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-llama: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) POSITIONAL+=("$arg") ;;
  esac
done
[ "$DRY" = 1 ] || DRY=0
OUT_DIR=${POSITIONAL[0]:-${OUT:-$ROOT/build/gpu-llama}}
if ! mkdir -p "$OUT_DIR" || ! OUT_DIR=$(cd "$OUT_DIR" && pwd); then
  echo "gpu-llama: cannot make $OUT_DIR" >&2
  exit 2
fi
OSDP=${OSDP:-$ROOT/build/cli/osdp}
if [ -n "${OSDP_PYTHON:-}" ]; then PY=$OSDP_PYTHON
elif [ -x "$ROOT/build/venv/bin/python" ]; then PY=$ROOT/build/venv/bin/python
else PY=python3; fi
EXPERIMENT=$ROOT/experiments/validate-gpu-llama.json
if [ "$DRY" = 1 ]; then
  BUDGET=${OSDP_GPU_LLAMA_BUDGET_S:-1800}
  REQUIRE_GPU=()
  DRY_FLAG=(--dry)
else
  BUDGET=${OSDP_GPU_LLAMA_BUDGET_S:-570}
  REQUIRE_GPU=(--require-gpu)
  DRY_FLAG=()
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
# The built-in models and clusters of this tree, wherever it was copied (osdp's own path to them is the
# source tree it was built from).
export OSDP_DATA_DIR=$ROOT/data${OSDP_DATA_DIR:+:$OSDP_DATA_DIR}
export OSDP_PYTHON=$PY
# osdp.torch.measure builds each model on the CPU before moving it (1.9 B parameters): all the cores.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
cd "$ROOT" || exit 2  # the experiment names its model file from the repository root
START=$(date +%s)
FAILED=()
: > "$OUT_DIR/phases.tsv"

say() { printf '\n== %s\n' "$*"; }
die() { echo "gpu-llama: $*" >&2; exit 2; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$OUT_DIR/phases.tsv"; }

# phase NAME CAP RESERVE NOTE -- COMMAND...: COMMAND under a limit of CAP seconds, cut to what the budget
# leaves after RESERVE seconds for the later phases; output to NAME.log and the terminal; a line in
# phases.tsv. Returns the command's exit (124 when stopped at its limit, 137 when killed 20 s later, 125
# when skipped for lack of time).
phase() {
  local name=$1 cap=$2 reserve=$3 note=$4
  shift 5
  local left=$((BUDGET - ($(date +%s) - START) - reserve))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -lt 10 ]; then
    say "$name: skipped (${left}s left of the budget after the later phases' share)"
    record "$name" 125 0 "skipped: no time left; $note"
    return 125
  fi
  say "$name (at most ${limit}s): $note"
  local t0 rc
  t0=$(date +%s)
  timeout -s INT -k 20 "$limit" "$@" 2>&1 | tee "$OUT_DIR/$name.log"
  rc=${PIPESTATUS[0]}
  record "$name" "$rc" "$(($(date +%s) - t0))" "$note"
  if [ "$DRY" = 0 ] && { [ "$rc" = 124 ] || [ "$rc" = 137 ]; }; then
    # Stopped at its limit: its ranks may still be exiting; the next phase needs the GPU's memory.
    local waited=0
    while [ "$waited" -lt 20 ] && [ -n "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2> /dev/null)" ]; do
      sleep 1
      waited=$((waited + 1))
    done
  fi
  return "$rc"
}

# ---- what the run needs --------------------------------------------------------------------------------
say "preflight ($([ "$DRY" = 1 ] && echo 'DRY RUN on the CPU' || echo 'one GPU'), output in $OUT_DIR)"
[ -x "$OSDP" ] || die "no osdp program at $OSDP: build it (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build) or name it with OSDP=..."
command -v "$PY" > /dev/null || die "no Python at $PY (OSDP_PYTHON names one with CUDA torch and transformers)"
"$OSDP" --version | tee "$OUT_DIR/osdp-version.txt" || die "$OSDP --version failed"
if [ "$DRY" = 0 ]; then
  GPUS=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ' || true)
  [ "${GPUS:-0}" -ge 1 ] || die "no GPU here (nvidia-smi -L lists none): this script times one GPU; OSDP_GPU_DRY=1 or --dry-run runs its dry mode on the CPU"
fi
"$PY" "$HERE/preflight.py" "$OUT_DIR/preflight.json" "${REQUIRE_GPU[@]}" ||
  die "the Python ($PY) lacks what the run needs (above)"
NCCL_CAL=0
if [ "$DRY" = 0 ] && [ -z "${OSDP_GPU_LLAMA_CALIBRATION:-}" ]; then
  if ! "$OSDP" --version | grep -q '^backends:.*nccl'; then
    echo "gpu-llama: warning: this osdp has no nccl backend (CUDA, NCCL and MPI at build time): no bf16 calibration; predictions from the h100-8 spec sheet" >&2
  elif ! "$OSDP" --version | grep -q '^CUDA: compiled in (toolkit .*); runtime '; then
    echo "gpu-llama: warning: osdp cannot load its nccl backend ($("$OSDP" --version | grep '^CUDA:')): no bf16 calibration" >&2
  elif ! command -v mpirun > /dev/null; then
    echo "gpu-llama: warning: no mpirun on PATH (osdp calibrate -np 1 starts itself under it): no bf16 calibration" >&2
  else
    NCCL_CAL=1
  fi
fi
"$PY" "$HERE/provenance.py" --root "$ROOT" --osdp "$OSDP" --phase start --out "$OUT_DIR"

# ---- inputs and plans (CPU) ----------------------------------------------------------------------------
seqs_of() { "$PY" -c 'import json, sys; e = json.load(open(sys.argv[1])); print(",".join(map(str, e.get("axes", {}).get("seq") or [e["base"]["seq"]])))' "$1"; }
model_of() { "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["base"]["model"])' "$1"; }
mapfile -t SEQ_CONFIGS < <("$PY" "$HERE/plans.py" seq-configs --experiment "$EXPERIMENT" --out "$OUT_DIR/inputs")
[ "${#SEQ_CONFIGS[@]}" -ge 1 ] || die "could not write the model's configs per sequence from $EXPERIMENT"
if [ "$DRY" = 1 ]; then
  RUN_EXP=$("$PY" "$HERE/plans.py" dry-inputs --experiment "$EXPERIMENT" --out "$OUT_DIR/inputs/dry") ||
    die "could not write the dry run's inputs"
  phase real-plans 300 600 "the real experiment's plans: osdp sweep, plan, simulate, export, and each export held to transformers' real-size model on the meta device" -- \
    "$PY" "$HERE/plans.py" predict --osdp "$OSDP" --experiment "$EXPERIMENT" --out "$OUT_DIR/real-plans" --export --check-meta ||
    FAILED+=(real-plans)
else
  RUN_EXP=$EXPERIMENT
fi
RUN_MODEL=$(model_of "$RUN_EXP")
RUN_SEQS=$(seqs_of "$RUN_EXP")
GIVEN=()
[ -n "${OSDP_GPU_LLAMA_CALIBRATION:-}" ] && GIVEN=(--calibration "given=$OSDP_GPU_LLAMA_CALIBRATION")
phase plans 120 480 "each unit's plan (osdp plan, simulate), its FSDP2 export, held to transformers' model on the meta device" -- \
  "$PY" "$HERE/plans.py" predict --osdp "$OSDP" --experiment "$RUN_EXP" --out "$OUT_DIR/plans" --export --check-meta "${GIVEN[@]}" ||
  FAILED+=(plans)

# ---- 1. torch's kernels --------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then BENCH_ARGS=(--cpu --repeats 3 --warmup 1); else BENCH_ARGS=(); fi
phase bench 90 420 "torch's bf16 GEMMs and SDPA at the model's shapes, sequences $RUN_SEQS" -- \
  "$PY" "$HERE/bench.py" --model "$RUN_MODEL" --tokens "$RUN_SEQS" --out "$OUT_DIR/bench.json" "${BENCH_ARGS[@]}" ||
  FAILED+=(bench)

# ---- 2. osdp's bf16 calibration ------------------------------------------------------------------------
CAL=
CAL_NAME=spec
MODEL_ARGS=()
for c in "${SEQ_CONFIGS[@]}"; do MODEL_ARGS+=(--model "$c"); done
# shellcheck disable=SC2206  # OSDP_GPU_LLAMA_CAL_ARGS is a list of options
NCCL_CMD=("$OSDP" calibrate --backend nccl --gemm bf16 -np 1 "${MODEL_ARGS[@]}" --out "$OUT_DIR/calibration-bf16.json"
  ${OSDP_GPU_LLAMA_CAL_ARGS:-})
if [ -n "${OSDP_GPU_LLAMA_CALIBRATION:-}" ]; then
  cp "$OSDP_GPU_LLAMA_CALIBRATION" "$OUT_DIR/calibration-given.json" ||
    die "OSDP_GPU_LLAMA_CALIBRATION: cannot read $OSDP_GPU_LLAMA_CALIBRATION"
  CAL=$OUT_DIR/calibration-given.json
  CAL_NAME=given
  record calibrate 0 0 "not run: OSDP_GPU_LLAMA_CALIBRATION=$OSDP_GPU_LLAMA_CALIBRATION"
elif [ "$DRY" = 1 ]; then
  # The real command line gets as far as the GPU it needs (its options parsed); osdp plan reads each
  # --model file; then the same calibration on the CPU backend, --quick (no model shapes).
  say "calibrate: DRY: the real command line, refused for want of a GPU: ${NCCL_CMD[*]}"
  "${NCCL_CMD[@]}" > "$OUT_DIR/calibrate-nccl-dry.log" 2>&1
  rc=$?
  cat "$OUT_DIR/calibrate-nccl-dry.log"
  if [ "$rc" = 0 ] || ! grep -qE 'nccl backend (needs a GPU|is not built|module)' "$OUT_DIR/calibrate-nccl-dry.log"; then
    FAILED+=("calibrate: the real command line exited $rc, not for want of a GPU")
  fi
  for c in "${SEQ_CONFIGS[@]}"; do
    "$OSDP" plan --model "$c" --cluster h100-8 --strategy fsdp --batch 1 --baseline none > /dev/null ||
      FAILED+=("calibrate: osdp does not read $c")
  done
  phase calibrate 120 360 "DRY: osdp calibrate --backend mpi --gemm bf16 --quick -np 1 (the nccl command line checked above)" -- \
    "$OSDP" calibrate --backend mpi --gemm bf16 -np 1 --quick "${MODEL_ARGS[@]}" --out "$OUT_DIR/calibration-bf16.json" &&
    CAL=$OUT_DIR/calibration-bf16.json CAL_NAME=bf16 || FAILED+=(calibrate)
elif [ "$NCCL_CAL" = 1 ]; then
  phase calibrate 200 270 "osdp calibrate --backend nccl --gemm bf16 -np 1 at the model's shapes (sequences $RUN_SEQS)" -- \
    "${NCCL_CMD[@]}" && CAL=$OUT_DIR/calibration-bf16.json CAL_NAME=bf16 || FAILED+=(calibrate)
  [ -n "$CAL" ] || echo "gpu-llama: warning: no bf16 calibration: osdp validate predicts with the h100-8 spec sheet" >&2
else
  FAILED+=(calibrate)
  record calibrate 125 0 "not run: no usable nccl backend (preflight above); predictions from the h100-8 spec sheet"
fi

# ---- 3. osdp validate --backend torch ------------------------------------------------------------------
CAL_ARGS=()
[ -n "$CAL" ] && CAL_ARGS=(--calibration "$CAL")
phase validate 330 90 "osdp validate --backend torch, predicted with calibration '$CAL_NAME'" -- \
  "$OSDP" validate "$RUN_EXP" --backend torch --python "$PY" "${CAL_ARGS[@]}" --out "$OUT_DIR/validate" --force
VAL_RC=$?
case $VAL_RC in 0 | 5 | 6) ;; *) FAILED+=(validate) ;; esac

# ---- 4. peak memory and the step's parts ---------------------------------------------------------------
if [ "$DRY" = 1 ]; then STEP_ARGS=(--warmup 1 --iterations 5); else STEP_ARGS=(--warmup 3 --iterations 10); fi
phase steps 150 20 "each plan again in FSDP2: torch.cuda.max_memory_allocated, forward+backward and optimizer apart, the attention kernels (profiled)" -- \
  "$PY" "$HERE/steps.py" --index "$OUT_DIR/plans/index.json" --out "$OUT_DIR/steps.json" --profile "${STEP_ARGS[@]}" ||
  FAILED+=(steps)

# ---- 5. torch's memory passes and Adam; every calibration's predictions --------------------------------
PRED_CALS=()
[ -n "$CAL" ] && PRED_CALS+=(--calibration "$CAL_NAME=$CAL")
if [ "${OSDP_GPU_LLAMA_TORCH_CAL:-1}" = 1 ]; then
  QUICK=()
  [ "$DRY" = 1 ] && QUICK=(--quick)
  if phase torch-calibrate 90 15 "osdp calibrate --backend torch -np 1 --no-models (torch's elementwise passes and Adam; fp32 GEMMs)" -- \
    "$OSDP" calibrate --backend torch -np 1 --no-models --python "$PY" "${QUICK[@]}" --out "$OUT_DIR/calibration-torch.json"; then
    PRED_CALS+=(--calibration "torch=$OUT_DIR/calibration-torch.json")
    if [ -n "$CAL" ] && "$PY" "$HERE/plans.py" merge --gemm "$CAL" --rest "$OUT_DIR/calibration-torch.json" \
      --out "$OUT_DIR/calibration-merged.json"; then
      PRED_CALS+=(--calibration "$CAL_NAME+torch=$OUT_DIR/calibration-merged.json")
    fi
  fi
fi
phase predictions 60 5 "every plan predicted with every calibration (osdp plan, simulate)" -- \
  "$PY" "$HERE/plans.py" predict --osdp "$OSDP" --experiment "$RUN_EXP" --out "$OUT_DIR/predictions" "${PRED_CALS[@]}" ||
  FAILED+=(predictions)

# ---- 6. provenance at the end, the README ----------------------------------------------------------------
"$PY" "$HERE/provenance.py" --root "$ROOT" --osdp "$OSDP" --phase end --out "$OUT_DIR"
say "README ($OUT_DIR/README.md)"
"$PY" "$HERE/report.py" --out "$OUT_DIR" --validate-calibration "$CAL_NAME" "${DRY_FLAG[@]}" ||
  FAILED+=(report)
echo
echo "gpu-llama: $(($(date +%s) - START)) s; phases (phase, exit, seconds):"
cut -f1-3 "$OUT_DIR/phases.tsv" | sed 's/^/  /'
if [ "${#FAILED[@]}" -gt 0 ]; then
  echo "gpu-llama: failed or out of time: ${FAILED[*]} (see $OUT_DIR/<phase>.log)" >&2
  exit 1
fi
if [ "$DRY" = 1 ]; then
  echo "gpu-llama: dry run complete: every phase ran (osdp validate exited $VAL_RC on the tiny model, whose times mean nothing)"
  exit 0
fi
case $VAL_RC in
  0) echo "gpu-llama: every prediction within the experiment's tolerances" ;;
  5) echo "gpu-llama: some predictions missed the tolerances (README.md, validate/summary.json)" ;;
  6) echo "gpu-llama: inconclusive: the GPU's step-to-step spread exceeds the time tolerance" ;;
esac
exit "$VAL_RC"
