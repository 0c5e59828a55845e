#!/usr/bin/env bash
# How fast the simulator replays a step, BEFORE and AFTER a change, side by side in one run: bench_sim
# of both, taking turns (round i of both binaries before round i+1, the order alternating), each
# round one bench_sim run (--repeat R inside it). Reported per case (topology, ranks, mode): the
# median over the rounds of bench_sim's median wall time on each binary, the spread (min-max) of
# those round medians, the ratio before/after, and whether the two replays agree on the iteration's
# ticks; with the load average at the start and the end. A case where after's fastest round is
# slower than before's slowest is called a regression beyond the spread. Rows only one binary has
# (the hybrid row, new with the one-lane schedule) are listed with one side.
#
#   tests/bench/bench_sim_versus.sh [--before PATH] [--after PATH] [--rounds N] [--repeat R] [--json FILE]
#
#   --before PATH  the old bench_sim; without it the script builds commit 1dce72d (the last with a
#                  separate pipeline simulator) in a git worktree under build-before-sim/ (a Release
#                  build of bench_sim alone; reused)
#   --after PATH   the new bench_sim (default build/tests/bench/bench_sim, built first when missing)
#   --rounds N     bench_sim runs per binary (default 5)
#   --repeat R     bench_sim's --repeat (default 3)
#   --json FILE    also write every round median and the summary as JSON
#
# Not a test and not run by CTest: it prints figures and fails only when a run fails.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BEFORE_COMMIT=1dce72d
BEFORE="" AFTER="" ROUNDS=5 REPEAT=3 JSON=""
while [ $# -gt 0 ]; do
  case $1 in
    --before) BEFORE=$2; shift 2 ;;
    --after) AFTER=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "bench_sim_versus: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for n in "$ROUNDS" "$REPEAT"; do
  case $n in ''|*[!0-9]*|0) echo "bench_sim_versus: --rounds and --repeat want positive whole numbers" >&2; exit 2 ;; esac
done

if [ -z "$BEFORE" ]; then
  src=$ROOT/build-before-sim/src build=$ROOT/build-before-sim/build
  BEFORE=$build/tests/bench/bench_sim
  if [ ! -x "$BEFORE" ]; then
    echo "bench_sim_versus: building bench_sim at commit $BEFORE_COMMIT in $ROOT/build-before-sim (takes minutes)" >&2
    [ -d "$src" ] || git -C "$ROOT" worktree add --detach "$src" "$BEFORE_COMMIT" >&2
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DOSDP_BUILD_TESTS=OFF >&2
    cmake --build "$build" --target bench_sim -j "$(nproc)" >&2
  fi
fi
if [ -z "$AFTER" ]; then
  AFTER=$ROOT/build/tests/bench/bench_sim
  if [ ! -x "$AFTER" ]; then
    cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release >&2
    cmake --build "$ROOT/build" --target bench_sim -j "$(nproc)" >&2
  fi
fi
for b in "$BEFORE" "$AFTER"; do
  [ -x "$b" ] || { echo "bench_sim_versus: $b is not an executable" >&2; exit 2; }
done

OSDP_DATA_DIR=$ROOT/data exec python3 - "$BEFORE" "$AFTER" "$ROUNDS" "$REPEAT" "$JSON" <<'PY'
import json, os, platform, statistics, subprocess, sys, tempfile

before, after, rounds, repeat, json_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
binaries = [("before", before), ("after", after)]

def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])

def run(path):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        p = subprocess.run([path, "--repeat", str(repeat), "--json", f.name], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"bench_sim_versus: {path} exited {p.returncode}: {p.stderr.strip()}")
        return json.load(open(f.name))

# (topology, ranks, mode) -> binary -> [(round median, iteration ticks)]
samples = {}
load_start = loadavg()
for i in range(rounds):
    for b, path in (binaries if i % 2 == 0 else binaries[::-1]):
        for c in run(path)["cases"]:
            for mode in ("full", "symmetric"):
                if mode in c:
                    key = (c.get("topology"), c["ranks"], mode)
                    samples.setdefault(key, {}).setdefault(b, []).append(
                        (c[mode]["median_s"], c[mode]["iteration_ticks"]))
    print(f"bench_sim_versus: round {i + 1} of {rounds} done", file=sys.stderr)
load_end = loadavg()

def fmt(s):
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.3f} s"

print(f"bench_sim, one iteration per case: the median over {rounds} rounds of each round's median wall time "
      f"(--repeat {repeat}), rounds interleaved")
print(f"machine: {platform.node()}, {os.cpu_count()} CPUs; load average (1, 5, 15 min) at start {load_start}, "
      f"at end {load_end}")
print(f"before: {before}\nafter:  {after}\n")
print("| topology | ranks | mode | before (min-max) | after (min-max) | before/after | same ticks | beyond spread |")
print("|---|---|---|---|---|---|---|---|")
report, regressions = [], []
for key in sorted(samples, key=lambda k: (k[0] != "flat", k[0] != "two-level", k[1], k[2])):
    topology, ranks, mode = key
    row = {"topology": topology, "ranks": ranks, "mode": mode}
    cells = []
    for b, _ in binaries:
        got = samples[key].get(b)
        if not got:
            cells.append("-")
            continue
        times = [t for t, _ in got]
        row[b] = {"round_medians_s": times, "median_s": statistics.median(times), "min_s": min(times),
                  "max_s": max(times), "iteration_ticks": got[-1][1]}
        cells.append(f"{fmt(row[b]['median_s'])} ({fmt(min(times))}-{fmt(max(times))})")
    if "before" in row and "after" in row:
        bf, af = row["before"], row["after"]
        row["ratio"] = bf["median_s"] / af["median_s"]
        row["same_ticks"] = bf["iteration_ticks"] == af["iteration_ticks"]
        row["regression_beyond_spread"] = af["min_s"] > bf["max_s"]
        if row["regression_beyond_spread"]:
            regressions.append(f"{topology} {ranks} {mode}")
        extra = [f"{row['ratio']:.2f}x", "yes" if row["same_ticks"] else "NO",
                 "YES" if row["regression_beyond_spread"] else "no"]
    else:
        extra = ["-", "-", "-"]
    report.append(row)
    print(f"| {topology} | {ranks} | {mode} | {cells[0]} | {cells[1]} | " + " | ".join(extra) + " |")
print("\nregressions beyond the spread of the rounds: " + ("none" if not regressions else "; ".join(regressions)))
if json_out:
    with open(json_out, "w") as f:
        json.dump({"schema_version": 1, "rounds": rounds, "repeat": repeat,
                   "machine": {"hostname": platform.node(), "nproc": os.cpu_count()},
                   "load_average_start": load_start, "load_average_end": load_end, "before": before,
                   "after": after, "cases": report, "regressions": regressions}, f, indent=1)
PY
