"""The hybrid study end to end on a small grid (CTest: python_hybrid_study).

Writes a one-case experiment (val-4x384 on h100-8 at 1400 MiB) with the study's strategies exact,
galvatron, dp-only, ddp and the ablation exact-m1, runs it with `osdp sweep` into a temporary
directory, then experiments/hybrid_study.py on that sweep, and checks: one row per strategy, all
feasible; exact's throughput at least every other's (the claim the study makes, on this case); the
exact row's throughput is the one `osdp plan` prints for the same request; the tables name every
strategy and the figures are written; and the sweep resumed over the same directory runs nothing again.

    python tests/python/test_hybrid_study.py OSDP
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "experiments", "hybrid_study.py")
STRATEGIES = {"exact": {"strategy": "exact"}, "galvatron": {"strategy": "galvatron"},
              "dp-only": {"strategy": "dp-only"}, "ddp": {"strategy": "ddp"},
              "exact-m1": {"strategy": "exact", "micro_batches": 1}}
BASE = {"model": "val-4x384", "cluster": "h100-8", "memory": "1400MiB", "split_max": 4, "checkpoint": "auto",
        "prefetch": 0, "tier": "extended", "batch": "auto"}


def sweep(osdp, exp, out, *extra):
    return subprocess.run([osdp, "sweep", exp, "--out", out, *extra], capture_output=True, text=True, timeout=600)


def rows(out):
    with open(os.path.join(out, "rows.jsonl")) as f:
        return [json.loads(x) for x in f if x.strip()]


def analytic(row):
    return next(e for e in row["evaluations"] if e["evaluator"] == "analytic")


def main():
    osdp = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        exp = os.path.join(tmp, "study.json")
        with open(exp, "w") as f:
            json.dump({"schema_version": 2, "name": "study-test", "base": BASE, "axes": {},
                       "strategies": [dict(label=k, **v) for k, v in STRATEGIES.items()],
                       "evaluators": ["analytic"]}, f)
        grid = os.path.join(tmp, "grid")
        r = sweep(osdp, exp, grid)
        if r.returncode != 0:
            print(r.stderr[-3000:])
            print("FAIL: the sweep exited", r.returncode)
            return 1
        got = rows(grid)
        if sorted(x["strategy"] for x in got) != sorted(STRATEGIES):
            failures.append(f"strategies swept: {sorted(x['strategy'] for x in got)}")
        thr = {}
        for x in got:
            if not (x["feasible"] and analytic(x)["feasible"]):
                failures.append(f"{x['strategy']}: not feasible")
            else:
                thr[x["strategy"]] = analytic(x)["throughput_samples_per_s"]
        if "exact" in thr:
            for s, v in thr.items():
                if thr["exact"] < v * (1 - 1e-9):
                    failures.append(f"exact {thr['exact']} below {s} {v}")
            plan = subprocess.run([osdp, "plan", "--model", "val-4x384", "--cluster", "h100-8", "--memory",
                                   "1400MiB", "--split-max", "4", "--prefetch", "0", "--tier", "extended",
                                   "--json"], capture_output=True, text=True, timeout=300)
            if plan.returncode != 0:
                failures.append(f"osdp plan exited {plan.returncode}: {plan.stderr[-500:]}")
            else:
                want = json.loads(plan.stdout)["throughput_samples_per_s"]
                if abs(want - thr["exact"]) > 1e-9 * want:
                    failures.append(f"exact row {thr['exact']} differs from osdp plan's {want}")
        tables, figs = os.path.join(tmp, "tables.md"), os.path.join(tmp, "fig")
        r = subprocess.run([sys.executable, SCRIPT, "--grid", grid, "--released", os.path.join(tmp, "none"),
                            "--tables", tables, "--figures", figs], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            print(r.stderr[-3000:])
            failures.append(f"hybrid_study.py exited {r.returncode}")
        else:
            text = open(tables).read()
            for label in ["exact (hybrid)", "galvatron", "exact, DP/ZDP only", "DDP", "exact, m = 1"]:
                if label not in text:
                    failures.append(f"tables.md does not name {label!r}")
            for f in ["hybrid-study-throughput-h100-8.png", "hybrid-study-ratio.png", "hybrid-study-plans.png"]:
                p = os.path.join(figs, f)
                if not os.path.exists(p) or os.path.getsize(p) == 0:
                    failures.append(f"{f} missing")
        r = sweep(osdp, exp, grid, "--resume")
        if r.returncode != 0 or len(rows(grid)) != len(got) or f"0 run, {len(got)} resumed" not in r.stdout + r.stderr:
            failures.append(f"the second sweep ran again: exit {r.returncode}, {len(rows(grid))} rows")
    for f in failures:
        print("FAIL:", f)
    print(f"test_hybrid_study: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
