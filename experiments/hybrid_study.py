#!/usr/bin/env python3
"""Tables and figures of the offline hybrid-parallelism study, from its sweeps.

The study is two experiment files run by `osdp sweep` (resumable, locked, fsync'd like every sweep):

  osdp sweep experiments/hybrid-study.json --out data/results/hybrid-study/grid
  osdp sweep experiments/hybrid-study-released.json --out data/results/hybrid-study/released

The first is the grid: models x clusters x memory limits, each with osdp's exact search over the whole
space, Galvatron's search (as its released code does it), megatron-3d, dp-only (exact within data
parallelism), pure TP (megatron-3d at pp 1, TP 8), pure PP (megatron-3d at TP 1, pp 8), DDP and FSDP
(ZeRO-3), and exact with one micro-batch (the ablation exact-m1). The second holds the settings of
Galvatron's released configurations (BERT-Huge-32 on 8 GPUs at 8 and 12 GB) at fixed global batches.
All evaluations are analytic: nothing is trained.

This script reads the sweeps' rows.jsonl and writes tables.md (throughput, the plans chosen, the
ablation, the released settings) and three figures: throughput per cluster, exact over each other
strategy, and the plans of exact and galvatron unit by unit.

  python3 experiments/hybrid_study.py [--grid DIR] [--released DIR] [--tables FILE] [--figures DIR]
"""

import argparse
import collections
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "data", "results", "hybrid-study")

ALL_STRATEGIES = ["exact", "galvatron", "megatron-3d", "dp-only", "pure-tp", "pure-pp", "ddp", "zero3"]
ABLATIONS = ["exact-m1"]


def log(msg):
    print(f"[hybrid_study] {msg}", file=sys.stderr, flush=True)


def runs(items):
    """Run-length encode [(name, value)] as 'a..b value' pieces."""
    out = []
    for name, val in items:
        if out and out[-1][2] == val:
            out[-1][1] = name
        else:
            out.append([name, name, val])
    return [(a if a == b else f"{a}..{b}", v) for a, b, v in out]


def choice_counts(row):
    """Operator choices over the model: from the units of a plan beyond data parallelism, else from the
    plan summary ("attention: ZDP+ckpt x 32; mlp: DP x 30, ZDP x 2; ...")."""
    counts = collections.Counter()
    if row.get("units"):
        for u in row["units"]:
            counts.update(u["operators"])
        return dict(counts)
    for part in row["plan_summary"].split(";"):
        if ":" not in part or part.strip().startswith("layout"):
            continue
        for item in part.split(":", 1)[1].split(","):
            m = re.match(r"\s*(.+?)\s+x\s+(\d+)\s*$", item)
            if m:
                counts[m.group(1)] += int(m.group(2))
    return dict(counts)


def record(row, released):
    """A sweep row (rows.jsonl) as the tables and figures read it: the analytic evaluation."""
    ev = next((e for e in row["evaluations"] if e["evaluator"] == "analytic"), None)
    ok = bool(row["feasible"] and ev and ev["feasible"])
    rec = {"model": row["model"], "cluster": row["cluster"], "memory": f"{row['memory_limit_bytes'] / 1e9:g}GB",
           "strategy": row["strategy"], "status": "ok" if ok else "infeasible", "released": released,
           "global_batch": json.loads(row["key"]).get("global_batch"),
           "throughput": ev["throughput_samples_per_s"] if ok else None,
           "min_fit_memory_bytes": row.get("min_fit_memory_bytes")}
    if ok:
        units = row.get("units") or []
        stages = collections.Counter(u["stage"] for u in units)
        sched = re.search(r"\((1f1b|gpipe)\)", row["plan_summary"])
        rec["plan"] = {
            "pp": row["pp"], "micro_batches": row["micro_batches"], "global_batch": row["global_batch"],
            "micro_batch_per_device": row["batch_size"], "schedule": sched.group(1) if sched else None,
            "stage_units": [stages[s] for s in sorted(stages)] if units else None,
            "tp_runs": [f"{a} tp{v}" for a, v in runs([(u["name"], u["tp"]) for u in units])] or ["all tp1"],
            "choices": choice_counts(row),
            "units": [f"{u['name']}:tp{u['tp']}:" + "/".join(u["operators"]) for u in units],
        }
    return rec


