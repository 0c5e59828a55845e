#!/usr/bin/env bash
# How long `osdp plan` searches, BEFORE and AFTER a change, side by side in one run, on every bundled
# model x every bundled cluster and on the audit's cases (tests/bench/cases/): the search time the
# plan reports (`search_seconds` of --json: pricing, the batch-size scheduler and the solver, not the
# program's start-up), N runs of each case on each binary, interleaved (run i of every case on both
# binaries before run i+1, the binary order alternating), after one warm-up run each. Reported per
# case: the median and spread (min-max) on each binary, their ratio, and the batch size and
# throughput each found (BEFORE tried only a geometric grid of batch sizes above 256, so where it
# differs AFTER's is the better one), with the load average at the start and the end.
#
#   tests/bench/bench_search_versus.sh [--before PATH] [--after PATH] [--runs N] [--json FILE]
#
#   --before PATH  the old osdp; without it the script builds commit 7be4a6b (the search as the issue
#                  that asked for an exact scheduler found it) in a git worktree under build-before/
#                  (a Release build of the osdp target alone: several minutes on two cores; reused)
#   --after PATH   the new osdp (default build/cli/osdp, built first when it is missing)
#   --runs N       counted runs per case and binary (default 5)
#   --json FILE    also write every sample and the summary as JSON
#
# Every case runs `osdp plan --strategy exact --json` with the device's memory, split max 4 and
# checkpointing auto unless the case says otherwise. Not a test and not run by CTest: it prints
# figures and the target (every case within 10 ms of search on AFTER), and fails only when a command
# fails other than with exit 3 (no plan fits, which is an answer).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BEFORE_COMMIT=7be4a6b
BEFORE="" AFTER="" RUNS=5 JSON=""
while [ $# -gt 0 ]; do
  case $1 in
    --before) BEFORE=$2; shift 2 ;;
    --after) AFTER=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "bench_search_versus: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $RUNS in ''|*[!0-9]*|0) echo "bench_search_versus: --runs wants a positive whole number" >&2; exit 2 ;; esac

# shellcheck source=binaries.sh
source "$ROOT/tests/bench/binaries.sh"
resolve_binaries bench_search_versus "$ROOT" "$BEFORE_COMMIT"

OSDP_DATA_DIR=$ROOT/data exec python3 - "$BEFORE" "$AFTER" "$RUNS" "$JSON" "$ROOT" <<'PY'
import glob, json, os, platform, statistics, subprocess, sys

before, after, runs, json_out, root = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
binaries = [("before", before), ("after", after)]
TARGET_S = 0.010
cases_dir = os.path.join(root, "tests", "bench", "cases")

def stem(path):
    return os.path.splitext(os.path.basename(path))[0]

# Every bundled model on every bundled cluster, then the audit's cases.
cases = []
for cluster in sorted(glob.glob(os.path.join(root, "data", "clusters", "*.json"))):
    for model in sorted(glob.glob(os.path.join(root, "data", "models", "*.json"))):
        cases.append((f"{stem(model)} on {stem(cluster)}", ["--model", stem(model), "--cluster", stem(cluster)]))
for model in ("gpt2-1.5b", "nd-96x1024"):
    for memory in ("8GiB", "16GiB"):
        cases.append((f"{model} on titan-rtx-8 at {memory}",
                      ["--model", model, "--cluster", "titan-rtx-8", "--memory", memory]))
for hidden in (256, 1024):
    cases.append((f"nd-200x{hidden} on h100-64x8 (512 ranks)",
                  ["--model", os.path.join(cases_dir, f"nd-200x{hidden}.json"),
                   "--cluster", os.path.join(cases_dir, "h100-64x8.json")]))
for memory in ("3.03GiB", "8GiB", "16GiB"):
    cases.append((f"nd-6x256 on titan-128x4-eth at {memory}, split 8, ckpt on, prefetch 1",
                  ["--model", os.path.join(cases_dir, "nd-6x256.json"),
                   "--cluster", os.path.join(cases_dir, "titan-128x4-eth.json"), "--memory", memory,
                   "--split-max", "8", "--checkpoint", "on", "--prefetch", "1"]))

def run(binary, args):
    p = subprocess.run([binary, "plan", "--strategy", "exact", "--json"] + args, capture_output=True, text=True)
    if p.returncode not in (0, 3):
        sys.exit(f"bench_search_versus: {binary} plan {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
    j = json.loads(p.stdout)
    return {"search_s": j["search_seconds"], "feasible": p.returncode == 0,
            "batch": j.get("batch_size"), "throughput": j.get("throughput_samples_per_s", j.get("throughput"))}

def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])

load_start = loadavg()
samples = {(c, b): [] for c, _ in cases for b, _ in binaries}
for _, args in cases:  # warm-up
    for _, path in binaries:
        run(path, args)
for i in range(runs):
    order = binaries if i % 2 == 0 else binaries[::-1]
    for c, args in cases:
        for b, path in order:
            samples[(c, b)].append(run(path, args))
    print(f"bench_search_versus: run {i + 1} of {runs} done", file=sys.stderr)
load_end = loadavg()

def ms(x):
    return f"{1e3 * x:.2f}"

print(f"osdp plan --strategy exact: search time, {runs} runs per case and binary, interleaved")
print(f"machine: {platform.node()}, {os.cpu_count()} CPUs; load average (1, 5, 15 min) at start {load_start}, "
      f"at end {load_end}")
print(f"before: {before}\nafter:  {after}\n")
print("| case | before: ms (min-max) | after: ms (min-max) | before/after | batch before -> after | throughput after/before |")
print("|---|---|---|---|---|---|")
report, over = [], []
for c, args in cases:
    row = {"case": c, "args": args}
    for b, _ in binaries:
        times = [s["search_s"] for s in samples[(c, b)]]
        last = samples[(c, b)][-1]
        row[b] = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                  "samples_s": times, "feasible": last["feasible"], "batch": last["batch"],
                  "throughput": last["throughput"]}
    bf, af = row["before"], row["after"]
    ratio = bf["median_s"] / af["median_s"] if af["median_s"] > 0 else float("inf")
    if af["feasible"] and bf["feasible"] and bf["throughput"]:
        gain = f"{af['throughput'] / bf['throughput']:.4f}"
        batch = f"{bf['batch']} -> {af['batch']}"
    else:
        gain, batch = "no plan fits", "-"
    row["ratio"] = ratio
    report.append(row)
    if af["median_s"] > TARGET_S:
        over.append(c)
    print(f"| {c} | {ms(bf['median_s'])} ({ms(bf['min_s'])}-{ms(bf['max_s'])}) | {ms(af['median_s'])} "
          f"({ms(af['min_s'])}-{ms(af['max_s'])}) | {ratio:.2f}x | {batch} | {gain} |")
after_medians = [r["after"]["median_s"] for r in report]
print(f"\n{len(cases)} cases; after: largest median {ms(max(after_medians))} ms, "
      f"median of medians {ms(statistics.median(after_medians))} ms")
print(f"target: every case within {ms(TARGET_S)} ms of search (after): "
      + ("met" if not over else f"NOT met in {len(over)}: " + "; ".join(over)))
if json_out:
    with open(json_out, "w") as f:
        json.dump({"schema_version": 1, "runs": runs, "machine": {"hostname": platform.node(), "nproc": os.cpu_count()},
                   "load_average_start": load_start, "load_average_end": load_end, "before": before,
                   "after": after, "target_s": TARGET_S, "cases": report, "over_target": over}, f, indent=1)
PY
