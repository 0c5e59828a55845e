#!/usr/bin/env bash
# End-to-end checks of `osdp sweep` (run by CTest as the test cli_sweep): the outputs, --jobs, an
# interrupted sweep (kill -9 and SIGINT) resumed with --resume, mpirun with 2 ranks, bad input.
#   OSDP=<path to the osdp binary> OSDP_DATA_DIR=<repo>/data bash tests/cli/test_sweep.sh
# Each check prints "ok - ..." or "not ok - ..." (with the evidence as "#" lines); the last line is
# "N passed, M failed" and the exit status is non-zero when anything failed.
#
# The interrupted runs use the sweep's test hook OSDP_SWEEP_TEST_DELAY_MS (each unit sleeps that many
# milliseconds first), so that a sweep of fast units can be stopped part-way.
set -euo pipefail

: "${OSDP:?set OSDP to the osdp binary}"
case $OSDP in */*) OSDP=$(cd "$(dirname "$OSDP")" && pwd)/$(basename "$OSDP") ;; esac # absolute: the checks run in a temporary directory
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OSDP_DATA_DIR=$(cd "${OSDP_DATA_DIR:-$HERE/../../data}" && pwd)
TMP=$(mktemp -d)
BG=""
trap '[[ -n $BG ]] && kill -9 "$BG" 2>/dev/null; rm -rf "$TMP"' EXIT
cd "$TMP"

# shellcheck source=harness.sh
source "$HERE/harness.sh"

# pycheck DESC CODE ARGS...: python CODE (with sys.argv[1:] in `args`) passes; fails with `assert`.
pycheck() {
  local desc=$1 code=$2 msg
  shift 2
  if msg=$(python3 -c "
import csv, json, math, sys
args = sys.argv[1:]
$code" "$@" 2>&1); then
    ok "$desc"
  else
    not_ok "$desc" "$(printf '%s\n' "$msg" | tail -n 3)"
  fi
}

# start_bg NAME CMD...: runs CMD in the background (stdout, stderr in NAME.out, NAME.err; its exit
# status into NAME.rc when it ends), its pid in BG. The wrapper keeps the shell's "Killed" notice quiet.
start_bg() {
  local name=$1
  shift
  rm -f "$name.pid" "$name.rc"
  (
    "$@" >"$name.out" 2>"$name.err" &
    echo $! >"$name.pid"
    rc=0
    wait $! || rc=$?
    echo $rc >"$name.rc"
  ) 2>/dev/null &
  local i
  for i in $(seq 100); do [[ -s $name.pid ]] && break; sleep 0.05; done
  BG=$(cat "$name.pid")
}

# wait_bg NAME: waits (up to 30 s) for the background run NAME to end; sets RC.
wait_bg() {
  local i
  for i in $(seq 300); do [[ -s $1.rc ]] && break; sleep 0.1; done
  RC=$(cat "$1.rc" 2>/dev/null || echo 999)
  BG=""
}

lines() { if [[ -f $1 ]]; then wc -l <"$1"; else echo 0; fi; }

# wait_rows FILE N: waits (up to 20 s) until FILE has at least N lines.
wait_rows() {
  local i
  for i in $(seq 200); do
    [[ $(lines "$1") -ge $2 ]] && return 0
    sleep 0.1
  done
  return 1
}

# 2 memory limits x 2 models x 2 strategies = 8 units, 2 evaluators: 16 result lines, in the
# data-parallel space (pp, tp and micro-batches pinned at 1: the batch-size scheduler's candidates). At 3GB
# nd-48x1024 fits no plan (its smallest peak is 3.16 GiB), so infeasible lines are covered too.
# (Axes are expanded in the alphabetical order of their names, memory before model; the model varies
# fastest. test_experiments checks that order in detail.)
cat >exp.json <<'EOF'
{"schema_version": 1, "name": "sweep-test", "description": "osdp sweep end-to-end test",
 "base": {"model": "nd-48x1024", "cluster": "titan-rtx-8", "checkpoint": "auto", "pp": 1, "tp": 1, "micro_batches": 1},
 "axes": {"memory": ["3GB", "16GB"], "model": ["nd-48x1024", "gpt2-1.5b"]},
 "strategies": [{"label": "fsdp", "strategy": "fsdp"}, {"label": "exact", "strategy": "exact", "split_max": 2}],
 "baseline": "fsdp", "evaluators": ["analytic", "sim"], "output": "default-out"}
EOF
UNITS=8

# --- an uninterrupted sweep and its outputs ------------------------------------------------------

run A "$OSDP" sweep exp.json --out A
expect_rc "sweep of 8 units into A" A 0
for f in rows.jsonl results.csv candidates.csv summary.json; do
  [[ -f A/$f ]] && ok "A/$f written" || not_ok "A/$f written" "$(ls -la A 2>&1)"
done
if [[ ! -s A.err ]]; then ok "no progress output when stderr is not a terminal"; else not_ok "quiet stderr" "$(cat -A A.err)"; fi
pycheck "results.csv: the header, one line per unit and evaluator in index order, speedup over fsdp" '
rows = list(csv.reader(open("A/results.csv")))
want = ("index,model,cluster,world_size,memory_limit_bytes,strategy,evaluator,feasible,batch_size,"
        "throughput_samples_per_s,iteration_time_s,peak_memory_bytes,min_fit_memory_bytes,plan_summary,"
        "speedup_over_baseline,micro_batches,pp,global_batch,iteration_time_low_s,iteration_time_high_s,"
        "throughput_low,throughput_high").split(",")
assert rows[0] == want, rows[0]
d = [dict(zip(want, r)) for r in rows[1:]]
assert len(d) == 16, len(d)
assert [(int(r["index"]), r["evaluator"]) for r in d] == [(i, e) for i in range(8) for e in ("analytic", "sim")]
# the axes product (axes by name: memory, model), the last axis fastest, strategies innermost
assert [r["model"] for r in d[::4]] == ["nd-48x1024", "gpt2-1.5b"] * 2, [r["model"] for r in d[::4]]
assert [r["memory_limit_bytes"] for r in d[::4]] == ["3000000000"] * 2 + ["16000000000"] * 2, d[::4]
assert {r["strategy"] for r in d[0::4] + d[1::4]} == {"fsdp"} and {r["strategy"] for r in d[2::4] + d[3::4]} == {"exact"}
feasible = [r for r in d if r["feasible"] == "true"]
infeasible = [r for r in d if r["feasible"] == "false"]
assert feasible and infeasible, "expected both feasible and infeasible lines"
for r in infeasible:
    assert r["throughput_samples_per_s"] == r["speedup_over_baseline"] == r["batch_size"] == "", r
    assert float(r["min_fit_memory_bytes"]) > float(r["memory_limit_bytes"]), r
for r in feasible:
    n, b, t = int(r["world_size"]), int(r["batch_size"]), float(r["iteration_time_s"])
    assert math.isclose(float(r["throughput_samples_per_s"]), n * b / t, rel_tol=1e-6), r
    assert float(r["peak_memory_bytes"]) <= float(r["memory_limit_bytes"]) * 1.001, r
    base = next(x for x in d if int(x["index"]) == int(r["index"]) // 2 * 2 and x["evaluator"] == r["evaluator"])
    if base["feasible"] == "true":
        want = float(r["throughput_samples_per_s"]) / float(base["throughput_samples_per_s"])
        assert math.isclose(float(r["speedup_over_baseline"]), want, rel_tol=1e-6), (r, base)
        assert r["strategy"] != "fsdp" or r["speedup_over_baseline"] == "1", r
        assert float(r["speedup_over_baseline"]) >= 1 - 1e-9, r  # exact is never slower than fsdp
    else:
        assert r["speedup_over_baseline"] == "", r'
pycheck "candidates.csv: header, feasible candidates of every feasible unit" '
rows = list(csv.reader(open("A/candidates.csv")))
assert rows[0] == "index,model,strategy,memory_limit_bytes,batch_size,iteration_time_s,peak_memory_bytes,throughput_samples_per_s".split(","), rows[0]
res = list(csv.DictReader(open("A/results.csv")))
feasible = {int(r["index"]) for r in res if r["feasible"] == "true"}
assert {int(r[0]) for r in rows[1:]} == feasible, ({int(r[0]) for r in rows[1:]}, feasible)
for r in rows[1:]:
    assert float(r[6]) <= float(r[3]) * 1.001, r'
pycheck "summary.json: schema_version, tool version and commit, the experiment as read, machine, times, units" '
s = json.load(open("A/summary.json"))
assert s["schema_version"] == 1
assert s["tool"]["version"] and s["tool"]["git_hash"], s["tool"]
assert s["experiment"]["source"] == json.load(open("exp.json")), "experiment source differs from the file"
assert s["experiment"]["file"] == "exp.json", s["experiment"]["file"]
m = s["machine"]
assert m["hostname"] and m["nproc"] >= 1, m
assert s["started_at"] and s["finished_at"] and s["wall_seconds"] >= 0, s
assert s["units"]["total"] == 8 and s["units"]["ran"] == 8 and s["units"]["failed"] == 0, s["units"]
assert s["failed"] == [], s["failed"]'
ver=$("$OSDP" --version | head -n 1)
pycheck "summary.json: the tool version and commit are those of osdp --version ($ver)" '
s = json.load(open("A/summary.json"))
assert s["tool"]["version"] in args[0] and s["tool"]["git_hash"] in args[0], (s["tool"], args[0])' "$ver"

run again "$OSDP" sweep exp.json --out A
expect_rc "sweeping into a directory with rows.jsonl, without --resume" again 2
contains "the message says to pass --resume or --force, or remove the directory" again.err "--resume" "--force" "A/rows.jsonl" "remove"
cp -r A A2
run force "$OSDP" sweep exp.json --out A2 --force
expect_rc "--force starts again in a finished directory" force 0
same "--force: the same results.csv as the first sweep" A/results.csv A2/results.csv
pycheck "--force: rows.jsonl holds each unit once, summary.json counts nothing resumed" '
rows = [json.loads(l) for l in open("A2/rows.jsonl")]
assert sorted(r["index"] for r in rows) == list(range(8)), [r["index"] for r in rows]
s = json.load(open("A2/summary.json"))
assert s["units"]["resumed"] == 0 and s["units"]["ran"] == 8, s["units"]'
run both "$OSDP" sweep exp.json --out A2 --force --resume
expect_rc "--force with --resume is a usage error" both 2
python3 -c "
import json; e = json.load(open('exp.json')); e['evaluators'] = ['analytic', 'measured']
json.dump(e, open('measured.json', 'w'))"
run measured "$OSDP" sweep measured.json --out M
expect_rc "an experiment with the measured evaluator" measured 2
contains "sweep says that osdp validate runs it" measured.err "measured" "osdp validate measured.json -np N"

run default "$OSDP" sweep exp.json
expect_rc "without --out the experiment's output directory is used" default 0
same "results.csv in default-out/ is identical to A's" A/results.csv default-out/results.csv

# --- --jobs: the same bytes ----------------------------------------------------------------------

run B "$OSDP" sweep exp.json --jobs 3 --out B
expect_rc "sweep with --jobs 3 into B" B 0
same "--jobs 3: results.csv identical to the 1-thread run" A/results.csv B/results.csv
same "--jobs 3: candidates.csv identical to the 1-thread run" A/candidates.csv B/candidates.csv

# --- kill -9 part-way, then --resume -------------------------------------------------------------

start_bg C env OSDP_SWEEP_TEST_DELAY_MS=250 "$OSDP" sweep exp.json --jobs 2 --out C
if wait_rows C/rows.jsonl 2; then ok "the sweep writes rows as units finish ($(lines C/rows.jsonl) rows while running)"; else not_ok "rows appear while the sweep runs" "$(ls -la C 2>&1)"; fi
kill -9 "$BG" 2>/dev/null || true
wait_bg C
n=$(lines C/rows.jsonl)
if [[ $n -ge 2 && $n -lt $UNITS && ! -f C/results.csv ]]; then
  ok "kill -9 left an incomplete sweep ($n of $UNITS rows, no results.csv)"
else
  not_ok "kill -9 left an incomplete sweep" "$n rows" "$(ls C)"
fi
printf '{"index": 7, "key": "torn by a kill -9 mid-wri' >>C/rows.jsonl # a torn last line
# What a kill -9 between a temporary write and its rename leaves (a PID no process has: 4194304 is
# above Linux's largest), and a temporary of a live process, which is not osdp's to remove.
echo "half" >C/results.csv.tmp.4194304
echo "live" >"C/notes.tmp.$$"
run C_resume "$OSDP" sweep exp.json --out C --resume
expect_rc "--resume after kill -9 (and a torn last line)" C_resume 0
if [[ ! -e C/results.csv.tmp.4194304 && -e "C/notes.tmp.$$" ]]; then
  ok "--resume removes the temporary a killed run left, and only that"
else
  not_ok "--resume and temporaries" "$(ls C)"
fi
rm -f "C/notes.tmp.$$"
same "resumed after kill -9: results.csv identical to the uninterrupted sweep" A/results.csv C/results.csv
same "resumed after kill -9: candidates.csv identical too" A/candidates.csv C/candidates.csv
pycheck "resumed: summary.json counts the resumed and the rerun units; rows.jsonl holds each unit once" '
s = json.load(open("C/summary.json"))
assert s["units"]["resumed"] == int(args[0]) and s["units"]["ran"] == 8 - int(args[0]), s["units"]
idx = [json.loads(l)["index"] for l in open("C/rows.jsonl")]
assert sorted(idx) == list(range(8)), idx' "$n"
run C_done "$OSDP" sweep exp.json --out C --resume
expect_rc "--resume of a finished sweep" C_done 0
same "resuming a finished sweep rewrites the same results.csv" A/results.csv C/results.csv

# --- SIGINT: the units in flight finish, exit 130, then --resume ---------------------------------

start_bg D env OSDP_SWEEP_TEST_DELAY_MS=250 "$OSDP" sweep exp.json --out D
wait_rows D/rows.jsonl 1 || true
kill -INT "$BG" 2>/dev/null || true
wait_bg D
expect_rc "SIGINT stops the sweep" D 130
n=$(lines D/rows.jsonl)
if [[ $n -ge 1 && $n -lt $UNITS && ! -f D/results.csv ]]; then
  ok "after SIGINT: $n of $UNITS rows, no results.csv"
else
  not_ok "after SIGINT: an incomplete sweep" "$n rows" "$(ls D)"
fi
contains "after SIGINT: the message says how to resume" D.err "interrupted" "--resume" "--out D"
run D_resume "$OSDP" sweep exp.json --out D --resume
expect_rc "--resume after SIGINT" D_resume 0
same "resumed after SIGINT: results.csv identical to the uninterrupted sweep" A/results.csv D/results.csv

# --- a stale row (another experiment's unit at that index) is run again -------------------------

mkdir -p S
python3 -c '
import json
rows = [json.loads(l) for l in open("A/rows.jsonl")]
rows[0]["key"] = rows[0]["key"].replace("nd-48x1024", "nd-96x1024")
rows[0]["feasible"] = not rows[0]["feasible"]
with open("S/rows.jsonl", "w") as f:
    for r in rows: f.write(json.dumps(r) + "\n")'
run S "$OSDP" sweep exp.json --out S --resume
expect_rc "--resume with a row whose key does not match its unit" S 0
same "the stale row was run again: results.csv identical" A/results.csv S/results.csv
pycheck "the stale row is not counted as resumed (7 resumed, 1 ran)" '
u = json.load(open("S/summary.json"))["units"]
assert (u["resumed"], u["ran"]) == (7, 1), u'


# --- progress on a terminal ----------------------------------------------------------------------

if command -v script >/dev/null 2>&1; then
  script -qec "$(printf '%q ' "$OSDP" sweep exp.json --out P)" /dev/null >P.tty 2>&1 || true
  contains "progress on a terminal: [done/total], rate and ETA" P.tty "[8/8]" "units/s" "ETA"
else
  echo "ok - skip: progress on a terminal (no script(1))"
fi

# --- mpirun -np 2 --------------------------------------------------------------------------------

if ! command -v mpirun >/dev/null 2>&1; then
  echo "ok - skip: mpirun -np 2 (mpirun is not installed)"
elif ! "$OSDP" --version | grep -q '^MPI: yes'; then
  echo "ok - skip: mpirun -np 2 (osdp was built without MPI)"
else
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  # In a sanitizer build LeakSanitizer reports Open MPI's own allocations (MCA components unloaded by
  # MPI_Finalize, so no suppression can name them): no leak check under mpirun. The runs above check ours.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  run E mpirun -np 2 --oversubscribe "$OSDP" sweep exp.json --out E
  expect_rc "mpirun -np 2 osdp sweep into E" E 0
  same "mpirun -np 2: results.csv identical to the single-process run" A/results.csv E/results.csv
  same "mpirun -np 2: candidates.csv identical" A/candidates.csv E/candidates.csv
  pycheck "mpirun -np 2: summary.json records 2 ranks; rows.jsonl holds all 8 units once" '
s = json.load(open("E/summary.json"))
assert s["machine"]["mpi_ranks"] == 2, s["machine"]
idx = sorted(json.loads(l)["index"] for l in open("E/rows.jsonl"))
assert idx == list(range(8)), idx'
  run E2 mpirun -np 2 --oversubscribe "$OSDP" sweep exp.json --out E --resume --jobs 2
  expect_rc "mpirun -np 2 --resume of a finished sweep" E2 0
  same "mpirun -np 2 --resume: results.csv identical" A/results.csv E/results.csv
  if [[ -e E/rows.rank1.jsonl ]]; then not_ok "a finished MPI sweep leaves rows.rank1.jsonl behind"
  else ok "a finished MPI sweep folds rank 1's row log into rows.jsonl"; fi

  # kill -9 of the whole MPI job part-way: rank 1's finished rows are on disk in its own log
  # (rows.rank1.jsonl) as they finish, not only in its memory; --resume folds them in and runs only
  # what no rank finished.
  OSDP_SWEEP_TEST_DELAY_MS=400 setsid mpirun -np 2 --oversubscribe -x OSDP_SWEEP_TEST_DELAY_MS \
    "$OSDP" sweep exp.json --out MK >MK.out 2>MK.err &
  FB=$!
  wait_rows MK/rows.rank1.jsonl 2 || true
  pkill -9 -s "$FB" 2>/dev/null || true
  wait "$FB" 2>/dev/null || true
  r1=$(lines MK/rows.rank1.jsonl)
  r0=$(lines MK/rows.jsonl)
  if [[ $r1 -ge 2 && ! -f MK/results.csv ]]; then
    ok "kill -9 of an MPI sweep: rank 1's $r1 finished rows are on disk (rank 0's: $r0)"
  else
    not_ok "kill -9 of an MPI sweep: rank 1's rows" "rank 1: $r1, rank 0: $r0" "$(ls MK)" "$(tail -5 MK.err)"
  fi
  run MK_resume "$OSDP" sweep exp.json --out MK --resume
  expect_rc "--resume after kill -9 of an MPI sweep" MK_resume 0
  same "resumed MPI sweep: results.csv identical to the uninterrupted sweep" A/results.csv MK/results.csv
  pycheck "resumed MPI sweep: rank 1's rows were kept, not run again; its log is folded in" '
s = json.load(open("MK/summary.json"))
assert s["units"]["resumed"] >= int(args[0]), (s["units"], args[0])
import os
assert not os.path.exists("MK/rows.rank1.jsonl")' "$r1"
fi

# --- bad input -----------------------------------------------------------------------------------

python3 -c '
import json
e = json.load(open("exp.json")); e["outptu"] = "x"; json.dump(e, open("bad_key.json", "w"))
e = json.load(open("exp.json")); e["axes"]["memroy"] = ["8GB"]; json.dump(e, open("bad_axis.json", "w"))
e = json.load(open("exp.json")); e["axes"]["model"][1] = "no-such-model"; json.dump(e, open("bad_model.json", "w"))'
run bad_key "$OSDP" sweep bad_key.json --out X
expect_rc "experiment file with an unknown key" bad_key 2
contains "unknown key: the message names the file, the JSON pointer and the key" bad_key.err "bad_key.json" "/outptu" \
  "unknown key"
[[ ! -e X ]] && ok "nothing is written for a bad experiment file" || not_ok "nothing is written for a bad file" "$(ls X)"
run bad_axis "$OSDP" sweep bad_axis.json --out X
expect_rc "experiment file with an unknown axis" bad_axis 2
contains "unknown axis: file and JSON pointer" bad_axis.err "bad_axis.json" "/axes/memroy"
run bad_model "$OSDP" sweep bad_model.json --out F
expect_rc "a unit with an unknown model fails, the others run" bad_model 2
contains "failed units are reported with the message" bad_model.err "no-such-model" "4 of 8 units failed"
pycheck "failed units: listed in summary.json, absent from results.csv, the others present" '
s = json.load(open("F/summary.json"))
assert [f["index"] for f in s["failed"]] == [2, 3, 6, 7], s["failed"]
assert all("no-such-model" in f["message"] for f in s["failed"]), s["failed"]
idx = sorted({int(r["index"]) for r in csv.DictReader(open("F/results.csv"))})
assert idx == [0, 1, 4, 5], idx'

finish
