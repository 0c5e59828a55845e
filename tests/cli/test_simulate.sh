#!/usr/bin/env bash
# End-to-end checks of `osdp simulate`, `osdp collective` and `osdp plan --evaluate sim` (run by CTest
# as the test cli_simulate).
#   OSDP=<path to the osdp binary> OSDP_DATA_DIR=<repo>/data bash tests/cli/test_simulate.sh
# Each check prints "ok - ..." or "not ok - ..." (with the evidence as "#" lines); the last line is
# "N passed, M failed" and the exit status is non-zero when anything failed.
set -euo pipefail

: "${OSDP:?set OSDP to the osdp binary}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OSDP_DATA_DIR="${OSDP_DATA_DIR:-$HERE/../../data}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=harness.sh
source "$HERE/harness.sh"

# --- a plan, simulated ---------------------------------------------------------------------------

PLAN="$TMP/nd.plan.json"
run plan "$OSDP" plan --model nd-48x1024 --cluster titan-rtx-8 --prefetch 1 --baseline none --out "$PLAN"
expect_rc "plan nd-48x1024 on titan-rtx-8 with --prefetch 1 --out" plan 0
jcheck "the plan file records prefetch 1" "$PLAN" 'assert j["prefetch"] == 1, j["prefetch"]'

run sim "$OSDP" simulate --plan "$PLAN" --json --trace "$TMP/trace.json" --memory-csv "$TMP/mem.csv"
expect_rc "simulate --json --trace --memory-csv" sim 0
jcheck "simulate --json: summary fields beside the plan's analytic figures" "$TMP/sim.out" '
for k in ("iteration_time_s", "exposed_comm_s", "compute_busy_s", "comm_busy_s", "peak_memory_bytes",
          "peak_time_s", "peak_rank", "peak_breakdown", "events", "queue_events", "wall_time_s",
          "events_per_second", "world_size", "ranks_simulated", "critical_rank", "analytic"):
    assert k in j, f"missing {k}; keys: {sorted(j)}"
assert j["world_size"] == 8 and j["ranks_simulated"] == 8, (j["world_size"], j["ranks_simulated"])
assert j["iteration_time_s"] > 0 and j["events"] > 0
assert 0 <= j["exposed_comm_s"] <= j["iteration_time_s"]
assert math.isclose(j["exposed_comm_s"], j["iteration_time_s"] - j["compute_busy_s"], rel_tol=1e-9, abs_tol=1e-12)
plan = json.load(open(args[0]))
assert j["analytic"]["iteration_time_s"] == plan["predicted"]["iteration_time_s"], j["analytic"]
assert j["analytic"]["peak_memory_bytes"] == plan["predicted"]["peak_memory_bytes"], j["analytic"]
cats = ("shards", "optimizer", "gathered_weights", "gradients", "activations", "workspace", "reserve")
assert sorted(j["peak_breakdown"]) == sorted(cats), sorted(j["peak_breakdown"])
assert math.isclose(sum(j["peak_breakdown"].values()), j["peak_memory_bytes"], rel_tol=1e-12)' "$PLAN"
jcheck "the analytic peak bounds the simulated peak" "$TMP/sim.out" '
assert j["peak_memory_bytes"] <= j["analytic"]["peak_memory_bytes"] * (1 + 1e-12), (j["peak_memory_bytes"], j["analytic"])'
jcheck "--trace: Chrome trace JSON with traceEvents, two named threads per rank, tasks and a memory counter" \
  "$TMP/trace.json" '
ev = j["traceEvents"]
assert isinstance(ev, list) and ev, "no traceEvents"
threads = {}
for e in ev:
    if e["ph"] == "M" and e["name"] == "thread_name":
        threads.setdefault(e["pid"], set()).add((e["tid"], e["args"]["name"]))
