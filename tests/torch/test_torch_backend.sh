#!/usr/bin/env bash
# The torch backend end to end (issue 15): `osdp validate --backend torch` runs plans in PyTorch FSDP2
# on 2 CPU ranks (gloo, torchrun) and writes the rows, CSV and summary of the other backends;
# `osdp calibrate --backend torch` fits torch's own collectives and kernels into a calibration that
# osdp plan reads; a rank that dies, a Python without torch and options the backend does not take
# are errors with a message. Times are not asserted (CI machines are shared): the memory at rest is,
# to the byte, against the closed form derived here from the plan's operators.
# Usage: OSDP=path/to/osdp bash test_torch_backend.sh VENV
set -uo pipefail
VENV=${1:?usage: test_torch_backend.sh VENV}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=../cli/harness.sh
source "$ROOT/tests/cli/harness.sh"
cd "$TMP" || exit 1
export OSDP_PYTHON="$VENV/bin/python"

# A small GPT of the gpt family (the check's reference, osdp's executor on the global batch inside
# osdp, is the slowest part under the sanitizers' build). Three plans on cpu-2: FSDP, DDP (every
# operator REPLICATE) and the exact search at 10 MiB, which splits and checkpoints (the test reads
# what it chose).
cat >tiny.json <<'JSON'
{"schema_version": 1, "name": "tiny-4x128", "description": "the torch backend's test model", "seq": 64,
 "vocab": 1024, "layers": 4, "hidden": 128, "heads": 4, "precision": "fp32", "dropout": false}
JSON
run p1 "$OSDP" plan --model tiny.json --cluster cpu-2 --strategy fsdp --batch 2 --out fsdp.json
run p2 "$OSDP" plan --model tiny.json --cluster cpu-2 --strategy ddp --batch 2 --out ddp.json
run p3 "$OSDP" plan --model tiny.json --cluster cpu-2 --split-max 4 --memory 10MiB --data-parallel --out exact.json
expect_rc "three plans of tiny-4x128" p3 0
jcheck "the exact plan splits one operator and checkpoints one" exact.json '
assert any(o["split"] > 1 for o in j["operators"]) and any(o["checkpoint"] for o in j["operators"]), j["operators"]'
run v "$OSDP" validate --backend torch --plan fsdp.json --plan ddp.json --plan exact.json --out res \
  --warmup 1 --iterations 5
if [[ $RC -eq 0 || $RC -eq 5 || $RC -eq 6 ]]; then ok "validate --backend torch ran every plan (exit $RC)"; else
  not_ok "validate --backend torch: exit $RC" "$(tail -n 80 "$TMP/v.err")"; fi
contains "the summary line names the job and the memory at rest" v.out "osdp validate: plans: 3 plans on 2 ranks" \
  "memory at rest |error| max 0.00%" "one step in torch against the unsharded step, 3 plans"
