#!/usr/bin/env python3
"""Offline hybrid-parallelism study: osdp's exact hybrid search beside Galvatron and the pure strategies.

For every case (model x cluster x memory limit) it runs `osdp plan`, one process at a time, once per
strategy:

  exact          osdp plan --hybrid --strategy exact        (pp, split, micro-batches, TP per unit, per-operator DP/ZDP)
  galvatron      osdp plan --hybrid --strategy galvatron    (Galvatron's search as its released code does it)
  megatron-3d    osdp plan --hybrid --strategy megatron-3d  (uniform tp x pp x dp grid, searched)
  dp-only        osdp plan --hybrid --strategy dp-only      (exact per-operator DP/ZDP, pp = tp = 1)
  pure-tp        osdp plan --hybrid --strategy megatron-3d --pp 1 --tp G   (G = devices per node)
  pure-pp        osdp plan --hybrid --strategy megatron-3d --pp W --tp 1   (W = world size; halved until it fits)
  ddp            osdp plan --strategy ddp    (not hybrid: every operator DP, batch-size scheduler)
  zero3          osdp plan --strategy fsdp   (not hybrid: every operator ZDP = ZeRO-3, batch-size scheduler)

All runs are analytic (osdp's cost model; nothing is trained). The hybrid strategies report a global
batch (samples per step over all devices, micro-batches included); `ddp` and `zero3` report a batch per
device, so their global batch is that times the world size (one micro-batch, no accumulation). Both give
samples per second of the whole job.

It also runs the settings of Galvatron's released configurations (BERT-Huge-32, 8 GPUs, 8 and 12 GB) at
their global batch (`--released`).

Results: one JSON line per (case, strategy) appended to RESULTS/results.jsonl and fsync'd (status ok,
infeasible, timeout or error; wall and CPU seconds of the process; the 1-minute load average before and
after; the plan's summary); the osdp JSON output, gzipped, under RESULTS/raw/. `--resume` skips the
(case, strategy) pairs already recorded (timeouts too, unless --retry-timeouts). Progress goes to stderr.
At the end (or with --report-only) it draws the figures and writes the markdown tables.

Examples:
  build/venv/bin/python experiments/hybrid_study.py --resume
  build/venv/bin/python experiments/hybrid_study.py --clusters a100-2x8 --models bert-huge-32 \\
      --memories 8GB --timeout 600 --resume
  build/venv/bin/python experiments/hybrid_study.py --ablations --resume   # adds exact-m1, exact-at-galvatron-batch
  build/venv/bin/python experiments/hybrid_study.py --report-only
"""

import argparse
import collections
import gzip
import hashlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

DEFAULT_MODELS = ["bert-huge-32", "t5-large-48"]
DEFAULT_CLUSTERS = ["a100-8"]
DEFAULT_MEMORIES = ["8GB", "12GB", "16GB", "20GB"]
ALL_STRATEGIES = ["exact", "galvatron", "megatron-3d", "dp-only", "pure-tp", "pure-pp", "ddp", "zero3"]
HYBRID = {"exact", "galvatron", "megatron-3d", "dp-only"}
# Ablations of the exact search (--ablations): micro-batches fixed to 1; the global batch fixed to galvatron's.
ABLATIONS = ["exact-m1", "exact-at-galvatron-batch"]

# Galvatron's released configurations that state a plan (see the write-up): at their global batch.
RELEASED = [
    # (label, model, cluster, memory, extra flags)
    ("released-8GB/galvatron-plan", "bert-huge-32", "a100-8", "8GB",
     ["--strategy", "megatron-3d", "--pp", "2", "--tp", "2", "--micro-batches", "2", "--global-batch", "8"]),
    ("released-8GB/exact-b8", "bert-huge-32", "a100-8", "8GB", ["--strategy", "exact", "--global-batch", "8"]),
    ("released-8GB/exact-b8-pp2-tp2-m2", "bert-huge-32", "a100-8", "8GB",
     ["--strategy", "exact", "--global-batch", "8", "--pp", "2", "--tp", "2", "--micro-batches", "2"]),
    ("released-8GB/exact-b8-pp2-tp1,2-m2", "bert-huge-32", "a100-8", "8GB",
     ["--strategy", "exact", "--global-batch", "8", "--pp", "2", "--tp", "1", "2", "--micro-batches", "2"]),
    ("released-8GB/galvatron-b8", "bert-huge-32", "a100-8", "8GB", ["--strategy", "galvatron", "--global-batch", "8"]),
    ("released-12GB/exact-b16-pp1-tp2", "bert-huge-32", "a100-8", "12GB",
     ["--strategy", "exact", "--global-batch", "16", "--pp", "1", "--tp", "2"]),
    ("released-12GB/exact-b16", "bert-huge-32", "a100-8", "12GB", ["--strategy", "exact", "--global-batch", "16"]),
    ("released-12GB/galvatron-b16", "bert-huge-32", "a100-8", "12GB",
     ["--strategy", "galvatron", "--global-batch", "16"]),
]