assert sorted(threads) == list(range(8)), sorted(threads)
assert all(t == {(0, "compute"), (1, "comm")} for t in threads.values()), threads
xs = [e for e in ev if e["ph"] == "X"]
assert xs and all(all(k in e for k in ("pid", "tid", "ts", "dur", "name", "cat")) for e in xs)
assert {e["cat"] for e in xs} >= {"forward", "backward", "allgather", "reducescatter", "optimizer"}, {e["cat"] for e in xs}
cs = [e for e in ev if e["ph"] == "C"]
assert cs and all(e["name"] == "memory" and "activations" in e["args"] for e in cs)'
header=$(head -n 1 "$TMP/mem.csv" 2>/dev/null || true)
if [[ $header == "time_s,rank,buffer,category,delta_bytes,total_bytes" ]]; then
  ok "--memory-csv: header time_s,rank,buffer,category,delta_bytes,total_bytes ($(($(wc -l <"$TMP/mem.csv") - 1)) rows)"
else
  not_ok "--memory-csv: header" "$header"
fi

run text "$OSDP" simulate --plan "$PLAN"
expect_rc "simulate (text)" text 0
contains "simulate (text): analytic beside simulated" "$TMP/text.out" analytic simulated "step time" "peak memory"

# Same input, same bytes.
run sim2 "$OSDP" simulate --plan "$PLAN" --json --trace "$TMP/trace2.json" --memory-csv "$TMP/mem2.csv"
if cmp -s "$TMP/trace.json" "$TMP/trace2.json" && cmp -s "$TMP/mem.csv" "$TMP/mem2.csv"; then
  ok "two runs write byte-identical traces and memory CSVs"
else
  not_ok "two runs write byte-identical traces and memory CSVs" "$(diff "$TMP/mem.csv" "$TMP/mem2.csv" | head -5)"
fi

# --- symmetric ranks ------------------------------------------------------------------------------

run sym "$OSDP" simulate --plan "$PLAN" --ranks symmetric --json
expect_rc "simulate --ranks symmetric" sym 0
jcheck "--ranks symmetric gives the iteration time and peak of --ranks all on titan-rtx-8" "$TMP/sym.out" '
a = json.load(open(args[0]))
assert j["ranks_simulated"] == 1, j["ranks_simulated"]
assert j["iteration_time_s"] == a["iteration_time_s"], (j["iteration_time_s"], a["iteration_time_s"])
assert j["peak_memory_bytes"] == a["peak_memory_bytes"], (j["peak_memory_bytes"], a["peak_memory_bytes"])' \
  "$TMP/sim.out"

run straggler "$OSDP" simulate --plan "$PLAN" --straggler 3:1.5 --json
expect_rc "simulate --straggler 3:1.5" straggler 0
jcheck "a straggler slows the whole step" "$TMP/straggler.out" '
a = json.load(open(args[0]))
assert j["iteration_time_s"] > a["iteration_time_s"] * 1.2, (j["iteration_time_s"], a["iteration_time_s"])' \
  "$TMP/sim.out"
run sym_straggler "$OSDP" simulate --plan "$PLAN" --ranks symmetric --straggler 3:1.5
expect_rc "--ranks symmetric with a straggler is a usage error" sym_straggler 2
contains "symmetric with a straggler: the message says why" "$TMP/sym_straggler.err" symmetric "--ranks all"

run prefetch0 "$OSDP" simulate --plan "$PLAN" --prefetch 0 --json
expect_rc "simulate --prefetch 0 (override)" prefetch0 0
jcheck "--prefetch 0: nothing overlaps, so the step is compute plus communication" "$TMP/prefetch0.out" '
assert j["prefetch"] == 0, j["prefetch"]
assert math.isclose(j["iteration_time_s"], j["compute_busy_s"] + j["comm_busy_s"], rel_tol=1e-9), j
assert j["analytic"]["source"] != "plan", j["analytic"]
assert math.isclose(j["iteration_time_s"], j["analytic"]["iteration_time_s"], rel_tol=1e-6), j["analytic"]'

# --- bad input: exit 2, naming the file -----------------------------------------------------------

