#!/usr/bin/env bash
# `osdp models` and `osdp clusters` with $OSDP_DATA_DIR added to the built-ins: the union is listed, a
# name there shadows the built-in (its path and the file it hides are shown), a file that does not
# load is skipped with a warning on stderr naming file and JSON pointer, and the exit status stays 0;
# loading that file by name for a plan still fails.
#   OSDP=<path to the osdp binary> OSDP_DATA_DIR=<repo>/data bash tests/cli/test_catalog_cli.sh
set -euo pipefail

: "${OSDP:?set OSDP to the osdp binary}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILTIN=$(cd "${OSDP_DATA_DIR:-$HERE/../../data}" && pwd)  # the build's data/, also the built-in one
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=harness.sh
source "$HERE/harness.sh"

# --- OSDP_DATA_DIR is the built-in directory itself: each name once, all built-in --------------------

export OSDP_DATA_DIR=$BUILTIN
run plain "$OSDP" models --json
expect_rc "models --json with OSDP_DATA_DIR = the built-in data/" plain 0
jcheck "each built-in model once, source built-in, path in data/models, shadowing nothing" "$TMP/plain.out" '
import os
names = [e["name"] for e in j]
stems = sorted(f[:-5] for f in os.listdir(os.path.join(args[0], "models")) if f.endswith(".json"))
assert names == stems, (names, stems)
for e in j:
    assert e["source"] == "built-in" and e["shadows"] == [], e
    assert os.path.samefile(e["path"], os.path.join(args[0], "models", e["name"] + ".json")), e["path"]' "$BUILTIN"
if [[ -s $TMP/plain.err ]]; then not_ok "no warning on stderr" "$(cat "$TMP/plain.err")"; else ok "no warning on stderr"; fi

# --- a directory of its own: one new model, one shadowing gpt2-1.5b, two bad files -------------------

D=$TMP/data
mkdir -p "$D/models" "$D/clusters"
python3 - "$BUILTIN" "$D" <<'PY'
import json, os, sys
builtin, d = sys.argv[1:]
gpt2 = json.load(open(os.path.join(builtin, "models", "gpt2-1.5b.json")))
json.dump(dict(gpt2, name="my-model", layers=3), open(os.path.join(d, "models", "my-model.json"), "w"))
json.dump(dict(gpt2, layers=2), open(os.path.join(d, "models", "gpt2-1.5b.json"), "w"))
json.dump(dict(gpt2, name="typo", layerz=3), open(os.path.join(d, "models", "typo.json"), "w"))
cpu2 = json.load(open(os.path.join(builtin, "clusters", "cpu-2.json")))
json.dump(dict(cpu2, name="my-cpu-4", devices_per_node=4), open(os.path.join(d, "clusters", "my-cpu-4.json"), "w"))
PY
printf '{"schema_version": 1, "name": ' >"$D/models/broken.json"
printf '{"schema_version": 1, "name": "bad"}' >"$D/clusters/bad.json"
export OSDP_DATA_DIR=$D

run models "$OSDP" models --json
expect_rc "models --json with a bad file in OSDP_DATA_DIR" models 0
jcheck "models --json: built-ins + my-model, gpt2-1.5b from OSDP_DATA_DIR, the bad files left out" \
  "$TMP/models.out" '
import os
builtin, d = args
m = {e["name"]: e for e in j}
stems = {f[:-5] for f in os.listdir(os.path.join(builtin, "models")) if f.endswith(".json")}
assert sorted(m) == sorted(stems | {"my-model"}), sorted(set(m) ^ (stems | {"my-model"}))
assert len(m) == len(j), "a name listed twice"
g = m["gpt2-1.5b"]
assert g["path"] == os.path.join(d, "models", "gpt2-1.5b.json"), g["path"]
assert g["source"] == "OSDP_DATA_DIR" and g["layers"] == 2, g
assert len(g["shadows"]) == 1 and os.path.samefile(g["shadows"][0], os.path.join(builtin, "models", "gpt2-1.5b.json")), g
mine = m["my-model"]
assert mine["path"] == os.path.join(d, "models", "my-model.json") and mine["source"] == "OSDP_DATA_DIR", mine
assert mine["layers"] == 3 and mine["shadows"] == [], mine
assert m["bert-large"]["source"] == "built-in" and m["bert-large"]["layers"] == 24, m["bert-large"]' "$BUILTIN" "$D"
contains "models --json: stderr names the unparsable file" "$TMP/models.err" \
  "osdp models: warning: skipped $D/models/broken.json: " "invalid JSON"
contains "models --json: stderr names the unknown key's file and pointer" "$TMP/models.err" \
  "osdp models: warning: skipped $D/models/typo.json:/layerz: "

