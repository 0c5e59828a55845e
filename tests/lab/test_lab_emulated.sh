#!/usr/bin/env bash
# The multi-node ranking with emulated compute (CTest lab_emulated, issue 36): a 2 x 2 lab at 200
# Mbit/s (two ranks a node over shared memory, the shaped link between the nodes), a quick
# calibration of its node rings, and three plans of val-4x384 at micro-batch 2 run by `osdp validate
# --compute emulate` (each compute task waits its calibrated time, so 4 ranks fit on 2 cores and the
# communication is what is measured; the calibration times the collectives only, the cluster file
# prices the compute): flat FSDP over the four ranks, HSDP (sharded within a node,
# replicated across), and the exact search with node groups and two-level collectives. FSDP is
# predicted at least 1.3x slower than both and must measure slower than both; every pair the
# validation finds predicted apart (their intervals apart) must measure in the predicted order; peak
# memory is the simulator's. A ranking, not a tolerance: CI machines are shared, so measured times
# are not held to the prediction here (experiments/lab-multinode-2x2.json does that on a quiet
# machine).
#
#   tests/lab/test_lab_emulated.sh [OSDP]
#
# Prints "ok - ..." / "not ok - ..."; exits 0, 1, or 77 (skipped) where network namespaces cannot
# be made (no CAP_NET_ADMIN) or a tool is missing. Removes its lab on every exit.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
NAME=em$$
NAME=${NAME:0:9}
# shellcheck source=lab_common.sh
source "$HERE/lab_common.sh" "$@"
MODEL=val-4x384


cat >"$WORK/inner.sh" <<INNER
set -euo pipefail
cd "$WORK"
"$OSDP" calibrate --backend mpi -np 4 --per-node 2 --compute emulate --mpirun-args "\$OSDP_LAB_MPIRUN_ARGS" \
  --quick --max-size 16MiB --quiet --out cal.json
common=(--model $MODEL --cluster lab-2x2 --calibration cal.json --batch 2 --data-parallel --baseline none)
"$OSDP" plan "\${common[@]}" --strategy fsdp --out fsdp.json >/dev/null
"$OSDP" plan "\${common[@]}" --strategy hsdp --out hsdp.json >/dev/null
"$OSDP" plan "\${common[@]}" --strategy exact --groups --out exact.json >/dev/null
"$OSDP" validate --plan fsdp.json --plan hsdp.json --plan exact.json -np 4 --compute emulate \
  --mpirun-args "\$OSDP_LAB_MPIRUN_ARGS" --warmup 1 --iterations 5 --out out --quiet ||
  { rc=\$?; [[ \$rc == 5 || \$rc == 6 ]]; }
INNER

start=$(date +%s)
# Its own time limit, under CTest's: SIGTERM lets osdp-lab.sh remove the lab.
if timeout -s TERM 300 "$LAB" run --nodes 2 --ranks-per-node 2 --rate 200mbit --name "$NAME" -- \
  bash "$WORK/inner.sh" >"$WORK/log.txt" 2>&1; then
  ok "calibrate, plan and validate with emulated compute in a 2 x 2 lab at 200 Mbit/s ($(($(date +%s) - start)) s)"
else
  notok "the lab run failed:"
  sed 's/^/    /' "$WORK/log.txt" | tail -30
  echo "1 failed"
  exit 1
fi

if python3 - "$WORK/out/summary.json" <<'PY'; then ok "emulated ranking as predicted (load $(cut -d' ' -f1-3 /proc/loadavg))"; else notok "emulated ranking"; fi
import json, sys
s = json.load(open(sys.argv[1]))
rows = {r["strategy"]: r for r in s["rows"]}
pred = {k: r["predicted_time_s"] for k, r in rows.items()}
meas = {k: r["measured_time_s"] for k, r in rows.items()}
for k in ("fsdp", "hsdp", "exact"):
    print(f"  {k:6s} predicted {pred[k]:.3f} s, measured {meas[k]:.3f} s (steps {rows[k]['steps_s']}), "
          f"compute {rows[k]['compute']}")
bad = []
for k in ("hsdp", "exact"):
    if pred["fsdp"] < 1.3 * pred[k]:
        bad.append(f"fsdp predicted only {pred['fsdp'] / pred[k]:.2f}x {k}: the test needs 1.3x")
    if meas["fsdp"] <= meas[k]:
        bad.append(f"fsdp measured {meas['fsdp']:.3f} s, not slower than {k} ({meas[k]:.3f} s)")
for o in s["order"]["checks"]:
    print(f"  order: {o['faster']} before {o['than']}: {'as predicted' if o['ok'] else 'REVERSED'}")
    if not o["ok"]:
        bad.append(f"{o['faster']} predicted faster than {o['than']} apart, measured slower")
if any(r["compute"] != "emulated" for r in s["rows"]):
    bad.append("a row does not say its compute was emulated")
if s["max_abs_memory_error"] != 0:
    bad.append(f"peak memory off by {s['max_abs_memory_error']}")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY

"$LAB" down --name "$NAME" >/dev/null 2>&1
if ip netns list | grep -q "^$NAME-"; then notok "a namespace of the lab is left"; else ok "no namespace left"; fi

if ((fails)); then
  echo "$fails failed"
  exit 1
fi
echo "all passed"
