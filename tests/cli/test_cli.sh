#!/usr/bin/env bash
# End-to-end checks of the `osdp` program (run by CTest as the test cli_plan).
#   OSDP=<path to the osdp binary> OSDP_DATA_DIR=<repo>/data bash tests/cli/test_cli.sh
# Each check prints "ok - ..." or "not ok - ..." (with the evidence as "#" lines); the last line is
# "N passed, M failed" and the exit status is non-zero when anything failed.
set -euo pipefail

: "${OSDP:?set OSDP to the osdp binary}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OSDP_DATA_DIR="${OSDP_DATA_DIR:-$HERE/../../data}"
AUDIT="$HERE/audit_costs.py"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MIB=1048576

# shellcheck source=harness.sh
source "$HERE/harness.sh"

# --- helpers and listings ------------------------------------------------------------------------

run version "$OSDP" --version
expect_rc "osdp --version" version 0
contains "--version mentions CUDA and NCCL" "$TMP/version.out" CUDA NCCL

run models "$OSDP" models --json
expect_rc "osdp models --json" models 0
jcheck "models --json: array of {name, parameters, layers, hidden} with gpt2-1.5b at 1557611200 parameters" \
  "$TMP/models.out" '
assert isinstance(j, list) and j, "not a non-empty array"
for e in j:
    missing = [k for k in ("name", "parameters", "layers", "hidden") if k not in e]
    assert not missing, "%s: missing %s" % (e.get("name"), missing)
m = {e["name"]: e for e in j}
assert "gpt2-1.5b" in m, f"gpt2-1.5b not among {sorted(m)}"
assert m["gpt2-1.5b"]["parameters"] == 1557611200, m["gpt2-1.5b"]["parameters"]
assert m["gpt2-1.5b"]["layers"] == 48, m["gpt2-1.5b"]["layers"]'

run clusters "$OSDP" clusters
expect_rc "osdp clusters" clusters 0
if grep -qE '^titan-rtx-8([[:space:]]|$)' "$TMP/clusters.out"; then
  ok "osdp clusters lists titan-rtx-8"
else
  not_ok "osdp clusters lists titan-rtx-8" "$(cat "$TMP/clusters.out")"
fi

run plan_help "$OSDP" plan --help
expect_rc "osdp plan --help" plan_help 0
if grep -qi 'exit codes' "$TMP/plan_help.out" && grep -qE '\b2\b' "$TMP/plan_help.out" &&
  grep -qE '\b3\b.*(fit|memory)' "$TMP/plan_help.out"; then
  ok "plan --help documents the exit codes (2 bad input, 3 no plan fits)"
else
  not_ok "plan --help documents the exit codes" "$(cat "$TMP/plan_help.out")"
fi

# --- a plan --------------------------------------------------------------------------------------

# The data-parallel space (--data-parallel): the knapsack --emit-costs writes is its search's.
run plan8 "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory 8GiB --json --out "$TMP/plan8.plan.json" \
  --emit-costs "$TMP/plan8.costs.json" --data-parallel
expect_rc "plan gpt2-1.5b on titan-rtx-8 at 8GiB" plan8 0
jcheck "plan --json: feasible, strategy, batch, throughput, step time, peak <= limit, plan" "$TMP/plan8.out" '
for k in ("feasible", "strategy", "batch_size", "throughput_samples_per_s", "iteration_time_s",
          "peak_memory_bytes", "memory_limit_bytes", "plan"):
    assert k in j, f"missing {k}; keys: {sorted(j)}"
assert j["feasible"] is True, j["feasible"]
assert j["strategy"] == "exact", j["strategy"]
assert isinstance(j["batch_size"], int) and j["batch_size"] >= 1, j["batch_size"]
assert j["throughput_samples_per_s"] > 0 and j["iteration_time_s"] > 0
assert j["memory_limit_bytes"] == 8 * 2**30, j["memory_limit_bytes"]
assert 0 < j["peak_memory_bytes"] <= j["memory_limit_bytes"], (j["peak_memory_bytes"], j["memory_limit_bytes"])'
jcheck "plan --json: throughput = world size x batch / step time" "$TMP/plan8.out" '
n = j.get("world_size", 8)
want = n * j["batch_size"] / j["iteration_time_s"]
assert math.isclose(j["throughput_samples_per_s"], want, rel_tol=1e-9), (j["throughput_samples_per_s"], want)'
jcheck "plan file (--out): valid JSON with one entry per operator (97 = embedding + 48 x (attention, mlp))" \
  "$TMP/plan8.plan.json" '
