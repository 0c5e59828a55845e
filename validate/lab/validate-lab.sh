#!/usr/bin/env bash
# validate-lab.sh — the lab validation in one command: a lab of NODES x RANKS at RATE comes up (2 x 1
# unless told), `osdp calibrate` measures it (collectives, per node level when a node has several
# ranks, and the experiment's models' GEMMs), `osdp validate` runs the experiment with that
# calibration, and the lab is removed (also on Ctrl-C or error).
#
#   validate-lab.sh [--rate 1gbit] [--nodes 2] [--ranks-per-node 1] [--topology pair|switch]
#                   [--compute real|emulate] [--experiment experiments/lab-validate.json] [--out DIR]
#                   [--name NAME] [--calibration FILE] [--resume] [--hybrid] [--probe-batch B]
#                   [-- VALIDATE-OPTIONS...]
#
#   --rate         the link rate (tc's units: 1gbit, 200mbit)
#   --nodes, --ranks-per-node, --topology   the lab's shape (osdp-lab.sh up); shared memory inside a
#                  node, the shaped TCP link between; with several ranks a node, the calibration fits
#                  the node rings (osdp calibrate --per-node RANKS)
#   --compute      emulate: every compute task waits its calibrated time (osdp validate --compute
#                  emulate), so that 4 or 8 ranks fit on 2 cores and the communication is what is
#                  measured; the lab's calibration then measures the collectives only (osdp calibrate
#                  --compute emulate) and takes its compute figures from a calibration of 2 ranks on
#                  this machine's 2 cores, outside the lab (OUT/compute-calibration.json), since 8
#                  ranks' GEMM sweeps would time their contention for the cores
#   --experiment   the experiment file (default: experiments/lab-validate.json beside this script)
#   --out          results directory (default: results/lab-validate/RATE); the calibration goes
#                  to OUT/calibration.json, the machine's load before and after to OUT/load.txt
#   --calibration  use this calibration instead of measuring one (it must come from the same lab
#                  settings)
#   --resume       keep the plans already in OUT/rows.jsonl (osdp validate --resume); otherwise a
#                  results directory with finished rows is started again (--force)
#   --hybrid       the pipeline experiment instead (experiments/lab-validate-hybrid.json): 2 stages,
#                  one per node, so that each micro-batch's activation and gradient cross the link,
#                  GPipe and 1F1B; OUT defaults to results/lab-validate-hybrid/RATE
#   --probe-batch  also probe the experiment's models at micro-batch B (osdp calibrate --probe-batch;
#                  repeatable), so that each is priced at its own level; B one the experiment does not
#                  run
#   -- ...         more options for osdp validate, e.g. -- --warmup 1 --iterations 5
#
# Environment: OSDP (the osdp program; default: osdp on PATH), OSDP_DATA_DIR as for osdp.
# Exit code: osdp validate's (0 within the experiment's tolerances, 5 over them, 6 inconclusive:
# the machine's spread exceeds the time tolerance), 2 bad usage or
# no right to make network namespaces (osdp-lab.sh says which).
set -euo pipefail

PROG=${0##*/}
HERE=$(cd "$(dirname "$0")" && pwd)
LAB=$HERE/osdp-lab.sh
RATE=1gbit
EXPERIMENT=$HERE/../../experiments/lab-validate.json
OUT=
NAME=labval
CALIBRATION=
MODE=--force
HYBRID=0
NODES=2
RANKS=1
TOPOLOGY=
COMPUTE=real
VALIDATE_ARGS=()
PROBE_ARGS=()
OSDP=${OSDP:-osdp}

die() {
  echo "$PROG: $*" >&2
  exit 2
}

while (($#)); do
  case $1 in
    --rate) RATE=${2:?--rate needs a value}; shift 2 ;;
    --experiment) EXPERIMENT=${2:?--experiment needs a value}; shift 2 ;;
    --out) OUT=${2:?--out needs a value}; shift 2 ;;
    --name) NAME=${2:?--name needs a value}; shift 2 ;;
    --calibration) CALIBRATION=${2:?--calibration needs a value}; shift 2 ;;
    --resume) MODE=--resume; shift ;;
    --hybrid) HYBRID=1; shift ;;
    --nodes) NODES=${2:?--nodes needs a value}; shift 2 ;;
    --ranks-per-node) RANKS=${2:?--ranks-per-node needs a value}; shift 2 ;;
    --topology) TOPOLOGY=${2:?--topology needs a value}; shift 2 ;;
    --compute) COMPUTE=${2:?--compute needs a value}; shift 2 ;;
    --probe-batch) PROBE_ARGS+=(--probe-batch "${2:?--probe-batch needs a value}"); shift 2 ;;
    --) shift; VALIDATE_ARGS=("$@"); break ;;
    -h | --help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option \"$1\" (try $PROG --help)" ;;
  esac