printf '{"schema_version": 1, "kind": "osdp-plan"' >"$TMP/broken.plan.json"
run broken "$OSDP" simulate --plan "$TMP/broken.plan.json"
expect_rc "simulate a truncated plan file" broken 2
contains "truncated plan: the message names the file" "$TMP/broken.err" "$TMP/broken.plan.json"
python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
j["batch_size"] = 0
json.dump(j, open(sys.argv[2], "w"))' "$PLAN" "$TMP/bad_batch.plan.json"
run bad_batch "$OSDP" simulate --plan "$TMP/bad_batch.plan.json"
expect_rc "simulate a plan with batch_size 0" bad_batch 2
contains "bad batch: the message names the file and the key" "$TMP/bad_batch.err" "$TMP/bad_batch.plan.json" \
  "/batch_size"
run missing "$OSDP" simulate --plan "$TMP/no-such.plan.json"
expect_rc "simulate a missing plan file" missing 2
contains "missing plan: the message names the file" "$TMP/missing.err" "$TMP/no-such.plan.json"
run bad_straggler "$OSDP" simulate --plan "$PLAN" --straggler 8:1.2
expect_rc "--straggler on a rank that does not exist" bad_straggler 2

# --- osdp collective ------------------------------------------------------------------------------

# 1000000007 bytes over 8 ranks: chunks of 125000000.875 bytes. Each of the 7 ring steps is rounded
# to a whole picosecond, so the simulated time is within 7 ps of 7 (10us + S/8 / 12GB/s).
for op in allgather reducescatter allreduce; do
  run coll "$OSDP" collective "$op" --ranks 8 --bytes 1000000007 --alpha 10us --bandwidth 12GB/s --json
  expect_rc "collective $op --json" coll 0
  jcheck "collective $op: simulated within 1 ps per step of the closed form" "$TMP/coll.out" '
steps = (2 if args[0] == "allreduce" else 1) * 7
want = steps * (10e-6 + 1000000007 / 8 / 12e9)
assert j["steps"] == steps and j["ranks"] == 8 and j["bytes"] == 1000000007, j
assert math.isclose(j["closed_form_s"], want, rel_tol=1e-12), (j["closed_form_s"], want)
assert abs(j["simulated_s"] - j["closed_form_s"]) <= steps * 1e-12, (j["simulated_s"], j["closed_form_s"])
assert j["events"] > 0' "$op"
done
run coll2 "$OSDP" collective allreduce --ranks 16 --nodes 2 --bytes 1GiB --alpha 5us --bandwidth 370GB/s \
  --inter-alpha 10us --inter-bandwidth 400Gb/s --json
expect_rc "collective allreduce over 2 nodes" coll2 0
jcheck "two nodes: the inter-node link is the bottleneck" "$TMP/coll2.out" '
want = 30 * (10e-6 + 2**30 / 16 / 50e9)
assert math.isclose(j["closed_form_s"], want, rel_tol=1e-12), (j["closed_form_s"], want)
assert abs(j["simulated_s"] - j["closed_form_s"]) <= 30e-12, (j["simulated_s"], j["closed_form_s"])'
run coll_bad "$OSDP" collective allgather --ranks 8 --bytes 1GiB --alpha 10us --bandwidth fast
expect_rc "collective with a bad bandwidth" coll_bad 2
contains "bad bandwidth: the message names the option" "$TMP/coll_bad.err" "--bandwidth"

# --- osdp plan --evaluate sim ---------------------------------------------------------------------
# (--data-parallel: the best plans of the top batch sizes are the batch-size scheduler's; a layout
# search's plan is simulated alone, checked in test_cli.sh.)

run eval "$OSDP" plan --model nd-48x1024 --cluster titan-rtx-8 --prefetch 1 --baseline none --evaluate sim --json \
  --data-parallel