models = {e["name"]: e for e in json.load(open(args[0]))}
want = 1 + 2 * models["gpt2-1.5b"]["layers"]  # tied embedding + attention and MLP per layer
ops = j["operators"]
assert len(ops) == want == 97, f"{len(ops)} operators, expected {want} (97)"
assert len({o["name"] for o in ops}) == len(ops), "operator names repeat"
modes = {o["mode"] for o in ops}
assert modes <= {"dp", "zdp", "replicate"}, modes
summary = json.load(open(args[1]))
assert j["batch_size"] == summary["batch_size"], (j["batch_size"], summary["batch_size"])
assert j["strategy"] == "exact", j["strategy"]
assert math.isclose(j["predicted"]["throughput_samples_per_s"], summary["throughput_samples_per_s"], rel_tol=1e-12)' \
  "$TMP/models.out" "$TMP/plan8.out"
jcheck "--emit-costs of gpt2-1.5b: objective agrees with the printed step time and peak" "$TMP/plan8.costs.json" '
s = json.load(open(args[0]))
assert j["batch_size"] == s["batch_size"], (j["batch_size"], s["batch_size"])
assert len(j["operators"]) == 97, len(j["operators"])
assert math.isclose(j["objective"]["time_s"], s["iteration_time_s"], rel_tol=1e-12), (j["objective"], s["iteration_time_s"])
assert math.isclose(j["objective"]["peak_memory_bytes"], s["peak_memory_bytes"], rel_tol=1e-12)' "$TMP/plan8.out"
if out=$(python3 "$AUDIT" "$TMP/plan8.costs.json" 2>&1); then
  ok "audit_costs.py: gpt2-1.5b instance (objective sums, peak <= capacity)"
else
  not_ok "audit_costs.py: gpt2-1.5b instance" "$out"
fi
run plan8_knapsack "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory 8GiB --emit-costs "$TMP/x.costs.json"
expect_rc "--emit-costs over the whole space (a layout search, no one knapsack) is refused" plan8_knapsack 2
contains "saying how to narrow it" "$TMP/plan8_knapsack.err" "--emit-costs" "--data-parallel"
# The whole space (the default) holds the data-parallel one: never below it; throughput = global
# batch / step time, the global batch = micro-batches x batch x devices per stage.
run plan8_all "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory 8GiB --json
expect_rc "plan gpt2-1.5b on titan-rtx-8 at 8GiB, the whole space" plan8_all 0
jcheck "the whole space: at least the data-parallel plan; throughput = global batch / step time" "$TMP/plan8_all.out" '
dp = json.load(open(args[0]))
assert j["feasible"] and j["throughput_samples_per_s"] >= dp["throughput_samples_per_s"] * (1 - 1e-12)
assert j["global_batch"] == j["micro_batches"] * j["batch_size"] * 8 // j["pp"], j
assert math.isclose(j["throughput_samples_per_s"], j["global_batch"] / j["iteration_time_s"], rel_tol=1e-9)
assert 0 < j["peak_memory_bytes"] <= 8 * 2**30' "$TMP/plan8.out"

# --- bad input: exit 2 ---------------------------------------------------------------------------

run no_model "$OSDP" plan --model no-such-model --cluster titan-rtx-8
expect_rc "unknown model name" no_model 2
contains "unknown model name: the message lists the built-in names" "$TMP/no_model.err" no-such-model gpt2-1.5b \
  nd-96x1024 ws-2x12288

cat >"$TMP/bad_key.json" <<'EOF'
{"schema_version": 1, "name": "bad-key", "seq": 128, "vocab": 1000, "layers": 2, "hidden": 256,
 "heads": 4, "precision": "fp32", "hiden_size": 256}
EOF
run bad_key "$OSDP" plan --model "$TMP/bad_key.json" --cluster titan-rtx-8
expect_rc "model file with an unknown key" bad_key 2
contains "unknown key: the message names the file and the JSON pointer" "$TMP/bad_key.err" "$TMP/bad_key.json" \
  "/hiden_size"

for bad in 8XB lots -8GiB 0; do
  run bad_memory "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory "$bad"
  expect_rc "bad --memory \"$bad\"" bad_memory 2
done
contains "bad --memory: the message names the option" "$TMP/bad_memory.err" "--memory"

run bad_strategy "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --strategy greedy
expect_rc "unknown strategy" bad_strategy 2
contains "unknown strategy: the message lists the known ones" "$TMP/bad_strategy.err" greedy exact fsdp osdp-ref dfs

# --- no plan fits: exit 3, with the memory that would fit ----------------------------------------

run tiny_text "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory 1GiB
expect_rc "memory limit too small (1GiB), text output" tiny_text 3
contains "too small: the summary says what memory would fit" "$TMP/tiny_text.out" "would fit"
suggested=$(sed -n 's/.*--memory \([0-9]*MiB\) would fit.*/\1/p' "$TMP/tiny_text.out")
if [[ -n $suggested ]]; then
  run suggested "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory "$suggested"
  expect_rc "the suggested --memory $suggested fits" suggested 0
else
  not_ok "too small: the summary suggests a --memory value" "$(cat "$TMP/tiny_text.out")"