done

[[ -f $EXPERIMENT ]] || die "--experiment: no file $EXPERIMENT"
[[ $COMPUTE == real || $COMPUTE == emulate ]] || die "--compute: real or emulate, not \"$COMPUTE\""
[[ $NODES =~ ^[0-9]+$ && $RANKS =~ ^[0-9]+$ && $NODES -ge 2 && $RANKS -ge 1 ]] ||
  die "--nodes (2 or more) and --ranks-per-node (1 or more) are whole numbers"
NP=$((NODES * RANKS))
OSDP=$(command -v "$OSDP") || die "no osdp program (set OSDP or put osdp on PATH)"
if ((HYBRID)); then
  EXPERIMENT=$HERE/../../experiments/lab-validate-hybrid.json
  [[ -n $OUT ]] || OUT=results/lab-validate-hybrid/$RATE
fi
[[ -n $OUT ]] || OUT=results/lab-validate/$RATE
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
EXPERIMENT=$(realpath "$EXPERIMENT")
[[ -z $CALIBRATION ]] || CALIBRATION=$(realpath "$CALIBRATION")

# The models whose GEMMs calibration times: the experiment's model axis, or its base model.
mapfile -t MODELS < <(python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))
ms = e.get("axes", {}).get("model") or [e["base"]["model"]]
print("\n".join(ms))' "$EXPERIMENT")
MODEL_ARGS=()
for m in "${MODELS[@]}"; do MODEL_ARGS+=(--model "$m"); done
# The calibration's probes (whole steps of probe-3x320) run on the experiment's cluster.
MODEL_ARGS+=(--probe-cluster "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["base"]["cluster"])' "$EXPERIMENT")")

# Open MPI as root needs these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

load() { echo "$1 $(date -u +%FT%TZ) loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/load.txt"; }
load before

# Inside node 0 of the lab (osdp-lab.sh run exports OSDP_LAB_MPIRUN_ARGS).
inner=$(
  cat <<'EOF'
set -euo pipefail
if [[ -z $CALIBRATION ]]; then
  CALIBRATION=$OUT/calibration.json
  extra=()
  if ((RANKS > 1)); then extra+=(--per-node "$RANKS"); fi
  if [[ $COMPUTE == emulate ]]; then extra+=(--compute emulate --compute-from "$OUT/compute-calibration.json"); fi
  "$OSDP" calibrate --backend mpi -np "$NP" --mpirun-args "$OSDP_LAB_MPIRUN_ARGS" "${MODEL_ARGS[@]}" \
    "${PROBE_ARGS[@]}" --max-size 16MiB "${extra[@]}" --out "$CALIBRATION"
fi
"$OSDP" validate "$EXPERIMENT" -np "$NP" --calibration "$CALIBRATION" --mpirun-args "$OSDP_LAB_MPIRUN_ARGS" \
  --compute "$COMPUTE" --out "$OUT" --tasks $MODE "${VALIDATE_ARGS[@]}"
EOF
)
# Emulated compute: the compute figures from 2 ranks on the machine's cores, outside the lab.
if [[ $COMPUTE == emulate && -z $CALIBRATION ]]; then
  "$OSDP" calibrate --backend mpi -np 2 "${MODEL_ARGS[@]}" --max-size 1MiB --probes off --quiet \
    --out "$OUT/compute-calibration.json" >"$OUT/compute-calibration.txt"
fi
SHAPE=(--nodes "$NODES" --ranks-per-node "$RANKS")
[[ -z $TOPOLOGY ]] || SHAPE+=(--topology "$TOPOLOGY")
status=0
OSDP=$OSDP OUT=$OUT EXPERIMENT=$EXPERIMENT CALIBRATION=$CALIBRATION MODE=$MODE NP=$NP RANKS=$RANKS \
  COMPUTE=$COMPUTE "$LAB" run "${SHAPE[@]}" --rate "$RATE" --name "$NAME" -- \
  bash -c "MODEL_ARGS=(${MODEL_ARGS[*]}); PROBE_ARGS=(${PROBE_ARGS[*]}); VALIDATE_ARGS=(${VALIDATE_ARGS[*]}); $inner" || status=$?
load after
exit "$status"
