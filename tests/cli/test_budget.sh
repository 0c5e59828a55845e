#!/usr/bin/env bash
# Every search has a budget (CTest cli_budget): the default `osdp plan` on a 100,000-layer model
# (hidden 64) on h100-8 ends within 60 s and 2 GB, with the best plan it found, and says that plan
# is not proved optimal. Run alone (RUN_SERIAL): the time budget is wall-clock time.
#   OSDP=<path to the osdp binary> OSDP_DATA_DIR=<repo>/data bash tests/cli/test_budget.sh
set -euo pipefail

: "${OSDP:?set OSDP to the osdp binary}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OSDP_DATA_DIR="${OSDP_DATA_DIR:-$HERE/../../data}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=harness.sh
source "$HERE/harness.sh"

cat >"$TMP/deep.json" <<'JSON'
{"schema_version": 1, "name": "deep-100k", "seq": 128, "vocab": 1000, "layers": 100000, "hidden": 64,
 "heads": 1, "precision": "fp32"}
JSON
# The wall time and the peak resident memory of the osdp process (ru_maxrss of the waited child).
python3 - "$OSDP" "$TMP" <<'PY' >"$TMP/measure.txt" 2>&1 || true
import resource, subprocess, sys, time
osdp, tmp = sys.argv[1], sys.argv[2]
t0 = time.monotonic()
with open(f"{tmp}/plan.out", "w") as out, open(f"{tmp}/plan.err", "w") as err:
    rc = subprocess.call([osdp, "plan", "--model", f"{tmp}/deep.json", "--cluster", "h100-8"], stdout=out, stderr=err)
wall = time.monotonic() - t0
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(rc, wall, peak)
PY
read -r rc wall peak <"$TMP/measure.txt" || true
if [[ $rc == 0 ]]; then ok "the default plan of a 100,000-layer model (exit 0)"
else not_ok "the default plan of a 100,000-layer model: exit $rc" "$(cat "$TMP/measure.txt" "$TMP/plan.err")"; fi
if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 60 else 1)" "$wall"; then
  ok "it ends within 60 s (${wall%.*} s)"
else
  not_ok "it ends within 60 s" "wall ${wall} s"
fi
if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 2e9 else 1)" "$peak"; then
  ok "it holds at most 2 GB ($((${peak%.*} / 1000000)) MB at its peak)"
else
  not_ok "it holds at most 2 GB" "peak ${peak} bytes"
fi
contains "the plan found, said not to be proved optimal" "$TMP/plan.out" "throughput" "not proved optimal"

finish