def log(msg):
    print(f"[hybrid_study {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def cluster_shape(name):
    path = os.path.join(ROOT, "data", "clusters", name + ".json")
    with open(path) as f:
        c = json.load(f)
    return c["nodes"], c["devices_per_node"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- plan summaries

def runs(items):
    """Run-length encode [(name, value)] as 'a..b value' pieces."""
    out = []
    for name, val in items:
        if out and out[-1][2] == val:
            out[-1][1] = name
        else:
            out.append([name, name, val])
    return [(a if a == b else f"{a}..{b}", v) for a, b, v in out]


def hybrid_summary(d, world):
    p = d.get("plan")
    if not p:
        return None
    stages = []
    tp_items, choice_count = [], collections.Counter()
    for st in p["stages"]:
        units = st["units"]
        sc = collections.Counter(o["choice"] for u in units for o in u["operators"])
        choice_count.update(sc)
        tp_items += [(u["name"], u["tp"]) for u in units]
        stages.append({
            "units": len(units),
            "first": units[0]["name"] if units else None,
            "last": units[-1]["name"] if units else None,
            "tp": sorted({u["tp"] for u in units}),
            "choices": dict(sc),
            "time_per_micro_batch_s": st.get("time_per_micro_batch_s"),
            "compute_s": st.get("compute_s"), "dp_comm_s": st.get("dp_comm_s"),
            "tp_comm_s": st.get("tp_comm_s"), "relayout_s": st.get("relayout_s"), "p2p_s": st.get("p2p_s"),
            "peak_memory_bytes": st.get("peak_memory_bytes"),
            "in_flight": st.get("micro_batches_in_flight"),
        })
    # per-layer ops as a compact string: unit:tp:choice/choice
    units_compact = [f"{u['name']}:tp{u['tp']}:" + "/".join(o["choice"] for o in u["operators"])
                     for st in p["stages"] for u in st["units"]]
    return {
        "pp": p["pp"], "micro_batches": p["micro_batches"], "schedule": p["schedule"],
        "micro_batch_per_device": p["micro_batch_per_device"], "global_batch": p["global_batch"],
        "sequence_parallel": p.get("sequence_parallel"), "bubble_fraction": p["bubble_fraction"],
        "iteration_time_s": p["predicted_iteration_time_s"], "peak_memory_bytes": p["predicted_peak_memory_bytes"],
        "stage_units": [s["units"] for s in stages],
        "tp_runs": [f"{a} tp{v}" for a, v in runs(tp_items)],
        "choices": dict(choice_count),
        "stages": stages,
        "units": units_compact,
    }


def flat_summary(d, world):
    if not d.get("feasible"):
        return None
    b = d["batch_size"]
    counts = collections.Counter()
    for c in d.get("choices") or []:
        # "attention: ZDP+ckpt x 32"
        m = re.match(r"\s*([^:]+):\s*(.+?)\s+x\s+(\d+)\s*$", str(c))
        if m:
            counts[m.group(2)] += int(m.group(3))
        else:
            counts[str(c)] += 1
    return {
        "pp": 1, "micro_batches": 1, "schedule": None, "micro_batch_per_device": b, "global_batch": b * world,
        "bubble_fraction": 0.0, "iteration_time_s": d["iteration_time_s"], "peak_memory_bytes": d["peak_memory_bytes"],
        "stage_units": None, "tp_runs": ["all tp1"], "choices": dict(counts), "choices_raw": d.get("choices"),
    }


# ---------------------------------------------------------------- running

def run_osdp(osdp, args, timeout):
    """Run one osdp process; returns (rc, stdout, stderr, wall_s, cpu_s, timed_out)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen([osdp] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)  # the group of the process started here only
        out, err = proc.communicate()
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return proc.returncode, out, err, wall, cpu, timed_out


def strategy_args(strategy, model, cluster, memory, recs=None):
    nodes, per_node = cluster_shape(cluster)
    world = nodes * per_node
    base = ["plan", "--model", model, "--cluster", cluster, "--memory", memory, "--json", "--baseline", "none"]
    if strategy in HYBRID:
        return [base + ["--hybrid", "--strategy", strategy]]
    if strategy == "pure-tp":
        return [base + ["--hybrid", "--strategy", "megatron-3d", "--pp", "1", "--tp", str(per_node)]]
    if strategy == "pure-pp":
        out, pp = [], world
        while pp >= 2:
            out.append(base + ["--hybrid", "--strategy", "megatron-3d", "--pp", str(pp), "--tp", "1"])
            pp //= 2
        return out
    if strategy == "ddp":
        return [base + ["--strategy", "ddp"]]
    if strategy == "zero3":
        return [base + ["--strategy", "fsdp"]]
    if strategy == "exact-m1":
        return [base + ["--hybrid", "--strategy", "exact", "--micro-batches", "1"]]
    if strategy == "exact-at-galvatron-batch":
        g = (recs or {}).get((model, cluster, memory, "galvatron"))
        if not g or g.get("status") != "ok":
            return None  # galvatron has no plan here (yet): nothing to compare at
        return [base + ["--hybrid", "--strategy", "exact", "--global-batch", str(g["plan"]["global_batch"])]]
    raise ValueError(strategy)


def append_record(path, rec):
    with open(path, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def load_records(path):
    recs = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        recs.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass  # a torn last line of an interrupted run
    return recs


def execute(osdp, osdp_info, outdir, case, label, arg_lists, timeout, world, hybrid):
    """Run the argument lists in turn (the first that fits wins; pure-pp halves pp) and record one line."""
    attempts = []
    rec = None
    for args in arg_lists:
        la0 = loadavg()
        rc, out, err, wall, cpu, timed_out = run_osdp(osdp, args, timeout)
        la1 = loadavg()
        rec = dict(case, strategy=label, command="osdp " + " ".join(args), rc=rc, wall_s=round(wall, 3),
                   cpu_s=round(cpu, 3), loadavg_before=la0, loadavg_after=la1, timeout_s=timeout,
                   timestamp=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **osdp_info)
        d = None
        if timed_out:
            rec["status"] = "timeout"
        else:
            try:
                d = json.loads(out) if out.strip() else None
            except json.JSONDecodeError:
                d = None
            if rc == 0 and d is not None and d.get("feasible", True):
                rec["status"] = "ok"
            elif rc == 3:
                rec["status"] = "infeasible"
            else:
                rec["status"] = "error"
        rec["stderr"] = err.strip()[-2000:]
        if d is not None:
            rec["search_seconds"] = d.get("search_seconds")
            rec["throughput"] = d.get("throughput_samples_per_s") or (
                d.get("plan", {}) or {}).get("predicted_throughput_samples_per_s")
            if d.get("min_fit_memory_bytes"):
                rec["min_fit_memory_bytes"] = d["min_fit_memory_bytes"]
            if rec["status"] == "ok":
                rec["plan"] = hybrid_summary(d, world) if hybrid else flat_summary(d, world)
                if hybrid:
                    rec["labels"] = d.get("labels")
                    rec["layouts"] = d.get("layouts")
            raw = os.path.join(outdir, "raw", re.sub(r"[^A-Za-z0-9_.-]+", "_",
                               f"{case['model']}_{case['cluster']}_{case['memory']}_{label}") + ".json.gz")
            os.makedirs(os.path.dirname(raw), exist_ok=True)
            with gzip.open(raw, "wt") as f:
                f.write(out)
            rec["raw"] = os.path.relpath(raw, outdir)
        attempts.append({"command": rec["command"], "status": rec["status"], "wall_s": rec["wall_s"]})
        if rec["status"] != "infeasible":
            break
    if len(attempts) > 1:
        rec["attempts"] = attempts
    return rec


def run_grid(a):
    outdir = a.out
    os.makedirs(outdir, exist_ok=True)
    results = os.path.join(outdir, "results.jsonl")
    recs = latest(load_records(results))
    done = {k: r["status"] for k, r in recs.items()}
    osdp = os.path.abspath(a.osdp)
    osdp_info = {"osdp_sha256": sha256(osdp)}
    try:
        osdp_info["osdp_version"] = subprocess.run([osdp, "--version"], capture_output=True, text=True,
                                                   timeout=30).stdout.splitlines()[0]
    except Exception:  # noqa: BLE001 - informative only
        pass

    jobs = []
    if not a.released_only:
        for cluster in a.clusters:
            for model in a.models:
                for memory in a.memories:
                    for s in a.strategies + (ABLATIONS if a.ablations else []):
                        jobs.append((model, cluster, memory, s, None))
    if a.released or a.released_only:
        for label, model, cluster, memory, extra in RELEASED:
            jobs.append((model, cluster, memory, label, extra))

    for i, (model, cluster, memory, label, extra) in enumerate(jobs):
        key = (model, cluster, memory, label)
        st = done.get(key)
        if a.resume and st is not None and st != "error" and not (st == "timeout" and a.retry_timeouts):
            log(f"[{i + 1}/{len(jobs)}] skip {model} {cluster} {memory} {label} (recorded: {st})")
            continue
        nodes, per_node = cluster_shape(cluster)
        world = nodes * per_node
        case = {"model": model, "cluster": cluster, "memory": memory, "world_size": world}
        if extra is None:
            arg_lists, hybrid = strategy_args(label, model, cluster, memory, recs), label not in ("ddp", "zero3")
            if arg_lists is None:
                log(f"[{i + 1}/{len(jobs)}] skip {model} {cluster} {memory} {label} (galvatron has no plan)")
                continue
        else:
            arg_lists = [["plan", "--model", model, "--cluster", cluster, "--memory", memory, "--json",
                          "--baseline", "none", "--hybrid"] + extra]
            hybrid = True
            case["released"] = True
        log(f"[{i + 1}/{len(jobs)}] run {model} {cluster} {memory} {label} (load {loadavg()})")
        rec = execute(osdp, osdp_info, outdir, case, label, arg_lists, a.timeout, world, hybrid)
        append_record(results, rec)
        recs[key] = rec
        thr = rec.get("throughput")
        log(f"    -> {rec['status']} in {rec['wall_s']:.1f} s wall, {rec['cpu_s']:.1f} s cpu"
            + (f", {thr:.2f} samples/s" if thr else "")
            + (f", plan pp{rec['plan']['pp']} m{rec['plan']['micro_batches']} B{rec['plan']['global_batch']}"
               if rec.get("plan") else ""))


# ---------------------------------------------------------------- report

LABELS = {"exact": "exact (hybrid)", "galvatron": "galvatron", "megatron-3d": "megatron-3d",
          "dp-only": "exact, DP/ZDP only", "pure-tp": "pure TP", "pure-pp": "pure PP", "ddp": "DDP",
          "zero3": "ZeRO-3 (FSDP)", "exact-m1": "exact, m = 1",
          "exact-at-galvatron-batch": "exact at galvatron's global batch"}


def latest(recs):
    """The last record per (model, cluster, memory, strategy)."""
    out = {}
    for r in recs:
        out[(r["model"], r["cluster"], r["memory"], r["strategy"])] = r
    return out


def mem_key(m):
    return float(re.match(r"[\d.]+", m).group(0))


def plan_text(r):
    p = r.get("plan")
    if not p:
        return r["status"]
    ch = ", ".join(f"{k} {v}" for k, v in sorted(p["choices"].items(), key=lambda kv: -kv[1]))
    split = "+".join(str(x) for x in p["stage_units"]) if p.get("stage_units") else "-"
    tp = "; ".join(p["tp_runs"])
    sched = p["schedule"] or "-"
    return (f"pp {p['pp']} ({split} units), m {p['micro_batches']} {sched}, B {p['global_batch']} "
            f"(b0 {p['micro_batch_per_device']}); {tp}; {ch}")


def fmt_thr(r):
    if r is None:
        return "not run"
    if r["status"] == "ok":
        return f"{r['throughput']:.2f}"
    if r["status"] == "timeout":
        return f"timeout ({r['timeout_s']} s)"
    return r["status"]


def report(a):
    outdir = a.out
    recs = load_records(os.path.join(outdir, "results.jsonl"))
    if not recs:
        log("no results to report")
        return
    L = latest(recs)
    cases = sorted({(k[0], k[1], k[2]) for k, r in L.items() if not r.get("released")},
                   key=lambda c: (c[1], c[0], mem_key(c[2])))
    lines = []
    # throughput table
    strategies = [s for s in ALL_STRATEGIES if any(k[3] == s for k in L)]
    lines.append("### Throughput (samples/s, analytic) and exact / galvatron\n")
    lines.append("| model | cluster | memory | " + " | ".join(LABELS[s] for s in strategies)
                 + " | exact / galvatron | exact / best other |")
    lines.append("|---" * (4 + len(strategies) + 1) + "|")
    for c in cases:
        row = [L.get(c + (s,)) for s in strategies]
        ex, ga = L.get(c + ("exact",)), L.get(c + ("galvatron",))
        ratio = (f"{ex['throughput'] / ga['throughput']:.3f}x" if ex and ga and ex["status"] == "ok"
                 and ga["status"] == "ok" else "-")
        others = [r["throughput"] for s, r in zip(strategies, row) if s != "exact" and r and r["status"] == "ok"]
        best = (f"{ex['throughput'] / max(others):.3f}x" if ex and ex["status"] == "ok" and others else "-")
        lines.append(f"| {c[0]} | {c[1]} | {c[2]} | " + " | ".join(fmt_thr(r) for r in row)
                     + f" | {ratio} | {best} |")
    # plans
    lines.append("\n### Plans chosen (exact, galvatron, megatron-3d, dp-only)\n")
    lines.append("pp (units per stage), micro-batches m and schedule, global batch B (b0: samples per device per "
                 "micro-batch at tp 1), TP degree per unit, operator choices (counts over the model's operators)\n")
    lines.append("| model | cluster | memory | strategy | throughput | plan |")
    lines.append("|---|---|---|---|---|---|")
    for c in cases:
        for s in ALL_STRATEGIES + ABLATIONS:
            r = L.get(c + (s,))
            if r is None:
                continue
            lines.append(f"| {c[0]} | {c[1]} | {c[2]} | {s} | {fmt_thr(r)} | {plan_text(r)} |")
    # ablations
    if any(k[3] in ABLATIONS for k in L):
        lines.append("\n### Ablations of the exact search\n")
        lines.append("| model | cluster | memory | exact | exact, m = 1 | exact at galvatron's B | galvatron | "
                     "exact / exact m=1 | exact at galvatron's B / galvatron |")
        lines.append("|---" * 9 + "|")
        for c in cases:
            ex, m1, gb, ga = (L.get(c + (s,)) for s in ("exact", "exact-m1", "exact-at-galvatron-batch", "galvatron"))
            if m1 is None and gb is None:
                continue

            def ok(r):
                return r is not None and r["status"] == "ok"

            def cell(r):
                return fmt_thr(r) + (f" (B {r['plan']['global_batch']}, m {r['plan']['micro_batches']})"
                                     if ok(r) else "")
            r1 = f"{ex['throughput'] / m1['throughput']:.3f}x" if ok(ex) and ok(m1) else "-"
            r2 = f"{gb['throughput'] / ga['throughput']:.3f}x" if ok(gb) and ok(ga) else "-"
            lines.append(f"| {c[0]} | {c[1]} | {c[2]} | {cell(ex)} | {cell(m1)} | {cell(gb)} | {cell(ga)} | {r1} | {r2} |")
    # search times
    lines.append("\n### Search time (s) and machine load\n")
    lines.append("wall seconds of the osdp process / its search_seconds; 1-minute load average before the run\n")
    lines.append("| model | cluster | memory | " + " | ".join(strategies) + " |")
    lines.append("|---" * (3 + len(strategies)) + "|")
    for c in cases:
        cells = []
        for s in strategies:
            r = L.get(c + (s,))
            if r is None:
                cells.append("not run")
            else:
                ss = r.get("search_seconds")
                la = (r.get("loadavg_before") or [None])[0]
                cells.append(f"{r['wall_s']:.1f} / {ss:.1f} (load {la:.2f})" if ss is not None and la is not None
                             else f"{r['wall_s']:.1f} {r['status']} (load {la})")
        lines.append(f"| {c[0]} | {c[1]} | {c[2]} | " + " | ".join(cells) + " |")
    # released
    rel = [r for r in L.values() if r.get("released")]
    if rel:
        lines.append("\n### At Galvatron's released settings (BERT-Huge-32, a100-8)\n")
        lines.append("| memory | run | throughput | wall s | plan |")
        lines.append("|---|---|---|---|---|")
        for r in sorted(rel, key=lambda r: (mem_key(r["memory"]), r["strategy"])):
            lines.append(f"| {r['memory']} | `{r['command'].split('--hybrid ')[-1]}` | {fmt_thr(r)} | "
                         f"{r['wall_s']:.1f} | {plan_text(r)} |")
    # not finished
    bad = [r for r in L.values() if r["status"] in ("timeout", "error")]
    lines.append("\n### Did not finish\n")
    if bad:
        for r in bad:
            lines.append(f"- {r['model']} {r['cluster']} {r['memory']} {r['strategy']}: {r['status']} after "
                         f"{r['wall_s']:.0f} s (`{r['command']}`)")
    else:
        lines.append("- none")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(outdir, "tables.md"), "w") as f:
        f.write(md)
    log(f"wrote {os.path.join(outdir, 'tables.md')}")
    plot(a, L, cases, strategies)


COLORS = {"exact": "#d62728", "galvatron": "#1f77b4", "megatron-3d": "#2ca02c", "dp-only": "#ff7f0e",
          "pure-tp": "#9467bd", "pure-pp": "#8c564b", "ddp": "#7f7f7f", "zero3": "#bcbd22"}


def plot(a, L, cases, strategies):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.lines  # noqa: F401
    import matplotlib.patches  # noqa: F401
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    os.makedirs(a.figures, exist_ok=True)
    for cluster in sorted({c[1] for c in cases}):
        models = [m for m in sorted({c[0] for c in cases if c[1] == cluster})]
        fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.4), squeeze=False)
        for ax, model in zip(axes[0], models):
            mems = sorted({c[2] for c in cases if c[0] == model and c[1] == cluster}, key=mem_key)
            w = 0.8 / len(strategies)
            for j, s in enumerate(strategies):
                xs, ys, marks = [], [], []
                for i, m in enumerate(mems):
                    r = L.get((model, cluster, m, s))
                    x = i - 0.4 + w * (j + 0.5)
                    if r and r["status"] == "ok":
                        xs.append(x)
                        ys.append(r["throughput"])
                    elif r:
                        marks.append((x, {"timeout": "T", "infeasible": "x", "error": "E"}[r["status"]]))
                ax.bar(xs, ys, w, label=LABELS[s], color=COLORS[s])
                for x, t in marks:
                    ax.text(x, 0, t, ha="center", va="bottom", fontsize=8, color=COLORS[s])
            ax.set_xticks(range(len(mems)))
            ax.set_xticklabels(mems)
            ax.set_xlabel("memory limit per device")
            ax.set_ylabel("samples/s (analytic)")
            ax.set_title(model)
            ax.grid(axis="y", alpha=0.3)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=8, ncol=len(labels), loc="lower center")
        fig.text(0.01, 0.005, "x: no plan fits; T: timed out; E: error", fontsize=7)
        fig.suptitle(f"Throughput on {cluster}: predicted by osdp's analytic model (nothing trained)", fontsize=11)
        fig.tight_layout(rect=(0, 0.08, 1, 0.97))
        path = os.path.join(a.figures, f"hybrid-study-throughput-{cluster}.png")
        fig.savefig(path, dpi=120, metadata={"Software": None})
        plt.close(fig)
        log(f"wrote {path}")

    # ratio figure: exact over each other strategy, one panel per cluster, models grouped along x
    others = [s for s in strategies if s != "exact"]
    clusters = sorted({c[1] for c in cases}, key=lambda c: ("x" in c.split("-", 1)[-1], c))  # one node first
    fig, axes = plt.subplots(1, len(clusters), figsize=(max(6.2 * len(clusters), 10), 4.9), squeeze=False,
                             sharey=True)
    lo, hi = 1.0, 1.0
    for ax, cluster in zip(axes[0], clusters):
        models = sorted({c[0] for c in cases if c[1] == cluster})
        pos, ticks, ticklabels, groups = {}, [], [], []
        x = 0
        for model in models:
            mems = sorted({c[2] for c in cases if c[0] == model and c[1] == cluster}, key=mem_key)
            start = x
            for m in mems:
                pos[(model, cluster, m)] = x
                ticks.append(x)
                ticklabels.append(m)
                x += 1
            groups.append((model, start, x - 1))
            x += 1  # a gap between models: no line crosses it
        for s in others:
            for model, first, last in groups:
                xs, ys = [], []
                for c, px in sorted(((c, px) for c, px in pos.items() if c[0] == model), key=lambda t: t[1]):
                    ex, r = L.get(c + ("exact",)), L.get(c + (s,))
                    xs.append(px)
                    if ex and r and ex["status"] == "ok" and r["status"] == "ok":
                        ys.append(ex["throughput"] / r["throughput"])
                        lo, hi = min(lo, ys[-1]), max(hi, ys[-1])
                    else:
                        ys.append(float("nan"))  # the other strategy fits no plan: a gap, not a line
                ax.plot(xs, ys, "o-", color=COLORS[s], ms=4, label=f"exact / {LABELS[s]}" if model == groups[0][0] else None)
        ax.axhline(1.0, color="k", lw=0.7)
        ax.set_xticks(ticks)
        ax.set_xticklabels(ticklabels, fontsize=8)
        for model, first, last in groups:
            ax.text((first + last) / 2, -0.13, model, transform=ax.get_xaxis_transform(), ha="center", va="top",
                    fontsize=9)
            if last < x - 2:
                ax.axvline(last + 1, color="0.8", lw=0.8)
        ax.set_xlim(-0.6, x - 1.4)
        ax.set_title(cluster, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    ax0 = axes[0][0]
    ax0.set_yscale("log")
    yt = [t for t in (1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0) if t <= hi * 1.05]
    ax0.set_yticks(yt)
    ax0.set_yticklabels([f"{t:g}x" for t in yt])
    ax0.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax0.set_ylim(0.97, hi * 1.08)
    ax0.set_ylabel("exact's throughput over the other's")
    fig.suptitle("Exact hybrid search over each other strategy, predicted by osdp's analytic model\n"
                 "(a gap: that strategy fits no plan there)", fontsize=11)
    handles, labels = ax0.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, ncol=4, loc="lower center")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    path = os.path.join(a.figures, "hybrid-study-ratio.png")
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)
    log(f"wrote {path}")

    # plans figure: per case, the TP degree of every unit, stage boundaries, and ZDP operators, exact vs galvatron
    shown = [(c, s) for c in cases for s in ("exact", "galvatron")
             if L.get(c + (s,)) and L[c + (s,)]["status"] == "ok"]
    if not shown:
        return
    fig, ax = plt.subplots(figsize=(13, 0.36 * len(shown) + 2.4))
    tpcol = {1: "#d9d9d9", 2: "#9ecae1", 4: "#4292c6", 8: "#08519c", 16: "#08306b"}
    for y, (c, s) in enumerate(shown):
        p = L[c + (s,)]["plan"]
        units = p["units"]
        bounds = set()
        acc = 0
        for n in p["stage_units"][:-1]:
            acc += n
            bounds.add(acc)
        for k, u in enumerate(units):
            name, tp, ch = u.split(":", 2)
            t = int(tp[2:])
            ops = ch.split("/")
            # lower half: the unit's TP degree; upper half: the share of its operators sharded (ZDP)
            ax.add_patch(matplotlib.patches.Rectangle((k, y + 0.5), 1, 0.42, color=tpcol.get(t, "#000000"), lw=0))
            ax.add_patch(matplotlib.patches.Rectangle((k, y + 0.08), 1, 0.42, color="#fff5eb", lw=0))
            nz = sum(1 for o in ops if "ZDP" in o)
            if nz:
                ax.add_patch(matplotlib.patches.Rectangle((k, y + 0.08), 1, 0.42 * nz / len(ops),
                                                          color="#e6550d", lw=0))
            if any("ckpt" in o for o in ops):
                ax.plot(k + 0.5, y + 0.29, "k.", ms=2.5)
            if k in bounds:
                ax.plot([k, k], [y + 0.02, y + 0.98], "r-", lw=1.6)
        ax.text(len(units) + 0.5, y + 0.5, f"pp{p['pp']} m{p['micro_batches']} B{p['global_batch']} "
                f"{L[c + (s,)]['throughput']:.1f}/s", va="center", fontsize=7)
    ax.set_yticks([y + 0.5 for y in range(len(shown))])
    ax.set_yticklabels([f"{c[0]} {c[1]} {c[2]} {s}" for c, s in shown], fontsize=7)
    ax.set_xlim(0, max(len(L[c + (s,)]["plan"]["units"]) for c, s in shown) + 12)
    ax.set_ylim(len(shown), 0)
    ax.set_xlabel("unit (embedding, layer0, layer1, ..., head when pp > 1)")
    handles = [matplotlib.patches.Patch(color=tpcol[t], label=f"tp{t} (lower half)") for t in (1, 2, 4, 8)]
    handles += [matplotlib.patches.Patch(color="#e6550d", label="ZDP share of the unit's operators (upper half)"),
                matplotlib.lines.Line2D([], [], color="k", marker=".", ls="", label="a checkpointed operator"),
                matplotlib.lines.Line2D([], [], color="r", ls="-", label="stage boundary")]
    handles.insert(4, matplotlib.patches.Patch(color="#fff5eb", label="DP or REPLICATE share (upper half)"))
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=4)
    ax.set_title("Plans chosen by the exact hybrid search and by galvatron (predicted by osdp's analytic model)")
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 1))  # the legend below, clear of the axis label
    path = os.path.join(a.figures, "hybrid-study-plans.png")
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)
    log(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--osdp", default=os.path.join(ROOT, "build", "cli", "osdp"), help="the osdp binary")
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="models (default: %(default)s)")
    ap.add_argument("--clusters", nargs="+", default=DEFAULT_CLUSTERS, help="clusters (default: %(default)s)")
    ap.add_argument("--memories", nargs="+", default=DEFAULT_MEMORIES, help="memory limits (default: %(default)s)")
    ap.add_argument("--strategies", nargs="+", default=ALL_STRATEGIES, choices=ALL_STRATEGIES,
                    help="strategies (default: all)")
    ap.add_argument("--ablations", action="store_true",
                    help="also run exact with --micro-batches 1 and exact at galvatron's global batch")
    ap.add_argument("--released", action="store_true", help="also run Galvatron's released settings")
    ap.add_argument("--released-only", action="store_true", help="only run Galvatron's released settings")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per osdp process (default: %(default)s)")
    ap.add_argument("--resume", action="store_true", help="skip (case, strategy) pairs already in results.jsonl")
    ap.add_argument("--retry-timeouts", action="store_true", help="with --resume, rerun the ones that timed out")
    ap.add_argument("--out", default=os.path.join(ROOT, "data", "results", "hybrid-study"),
                    help="results directory (default: the committed study, data/results/hybrid-study)")
    ap.add_argument("--figures", default=os.path.join(ROOT, "data", "results", "figures"),
                    help="figures directory (default: data/results/figures)")
    ap.add_argument("--report-only", action="store_true", help="only write the tables and figures")
    ap.add_argument("--no-report", action="store_true", help="do not write the tables and figures at the end")
    a = ap.parse_args()
    if not a.report_only:
        run_grid(a)
    if not a.no_report:
        report(a)


if __name__ == "__main__":
    main()