fi

run tiny_json "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory 1GiB --json
expect_rc "memory limit too small (1GiB), --json" tiny_json 3
min_fit=$(python3 -c '
import json, re, sys
j = json.load(open(sys.argv[1]))
err = open(sys.argv[2]).read()
m = re.search(r"(\d+) bytes", err)
assert j["feasible"] is False
assert m, "no byte count in: " + err
assert abs(int(m.group(1)) - j["min_fit_memory_bytes"]) <= 1, (m.group(1), j["min_fit_memory_bytes"])
assert j["min_fit_memory_bytes"] > 2**30
print(int(j["min_fit_memory_bytes"]))' "$TMP/tiny_json.out" "$TMP/tiny_json.err" 2>&1) || min_fit=""
if [[ $min_fit =~ ^[0-9]+$ ]]; then
  ok "too small: stderr and min_fit_memory_bytes agree on the smallest memory that fits ($min_fit bytes)"
  fit_mib=$(((min_fit + MIB) / MIB))  # rounded up to the next MiB
  run refit "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory "${fit_mib}MiB" --json
  expect_rc "rerun with that memory rounded up to the next MiB (${fit_mib}MiB) is feasible" refit 0
  run below "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory "$((min_fit - MIB))" --json
  expect_rc "1 MiB below that memory still does not fit" below 3
else
  not_ok "too small: the smallest memory that fits is given in bytes" "$min_fit" "$(cat "$TMP/tiny_json.err")"
fi

# --- --emit-costs audited by brute force on a reduced instance -----------------------------------

cat >"$TMP/small.json" <<'EOF'
{"schema_version": 1, "name": "small-2x256", "description": "test model", "seq": 128, "vocab": 1000,
 "layers": 2, "hidden": 256, "heads": 4, "precision": "fp32"}
EOF
small=(plan --model "$TMP/small.json" --cluster titan-rtx-8 --split-max 2 --checkpoint auto --batch 4 --json --data-parallel)
run small_min "$OSDP" "${small[@]}" --memory 1MiB --emit-costs "$TMP/small_none.costs.json"
expect_rc "small model at 1MiB does not fit" small_min 3
if out=$(python3 "$AUDIT" --require-brute-force "$TMP/small_none.costs.json" 2>&1); then
  ok "audit_costs.py: brute force confirms nothing fits at 1MiB"
else
  not_ok "audit_costs.py: brute force confirms nothing fits at 1MiB" "$out"
fi
run small_free "$OSDP" "${small[@]}" --memory 24GiB
expect_rc "small model at 24GiB" small_free 0
tight=$(python3 -c '
import json, sys
lo = json.load(open(sys.argv[1]))["min_fit_memory_bytes"]
hi = json.load(open(sys.argv[2]))["peak_memory_bytes"]  # the unconstrained optimum
assert hi > lo, (lo, hi)
print(int((lo + hi) / 2))' "$TMP/small_min.out" "$TMP/small_free.out" 2>&1) || true
if [[ $tight =~ ^[0-9]+$ ]]; then
  ok "small model: a memory limit between the smallest peak and the unconstrained optimum ($tight bytes)"
  run small_tight "$OSDP" "${small[@]}" --memory "$tight" --emit-costs "$TMP/small.costs.json"
  expect_rc "small model at the tight limit" small_tight 0
  if out=$(python3 "$AUDIT" --require-brute-force "$TMP/small.costs.json" 2>&1); then
    ok "audit_costs.py: schema, objective sums, peak <= capacity, optimal by brute force ($(grep -o '[0-9]* combinations' <<<"$out"))"
  else
    not_ok "audit_costs.py on the small instance" "$out"
  fi
  # The auditor itself must catch a wrong answer: a consistent but slower selection, and a misreported objective.
  python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
ops, cap = j["operators"], j["memory_capacity_bytes"]
def cost(sel):
    c = [o["choices"][i] for o, i in zip(ops, sel)]
    return (j["fixed"]["time_s"] + sum(x["time_s"] for x in c),
            j["fixed"]["memory_bytes"] + sum(x["persistent_bytes"] for x in c) + max(x["transient_bytes"] for x in c))
sel = [o["chosen"] for o in ops]
best = cost(sel)[0]
for g, o in enumerate(ops):  # the first single change that still fits but is slower
    for i in range(len(o["choices"])):
        alt = sel[:g] + [i] + sel[g + 1:]
        t, p = cost(alt)
        if p <= cap and t > best * (1 + 1e-6):
            for op, k in zip(ops, alt): op["chosen"] = k
            j["objective"] = {"time_s": t, "peak_memory_bytes": p}
            json.dump(j, open(sys.argv[2], "w"))
            j["objective"]["time_s"] = t * 0.9
            json.dump(j, open(sys.argv[3], "w"))
            sys.exit(0)
sys.exit("no slower feasible neighbour")' "$TMP/small.costs.json" "$TMP/slower.costs.json" "$TMP/misreported.costs.json" ||
    true
  for bad in slower misreported; do
    if [[ ! -f $TMP/$bad.costs.json ]]; then
      not_ok "audit_costs.py rejects a $bad selection" "could not build the tampered instance"
    elif out=$(python3 "$AUDIT" "$TMP/$bad.costs.json" 2>&1); then
      not_ok "audit_costs.py rejects a $bad selection" "$out"
    else
      ok "audit_costs.py rejects a $bad selection ($(grep -m1 -o 'FAIL: [a-z_.]* [a-z_.]*' <<<"$out"))"
    fi
  done
  run small_dfs "$OSDP" "${small[@]}" --memory "$tight" --strategy dfs --baseline none
  jcheck "small model: dfs completes and matches exact" "$TMP/small_dfs.out" '
e = json.load(open(args[0]))
assert j["complete"] is True, "dfs stopped early"
assert math.isclose(j["iteration_time_s"], e["iteration_time_s"], rel_tol=1e-9), (j["iteration_time_s"], e["iteration_time_s"])' \
    "$TMP/small_tight.out"
else
  not_ok "small model: a tight memory limit" "$tight"
fi

# --- no baseline beats exact ---------------------------------------------------------------------
# (--no-hybrid here and in the scheduler's checks: they compare data-parallel searches; the whole
# space has its own checks further down.)

for cfg in "gpt2-1.5b 8GiB" "gpt2-1.5b 16GiB" "nd-96x1024 16GiB" "ws-2x8192 16GiB" "$TMP/small.json 2GiB"; do
  read -r model mem <<<"$cfg"
  run ex "$OSDP" plan --model "$model" --cluster titan-rtx-8 --memory "$mem" --strategy exact --baseline none --json \
    --no-hybrid
  for s in fsdp osdp-ref; do
    run base "$OSDP" plan --model "$model" --cluster titan-rtx-8 --memory "$mem" --strategy "$s" --baseline none --json \
      --no-hybrid
    jcheck "$s never beats exact: $(basename "$model") at $mem" "$TMP/base.out" '
e = json.load(open(args[0]))
assert e["feasible"], "exact found no plan"
if j["feasible"]:
    b, x = j["throughput_samples_per_s"], e["throughput_samples_per_s"]
    assert b <= x * (1 + 1e-9), "%s %r samples/s (batch %d) > exact %r (batch %d)" % (
        j["strategy"], b, j["batch_size"], x, e["batch_size"])' \
      "$TMP/ex.out"
  done
done

# --- the batch-size scheduler: skipping batch sizes by their bound loses nothing -----------------

run auto "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory 16GiB --baseline none --json --no-hybrid
expect_rc "plan gpt2-1.5b at 16GiB, batch auto" auto 0
worse=""
grid=$(python3 -c 'import json,sys; print(" ".join(str(c["batch_size"]) for c in json.load(open(sys.argv[1]))["candidates"]))' \
  "$TMP/auto.out" 2>/dev/null) || grid=""
[[ -n $grid ]] || worse="no candidates[].batch_size in the --json output"
for b in $grid; do
  run fixed "$OSDP" plan --model gpt2-1.5b --cluster titan-rtx-8 --memory 16GiB --baseline none --json --batch "$b" \
    --no-hybrid
  worse+=$(python3 -c '
import json, sys
a, f = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
if f["feasible"] and f["throughput_samples_per_s"] > a["throughput_samples_per_s"] * (1 + 1e-9):
    print("batch %s: %r samples/s > auto (batch %d) %r; " % (sys.argv[3], f["throughput_samples_per_s"],
          a["batch_size"], a["throughput_samples_per_s"]))' "$TMP/auto.out" "$TMP/fixed.out" "$b" 2>&1 ||
    echo "batch $b: no JSON result (exit $RC); ")
done
if [[ -z $worse ]]; then
  ok "batch auto is at least as fast as every fixed batch size of its grid (gpt2-1.5b, 16GiB)"
else
  not_ok "batch auto is at least as fast as every fixed batch size of its grid" "$worse"
fi

# --- hostile input: each a clear message and exit 2, never a crash -------------------------------

python3 -c "d = 100000; print('{\"schema_version\": ' + '[' * d + ']' * d + '}')" >"$TMP/deep.json"
run deep "$OSDP" plan --model "$TMP/deep.json" --cluster cpu-2
expect_rc "a model nested 100,000 levels deep is refused, not a stack overflow" deep 2
contains "the nesting message names the file and the limit" "$TMP/deep.err" "deep.json:" "nested deeper than 64 levels"

python3 -c "
import json, sys
m = json.load(open(sys.argv[1])); m['hiden'] = m.pop('hidden'); json.dump(m, open(sys.argv[2], 'w'))" \
  "$OSDP_DATA_DIR/models/val-4x384.json" "$TMP/typo.json"
run typo "$OSDP" plan --model "$TMP/typo.json" --cluster cpu-2
expect_rc "a misspelled key" typo 2
contains "the misspelling is named with a did-you-mean" "$TMP/typo.err" \
  'typo.json:/hidden: required key is missing' 'the file has "hiden" here: did you mean "hidden"?'

run kind "$OSDP" plan --model "$OSDP_DATA_DIR/clusters/cpu-2.json" --cluster cpu-2
expect_rc "a cluster file given as --model" kind 2
contains "it is called a cluster file" "$TMP/kind.err" "this is a cluster file" "not a model file"

run dir "$OSDP" simulate --plan "$TMP"
expect_rc "a directory given as --plan" dir 2
contains "it is called a directory" "$TMP/dir.err" "is a directory, not a JSON file"

run mem8 "$OSDP" plan --model val-4x384 --cluster cpu-2 --memory 8
expect_rc "--memory 8 (bytes) is refused" mem8 2
contains "--memory 8 suggests a unit" "$TMP/mem8.err" "osdp plan: error: --memory:" 'did you mean "8GiB"?'

run membig "$OSDP" plan --model val-4x384 --cluster cpu-2 --memory 100GiB
expect_rc "--memory above the device's plans" membig 0
contains "--memory above the device's memory warns" "$TMP/membig.err" "warning: --memory 100.00 GiB is more than the 4.00 GiB"

run split3 "$OSDP" plan --model val-4x384 --cluster cpu-2 --split-max 3
expect_rc "--split-max 3 is refused" split3 2
contains "--split-max asks for a power of two" "$TMP/split3.err" "osdp plan: error: --split-max: expected a power of two"

run badopt "$OSDP" sweep --no-such-option
expect_rc "an unknown option" badopt 2
contains "parser errors carry the command's prefix" "$TMP/badopt.err" "osdp sweep: error:" "osdp sweep --help"

python3 -c "
import json, sys
c = json.load(open(sys.argv[1])); c['device']['memory'] = 1e308; json.dump(c, open(sys.argv[2], 'w'))
c['device']['memory'] = '4GiB'; c['links']['intra']['bandwidth'] = 1; json.dump(c, open(sys.argv[3], 'w'))
c['links']['intra']['bandwidth'] = '10GB/s'; c['device']['gemm_efficiency'] = 1e-6; json.dump(c, open(sys.argv[4], 'w'))
c['device']['gemm_efficiency'] = 0.5; c['name'] = 'a\u202eb'; json.dump(c, open(sys.argv[5], 'w'))" \
  "$OSDP_DATA_DIR/clusters/cpu-2.json" "$TMP/c-mem.json" "$TMP/c-bw.json" "$TMP/c-eff.json" "$TMP/c-bidi.json"
for c in mem bw eff bidi; do
  run "c$c" "$OSDP" plan --model val-4x384 --cluster "$TMP/c-$c.json"
  expect_rc "an absurd cluster ($c) is refused" "c$c" 2
done
contains "device memory 1e308 B gives the range" "$TMP/cmem.err" "/device/memory: a device's memory must be between 1 MiB and 1 PiB"
contains "a bandwidth of 1 B/s gives the range" "$TMP/cbw.err" "/links/intra/bandwidth: a link's bandwidth must be between"
contains "gemm_efficiency 1e-6 gives the range" "$TMP/ceff.err" "/device/gemm_efficiency: a GEMM efficiency must be between 0.01 and 1"
contains "a bidi control in a name is refused" "$TMP/cbidi.err" "/name: a name must not contain bidirectional controls"

# A million ranks: samples per step is batch x 1,000,000, not an int that wrapped.
python3 -c "
import json, sys
c = json.load(open(sys.argv[1])); c['name'] = 'million'; c['nodes'] = 125000; c['devices_per_node'] = 8
c['links']['inter'] = c['links']['intra']; json.dump(c, open(sys.argv[2], 'w'))" \
  "$OSDP_DATA_DIR/clusters/cpu-2.json" "$TMP/million.json"
run million "$OSDP" plan --model val-4x384 --cluster "$TMP/million.json" --strategy fsdp --baseline none
expect_rc "a plan on 1,000,000 ranks" million 0
samples=$(sed -n 's/.*batch size *\([0-9]*\) per device (global batch \(-*[0-9]*\)).*/\1 \2/p' "$TMP/million.out")
if [[ -n $samples ]] && python3 -c "import sys; b, s = map(int, sys.argv[1:]); assert s == b * 1000000" $samples; then
  ok "samples per step at 1,000,000 ranks is batch x 1,000,000 ($samples)"
else
  not_ok "samples per step at 1,000,000 ranks" "$(head -3 "$TMP/million.out")"
fi

# Node groups and two-level collectives (issue 14): on h100-2x8 exact with --groups says so in its
# choices and records them in the plan; simulate refuses such a plan by name rather than replaying it
# as world rings; --groups on a single node is refused.
run groups "$OSDP" plan --model nd-48x1024 --cluster h100-2x8 --groups --out "$TMP/groups.plan.json"
expect_rc "exact with --groups on 2 x 8" groups 0
if grep -Eq "(/node|/2lvl)" "$TMP/groups.out"; then ok "the choices name node-sharded or two-level operators"
else not_ok "the choices name node-sharded or two-level operators" "$(cat "$TMP/groups.out")"; fi
jcheck "the plan file records group or comm for the operators that use them" "$TMP/groups.plan.json" '
ops = j["operators"]
assert any(o.get("group") == "node" or o.get("comm") == "two-level" for o in ops), ops[:3]
assert all(o.get("group", "world") in ("world", "node") and o.get("comm", "flat") in ("flat", "two-level") for o in ops)
'
run groups_sim "$OSDP" simulate --plan "$TMP/groups.plan.json" --json --trace "$TMP/groups.trace.json"
expect_rc "simulate runs a plan with node groups or two-level collectives" groups_sim 0
jcheck "simulated as priced: prefetch 0, the step within 1e-9 of the analytic one" "$TMP/groups_sim.out" '
assert abs(j["relative_difference"]["iteration_time"]) < 1e-9, j["relative_difference"]
assert j["relative_difference"]["peak_memory"] == 0, j["relative_difference"]
'
jcheck "the trace names the ring level of every collective" "$TMP/groups.trace.json" '
ev = j["traceEvents"] if isinstance(j, dict) else j
levels = {e["args"]["level"] for e in ev if e.get("ph") == "X" and "bytes" in e.get("args", {})}
assert levels <= {"world", "intra", "inter"} and ("intra" in levels or "inter" in levels), levels
'

for s in hsdp fsdp-2level; do
  run "base_$s" "$OSDP" plan --model nd-48x1024 --cluster h100-2x8 --strategy "$s" --baseline none
  expect_rc "--strategy $s on 2 x 8" "base_$s" 0
done
contains "hsdp: every operator ZDP within its node" "$TMP/base_hsdp.out" "ZDP/node x 48"
contains "fsdp-2level: every operator ZDP with two-level collectives" "$TMP/base_fsdp-2level.out" "ZDP/2lvl x 48"
run groups_one "$OSDP" plan --model nd-48x1024 --cluster titan-rtx-8 --groups
expect_rc "--groups on one node is refused" groups_one 2
contains "saying what it needs" "$TMP/groups_one.err" "--groups: node groups and two-level collectives need a cluster of several nodes"

# The whole space (issue 16, one lane since issue 32): the exact search over stages, micro-batches
# and TP degrees beside the baselines; dp-only is osdp's data-parallel space and must price as
# `osdp plan --data-parallel` does.
run hybrid "$OSDP" plan --model val-4x384 --cluster h100-8 --memory 1100MiB --json --out "$TMP/hybrid.plan.json" \
  --baseline galvatron megatron-3d dp-only
expect_rc "plan on 8 devices with the layout baselines" hybrid 0
run flat_exact "$OSDP" plan --model val-4x384 --cluster h100-8 --memory 1100MiB --baseline none --json --data-parallel
expect_rc "the same case in the data-parallel space" flat_exact 0
cp "$TMP/flat_exact.out" "$TMP/flat_exact.json"
jcheck "exact beats or ties every baseline; dp-only is osdp plan's exact" "$TMP/hybrid.out" '
import json
flat = json.load(open("'"$TMP"'/flat_exact.json"))
thr = j["plan"]["predicted"]["throughput_samples_per_s"]
assert j["feasible"] and j["strategy"] == "exact" and thr == j["throughput_samples_per_s"]
names = {b["strategy"]: b for b in j["baselines"]}
assert set(names) == {"galvatron", "megatron-3d", "dp-only"}, names.keys()
for b in j["baselines"]:
    if b["feasible"]:
        assert thr >= b["throughput_samples_per_s"] * (1 - 1e-12), (b["strategy"], thr, b["throughput_samples_per_s"])
        assert abs(b["speedup_over_baseline"] - thr / b["throughput_samples_per_s"]) < 1e-12
dp = names["dp-only"]
assert abs(dp["throughput_samples_per_s"] / flat["throughput_samples_per_s"] - 1) < 1e-9, (dp["throughput_samples_per_s"], flat["throughput_samples_per_s"])
assert dp["pp"] == 1 and dp["micro_batches"] == 1
'
jcheck "the plan file: stages, degrees and choices of every unit" "$TMP/hybrid.plan.json" '
p = j["pipeline"]
assert j["schema_version"] == 2 and p["stages"] == 1 + max(u["stage"] for u in j["units"])
units = j["units"]
assert units[0]["name"] == "embedding" and len([u for u in units if u["name"].startswith("layer")]) == 4
assert [u["stage"] for u in units] == sorted(u["stage"] for u in units)
ops = {o["name"].split(".")[0] for o in j["operators"]}
assert all(u["tp"] in (1, 2, 4, 8) and u["name"] in ops for u in units), (units, ops)
pr = j["predicted"]
cp = p.get("context_parallel", {}).get("degree", 1)
assert pr["global_batch"] == p["micro_batches"] * j["batch_size"] * 8 // p["stages"] // cp
assert max(s["peak_memory_bytes"] for s in pr["stages"]) <= 1100 * 2**20
'
run hybrid_m3d "$OSDP" plan --strategy megatron-3d --model val-4x384 --cluster h100-8 --memory 1100MiB --baseline none \
  --out "$TMP/m3d.plan.json"
expect_rc "--strategy megatron-3d" hybrid_m3d 0
jcheck "megatron-3d: one TP degree for every layer, every operator REPLICATE" "$TMP/m3d.plan.json" '
assert len({u["tp"] for u in j["units"] if u["name"].startswith("layer")}) == 1, j["units"]
assert all(o["mode"] == "replicate" for o in j["operators"]), j["operators"]
'
run hybrid_bad "$OSDP" plan --strategy fsdp --pp 2 --model val-4x384 --cluster h100-8
expect_rc "--pp 2 with a data-parallel strategy is refused" hybrid_bad 2
contains "naming the strategies of the whole space" "$TMP/hybrid_bad.err" "--pp: strategy fsdp searches data parallelism only" \
  "exact, galvatron, megatron-3d"
run hybrid_old "$OSDP" plan --hybrid --strategy fsdp --model val-4x384 --cluster h100-8
expect_rc "the old --hybrid with a data-parallel strategy is refused" hybrid_old 2
# At pp 2 the tied table is lowered untied, and an untied token table does not split: --tp 2 alone
# leaves the embedding no degree. The pipeline degree is passed over with that reason, not reported
# as a memory limit; with pp 1 allowed too, pp 1 is searched.
run hybrid_tp "$OSDP" plan --model val-4x384 --cluster h100-8 --memory 1100MiB --pp 2 --tp 2 --baseline none
expect_rc "--pp 2 --tp 2: no plan" hybrid_tp 3
contains "the reason is the embedding's degree, not memory" "$TMP/hybrid_tp.out" \
  "no pipeline degree could be searched" "skipped        pipeline degree 2: unit embedding can take none of the TP degrees 2"
run hybrid_tp1 "$OSDP" plan --model val-4x384 --cluster h100-8 --memory 1100MiB --pp 1 2 --tp 2 --baseline none --json
expect_rc "--pp 1 2 --tp 2: pp 1 searched" hybrid_tp1 0
jcheck "the skipped degree is in the JSON" "$TMP/hybrid_tp1.out" '
assert j["feasible"] and j["pp"] == 1, j["pp"]
assert len(j["layouts"]["skipped"]) == 1 and "unit embedding" in j["layouts"]["skipped"][0], j["layouts"]["skipped"]
'
# --batch beyond data parallelism: the global batch of that data-parallel plan, for the plan and
# every baseline, not ignored.
run hybrid_batch "$OSDP" plan --batch 4 --model val-4x384 --cluster h100-8 --json --baseline fsdp megatron-3d
expect_rc "--batch 4 over the whole space" hybrid_batch 0
jcheck "--batch 4 on 8 devices: global batch 32 for the plan and its baselines" "$TMP/hybrid_batch.out" '
assert j["global_batch"] == 32, j["global_batch"]
assert [b["global_batch"] for b in j["baselines"]] == [32, 32], j["baselines"]
'
# Plain `osdp plan` is the search the old --hybrid asked for; --hybrid is accepted with a warning.
run plain "$OSDP" plan --model val-4x384 --cluster h100-8 --memory 1100MiB --baseline none --json
run plain_hybrid "$OSDP" plan --hybrid --model val-4x384 --cluster h100-8 --memory 1100MiB --baseline none --json
expect_rc "--hybrid is still accepted" plain_hybrid 0
contains "with a warning that it is the default" "$TMP/plain_hybrid.err" "--hybrid is the default now"
jcheck "plain plan: the whole space, at least the data-parallel plan, the same as --hybrid" "$TMP/plain.out" '
import json
hy = json.load(open("'"$TMP"'/plain_hybrid.out"))
flat = json.load(open("'"$TMP"'/flat_exact.json"))
assert j["strategy"] == "exact" and j["feasible"]
assert j["throughput_samples_per_s"] == hy["throughput_samples_per_s"]
assert j["throughput_samples_per_s"] >= flat["throughput_samples_per_s"] * (1 - 1e-12)
'
run plain_no_hybrid "$OSDP" plan --model val-4x384 --cluster h100-8 --memory 1100MiB --baseline none --json --no-hybrid
expect_rc "plain plan --no-hybrid" plain_no_hybrid 0
jcheck "--no-hybrid: the data-parallel plan" "$TMP/plain_no_hybrid.out" '
assert j["pp"] == 1 and j["micro_batches"] == 1 and all(u["tp"] == 1 for u in j["plan"]["units"])
'
run plain_batch "$OSDP" plan --model val-4x384 --cluster h100-8 --memory 1100MiB --baseline none --json --batch 2
expect_rc "plain plan --batch 2" plain_batch 0
jcheck "--batch 2 on 8 devices: the plan at the same global batch, 16" "$TMP/plain_batch.out" '
assert j["global_batch"] == 16 and j["plan"]["predicted"]["global_batch"] == 16, j["global_batch"]
'
run plain_bert "$OSDP" plan --model bert-huge-32 --cluster a100-8 --memory 8GB --baseline fsdp megatron-3d
expect_rc "plain plan, bert-huge-32 on 8 A100s at 8 GB" plain_bert 0
pcheck "it reports the plan's stages and degrees, at least fsdp and megatron-3d" "$TMP/plain_bert.out" '
thr = float(re.search(r"throughput +([0-9.]+) samples/s", text).group(1))
for name in ("fsdp", "megatron-3d"):
    m = re.search(name + r" +batch [0-9]+, ([0-9.]+) samples/s.* -> exact is ([0-9.]+)x", text)
    assert m, (name, text)
    assert thr >= float(m.group(1)) and float(m.group(2)) >= 1
assert re.search(r"layout +[0-9]+ stages?(.*1f1b.*)?, [0-9]+ micro-batch(es)?, TP", text), text
assert re.search(r"global batch [0-9]+", text), text
assert re.search(r"stage 0 +[0-9]+ ranks: embedding.*tp[1248]", text), text
'
run hybrid_sim "$OSDP" plan --model val-4x384 --cluster h100-8 --memory 1100MiB --pp 2 --micro-batches 4 --baseline none --evaluate sim --trace "$TMP/hybrid.trace.json" --json
expect_rc "--pp 2 --micro-batches 4 --evaluate sim --trace" hybrid_sim 0
jcheck "the simulator replays the plan: 1F1B holds min(pp - s, m) micro-batches" "$TMP/hybrid_sim.out" '
s = j["simulated"]["summary"]
p = j["plan"]
assert j["pp"] == 2 and j["micro_batches"] == 4 and s["micro_batches"] == 4 and s["pp"] == 2
assert [st["max_micro_batches_in_flight"] for st in s["stages"]] == [2, 1], s["stages"]
assert 0 < s["bubble_fraction"] < 1 and s["iteration_time_s"] > 0
assert abs(j["simulated"]["iteration_time_s"] / p["predicted"]["iteration_time_s"] - 1) < 0.05, (j["simulated"]["iteration_time_s"], p["predicted"]["iteration_time_s"])
'
jcheck "the trace: a process per rank named by stage, forward and backward of every micro-batch, sends, memory counters" "$TMP/hybrid.trace.json" '
ev = j["traceEvents"]
procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert procs[0] == "rank 0 (stage 0)" and procs[4] == "rank 4 (stage 1)", procs
names = {(e["pid"], e["name"]) for e in ev if e["ph"] == "X"}
for rank in (0, 4):
    for mb in range(4):
        assert any(pid == rank and ".forward" in n and n.endswith(f".mb{mb}") for pid, n in names), (rank, mb)
        assert any(pid == rank and ".backward" in n and n.endswith(f".mb{mb}") for pid, n in names), (rank, mb)
assert any(n.startswith("send.activations") for _, n in names) and any(n.startswith("recv.gradients") for _, n in names)
assert {e["pid"] for e in ev if e["ph"] == "C"} >= {0, 4}
'
run hybrid_trace "$OSDP" plan --model val-4x384 --cluster h100-8 --trace "$TMP/x.json"
expect_rc "--trace without --evaluate sim is refused" hybrid_trace 2

# A gain within the calibration's error names what does as well: a baseline by its strategy, a simpler
# form of the plan by what it is (a recorded shared-memory calibration of the lab's machines).
run within "$OSDP" plan --model val-ic-256-512 --cluster lab-2x1 --memory 2GiB \
  --calibration "$OSDP_DATA_DIR/results/lab/epyc-shm-b/calibration.json"
expect_rc "plan with a calibration's intervals" within 0
contains "a simpler plan within the error is named by what it is" "$TMP/within.out" \
  "  one choice per kind batch " \
  "the gain is within the calibration's error: the same plan with one choice per operator kind does as well"

finish
