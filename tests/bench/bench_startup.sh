#!/usr/bin/env bash
# How fast the osdp program starts and how much memory it takes, BEFORE and AFTER a change, side by
# side in one run: `osdp models`, `osdp --version` and `osdp plan --model nd-48x1024 --cluster
# titan-rtx-8 --memory 16GiB`, N runs of each on each binary, interleaved (run i of every command on
# both binaries before run i+1, the binary order alternating), after one warm-up run each that is
# not counted. Wall time from fork to exit and peak RSS (GNU time's %M: the child's ru_maxrss) are
# reported as median and spread (min-max), with the load average at the start and at the end, and
# the floor of the method (/bin/true measured the same way).
#
#   tests/bench/bench_startup.sh [--before PATH] [--after PATH] [--runs N] [--json FILE]
#
#   --before PATH  the old osdp; without it the script builds commit 7be4a6b (an osdp that still
#                  linked CUDA, cuBLAS and NCCL into every process) in a git worktree under
#                  build-before/ (a Release build of the osdp target alone: several minutes on
#                  two cores; reused by later runs)
#   --after PATH   the new osdp (default build/cli/osdp, built first when it is missing)
#   --runs N       counted runs per command and binary (default 30)
#   --json FILE    also write every sample and the summary as JSON
#
# Both binaries read the built-in models and clusters from this checkout's data/ (OSDP_DATA_DIR).
# Not a test and not run by CTest: it prints figures and the targets (osdp models and osdp plan
# under 30 ms and 40 MiB for AFTER), and fails only when a command fails.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BEFORE_COMMIT=7be4a6b
BEFORE="" AFTER="" RUNS=30 JSON=""
while [ $# -gt 0 ]; do
  case $1 in
    --before) BEFORE=$2; shift 2 ;;
    --after) AFTER=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "bench_startup: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# shellcheck source=binaries.sh
source "$ROOT/tests/bench/binaries.sh"
resolve_binaries bench_startup "$ROOT" "$BEFORE_COMMIT"

OSDP_DATA_DIR=$ROOT/data exec /usr/bin/python3 - "$BEFORE" "$AFTER" "$RUNS" "$JSON" <<'PY'
import json, os, platform, statistics, subprocess, sys, time

before, after, runs, json_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
binaries = [("before", before), ("after", after)]
commands = [
    ("models", ["models"]),
    ("--version", ["--version"]),
    ("plan", ["plan", "--model", "nd-48x1024", "--cluster", "titan-rtx-8", "--memory", "16GiB"]),
]
targets = {"models": (0.030, 40.0), "plan": (0.030, 40.0)}  # seconds, MiB (AFTER)

TIME = "/usr/bin/time"  # GNU time: the child's peak RSS (%M, KiB)
if not os.access(TIME, os.X_OK):
    sys.exit("bench_startup: needs GNU time as /usr/bin/time (Debian package `time`)")
rss_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_startup.{os.getpid()}.rss")

def run(binary, args):
    """One run: wall seconds (fork to exit, through /usr/bin/time) and peak RSS in MiB.

    The peak RSS is the child's ru_maxrss, which also counts the process it was forked from, up to
    its exec: from this Python process that would be ~14 MiB; from /usr/bin/time it is under 1 MiB
    (the `floor` row: /bin/true measured the same way)."""
    start = time.perf_counter()
    p = subprocess.run([TIME, "-f", "%M", "-o", rss_file, binary] + args, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"bench_startup: {binary} {' '.join(args)} exited {p.returncode}: "
                 f"{p.stderr.decode(errors='replace').strip()}")
    with open(rss_file) as f:
        rss_kib = int(f.read().split()[-1])
    return wall, rss_kib / 1024.0

def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])

load_start = loadavg()
samples = {(c, b): [] for c, _ in commands for b, _ in binaries}
samples[("floor", "true")] = []
for c, args in commands:  # warm-up: page cache, dynamic loader caches
    for _, path in binaries:
        run(path, args)
