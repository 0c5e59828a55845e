#!/usr/bin/env bash
# End-to-end checks of `osdp calibrate` (run by CTest as the test cli_calibrate): a quick calibration on
# 2 MPI ranks (relaunched under mpirun by osdp itself), the file it writes read back by `osdp plan`,
# and bad arguments.
#   OSDP=<path to the osdp binary> OSDP_DATA_DIR=<repo>/data bash tests/calibrate/test_calibrate_cli.sh
# Each check prints "ok - ..." or "not ok - ..." (with the evidence as "#" lines); the last line is
# "N passed, M failed" and the exit status is non-zero when anything failed. Nothing here depends on
# how fast this machine is: only the structure of the results is checked.
set -euo pipefail

: "${OSDP:?set OSDP to the osdp binary}"
case $OSDP in */*) OSDP=$(cd "$(dirname "$OSDP")" && pwd)/$(basename "$OSDP") ;; esac # absolute: we cd
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OSDP_DATA_DIR=$(cd "${OSDP_DATA_DIR:-$HERE/../../data}" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"

# shellcheck source=../cli/harness.sh
source "$HERE/../cli/harness.sh"

# --- usage errors (before any launch) ------------------------------------------------------------

run help "$OSDP" calibrate --help
expect_rc "osdp calibrate --help" help 0
contains "--help explains -np, --quick, the output files and the exit codes" "$TMP/help.out" \
  "--np" "--quick" "--out" "measurements.csv" "Exit codes" "mpirun"

bad() {  # bad NAME PATTERN ARGS...: exit 2 and PATTERN in stderr
  local name=$1 pattern=$2
  shift 2
  run "$name" "$OSDP" calibrate "$@"
  expect_rc "calibrate $* is refused" "$name" 2
  contains "calibrate $*: the message says why" "$TMP/$name.err" "$pattern"
}
bad backend "backend" --backend tcp -np 2 --quick
bad nccl "nccl backend" --backend nccl -np 2 --quick  # not built, or no GPU: either way before any launch
bad np0 "-np" -np 0 --quick
bad npword "-np" -np two --quick
bad nonp "-np N" --quick
bad pernode "nodes of 3 ranks do not divide -np 4" -np 4 --per-node 3 --quick
bad sizes "larger than" -np 2 --min-size 2MiB --max-size 1MiB --quick
bad sizeunit "--max-size" -np 2 --max-size lots --quick
bad model "nope" -np 2 --model nope.json
bad timeout "--timeout" -np 2 --timeout 0 --quick
bad computefrom "only with --compute emulate" -np 2 --quick --compute-from nothere.json
bad computetorch "collectives only" -np 2 --quick --compute emulate --backend torch
bad computewhat "--compute" -np 2 --quick --compute fast

# --- a quick calibration on 2 ranks --------------------------------------------------------------

if ! command -v mpirun >/dev/null 2>&1; then
  echo "ok - skip: calibration on 2 ranks (mpirun is not installed)"
  finish
  exit $?
fi
if ! "$OSDP" --version | grep -q '^MPI: yes'; then
  echo "ok - skip: calibration on 2 ranks (osdp was built without MPI)"
  finish
  exit $?
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI's own allocations outlive MPI_Finalize (see tests/cli/test_sweep.sh): no leak check here.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

run quick "$OSDP" calibrate --backend mpi -np 2 --quick --out cal2.json
expect_rc "calibrate --backend mpi -np 2 --quick --out cal2.json" quick 0
jcheck "the calibration file: schema 1, name, 2-rank provenance, 3 collectives, compute, interference" cal2.json '
assert j["schema_version"] == 1 and j["name"] == "cal2", (j["schema_version"], j["name"])
p = j["provenance"]
for k in ("host", "date", "backend", "backend_version", "world_size", "compiler", "eigen", "options", "machine"):
    assert k in p, f"provenance lacks {k}: {sorted(p)}"
assert p["backend"] == "mpi" and p["world_size"] == 2, (p["backend"], p["world_size"])
assert p["options"]["quick"] is True
# GEMM calls rotate over twice the last-level cache (at least 64 MiB): the largest data cache /sys
# lists for cpu0, read here on its own.
import glob
llc = 0
for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/"):
    kind, size = open(d + "type").read().strip(), open(d + "size").read().strip()
    if kind != "Instruction":
        llc = max(llc, int(size.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1))
g = p["gemm_operands"]
assert g["last_level_cache_bytes"] == llc and g["rotation_bytes"] == max(64 << 20, 2 * llc), (g, llc)
for c in ("allgather", "reducescatter", "allreduce", "alltoall"):
    segs = j["collectives"][c]
    assert 1 <= len(segs) <= 6, (c, len(segs))
    assert "up_to" not in segs[-1], f"{c}: the last segment is bounded"
    ups = [s["up_to"] for s in segs[:-1]]
    assert ups == sorted(ups), (c, ups)
    for s in segs:
        assert s["alpha"] >= 0 and s["bandwidth"] > 0 and s["residual_rms"] >= 0, (c, s)
c = j["compute"]
assert c["fp32_flops"] > 1e8 and c["bf16_flops"] == c["fp32_flops"], c
assert c["gemm_efficiency"] == 1 and c["gemm_half_efficiency_dim"] >= 0, c
assert c["memory_bandwidth"] > 1e8 and c["kernel_overhead"] >= 0, c
assert j["overlap"]["interference"] >= 1, j["overlap"]'
jcheck "the raw points: cal2.measurements.csv, one line per point, every sweep there" cal2.json '
import csv
rows = list(csv.DictReader(open("cal2.measurements.csv")))
sweeps = {r["sweep"] for r in rows}
want = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all", "elementwise", "adam", "gemm", "gemm-accumulate",
        "overlap"}
assert sweeps == want, sweeps
# --quick: one generic shape timed adding into C too, fitted against its "gemm" point.
added = [r for r in rows if r["sweep"] == "gemm-accumulate"]
assert [(r["m"], r["n"], r["k"]) for r in added] == [("256", "256", "32")], added
assert j["provenance"]["fit"]["accumulate"]["points"] == 1
assert j["compute"]["accumulate_bandwidth"] > 0, j["compute"]
ag = [float(r["bytes"]) for r in rows if r["sweep"] == "all-gather"]
assert ag[0] == 1024 and ag[-1] == 1048576 and len(ag) == 11, ag  # --quick: 1 KiB .. 1 MiB, powers of 2
assert all(float(r["seconds"]) > 0 for r in rows)
assert sum(s["points"] for s in j["provenance"]["fit"]["allgather"]) == len(ag)
# Every repetition kept, in the order timed: as many as the point has, their median its time and
# their extremes its min and max.
import statistics
for r in rows:
    t = [float(x) for x in r["times_s"].split()]
    assert len(t) == int(r["repeats"]), r
    assert abs(statistics.median(t) - float(r["seconds"])) <= 1e-8 * float(r["seconds"]), r
    assert abs(min(t) - float(r["min_s"])) <= 1e-8 * float(r["min_s"]) and abs(max(t) - float(r["max_s"])) <= 1e-8 * float(r["max_s"]), r'
# Points are timed in passes (one repetition of each a pass): a line per point as its last
# repetition is timed, and a line at the end of each pass before the last (--quick: 3 repetitions,
# so two such lines for each of the 8 interleaved sweeps).
if grep -qE '^calibrate: all-gather 1\.0 KiB \[1/[0-9]+\] ' quick.err &&
  [[ $(grep '^calibrate: ' quick.err | grep -vc ' pass [0-9]* of ') -eq $(($(wc -l <cal2.measurements.csv) - 1)) ]] &&
  [[ $(grep -cE '^calibrate: [a-z-]+ pass [12] of 3 over [0-9]+ points ' quick.err) -eq 16 ]]; then
  ok "progress: one line per point and one per pass on stderr, with a counter"
else
  not_ok "progress: one line per point and one per pass on stderr, with a counter" "$(head -n 5 quick.err)"
fi
contains "the summary: segments, GEMM peak, bandwidth, interference" quick.out \
  "all-gather" "reduce-scatter" "all-reduce" "all-to-all" "GFLOP/s" "interference" "cal2.json"

# The file is a calibration `osdp plan` reads, and it changes the prediction.
cat >two.json <<'EOF'
{
  "schema_version": 1,
  "name": "two-cpus",
  "description": "2 ranks on this machine",
  "source": "test",
  "nodes": 1,
  "devices_per_node": 2,
  "device": {"name": "cpu", "memory": "16GiB", "reserve": "0B", "fp32_flops": "1TFLOP/s",
             "bf16_flops": "1TFLOP/s", "memory_bandwidth": "100GB/s", "kernel_overhead": "0s"},
  "links": {"intra": {"alpha": "1us", "bandwidth": "100GB/s"}}
}
EOF
run plan_cal "$OSDP" plan --model nd-48x1024 --cluster two.json --calibration cal2.json --json
expect_rc "plan --calibration cal2.json" plan_cal 0
run plan_raw "$OSDP" plan --model nd-48x1024 --cluster two.json --json
expect_rc "plan without the calibration" plan_raw 0
jcheck "the calibration changes the predicted step time" plan_cal.out '
raw = json.load(open(args[0]))
assert j["feasible"] and raw["feasible"]
assert j["iteration_time_s"] != raw["iteration_time_s"], j["iteration_time_s"]' plan_raw.out

# Without a comm thread there is no overlap to measure: no interference in the file.
run nothread "$OSDP" calibrate -np 2 --quick --no-comm-thread --quiet --out nothread.json
expect_rc "calibrate --no-comm-thread" nothread 0
jcheck "--no-comm-thread: no overlap block, and the provenance says why" nothread.json '
assert "overlap" not in j, j.get("overlap")
assert "not measured" in j["provenance"]["interference"], j["provenance"]["interference"]'
# (A warning about noisy fits may remain: --quiet drops progress, not warnings.)
if grep -v "^osdp calibrate: warning: " nothread.err | grep -q .; then
  not_ok "--quiet: no progress lines" "$(head -n 3 nothread.err)"
else
  ok "--quiet: no progress lines"
fi

# --compute emulate: the collectives only (for validate --compute emulate), no compute figures; with
# --compute-from another calibration's compute figures, GEMM times and residuals, and its collectives
# its own.
run emu "$OSDP" calibrate -np 2 --quick --compute emulate --quiet --out emu.json
expect_rc "calibrate --compute emulate" emu 0
jcheck "--compute emulate: collectives, no compute block, and the provenance says so" emu.json '
assert "compute" not in j and "gemm_times" not in j, sorted(j)
assert j["provenance"]["options"]["collectives_only"] is True
assert "not measured" in j["provenance"]["compute"], j["provenance"]["compute"]
assert set(j["collectives"]) == {"allgather", "reducescatter", "allreduce", "alltoall"}, j["collectives"].keys()'
contains "the summary says the compute was not measured" emu.out "compute        not measured"
run emufrom "$OSDP" calibrate -np 2 --quick --compute emulate --compute-from cal2.json --quiet --out emufrom.json
expect_rc "calibrate --compute emulate --compute-from cal2.json" emufrom 0
jcheck "--compute-from: the compute figures and GEMM times of cal2.json, the collectives measured here" emufrom.json '
import json
src = json.load(open("cal2.json"))
assert j["compute"] == src["compute"] and j["gemm_times"] == src["gemm_times"], "compute"
assert j["provenance"]["fit"]["gemm"] == src["provenance"]["fit"]["gemm"]
assert "from cal2.json" in j["provenance"]["compute"], j["provenance"]["compute"]'
bad emuplan "" -np 2 --quick --compute emulate --compute-from emu.json
contains "--compute-from a calibration without compute figures is refused" "$TMP/emuplan.err" "has no compute figures"

# The probes (--probes on; auto leaves them out with --quick): plans of probe-3x320 run whole after the
# sweeps, four uniform strategies and two searches under two memory caps, and the uniform ones of
# probe-8x192 and probe-2x448 (with --quick at micro-batch 2 alone, 5 timed steps each). The
# composition fit in the provenance is recomputed here from the probes' rows as
# costmodel/composition.hpp defines it: per group (the plans run side by side), step j's pace the mean
# log over the plans, each plan's residual the median of its steps over the pace against the simulated
# step, their squares about the group's mean over the degrees of freedom, less the steps' noise and the
# spread of the drawn predictions. With --model val-4x384 --probe-batch 1 --probe-batch 3 the model to
# be planned is probed too: its uniform strategies at micro-batches 1 and 3.
run probes "$OSDP" calibrate -np 2 --quick --probes on --model val-4x384 --probe-batch 1 --probe-batch 3 \
  --quiet --out probes.json
expect_rc "calibrate --probes on" probes 0
jcheck "the composition fit is the probes' residuals less the steps' noise and the drawn errors" probes.json '
import json, math, statistics
c = j["provenance"]["fit"]["composition"]
rows = [json.loads(l) for l in open("probes.probes/rows.jsonl")]
assert len(rows) == 24 and all(r["batch_size"] in (0, 2) for r in rows if r["model"] != "val-4x384"), len(rows)
searches = {f"{s}@{m}" for s in ("exact", "exact+split") for m in ("70MiB", "95MiB")}
uniform = {"ddp", "fsdp", "fsdp+ckpt", "zero2"}
assert {r["strategy"] for r in rows if r["model"] == "probe-3x320"} == uniform | searches
assert {r["strategy"] for r in rows if r["model"] == "probe-8x192"} == uniform
assert {r["strategy"] for r in rows if r["model"] == "probe-2x448"} == uniform
assert {(r["strategy"], r["batch_size"]) for r in rows if r["model"] == "val-4x384"} == {
    (s, b) for s in uniform for b in (1, 3)}
assert all(json.loads(r["measurement"]["group"]) == {"model": r["model"], "batch": 2 if r["model"] != "val-4x384" else r["batch_size"]}
           for r in rows if r["feasible"])
assert all(r["feasible"] for r in rows if r["strategy"] not in searches)
# A plan a group already has (the search finding a uniform plan) counts once: the first by index.
# Infeasible searches (nothing fits the cap) have no steps.
seen, used = set(), []
for r in sorted(rows, key=lambda r: r["index"]):
    if not r["feasible"]:
        continue
    key = (json.dumps(r["measurement"]["group"], sort_keys=True), r["plan_summary"])
    if key not in seen:
        seen.add(key)
        used.append(r)
assert sorted(c["row_indices"]) == sorted(r["index"] for r in used), (c["row_indices"], len(used))
groups = {}
for r in used:
    sim = [e for e in r["evaluations"] if e["evaluator"] == "sim"][0]
    groups.setdefault(json.dumps(r["measurement"]["group"], sort_keys=True), []).append(
        (sim["iteration_time_s"], sim["drawn_time_s"], r["measurement"]["steps_s"]))
v = drawn = noise = 0.0
dof = 0
for g in groups.values():
    m = min(len(s) for _, _, s in g)
    pace = [sum(math.log(s[k]) for _, _, s in g) / len(g) for k in range(m)]
    res = []
    for p, _, s in g:
        e = [math.log(s[k]) - pace[k] for k in range(m)]
        res.append(statistics.median(e) - math.log(p))
        noise += math.pi / 2 * statistics.variance(e) / m
    mean = sum(res) / len(res)
    v += sum((x - mean) ** 2 for x in res)
    draws = len(g[0][1])
    for d in range(draws):
        x = [math.log(dr[d] / p) for p, dr, _ in g]
        mx = sum(x) / len(x)
        drawn += sum((a - mx) ** 2 for a in x) / draws
    dof += len(g) - 1
v, drawn, noise = v / dof, drawn / dof, noise / len(used)
assert c["dof"] == dof >= 15 and c["groups"] == 5 and c["plans"] == len(used), c  # 4 uniform plans a group at least
for k, want in (("variance", v), ("drawn", drawn), ("noise", noise)):
    assert abs(c[k] - want) <= 1e-9 * max(1.0, abs(want)), (k, c[k], want)
assert abs(c["sigma"] - math.sqrt(max(0.0, v - noise - drawn))) < 1e-9, (c["sigma"], v, noise, drawn)'
# The step level: each group's (model and micro-batch) mean of ln(median step / simulated step), each
# model's mean of its groups (val-4x384 has two), e^(the four models' mean); the spread a further
# model's group may take, var(models) (1 + 1/4) + within (1 - 1/n), within val-4x384's two groups'
# variance (one degree of freedom), n = 5/4 groups a model; to 3 degrees of freedom. Each model's own
# level: e^(its mean), spread sqrt(within (1 + 1/n_w)), to the one degree of freedom within.
jcheck "the step level: the mean of the models' mean ln(median step / simulated), and their spread" probes.json '
import json, math, statistics
c = j["provenance"]["fit"]["composition"]
used = [json.loads(l) for l in open("probes.probes/rows.jsonl")]
used = [r for r in used if r["index"] in c["row_indices"]]
by = {}
for r in used:
    sim = [x for x in r["evaluations"] if x["evaluator"] == "sim"][0]["iteration_time_s"]
    by.setdefault(r["model"], {}).setdefault(r["measurement"]["group"], []).append(
        math.log(statistics.median(r["measurement"]["steps_s"]) / sim))
groups = {m: [sum(v) / len(v) for v in gs.values()] for m, gs in by.items()}
assert sorted(len(v) for v in groups.values()) == [1, 1, 1, 2] and len(c["level_groups"]) == 5, c["level_groups"]
g = {m: sum(v) / len(v) for m, v in groups.items()}
within = statistics.variance(groups["val-4x384"])
assert abs(c["level"] - math.exp(sum(g.values()) / 4)) < 1e-9, (c["level"], g)
want = math.sqrt(statistics.variance(g.values()) * (1 + 1 / 4) + within * (1 - 4 / 5))
assert abs(c["level_sigma"] - want) < 1e-9, (c["level_sigma"], want)
assert c["level_dof"] == 3 and c["level_workloads"] == 4, c
own = c["level_models"]
assert set(own) == set(g), own
for m, v in groups.items():
    assert abs(own[m]["level"] - math.exp(g[m])) < 1e-9, (m, own[m], g[m])
    assert abs(own[m]["level_sigma"] - math.sqrt(within * (1 + 1 / len(v)))) < 1e-9, (m, own[m])
    assert own[m]["level_dof"] == 1 and own[m]["groups"] == len(v), own[m]
assert c["planned"] == {"models": ["val-4x384"], "batches": [1, 3]}, c["planned"]'
contains "the summary gives the composition error" probes.out "composition    " "between strategies"
contains "the summary gives the step level" probes.out "step level     " "5 groups of 4 models" \
  "to 3 degrees of freedom" "in place of the repeats' drift"
contains "the summary gives the planned model's own level" probes.out "model level    val-4x384 " \
  "(2 micro-batches): its plans are priced at it" "to 1 degree of freedom)"
for f in validation.csv summary.json; do
  [[ -s probes.probes/$f ]] && ok "the probes leave $f" || not_ok "the probes leave $f"
done
# Drawn into the intervals: with a composition error, fsdp and ddp (different strategies) move apart in
# every draw, so the speedup interval of one over the other is wider than with it taken out.
python3 - "$TMP" <<'PY' || not_ok "a copy of probes.json without its composition error"
import json, sys
j = json.load(open(sys.argv[1] + "/probes.json"))
j["provenance"]["fit"]["composition"]["sigma"] = 0.2
json.dump(j, open(sys.argv[1] + "/wide.json", "w"))
j["provenance"]["fit"]["composition"].update(level=1.25, level_sigma=0.0)
del j["provenance"]["fit"]["composition"]["level_models"]  # else probe-3x320 is priced at its own
json.dump(j, open(sys.argv[1] + "/level.json", "w"))
del j["provenance"]["fit"]["composition"]
json.dump(j, open(sys.argv[1] + "/bare.json", "w"))
PY
for v in wide bare level; do
  run "pplan$v" "$OSDP" plan --model probe-3x320 --cluster cpu-2 --strategy fsdp --batch 2 --baseline ddp \
    --calibration "$v.json" --json
done
expect_rc "plan under the composition error" pplanwide 0
jcheck "the composition error widens the speedup interval between two strategies" pplanwide.out '
import json
bare = json.load(open("pplanbare.out"))
def reach(doc):
    lo, hi = doc["baselines"][0]["speedup_interval"]
    return hi / lo
assert reach(j) > reach(bare) * 1.3, (reach(j), reach(bare))'
# A plan of the probed model is priced at that model's own level: its step is level_models' level over
# the level across models times the step under a copy without the own levels, and its file's
# calibration says whose level it is.
python3 - "$TMP" <<'PY' || not_ok "a copy of probes.json without the models' own levels"
import json, sys
j = json.load(open(sys.argv[1] + "/probes.json"))
del j["provenance"]["fit"]["composition"]["level_models"]
json.dump(j, open(sys.argv[1] + "/across.json", "w"))
PY
for v in probes across; do
  run "pval$v" "$OSDP" plan --model val-4x384 --cluster cpu-2 --strategy fsdp --batch 2 --baseline ddp \
    --calibration "$v.json" --json --out "pval$v.json"
done
expect_rc "plan of the probed model at its own level" pvalprobes 0
jcheck "the probed model's plans are priced at its own level" pvalprobes.out '
import json
c = json.load(open("probes.json"))["provenance"]["fit"]["composition"]
across = json.load(open("pvalacross.out"))
ratio = c["level_models"]["val-4x384"]["level"] / c["level"]
assert abs(j["iteration_time_s"] / across["iteration_time_s"] - ratio) < 1e-6, (j["iteration_time_s"], across["iteration_time_s"], ratio)
b, bb = j["baselines"][0], across["baselines"][0]
assert abs(b["iteration_time_s"] / bb["iteration_time_s"] - ratio) < 1e-6, (b, bb)
own = json.load(open("pvalprobes.json"))["calibration"]["provenance"]["fit"]["composition"]
assert own["level_of"] == "val-4x384" and own["level"] == c["level_models"]["val-4x384"]["level"], own
assert "level_of" not in json.load(open("pvalacross.json"))["calibration"]["provenance"]["fit"]["composition"]'
# A step level of 1.25 scales every price the calibration gives (this one prices every collective and
# kernel of an fsdp step): the step is 1.25 times the bare calibration's, and so is ddp's.
expect_rc "plan under a step level" pplanlevel 0
jcheck "the step level scales the predicted step" pplanlevel.out '
import json
bare = json.load(open("pplanbare.out"))
assert abs(j["iteration_time_s"] / bare["iteration_time_s"] - 1.25) < 1e-6, (j["iteration_time_s"], bare["iteration_time_s"])
b, bb = j["baselines"][0], bare["baselines"][0]
assert abs(b["iteration_time_s"] / bb["iteration_time_s"] - 1.25) < 1e-6, (b, bb)'

# The rings of nodes: 4 ranks as 2 nodes of 2. The file gets a "levels" block with both levels and
# all three collectives; plan and simulate price a two-level plan by it and agree to the tick
# (prefetch 0), and the inter segments price the inter-node legs.
# Sizes from 64 KiB: 4 ranks share the 2 cores here, and a busy machine makes the smallest messages
# noise (a 1 KiB reduce-scatter segment fitted at 0.33 MB/s under load, which the file refuses).
run levels "$OSDP" calibrate -np 4 --per-node 2 --quick --min-size 64KiB --quiet --mpirun-args "--oversubscribe" \
  --out levels.json
expect_rc "calibrate -np 4 --per-node 2" levels 0
jcheck "--per-node 2: intra and inter segments for every collective, recorded per_node" levels.json '
l = j["levels"]
assert l["per_node"] == 2 and j["provenance"]["options"]["per_node"] == 2, l
for level in ("intra", "inter"):
    assert set(l[level]) == {"allgather", "reducescatter", "allreduce", "alltoall"}, (level, l[level].keys())
    for segs in l[level].values():
        assert segs and all(s["alpha"] >= 0 and s["bandwidth"] > 0 for s in segs), segs
assert set(j["collectives"]) == {"allgather", "reducescatter", "allreduce", "alltoall"}
'
contains "the summary lists the rings' segments" levels.out "rings of nodes of 2 ranks" "all-gather intra" "reduce-scatter inter"
run lplan "$OSDP" plan --model val-nd-8x256 --cluster lab-2x2 --strategy fsdp-2level --batch 2 --calibration levels.json \
  --out lplan.json --json
expect_rc "plan a two-level plan with the per-level calibration" lplan 0
run lsim "$OSDP" simulate --plan lplan.json --json
expect_rc "simulate it" lsim 0
jcheck "simulated as priced by the per-level segments: the step within 1e-9 of the analytic one" lsim.out '
assert abs(j["relative_difference"]["iteration_time"]) < 1e-9, j["relative_difference"]'
# The inter segments price the inter-node legs, linearly in their inverse bandwidth. From the measured
# file with the inter alphas set to 0: A as is, B with every inter bandwidth / 10, C / 20. The simulated
# communication time is intra + k * inter for k = 1, 10, 20, so (C - A) / (B - A) = 19 / 9 exactly.
python3 - "$TMP" <<'PY' || not_ok "scaled copies of levels.json"
import json, sys
d = sys.argv[1]
for name, k in (("A", 1), ("B", 10), ("C", 20)):
    j = json.load(open(d + "/levels.json"))
    for segs in j["levels"]["inter"].values():
        for s in segs:
            s["alpha"], s["bandwidth"] = 0.0, s["bandwidth"] / k
    json.dump(j, open(f"{d}/levels{name}.json", "w"))
PY
for v in A B C; do
  run "lplan$v" "$OSDP" plan --model val-nd-8x256 --cluster lab-2x2 --strategy fsdp-2level --batch 2 \
    --calibration "levels$v.json" --out "lplan$v.json" --json
  run "lsim$v" "$OSDP" simulate --plan "lplan$v.json" --json
done
expect_rc "plan and simulate by the scaled inter segments" lsimC 0
python3 - "$TMP" <<'PY' && ok "the inter segments price the inter legs: (C - A) / (B - A) = 19/9" \
  || not_ok "the inter segments do not price the inter legs linearly"
import json, sys
d = sys.argv[1]
c = {v: json.load(open(f"{d}/lsim{v}.out"))["comm_busy_s"] for v in "ABC"}
assert c["B"] > c["A"], c
ratio = (c["C"] - c["A"]) / (c["B"] - c["A"])
assert abs(ratio - 19 / 9) < 1e-6, (ratio, c)
PY

# Under mpirun itself (no relaunch); -np must then match the job.
run inside mpirun -np 2 --oversubscribe "$OSDP" calibrate --quick --quiet --out inside.json
expect_rc "mpirun -np 2 osdp calibrate --quick" inside 0
jcheck "under mpirun: 2 ranks, default name from the file" inside.json '
assert j["provenance"]["world_size"] == 2 and j["name"] == "inside", (j["provenance"]["world_size"], j["name"])'
run mismatch mpirun -np 2 --oversubscribe "$OSDP" calibrate -np 3 --quick --out mismatch.json
expect_rc "mpirun -np 2 osdp calibrate -np 3" mismatch 2
contains "-np against the job's size: the message says so" mismatch.err "-np 3 but mpirun started 2 ranks"
[[ ! -e mismatch.json ]] && ok "no file after a refused run" || not_ok "no file after a refused run"

# A rank that hangs in a collective: the other one times out, names the operation and aborts the job.
run hang env OSDP_INJECT_FAULT="rank=1,op=calibrate all-reduce,kind=hang" \
  "$OSDP" calibrate -np 2 --quick --quiet --timeout 2 --out hang.json
expect_rc "a hung rank aborts the job" hang 4
contains "the message names the waiting rank and the operation" hang.err "rank 0" "all-reduce"
[[ ! -e hang.json ]] && ok "no file after an aborted run" || not_ok "no file after an aborted run"

finish
