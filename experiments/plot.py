#!/usr/bin/env python3
"""Figures from `osdp sweep` results (PNG, matplotlib's Agg backend, fixed file names).

Usage: plot.py RESULTS_DIR [--out DIR] [--evaluator analytic|sim] [--model NAME] [--scaling DIR]
               [--experiment FILE]

  throughput-ckpt-<setting>.png  throughput bars like the OSDP paper's Figure 5: one panel per model
                                 family (nd-, ws-, ic-, other) and memory limit (and cluster or world
                                 size where the results hold several), one group of bars per model,
                                 one bar per strategy label; "OOM" where a strategy fits no batch size.
                                 One figure per checkpoint setting (off, on, auto). A panel where no
                                 strategy fits any model is not drawn; the figure names it.
  candidates-<model>.png         peak memory against step time of every candidate plan of one model
                                 (the best plan of each batch size the search visited, candidates.csv;
                                 --model, default the first model there), the Pareto front (no other
                                 candidate is both faster and smaller) marked and labelled by batch size.
  scaling-speedup.png            speedup over fsdp against world size, from --scaling DIR (a results
                                 directory of experiments/scaling.json or scaling-groups.json), one
                                 panel per model, one line per strategy and evaluator (a strategy that
                                 searched the multi-node choices too is labelled "+groups"; a line
                                 equal to one already drawn is left out).

A figure whose data is absent is skipped with a note. The default output directory is
RESULTS_DIR/plots.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paper_table import FAMILY_LONG, Results, gib  # noqa: E402

COLORS = {"fsdp": "#7f7f7f", "zero2": "#bcbd22", "ddp": "#8c564b", "osdp-ref": "#1f77b4", "dfs": "#9467bd",
          "exact": "#ff7f0e", "exact+split": "#d62728", "hsdp": "#2ca02c", "fsdp-2level": "#17becf",
          "exact+groups": "#d62728"}
FALLBACK = ["#2ca02c", "#17becf", "#e377c2", "#9467bd", "#8c564b"]
PNG_META = {"Software": None}  # no matplotlib version in the file: the same data gives the same bytes


def color_of(label, i):
    return COLORS.get(label, FALLBACK[i % len(FALLBACK)])


def safe(name):
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)


def save(fig, path):
    fig.savefig(path, dpi=120, metadata=PNG_META)
    plt.close(fig)
    print(f"plot: wrote {path}")


# ---------------------------------------------------------------------------------------------
# (i) throughput bars


PREDICTED_BY = {"analytic": "the analytic model", "sim": "the simulator"}


def panel_title(key):
    fam, memory, cluster, world = key
    title = f"{FAMILY_LONG.get(fam, fam)}, {gib(memory)}"
    if cluster:
        title += f", {cluster}"
    if world:
        title += f", {world} GPUs"
    return title


def throughput_figures(res, evaluator, out_dir):
    rows = res.select(evaluator)
    if not rows:
        print(f"plot: no {evaluator} rows in {res.dir}: skipping the throughput figures")
        return []
    labels = res.labels()
    clusters = list(OrderedDict.fromkeys(r.get("cluster", "") for r in rows))
    worlds = list(OrderedDict.fromkeys(r.get("world_size", "") for r in rows))
    written = []
    for ck in OrderedDict.fromkeys(r["checkpoint"] for r in rows):
        sel = [r for r in rows if r["checkpoint"] == ck]
        panels = OrderedDict()
        fam_order = {f: i for i, f in enumerate(["N&D", "W&S", "I&C", "other"])}
        for r in sorted(sel, key=lambda r: (fam_order[r["family"]], r["memory"])):
            key = (r["family"], r["memory"], r.get("cluster", "") if len(clusters) > 1 else "",
                   r.get("world_size", "") if len(worlds) > 1 else "")
            panels.setdefault(key, []).append(r)
        # A panel where no strategy fits any model would hold only "OOM" marks: it is not drawn, and the
        # figure says which panels were left out and why.
        empty = [k for k, prs in panels.items() if not any(r["feasible_b"] for r in prs)]
        for k in empty:
            del panels[k]
        if not panels:
            print(f"plot: checkpointing {ck}: no strategy fits any model: skipping throughput-ckpt-{ck}.png")
            continue
        fams = list(OrderedDict.fromkeys(k[0] for k in panels))
        per_fam = OrderedDict((f, [k for k in panels if k[0] == f]) for f in fams)
        ncols = max(len(v) for v in per_fam.values())
        nrows = len(fams)
        height = 3.4 * nrows + 0.7  # the title and the legend above the panels
        fig, axes = plt.subplots(nrows, ncols, figsize=(max(4.2 * ncols, 7.5), height), squeeze=False)
        for i, (fam, keys) in enumerate(per_fam.items()):
            for j in range(ncols):
                ax = axes[i][j]
                if j >= len(keys):
                    ax.axis("off")
                    continue
                key = keys[j]
                prs = panels[key]
                models = list(OrderedDict.fromkeys(r["model"] for r in prs))
                width = 0.8 / max(1, len(labels))
                top = max([r["throughput"] for r in prs if r["feasible_b"]] + [0.0])
                for s, label in enumerate(labels):
                    for m, model in enumerate(models):
                        hit = [r for r in prs if r["model"] == model and r["strategy"] == label]
                        if not hit:
                            continue
                        x = m - 0.4 + width * (s + 0.5)
                        r = hit[0]
                        if r["feasible_b"]:
                            interval = r.get("throughput_interval")  # 90%, drawn where the rows have it
                            ax.bar(x, r["throughput"], width, color=color_of(label, s),
                                   label=label if m == 0 else None,
                                   yerr=[[r["throughput"] - interval[0]], [interval[1] - r["throughput"]]]
                                   if interval else None, capsize=2, error_kw={"lw": 0.8})
                        else:
                            ax.bar(x, 0, width, color=color_of(label, s), label=label if m == 0 else None)
                            ax.text(x, top * 0.02 if top else 0.02, "OOM", rotation=90, ha="center", va="bottom",
                                    fontsize=7, color=color_of(label, s))
                ax.set_xticks(range(len(models)))
                ax.set_xticklabels(models, rotation=20, ha="right", fontsize=8)
                ax.set_title(panel_title(key), fontsize=9)
                ax.set_ylabel("samples/s")
                if not top:
                    ax.set_ylim(0, 1)
                ax.grid(axis="y", alpha=0.3)
        handles, names = [], []
        for ax in axes.flat:
            for h, n in zip(*ax.get_legend_handles_labels()):
                if n not in names:
                    handles.append(h)
                    names.append(n)
        fig.suptitle(f"Throughput per strategy, checkpointing {ck}\n"
                     f"predicted by {PREDICTED_BY.get(evaluator, evaluator)}", fontsize=11, y=1 - 0.06 / height,
                     va="top")
        bottom = 0.0
        if empty:
            names_left = "; ".join(panel_title(k) for k in empty)
            fig.text(0.01, 0.01, f"Not drawn, no strategy fits any model there: {names_left}", fontsize=8,
                     wrap=True)
            bottom = 0.45 / height
        fig.tight_layout(rect=(0, bottom, 1, 1 - 0.62 / height))
        fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.5 / height),
                   ncol=len(names), frameon=False, fontsize=9)
        path = os.path.join(out_dir, f"throughput-ckpt-{safe(ck)}.png")
        save(fig, path)
        written.append(path)
    return written


# ---------------------------------------------------------------------------------------------
# (ii) candidates: memory against step time, Pareto front


def pareto(points):
    """Indices of the points no other point beats in both time and memory (lower-left front)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], math.inf
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def label_front(ax, points, min_px=11.0):
    """Batch-size labels beside the front's points, never on top of each other: points that sit together
    (several strategies reach the same plan) get one label naming their batch sizes, and a label that
    would land within min_px of one already placed is left out."""
    ax.figure.canvas.draw()  # settle the axes' limits so data coordinates map to pixels
    to_px = ax.transData.transform
    groups = []  # [pixel position, x, y, batch sizes]
    for x, y, b in sorted(points, key=lambda p: (p[0], p[1])):
        px = to_px((x, y))
        for g in groups:
            if abs(g[0][0] - px[0]) < min_px and abs(g[0][1] - px[1]) < min_px:
                g[3].add(b)
                break
        else:
            groups.append([px, x, y, {b}])
    placed = []
    for px, x, y, batches in groups:
        if any(abs(px[0] - q[0]) < 2.5 * min_px and abs(px[1] - q[1]) < min_px for q in placed):
            continue
        placed.append(px)
        ax.annotate("b" + "/".join(str(b) for b in sorted(batches)), (x, y), textcoords="offset points",
                    xytext=(4, -9), fontsize=7)


