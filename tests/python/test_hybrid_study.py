"""experiments/hybrid_study.py end to end on a small grid (CTest: python_hybrid_study).

Runs the study for val-4x384 on h100-8 at 1400 MiB with exact, galvatron, dp-only and ddp into a
temporary directory, then checks: one JSON line per strategy, all ok; exact's throughput at least
every other's (the claim the study makes, on this case); each line's throughput is the one in its
raw osdp output; the tables and the figures are written; and --resume runs nothing again.

    python tests/python/test_hybrid_study.py OSDP
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "experiments", "hybrid_study.py")
STRATEGIES = ["exact", "galvatron", "dp-only", "ddp"]


def run(osdp, out, *extra):
    cmd = [sys.executable, SCRIPT, "--osdp", osdp, "--models", "val-4x384", "--clusters", "h100-8",
           "--memories", "1400MiB", "--strategies", *STRATEGIES, "--out", out, "--figures",
           os.path.join(out, "fig"), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def lines(out):
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(x) for x in f if x.strip()]


def main():
    osdp = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as out:
        r = run(osdp, out)
        if r.returncode != 0:
            print(r.stderr[-3000:])
            print("FAIL: the study exited", r.returncode)
            return 1
        rows = lines(out)
        got = sorted(x["strategy"] for x in rows)
        if got != sorted(STRATEGIES):
            failures.append(f"strategies recorded: {got}")
        thr = {x["strategy"]: x.get("throughput") for x in rows}
        for x in rows:
            if x["status"] != "ok":
                failures.append(f"{x['strategy']}: status {x['status']}")
        if all(isinstance(v, (int, float)) for v in thr.values()):
            for s in STRATEGIES:
                if thr["exact"] < thr[s] * (1 - 1e-9):
                    failures.append(f"exact {thr['exact']} below {s} {thr[s]}")
        raw = os.path.join(out, "raw", "val-4x384_h100-8_1400MiB_exact.json.gz")
        with gzip.open(raw, "rt") as f:
            doc = json.load(f)
        if abs(doc["plan"]["predicted_throughput_samples_per_s"] - thr["exact"]) > 1e-9 * thr["exact"]:
            failures.append("exact: the raw output's throughput differs from the JSONL line")
        for f in ["tables.md", "fig/hybrid-study-throughput-h100-8.png", "fig/hybrid-study-ratio.png",
                  "fig/hybrid-study-plans.png"]:
            p = os.path.join(out, f)
            if not os.path.exists(p) or os.path.getsize(p) == 0:
                failures.append(f"{f} missing")
        r = run(osdp, out, "--resume", "--no-report")
        if r.returncode != 0 or len(lines(out)) != len(rows):
            failures.append(f"--resume ran again: exit {r.returncode}, {len(lines(out))} lines")
    for f in failures:
        print("FAIL:", f)
    print(f"test_hybrid_study: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
