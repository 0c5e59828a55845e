#!/usr/bin/env bash
# End-to-end checks of `osdp validate --backend mpi -np 2` on a tiny model (run by CTest as the test
# cli_validate): outputs, exact peak memory at prefetch 0, the tolerance exit code, --resume, bad
# input, and injected faults (a hung and a dead rank end the job with a message naming the rank and
# the operation, well within a time guard).
#   OSDP=<path to the osdp binary> OSDP_DATA_DIR=<repo>/data bash tests/cli/test_validate.sh
set -euo pipefail

: "${OSDP:?set OSDP to the osdp binary}"
case $OSDP in */*) OSDP=$(cd "$(dirname "$OSDP")" && pwd)/$(basename "$OSDP") ;; esac
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OSDP_DATA_DIR=$(cd "${OSDP_DATA_DIR:-$HERE/../../data}" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under AddressSanitizer: Open MPI's own allocations (in components it unloads) are reported as
# leaks at exit; the executor's memory is leak-checked by the single-process tests (test_executor).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"

# shellcheck source=harness.sh
source "$HERE/harness.sh"

cat >tiny.json <<'EOF'
{"schema_version": 1, "name": "tiny", "seq": 32, "vocab": 256, "layers": 2, "hidden": 64, "heads": 4,
 "precision": "fp32", "dropout": false}
EOF
# experiment TIME_MAX FILE: 4 units (fsdp and dp at batch 1 and 2) with the given time tolerance.
# The loose one cannot fail on timing (CTest runs other tests beside this one: millisecond steps
# then take many times their prediction); the strict one always does.
experiment() {
  cat >"$2" <<EOF
{"schema_version": 1, "name": "tiny-validation",
 "base": {"model": "tiny.json", "cluster": "cpu-2", "batch": 1, "split_max": 2},
 "axes": {"batch": [1, 2]},
 "strategies": [{"label": "fsdp", "strategy": "fsdp"}, {"label": "dp", "strategy": "zero2"}],
 "output": "default-out",
 "validation": {"warmup": 1, "iterations": 5,
                "tolerance": {"time_median": $1, "time_max": $1, "memory_max": 0.0},
                "speedups": [{"faster": "dp", "than": "fsdp", "tolerance": 1000000}]}}
EOF
}
experiment 1000000 loose.json
experiment 0 strict.json

run A "$OSDP" validate loose.json -np 2 --out A
expect_rc "validate 4 plans on 2 ranks" A 0
jcheck "summary: 4 plans measured, each 5 timed steps, peak memory exact at prefetch 0" A/summary.json '
assert j["kind"] == "osdp-validation" and j["plans"] == 4, j["plans"]
for r in j["rows"]:
    assert r["feasible"] and len(r["steps_s"]) == 5, r
    assert sorted(r["steps_s"])[2] == r["measured_time_s"], "median of the 5 steps"
    assert r["measured_peak_bytes"] == r["predicted_peak_bytes"], (r["measured_peak_bytes"], r["predicted_peak_bytes"])
    assert r["predicted_time_s"] > 0 and r["loss"] > 0
assert j["max_abs_memory_error"] == 0 and j["ok"]
assert j["provenance"]["backend"] == "mpi"
'
pycheck_csv() {
  python3 - "$1" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4, len(rows)
assert {r["strategy"] for r in rows} == {"fsdp", "dp"}
for r in rows:
    t, p = float(r["measured_time_s"]), float(r["predicted_time_s"])
    assert abs(float(r["time_error"]) - (t - p) / p) < 1e-4 * max(1, abs((t - p) / p)), r
EOF
}
if msg=$(pycheck_csv A/validation.csv 2>&1); then ok "validation.csv: one row per plan, time_error = (measured - predicted) / predicted"; else not_ok "validation.csv" "$msg"; fi
contains "progress lines name each plan with predicted and measured times" A.err "validate: [1/4]" "predicted" "measured"
if [[ -s A/predicted_vs_measured.png ]] || grep -q "no plot" A.err; then ok "the plot is written (or why not is said)"; else not_ok "no plot and no reason" "$(cat A.err)"; fi

run S "$OSDP" validate strict.json -np 2 --out S --quiet
expect_rc "a zero time tolerance is exceeded" S 5
contains "the failures are listed" S.err "over tolerance" "step time off by"

# --resume keeps the finished rows: nothing runs again.
run R "$OSDP" validate loose.json -np 2 --out A --resume
expect_rc "resume of a finished run" R 0
if grep -q "running" R.err; then not_ok "resume re-ran plans" "$(cat R.err)"; else ok "resume runs nothing again"; fi
jcheck "resumed summary has the same 4 rows" A/summary.json 'assert j["plans"] == 4'

run M "$OSDP" validate missing.json -np 2
expect_rc "a missing experiment file" M 2
contains "names the file" M.err "missing.json"
run N "$OSDP" validate loose.json
expect_rc "no -np outside mpirun" N 2
contains "says to give -np" N.err "-np"
run B "$OSDP" validate loose.json -np 2 --backend tpu
expect_rc "an unknown backend" B 2
# nccl: not built into this osdp, or no GPU here; either way refused before any rank starts.
if "$OSDP" --version | grep -q '^CUDA:.* GPU(s)$'; then
  ok "# skip: a GPU is here, the nccl backend can run"
else
  run G "$OSDP" validate loose.json -np 2 --backend nccl
  expect_rc "--backend nccl without a GPU (or without the backend)" G 2
  contains "says why" G.err "nccl backend"
fi
run F "$OSDP" validate loose.json -np 2 --gemm fp16
expect_rc "--gemm fp16 is refused" F 2

# bf16 GEMMs (emulated on the CPU): same plans and memory, a loss moved by the rounding only.
run BF "$OSDP" validate loose.json -np 2 --out BF --gemm bf16 --quiet
expect_rc "validate --gemm bf16" BF 0
python3 - A/summary.json BF/summary.json >"$TMP/bf.out" 2>&1 <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert b["provenance"]["gemm"] == "bf16" and a["provenance"]["gemm"] == "fp32", (a["provenance"], b["provenance"])
assert b["provenance"]["device"].startswith("cpu"), b["provenance"]["device"]
for ra, rb in zip(a["rows"], b["rows"]):
    assert ra["key"] == rb["key"] and rb["measured_peak_bytes"] == ra["measured_peak_bytes"]
    rel = abs(rb["loss"] - ra["loss"]) / ra["loss"]
    assert 0 < rel < 1e-2, (ra["loss"], rb["loss"])
PY
if [[ $? -eq 0 ]]; then ok "bf16: provenance says so, memory unchanged, the loss moved by less than 1%"; else not_ok "bf16 run" "$(cat "$TMP/bf.out")"; fi

# Faults: a rank that hangs in an all-gather, and one that dies before a reduce-scatter.
start=$(date +%s)
run H env OSDP_INJECT_FAULT="rank=1,op=all-gather,kind=hang" timeout 60 "$OSDP" validate loose.json -np 2 --out H --timeout 3 --quiet
took=$(($(date +%s) - start))
if [[ $RC -ne 0 && $RC -ne 2 && $RC -ne 124 && $took -lt 30 ]]; then ok "a hung rank ends the job (exit $RC after ${took} s)"; else not_ok "hung rank: exit $RC after ${took} s" "$(cat H.err)"; fi
contains "the message names the waiting rank and the operation" H.err "rank 0" "all-gather" "did not complete within 3 s"
start=$(date +%s)
run D env OSDP_INJECT_FAULT="rank=1,op=reduce-scatter,kind=exit" timeout 60 "$OSDP" validate loose.json -np 2 --out D --timeout 3 --quiet
took=$(($(date +%s) - start))
if [[ $RC -ne 0 && $RC -ne 2 && $RC -ne 124 && $took -lt 30 ]]; then ok "a dead rank ends the job (exit $RC after ${took} s)"; else not_ok "dead rank: exit $RC after ${took} s" "$(cat D.err)"; fi
contains "the message names the rank and the operation" D.err "rank 1" "reduce-scatter"

finish