def load(directory, released):
    """The rows of a sweep directory, the last line per unit."""
    path = os.path.join(directory, "rows.jsonl")
    if not os.path.exists(path):
        return []
    rows = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rows[r["index"]] = r
    return [record(rows[i], released) for i in sorted(rows)]


# ---------------------------------------------------------------- report

LABELS = {"exact": "exact (hybrid)", "galvatron": "galvatron", "megatron-3d": "megatron-3d",
          "dp-only": "exact, DP/ZDP only", "pure-tp": "pure TP", "pure-pp": "pure PP", "ddp": "DDP",
          "zero3": "ZeRO-3 (FSDP)", "exact-m1": "exact, m = 1"}


def latest(recs):
    """The grid's records by (model, cluster, memory, strategy); the released settings' by that and
    their global batch (the fifth element)."""
    out = {}
    for r in recs:
        key = (r["model"], r["cluster"], r["memory"], r["strategy"])
        out[key + ((r["global_batch"],) if r["released"] else ())] = r
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
    return r["status"]


def report(a):
    recs = load(a.grid, False) + load(a.released, True)
    if not recs:
        log(f"no rows in {a.grid}/rows.jsonl or {a.released}/rows.jsonl: run the sweeps first (see --help)")
        return 1
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
        lines.append("| model | cluster | memory | exact | exact, m = 1 | exact / exact m=1 |")
        lines.append("|---" * 6 + "|")
        for c in cases:
            ex, m1 = L.get(c + ("exact",)), L.get(c + ("exact-m1",))
            if m1 is None:
                continue

            def ok(r):
                return r is not None and r["status"] == "ok"

            def cell(r):
                return fmt_thr(r) + (f" (B {r['plan']['global_batch']}, m {r['plan']['micro_batches']})"
                                     if ok(r) else "")
            r1 = f"{ex['throughput'] / m1['throughput']:.3f}x" if ok(ex) and ok(m1) else "-"
            lines.append(f"| {c[0]} | {c[1]} | {c[2]} | {cell(ex)} | {cell(m1)} | {r1} |")
    # released
    rel = [r for r in L.values() if r.get("released")]
    if rel:
        lines.append("\n### At Galvatron's released settings (BERT-Huge-32, a100-8)\n")
        lines.append("| memory | global batch | run | throughput | plan |")
        lines.append("|---|---|---|---|---|")
        for r in sorted(rel, key=lambda r: (mem_key(r["memory"]), r["global_batch"] or 0, r["strategy"])):
            lines.append(f"| {r['memory']} | {r['global_batch']} | {r['strategy']} | {fmt_thr(r)} | {plan_text(r)} |")
    md = "\n".join(lines) + "\n"
    tmp = a.tables + ".tmp"
    with open(tmp, "w") as f:
        f.write(md)
    os.replace(tmp, a.tables)
    log(f"wrote {a.tables}")
    plot(a, L, cases, strategies)
    return 0


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
        if not units:  # a data-parallel plan: the sweep lists no units for it
            counts = ", ".join(f"{k} {v}" for k, v in sorted(p["choices"].items()))
            ax.text(0.5, y + 0.5, f"data parallel: one stage, TP 1 everywhere ({counts}); "
                    f"m{p['micro_batches']} B{p['global_batch']} {L[c + (s,)]['throughput']:.1f}/s",
                    va="center", fontsize=7)
            continue
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
    ax.set_xlim(0, max(len(L[c + (s,)]["plan"]["units"]) for c, s in shown) + 12)  # units of the widest plan
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
    ap.add_argument("--grid", default=os.path.join(RESULTS, "grid"),
                    help="the sweep of experiments/hybrid-study.json (default: %(default)s)")
    ap.add_argument("--released", default=os.path.join(RESULTS, "released"),
                    help="the sweep of experiments/hybrid-study-released.json (default: %(default)s)")
    ap.add_argument("--tables", default=os.path.join(RESULTS, "tables.md"), help="markdown tables (default: %(default)s)")
    ap.add_argument("--figures", default=os.path.join(ROOT, "data", "results", "figures"),
                    help="figures directory (default: %(default)s)")
    return report(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