def _num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


def candidates_figure(res, model, out_dir):
    cands = res.candidates
    if not cands:
        print(f"plot: no candidates.csv in {res.dir}: skipping the candidates figure")
        return []
    models = list(OrderedDict.fromkeys(c["model"] for c in cands))
    model = model or models[0]
    sel = [c for c in cands if c["model"] == model]
    if not sel:
        print(f"plot: no candidates of model {model!r} (have: {', '.join(models)}): skipping the candidates figure")
        return []
    by_index = {}
    for r in res.rows:
        by_index.setdefault(r["index"], r)
    pts, meta, thr = [], [], []
    for c in sel:
        try:
            t, m, b = float(c["iteration_time_s"]), float(c["peak_memory_bytes"]) / 2**30, int(c["batch_size"])
        except (TypeError, ValueError):
            continue
        r = by_index.get(c["index"], {})
        meta.append({"label": c["strategy"], "ck": r.get("checkpoint", "?"), "mem": c.get("memory_limit_bytes"),
                     "batch": b})
        pts.append((t, m))
        thr.append(_num(c.get("throughput_samples_per_s")))
    if not pts:
        print(f"plot: candidates of {model} have no numbers: skipping the candidates figure")
        return []
    labels = list(OrderedDict.fromkeys(m["label"] for m in meta))
    cks = list(OrderedDict.fromkeys(m["ck"] for m in meta))
    limits = sorted({float(m["mem"]) for m in meta if m["mem"]})
    markers = ["o", "s", "^", "D", "v"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    # Left: step time, as the search sees each batch size. Right: seconds per sample (1/throughput),
    # where the front is what the batch-size scheduler trades: throughput against memory.
    views = [("step time (s)", [p[0] for p in pts], "step time"),
             ("seconds per sample (1 / throughput)", [1.0 / t if t else math.inf for t in thr], "time per sample")]
    for ax, (xlabel, xs, what) in zip(axes, views):
        for s, label in enumerate(labels):
            for k, ck in enumerate(cks):
                idx = [i for i, m in enumerate(meta) if m["label"] == label and m["ck"] == ck]
                if not idx:
                    continue
                name = label if len(cks) == 1 else f"{label}, ckpt {ck}"
                filled = ck != "on"
                ax.scatter([xs[i] for i in idx], [pts[i][1] for i in idx], s=22, marker=markers[k % len(markers)],
                           facecolors=color_of(label, s) if filled else "none", edgecolors=color_of(label, s),
                           linewidths=0.8, alpha=0.8, label=name)
        front = pareto([(xs[i], pts[i][1]) for i in range(len(pts))])
        fx = [xs[i] for i in front]
        fy = [pts[i][1] for i in front]
        ax.step(fx, fy, where="post", color="black", linewidth=1, label=f"Pareto front ({len(front)})")
        ax.scatter(fx, fy, s=70, facecolors="none", edgecolors="black", linewidths=1.2)
        label_front(ax, [(xs[i], pts[i][1], meta[i]["batch"]) for i in front])
        for lim in limits:
            ax.axhline(lim / 2**30, color="grey", linestyle=":", linewidth=0.8)
            ax.text(ax.get_xlim()[0], lim / 2**30, f" limit {gib(lim)}", va="bottom", ha="left", fontsize=7,
                    color="grey")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("peak memory per device (GiB)")
        ax.set_title(f"peak memory against {what}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"{model}: the best plan of every batch size searched, predicted by the analytic model "
                 f"({len(pts)} candidates; hollow: checkpointing on; b = batch size per device)", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out_dir, f"candidates-{safe(model)}.png")
    save(fig, path)
    return [path]


# ---------------------------------------------------------------------------------------------
# (iii) scaling


def scaling_figure(scaling_dir, out_dir, experiment=None):
    if not scaling_dir:
        print("plot: no --scaling DIR: skipping the scaling figure")
        return []
    res = Results(scaling_dir, experiment)
    if not res.rows:
        print(f"plot: no results in {scaling_dir}: skipping the scaling figure")
        return []
    labels = [l for l in res.labels() if l != "fsdp"]
    if "fsdp" not in res.labels() or not labels:
        print(f"plot: {scaling_dir} has no fsdp rows or nothing to compare: skipping the scaling figure")
        return []
    styles = {"analytic": "-", "sim": "--"}
    groups = OrderedDict()
    for r in res.rows:
        groups.setdefault((r["model"], r["memory"], r["checkpoint"]), []).append(r)
    # One panel per model (and memory and checkpoint setting).
    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), 4.5), squeeze=False)
    drawn = 0
    for ax, ((model, mem, ck), rows) in zip(axes[0], groups.items()):
        for ev in res.evaluators():
            # A strategy whose speedups are fsdp's (fsdp+groups) or another's at every size (the
            # baselines that do not depend on the multi-node choices) is not drawn again.
            seen = []
            base = {}
            for r in rows:
                if r["evaluator"] == ev and r["strategy"] == "fsdp" and r["feasible_b"]:
                    base[r["config_id"]] = r
            for s, label in enumerate(labels):
                xs, ys = [], []
                for r in rows:
                    b = base.get(r["config_id"])
                    if r["evaluator"] == ev and r["strategy"] == label and r["feasible_b"] and b:
                        xs.append(int(r["world_size"]))
                        ys.append(r["throughput"] / b["throughput"])
                if not xs:
                    continue
                xs, ys = zip(*sorted(zip(xs, ys)))
                same = lambda y0: all(abs(a - b) <= 1e-9 * abs(a) for a, b in zip(ys, y0))  # noqa: E731
                if same([1.0] * len(ys)) or any(xs == x0 and same(y0) for x0, y0 in seen):
                    continue
                seen.append((xs, ys))
                name = f"{label} ({ev})"
                hollow = ev != "analytic"
                ax.plot(xs, ys, styles.get(ev, ":"), marker="o", markersize=8 if hollow else 5,
                        markerfacecolor="none" if hollow else color_of(label, s), color=color_of(label, s),
                        label=name)
                drawn += 1
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        sizes = sorted({int(r["world_size"]) for r in rows})
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(n) for n in sizes])  # 16, 32, ... rather than 2^4, 2^5, ...
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("world size (GPUs)")
        ax.set_ylabel("throughput / fsdp throughput")
        ax.set_title(f"Predicted speedup over fsdp against world size: {model}" +
                     (f", {gib(mem)}, checkpoint {ck}" if len(groups) > 1 else ""), fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="best")
    if not drawn:
        plt.close(fig)
        print(f"plot: no world size where both fsdp and another strategy fit in {scaling_dir}: skipping")
        return []
    fig.tight_layout()
    path = os.path.join(out_dir, "scaling-speedup.png")
    save(fig, path)
    return [path]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results_dir")
    ap.add_argument("--out", help="output directory (default RESULTS_DIR/plots)")
    ap.add_argument("--evaluator", default="analytic", help="analytic (default) or sim, for the throughput bars")
    ap.add_argument("--model", help="the model of the candidates figure (default: the first in candidates.csv)")
    ap.add_argument("--scaling", help="a results directory of experiments/scaling.json")
    ap.add_argument("--experiment", help="the experiment file of RESULTS_DIR (when the directory does not say)")
    args = ap.parse_args(argv)

    out_dir = args.out or os.path.join(args.results_dir, "plots")
    os.makedirs(out_dir, exist_ok=True)
    res = Results(args.results_dir, args.experiment)
    if not res.rows:
        print(f"plot: no results.csv in {args.results_dir}: skipping the throughput figures")
    else:
        throughput_figures(res, args.evaluator, out_dir)
    candidates_figure(res, args.model, out_dir)
    scaling_figure(args.scaling, out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