# FSDP2 shards every parameter's first dimension over the 2 ranks (all even here): a rank holds P/2 of
# a sharded operator and P of a replicated one, each parameter with its gradient and Adam's two
# moments, 4 + 4 + 8 bytes.
for p in fsdp ddp exact; do "$OSDP" export $p.json --to fsdp2 --out $p.x >/dev/null; done  # each module's parameters
jcheck "rows: 5 timed steps each, memory at rest to the byte, a loss near ln(vocab) after one step" res/summary.json '
import json
rows = [json.loads(l) for l in open(args[0])]
assert len(rows) == 3, len(rows)
model = json.load(open(args[1]))
vocab = model["vocab"]
for r, plan_file in zip(sorted(rows, key=lambda r: r["index"]), args[2:]):
    export = json.load(open(plan_file.replace(".json", ".x/fsdp2_plan.json")))
    m = r["measurement"]
    assert len(m["steps_s"]) == 5 and min(m["steps_s"]) > 0, m["steps_s"]
    mods = export["modules"]
    assert all(x["parameters"] % 2 == 0 for x in mods)
    want = sum(16 * (x["parameters"] if x["mesh"] == "replicate" else x["parameters"] // 2) for x in mods)
    assert m["predicted_state_bytes"] == want, (plan_file, m["predicted_state_bytes"], want)
    assert m["state_bytes"] == want, (plan_file, m["state_bytes"], want)
    assert m["memory_error"] == 0 and m["peak_bytes"] == 0
    assert abs(m["loss"] - math.log(vocab)) < 1.0, (m["loss"], math.log(vocab))
    # One step in FSDP2 on the executor arithmetic equals the executor itself (fp32 tolerances).
    assert 0 <= m["check_loss_error"] <= 1e-5 and 0 <= m["check_grad_diff"] <= 1e-3, m
    assert 0 <= m["check_weight_diff"] <= 5e-5, m
    ev = {e["evaluator"]: e for e in r["evaluations"]}
    assert ev["measured"]["iteration_time_s"] == sorted(m["steps_s"])[2]
' res/rows.jsonl tiny.json fsdp.json ddp.json exact.json
jcheck "summary.json names the torch backend and the Python it ran" res/summary.json '
p = j["provenance"]
assert p["backend"] == "torch (gloo)" and p["python"].endswith("/bin/python"), p
assert p["backend_version"].startswith("torch 2.") and p["device"] == "cpu (1 thread per rank)", p
assert j["plans"] == 3 and j["verdict"] in ("pass", "fail", "inconclusive"), j["plans"]'
contains "validation.csv has the states columns" res/validation.csv "predicted_state_bytes,measured_state_bytes,loss,plan"

# --resume keeps the finished rows and runs nothing.
run resume "$OSDP" validate --backend torch --plan fsdp.json --plan ddp.json --plan exact.json --out res --resume
if grep -q "running" "$TMP/resume.err"; then not_ok "--resume ran a finished plan again" "$(cat "$TMP/resume.err")"; else
  ok "--resume: every row was kept, no plan ran again"; fi

# The check fails when torch steps differently (twice the learning rate: every weight moves about
# 1e-3 further): exit 5 even where the timings are noise, naming the plan and the operators.
OSDP_TORCH_TEST_LR_SCALE=2 run differs "$OSDP" validate --backend torch --plan fsdp.json --out differs --iterations 5
expect_rc "a torch step that differs from osdp's executor" differs 5
contains "the failure names the plan and what differs" differs.err "one step in torch differs from the unsharded step" \
  "fsdp b=2" "largest weight difference in"
run nocheck "$OSDP" validate --backend torch --plan fsdp.json --out nocheck --iterations 5 --no-check
if [[ $RC -eq 0 || $RC -eq 5 || $RC -eq 6 ]]; then ok "validate --no-check ran (exit $RC)"; else
  not_ok "validate --no-check: exit $RC" "$(tail -n 80 "$TMP/nocheck.err")"; fi
jcheck "--no-check: no plan checked" nocheck/summary.json 'assert j["numerics"]["checked"] == 0, j["numerics"]'

# A rank that dies ends the job with exit 4, naming the job and where rank 0 was.
OSDP_TORCH_TEST_FAIL_RANK=1 run dies "$OSDP" validate --backend torch --plan fsdp.json --out dead --iterations 5 \
  --no-check
expect_rc "a rank that dies" dies 4
contains "the message says the torch job failed" dies.err "the torch job (2 ranks" "failed with exit status"
contains "the rank's own error is shown" dies.err "rank 1 fails on purpose"

# Errors before anything runs: exit 2.
run nopy "$OSDP" validate --backend torch --plan fsdp.json --out x --python /bin/false
expect_rc "a Python without torch" nopy 2
contains "the message says what to do" nopy.err "cannot import torch" "setup-python.sh"
run tasks "$OSDP" validate --backend torch --plan fsdp.json --out x --tasks
expect_rc "--tasks with the torch backend" tasks 2
run np "$OSDP" validate --backend torch --plan fsdp.json --out x -np 4
expect_rc "-np 4 for a plan of 2 ranks" np 2
run pyelse "$OSDP" validate --plan fsdp.json --out x --python /bin/false
expect_rc "--python without --backend torch" pyelse 2
run calnp "$OSDP" calibrate --backend torch --quick
expect_rc "calibrate --backend torch without -np" calnp 2

# Calibration: the three collectives, the kernels, and a file osdp plan reads.
# From 64 KiB: below it a reduce-scatter (a difference of two timings) is mostly gloo's noise.
# With the probes (plans of probe-3x320, probe-8x192 and probe-2x448 run whole by torchrun;
# test_calibrate_cli.sh recomputes the fit from the rows): the composition fit over their 8 + 4 + 4
# plans of micro-batch 2 (--quick; a search's plan that repeats a uniform one counts once, one that does
# not fit its cap not at all: at least the 4 uniform strategies of each model), in 3 groups, and a step
# level from them.
run cal "$OSDP" calibrate --backend torch -np 2 --quick --min-size 64KiB --probes on --out cal/torch.json
expect_rc "calibrate --backend torch -np 2 --quick --min-size 64KiB --probes on" cal 0
jcheck "the probes ran in torch: the composition fit over their distinct plans in 3 groups" cal/torch.json '
import json, math
c = j["provenance"]["fit"]["composition"]
assert 12 <= c["plans"] <= 16 and c["groups"] == 3 and c["dof"] == c["plans"] - 3, c
assert abs(c["sigma"] - math.sqrt(max(0.0, c["variance"] - c["noise"] - c["drawn"]))) < 1e-12, c
g = [math.log(v) for v in c["level_groups"].values()]
assert len(g) == 3 and abs(c["level"] - math.exp(sum(g) / 3)) < 1e-9, c
assert c["level_dof"] == 2 and abs(c["level_sigma"] - math.sqrt(sum((x - sum(g) / 3) ** 2 for x in g) / 2 * 4 / 3)) < 1e-9, c
rows = [json.loads(l) for l in open("cal/torch.probes/rows.jsonl")]
assert len(rows) == 16 and all(len(r["measurement"]["steps_s"]) == 5 for r in rows if r["feasible"]), len(rows)'
jcheck "the calibration: every collective fitted, torch named, the points kept" cal/torch.json '
assert set(j["collectives"]) == {"allgather", "reducescatter", "allreduce"}, list(j["collectives"])
for k in ("allgather", "reducescatter", "allreduce"):
    assert len(j["collectives"][k]) >= 1, k
p = j["provenance"]
assert p["backend"] == "torch (gloo)" and p["backend_version"].startswith("torch "), p
assert j["compute"]["fp32_flops"] > 0
g = p["gemm_operands"]  # GEMM calls rotate over twice the last-level cache, at least 64 MiB
assert g["rotation_bytes"] == max(64 << 20, 2 * g["last_level_cache_bytes"]), g'
if [[ -s cal/torch.measurements.csv ]] && grep -q "^all-gather," cal/torch.measurements.csv; then
  ok "the raw points beside it"; else not_ok "the raw points beside it" "$(ls cal)"; fi
# The all-reduce is FSDP2's gradient reduction timed in place; what a REPLICATE module's step pays
# beyond it and its kernels is its own sweep, at the same sizes, fitted into the compute block.
jcheck "the REPLICATE copies fitted beside the in-place all-reduce" cal/torch.json '
c, f = j["compute"], j["provenance"]["fit"]
assert c["replicate_bandwidth"] > 0 and 0 <= c["replicate_overhead"] < 1, c
assert f["replicate"]["points"] >= 3, f.get("replicate")'
if python3 - cal/torch.measurements.csv <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
sizes = lambda s: sorted(float(r["bytes"]) for r in rows if r["sweep"] == s)
ar = sizes("all-reduce")
assert ar and ar == sizes("replicate-copies"), (ar, sizes("replicate-copies"))
assert all(float(r["seconds"]) > 0 for r in rows if r["sweep"] == "all-reduce")
PY
then ok "an all-reduce and a replicate-copies point at every size"
else not_ok "an all-reduce and a replicate-copies point at every size" "$(grep -c . cal/torch.measurements.csv) lines"; fi
# Every repetition kept: as many as the point has; a timed point's median is its time (a derived one,
# the reduce-scatter and the copies, is a difference of medians, each pass's difference listed).
if msg=$(python3 - cal/torch.measurements.csv 2>&1 <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows:
    t = [float(x) for x in r["times_s"].split()]
    assert len(t) == int(r["repeats"]), r
    if r["sweep"] not in ("reduce-scatter", "replicate-copies"):
        assert abs(statistics.median(t) - float(r["seconds"])) <= 1e-8 * float(r["seconds"]), r
PY
); then ok "each repetition of every point in the raw points"
else not_ok "each repetition of every point in the raw points" "$msg"; fi
run plan "$OSDP" plan --model val-nd-8x256 --cluster cpu-2 --data-parallel --calibration cal/torch.json
expect_rc "osdp plan --calibration with the torch calibration" plan 0
finish
