#!/usr/bin/env bash
# How long plain `osdp plan` (the whole space: pipelines, TP, micro-batches, node groups) searches the
# models users train, from their Hugging Face configs: Llama 3.1 8B on h100-8 at 8k, 32k and 128k
# tokens, Llama 3.1 70B on h100-2x8, Llama 3.1 405B on 512 H100s (tests/bench/cases/h100-64x8.json),
# Qwen 2.5 72B on h100-2x8, beside the data-parallel space (--data-parallel) of the same case. N runs
# of each case and mode, interleaved, after one warm-up run each; reported per case: the median and
# range (min-max) of the search time the plan reports (`search_seconds` of --json), the plan found
# (stages, micro-batches, throughput) or "no plan fits", and the load average at the start and end.
#
#   tests/bench/bench_families.sh [--osdp PATH] [--runs N] [--json FILE]
#
# Not a test and not run by CTest: it prints figures and the target (100 ms of search per case, the
# hybrid search's target), and fails only when a command fails other than with exit 3 (no plan fits).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OSDP=$ROOT/build/cli/osdp RUNS=5 JSON=""
while [ $# -gt 0 ]; do
  case $1 in
    --osdp) OSDP=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "bench_families: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $RUNS in ''|*[!0-9]*|0) echo "bench_families: --runs wants a positive whole number" >&2; exit 2 ;; esac
[ -x "$OSDP" ] || { echo "bench_families: no osdp at $OSDP (build the osdp target first)" >&2; exit 2; }
export OSDP_DATA_DIR=${OSDP_DATA_DIR:-$ROOT/data}

CASES=(
  "llama3.1-8b|h100-8|8192"
  "llama3.1-8b|h100-8|32768"
  "llama3.1-8b|h100-8|131072"
  "llama3.1-70b|h100-2x8|8192"
  "qwen2.5-72b|h100-2x8|8192"
  "llama3.1-405b|$ROOT/tests/bench/cases/h100-64x8.json|8192"
)
MODES=("whole space|" "data-parallel|--data-parallel")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

run() {  # case mode run -> appends "seconds feasible summary" to $TMP/<case>.<mode>
  local c=$1 m=$2 out rc=0
  IFS='|' read -r model cluster seq <<<"${CASES[$c]}"
  local flags=${MODES[$m]#*|}
  # shellcheck disable=SC2086
  out=$("$OSDP" plan --model "$model" --cluster "$cluster" --seq "$seq" --json --baseline none $flags) || rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then
    echo "bench_families: osdp plan --model $model --cluster $cluster --seq $seq $flags failed ($rc)" >&2
    exit 1
  fi
  python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
summary = "no plan fits"
if j["feasible"]:
    summary = "pp %d, m %d, %.3f samples/s" % (j["pp"], j["micro_batches"], j["throughput_samples_per_s"])
s = j["search_seconds"]
print(s, summary, sep="|")' <<<"$out" >>"$TMP/$c.$m"
}

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "bench_families: $("$OSDP" --version | head -1), $(nproc) cores, $RUNS runs per case and mode"
echo "load at the start: $(load)"
for c in "${!CASES[@]}"; do for m in "${!MODES[@]}"; do run "$c" "$m"; : >"$TMP/$c.$m"; done; done  # warm-up
for ((r = 0; r < RUNS; ++r)); do
  for c in "${!CASES[@]}"; do for m in "${!MODES[@]}"; do run "$c" "$m"; done; done
done
echo "load at the end: $(load)"
python3 - "$TMP" "$RUNS" "$JSON" "${CASES[@]}" <<'EOF'
import json, statistics, sys
tmp, runs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cases = sys.argv[4:]
modes = ["whole space", "data-parallel"]
rows = []
print("| model | cluster | seq | space | search ms, median (min-max) | plan |")
print("|---|---|---|---|---|---|")
for c, spec in enumerate(cases):
    model, cluster, seq = spec.split("|")
    cluster = cluster.rsplit("/", 1)[-1].removesuffix(".json")
    for m, mode in enumerate(modes):
        lines = open(f"{tmp}/{c}.{m}").read().split("\n")
        samples = [float(l.split("|")[0]) * 1e3 for l in lines if l]
        summary = [l.split("|")[1] for l in lines if l][-1]
        med = statistics.median(samples)
        rows.append({"model": model, "cluster": cluster, "seq": int(seq), "space": mode,
                     "search_ms": samples, "median_ms": med, "plan": summary})
        print(f"| {model} | {cluster} | {seq} | {mode} | {med:.1f} ({min(samples):.1f}-{max(samples):.1f}) | {summary} |")
over = [r for r in rows if r["space"] == "whole space" and r["median_ms"] > 100]
print(f"target (whole space within 100 ms): {'met' if not over else f'missed in {len(over)} of {len(cases)} cases'}")
if out:
    with open(out, "w") as f:
        json.dump({"runs": runs, "cases": rows}, f, indent=2)
EOF