for i in range(runs):
    order = binaries if i % 2 == 0 else binaries[::-1]
    for c, args in commands:
        for b, path in order:
            samples[(c, b)].append(run(path, args))
    samples[("floor", "true")].append(run("/bin/true", []))
load_end = loadavg()
os.remove(rss_file)

def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}

print(f"osdp start-up: {runs} runs per command and binary, interleaved, after one warm-up run each")
print(f"machine: {platform.node()}, {os.cpu_count()} CPUs; load average (1, 5, 15 min) "
      f"at start {load_start}, at end {load_end}")
print(f"before: {before}\nafter:  {after}\n")
head = f"{'command':<10} {'binary':<7} {'wall ms: median':>15} {'(min-max)':>15} {'peak RSS MiB: median':>21} {'(min-max)':>15}"
print(head)
print("-" * len(head))
report = {}
for c, _ in commands:
    for b, _ in binaries:
        wall = summary([w for w, _ in samples[(c, b)]])
        rss = summary([r for _, r in samples[(c, b)]])
        report[f"{c} {b}"] = {"wall_s": wall, "peak_rss_mib": rss}
        wall_range = "({:.1f}-{:.1f})".format(1e3 * wall["min"], 1e3 * wall["max"])
        rss_range = "({:.1f}-{:.1f})".format(rss["min"], rss["max"])
        print(f"{c:<10} {b:<7} {1e3 * wall['median']:>15.1f} {wall_range:>15} {rss['median']:>21.1f} "
              f"{rss_range:>15}")
    b_wall = report[f"{c} before"]["wall_s"]["median"]
    a_wall = report[f"{c} after"]["wall_s"]["median"]
    b_rss = report[f"{c} before"]["peak_rss_mib"]["median"]
    a_rss = report[f"{c} after"]["peak_rss_mib"]["median"]
    print(f"{'':<10} {'ratio':<7} {b_wall / a_wall:>14.1f}x {'':>15} {b_rss / a_rss:>20.1f}x")
floor_wall = summary([w for w, _ in samples[("floor", "true")]])
floor_rss = summary([r for _, r in samples[("floor", "true")]])
report["floor"] = {"wall_s": floor_wall, "peak_rss_mib": floor_rss}
floor_wall_range = "({:.1f}-{:.1f})".format(1e3 * floor_wall["min"], 1e3 * floor_wall["max"])
floor_rss_range = "({:.1f}-{:.1f})".format(floor_rss["min"], floor_rss["max"])
print(f"{'floor':<10} {'true':<7} {1e3 * floor_wall['median']:>15.1f} {floor_wall_range:>15} "
      f"{floor_rss['median']:>21.1f} {floor_rss_range:>15}  (/bin/true, measured the same way)")
print()
for c, (t_s, t_mib) in targets.items():
    wall = report[f"{c} after"]["wall_s"]["median"]
    rss = report[f"{c} after"]["peak_rss_mib"]["median"]
    ok = wall < t_s and rss < t_mib
    print(f"target: osdp {c} under {1e3 * t_s:.0f} ms and {t_mib:.0f} MiB (after, median): "
          f"{1e3 * wall:.1f} ms, {rss:.1f} MiB -> {'met' if ok else 'NOT met'}")
if json_out:
    with open(json_out, "w") as f:
        json.dump({"schema_version": 1, "machine": {"hostname": platform.node(), "nproc": os.cpu_count()},
                   "load_average_start": load_start, "load_average_end": load_end, "runs": runs,
                   "before": before, "after": after,
                   "targets": {c: {"wall_s": t, "peak_rss_mib": m} for c, (t, m) in targets.items()},
                   "summary": report,
                   "samples": {f"{c} {b}": [{"wall_s": w, "peak_rss_mib": r} for w, r in v]
                               for (c, b), v in samples.items()}}, f, indent=2)
    print(f"wrote {json_out}")
PY