run models_text "$OSDP" models
expect_rc "models (text) with a bad file in OSDP_DATA_DIR" models_text 0
pcheck "models (text): gpt2-1.5b shows its file and the built-in it shadows; my-model its file" \
  "$TMP/models_text.out" "
rows = {l.split()[0]: l for l in text.splitlines()[1:]}
assert rows['gpt2-1.5b'].endswith('[$D/models/gpt2-1.5b.json, shadows $BUILTIN/models/gpt2-1.5b.json]'), rows['gpt2-1.5b']
assert rows['my-model'].endswith('[$D/models/my-model.json]'), rows['my-model']
assert '[' not in rows['bert-large'], rows['bert-large']
assert 'broken' not in rows and 'typo' not in rows, sorted(rows)"
contains "models (text): the warnings go to stderr" "$TMP/models_text.err" \
  "skipped $D/models/broken.json: " "skipped $D/models/typo.json:/layerz: "

run clusters "$OSDP" clusters --json
expect_rc "clusters --json with a bad file in OSDP_DATA_DIR" clusters 0
jcheck "clusters --json: built-ins + my-cpu-4 (4 ranks), bad left out" "$TMP/clusters.out" '
import os
builtin, d = args
m = {e["name"]: e for e in j}
stems = {f[:-5] for f in os.listdir(os.path.join(builtin, "clusters")) if f.endswith(".json")}
assert sorted(m) == sorted(stems | {"my-cpu-4"}), sorted(set(m) ^ (stems | {"my-cpu-4"}))
c = m["my-cpu-4"]
assert c["world_size"] == 4 and c["source"] == "OSDP_DATA_DIR", c
assert c["path"] == os.path.join(d, "clusters", "my-cpu-4.json"), c["path"]
assert m["cpu-2"]["source"] == "built-in" and m["cpu-2"]["world_size"] == 2, m["cpu-2"]' "$BUILTIN" "$D"
contains "clusters --json: stderr names the invalid cluster" "$TMP/clusters.err" \
  "osdp clusters: warning: skipped $D/clusters/bad.json"

run clusters_text "$OSDP" clusters
expect_rc "clusters (text) with a bad file in OSDP_DATA_DIR" clusters_text 0
contains "clusters (text): my-cpu-4 with its file" "$TMP/clusters_text.out" "[$D/clusters/my-cpu-4.json]"
contains "clusters (text): the warning goes to stderr" "$TMP/clusters_text.err" "skipped $D/clusters/bad.json"

# --- by name, the bad file is an error; the good ones plan -------------------------------------------

run plan_broken "$OSDP" plan --model broken --cluster cpu-2 --memory 4GiB
expect_rc "plan --model broken (unparsable file in OSDP_DATA_DIR)" plan_broken 2
contains "plan --model broken names the file" "$TMP/plan_broken.err" "$D/models/broken.json: " "invalid JSON"
run plan_typo "$OSDP" plan --model typo --cluster cpu-2 --memory 4GiB
expect_rc "plan --model typo (unknown key)" plan_typo 2
contains "plan --model typo names the file and the pointer" "$TMP/plan_typo.err" "$D/models/typo.json:/layerz"
run plan_mine "$OSDP" plan --model my-model --cluster my-cpu-4 --memory 64GiB --json
expect_rc "plan --model my-model --cluster my-cpu-4 (both from OSDP_DATA_DIR)" plan_mine 0

# --- a colon-separated list: the first directory wins ------------------------------------------------

E=$TMP/first
mkdir -p "$E/models"
python3 -c 'import json,sys; g=json.load(open(sys.argv[1])); g["layers"]=5; json.dump(g, open(sys.argv[2], "w"))' \
  "$BUILTIN/models/gpt2-1.5b.json" "$E/models/gpt2-1.5b.json"
export OSDP_DATA_DIR=$E:$D
run list "$OSDP" models --json
expect_rc "models --json with OSDP_DATA_DIR=first:data" list 0
jcheck "the first directory's gpt2-1.5b wins and hides the other two; my-model from the second" "$TMP/list.out" '
import os
first, d, builtin = args
m = {e["name"]: e for e in j}
g = m["gpt2-1.5b"]
assert g["path"] == os.path.join(first, "models", "gpt2-1.5b.json") and g["layers"] == 5, g
assert g["shadows"][0] == os.path.join(d, "models", "gpt2-1.5b.json"), g["shadows"]
assert len(g["shadows"]) == 2 and os.path.samefile(g["shadows"][1], os.path.join(builtin, "models", "gpt2-1.5b.json")), g
assert m["my-model"]["path"] == os.path.join(d, "models", "my-model.json"), m["my-model"]' "$E" "$D" "$BUILTIN"

finish
