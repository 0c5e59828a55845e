#!/usr/bin/env bash
# osdp export --to fsdp2 end to end (issue 15): a plan with split, checkpointed and ZDP operators
# exported, its files read back (JSON and the Python module agree with the plan), the errors, and the
# bundled example trained with the plan applied under torchrun (2 CPU ranks, gloo), checked against
# an unsharded copy.
# Usage: OSDP=path/to/osdp bash test_export.sh VENV   (VENV: the virtual environment with torch)
set -uo pipefail
VENV=${1:?usage: test_export.sh VENV}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=../cli/harness.sh
source "$ROOT/tests/cli/harness.sh"
cd "$TMP" || exit 1
export OMP_NUM_THREADS=1

# At 74 MiB on cpu-2 the exact plan of val-nd-8x256 splits an attention in two and checkpoints most
# operators, some selectively (derived by the search; the test reads the plan rather than assuming it).
run plan "$OSDP" plan --model val-nd-8x256 --cluster cpu-2 --split-max 4 --memory 74MiB --data-parallel --out p.json
expect_rc "plan val-nd-8x256 on cpu-2 at 74 MiB" plan 0
run export "$OSDP" export p.json --to fsdp2
expect_rc "export p.json --to fsdp2" export 0
contains "the summary names the plan, the mapping and the files" export.out "p.json (val-nd-8x256 on cpu-2, 2 ranks" \
  "by the gpt family's default mapping" "wrote p.fsdp2/fsdp2_plan.json and p.fsdp2/fsdp2_plan.py"
jcheck "every operator in FSDP2's words, as the plan chose it" p.fsdp2/fsdp2_plan.json '
plan = json.load(open(args[0]))
assert j["kind"] == "osdp-fsdp2" and j["schema_version"] == 1
assert j["micro_batch_size"] == plan["batch_size"] and j["world_size"] == 2 and j["nodes"] == 1
assert j["source"]["plan"] == "p.json" and j["model"]["name"] == "val-nd-8x256"
assert j["source"]["name_mapping"] == "the gpt family\x27s default mapping" and j["transformers"] is None
ops = plan["operators"]
assert [m["operator"] for m in j["modules"]] == [o["name"] for o in ops]
kinds = set()
for m, o in zip(j["modules"], ops):
    assert m["mesh"] == ("replicate" if o["mode"] == "replicate" else "world"), (m, o)
    assert m["reshard_after_forward"] == (o["mode"] in ("zdp", "mixed")), (m, o)
    word = {False: "none", True: "full", "selective": "selective"}[o["checkpoint"]]
    assert m["recompute"] == word and m["checkpoint"] == (word != "none"), (m, o)
    if o["split"] > 1:
        assert m["split"] == {"slices": o["split"], "resharded": o["zdp_slices"]}, (m, o)
    else:
        assert m["split"] is None, (m, o)
    kinds.add((o["mode"], o["split"] > 1, o["checkpoint"]))
name = {"layer0.attention": "layers.0.attention", "layer7.mlp": "layers.7.mlp", "embedding": "embedding"}
for m in j["modules"]:
    if m["operator"] in name:
        assert m["path"] == name[m["operator"]] and m["paths"] == [m["path"]], m
assert len(kinds) >= 3, kinds  # the plan mixes kinds of choice: the export is not one setting
' p.json
head -n 3 p.fsdp2/fsdp2_plan.py >header.txt
contains "the Python module's header names plan, model and cluster" header.txt "exported by osdp" "from p.json" \
  "# model val-nd-8x256, cluster cpu-2 (2 ranks: 1 node(s) x 2), strategy exact"
run pyplan "$VENV/bin/python" -c "
import json, sys
sys.path.insert(0, 'p.fsdp2')
import fsdp2_plan
assert fsdp2_plan.PLAN == json.load(open('p.fsdp2/fsdp2_plan.json')), 'PLAN differs from the JSON'
assert fsdp2_plan.MICRO_BATCH_SIZE == fsdp2_plan.PLAN['micro_batch_size']
print('same')"
expect_rc "fsdp2_plan.py imports, and its PLAN is the JSON export" pyplan 0
run out "$OSDP" export p.json --out elsewhere --json
expect_rc "export --out DIR --json" out 0
jcheck "--json: the files written and the export" out.out '
assert j["json"] == "elsewhere/fsdp2_plan.json" and j["python"] == "elsewhere/fsdp2_plan.py", j
assert j["export"]["kind"] == "osdp-fsdp2"'

# Errors: exit 2 and a message naming what is wrong.
run missing "$OSDP" export nope.json
expect_rc "a missing plan file" missing 2
contains "the message names the file" missing.err "nope.json"
run notplan "$OSDP" export "$ROOT/data/models/val-nd-8x256.json"
expect_rc "a model file given as the plan" notplan 2
run target "$OSDP" export p.json --to deepspeed
expect_rc "--to deepspeed" target 2
cat >map.json <<'JSON'
{"schema_version": 1, "rules": [{"operator": "embedding", "module": "tok"},
                                {"operator": "layer(\\d+)\\.attention", "module": "blocks.$1.attn"}]}
JSON
run unmapped "$OSDP" export p.json --map map.json
expect_rc "a mapping that leaves operators out" unmapped 2
contains "the message names the first unmapped operator and the mapping file" unmapped.err \
  "operator layer0.mlp is not mapped" "map.json"
cat >map2.json <<'JSON'
{"schema_version": 1, "rules": [{"operator": "embedding", "module": "tok"},
                                {"operator": "layer(\\d+)\\.(attention|mlp)", "module": "blocks.$1.$2"},
                                {"operator": "head", "module": "out"}]}
JSON
run mapped "$OSDP" export p.json --map map2.json --out mapped
expect_rc "a mapping of every operator" mapped 0
jcheck "the mapped paths" mapped/fsdp2_plan.json '
p = {m["operator"]: m["path"] for m in j["modules"]}
assert p["embedding"] == "tok" and p["layer3.mlp"] == "blocks.3.mlp" and p["layer0.attention"] == "blocks.0.attention", p'

# The bundled example trains with the plan applied, and equals the unsharded model step by step.
run train "$VENV/bin/torchrun" --standalone --nproc_per_node 2 "$ROOT/python/examples/train_gpt.py" p.fsdp2 \
  --steps 2 --check
expect_rc "torchrun --nproc_per_node 2 train_gpt.py p.fsdp2 --check" train 0
contains "two steps, then the check" train.out "step 0: loss" "step 1: loss" "train_gpt: check passed"
run wrongsize "$VENV/bin/torchrun" --standalone --nproc_per_node 1 "$ROOT/python/examples/train_gpt.py" p.fsdp2
if [[ $RC -ne 0 ]] && grep -q "the plan is for 2 ranks; torchrun started 1" "$TMP/wrongsize.err" "$TMP/wrongsize.out"; then
  ok "a job of the wrong size is refused with the plan's size"
else
  not_ok "a job of the wrong size is refused with the plan's size" "$(tail -n 5 "$TMP/wrongsize.err")"
fi
finish