expect_rc "plan --evaluate sim --json" eval 0
jcheck "plan --evaluate sim: an evaluated array, analytic beside simulated per batch size" "$TMP/eval.out" '
ev = j["evaluated"]
assert isinstance(ev, list) and ev, "empty evaluated array"
for e in ev:
    for k in ("batch_size", "analytic_time_s", "simulated_time_s", "analytic_peak_bytes",
              "simulated_peak_bytes", "simulated_throughput"):
        assert k in e, f"missing {k} in {e}"
    assert e["simulated_time_s"] > 0
    assert math.isclose(e["simulated_throughput"], 8 * e["batch_size"] / e["simulated_time_s"], rel_tol=1e-12)
    assert e["simulated_peak_bytes"] <= e["analytic_peak_bytes"] * (1 + 1e-12), e
assert j["batch_size"] in [e["batch_size"] for e in ev], "the chosen batch size was not evaluated"
best = max(ev, key=lambda e: e["simulated_throughput"])
assert j["simulated_best_batch_size"] == best["batch_size"], (j["simulated_best_batch_size"], best)'
run eval_text "$OSDP" plan --model nd-48x1024 --cluster titan-rtx-8 --prefetch 1 --baseline none --evaluate sim \
  --data-parallel
expect_rc "plan --evaluate sim (text)" eval_text 0
contains "plan --evaluate sim (text): says which batch size wins under simulation" "$TMP/eval_text.out" \
  "under simulation batch"

# A plan whose predictions were edited: simulate says so, with both figures; an unedited plan is quiet.
run quiet "$OSDP" simulate --plan "$PLAN"
if grep -q "warning" "$TMP/quiet.err"; then not_ok "an unedited plan simulates without a warning" "$(cat "$TMP/quiet.err")"
else ok "an unedited plan simulates without a warning"; fi
python3 -c "
import json, sys
p = json.load(open(sys.argv[1])); p['predicted']['iteration_time_s'] *= 0.5; p['tool_version'] = '0.0.1+feed'
json.dump(p, open(sys.argv[2], 'w'))" "$PLAN" "$TMP/edited.plan.json"
run edited "$OSDP" simulate --plan "$TMP/edited.plan.json"
expect_rc "an edited plan still simulates" edited 0
contains "an edited plan is named as edited or from another version, with its figures" "$TMP/edited.err" \
  "warning: $TMP/edited.plan.json: the plan's predictions (step" "the plan was edited or written by another version" \
  'it says "0.0.1+feed"' "note: $TMP/edited.plan.json was written by osdp 0.0.1+feed"

# A long simulation (every one of 65,536 ranks) says how far it is, about once a second (it takes
# about a minute).
python3 -c "
import json, sys
c = json.load(open(sys.argv[1])); c['name'] = 'big'; c['nodes'] = 8192; c['devices_per_node'] = 8
c['links']['inter'] = c['links']['intra']; json.dump(c, open(sys.argv[2], 'w'))" \
  "$OSDP_DATA_DIR/clusters/cpu-2.json" "$TMP/big.json"
run bigplan "$OSDP" plan --model val-4x384 --cluster "$TMP/big.json" --strategy fsdp --batch 1 --baseline none \
  --out "$TMP/big.plan.json"
expect_rc "a plan on 65,536 ranks" bigplan 0
# Stopped as soon as a progress line appears (or after 300 s: the first line comes at 1% of the
# tasks, which a sanitizer build on the 2-core AMD EPYC VM reached after 68 s alone, later beside
# another test).
"$OSDP" simulate --plan "$TMP/big.plan.json" --ranks all >"$TMP/bigsim.out" 2>"$TMP/bigsim.err" &
bigsim=$!
for _ in $(seq 3000); do
  grep -q "% of the tasks of 65536 ranks after" "$TMP/bigsim.err" 2>/dev/null && break
  sleep 0.1
done
kill "$bigsim" 2>/dev/null || true
wait "$bigsim" 2>/dev/null || true
contains "simulating 65,536 ranks reports its progress" "$TMP/bigsim.err" "% of the tasks of 65536 ranks after"

finish
