#!/usr/bin/env python3
"""Predicted against measured step time of an `osdp validate` run.

Usage: plot_validation.py SUMMARY.json OUT.png

One point per plan (colour by strategy, marker by model), the y = x line and the band of the
experiment's largest allowed step-time error; the title gives the median and largest errors and
the largest peak-memory error.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FormatStrFormatter  # noqa: E402


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    with open(argv[1]) as f:
        summary = json.load(f)
    rows = [r for r in summary["rows"] if r["feasible"]]
    if not rows:
        sys.exit("no measured plans in " + argv[1])
    tol = summary["tolerance"]["time_max"]
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    pred = [1e3 * r["predicted_time_s"] for r in rows]
    meas = [1e3 * r["measured_time_s"] for r in rows]
    lo, hi = 0.8 * min(pred + meas), 1.2 * max(pred + meas)
    xs = [lo, hi]
    ax.plot(xs, xs, color="black", lw=1, label="y = x")
    ax.fill_between(xs, [x * (1 - tol) for x in xs], [x * (1 + tol) for x in xs], color="0.85",
                    label=f"±{100 * tol:.0f}%")
    strategies = sorted({r["strategy"] for r in rows})
    models = sorted({r["model"] for r in rows})
    markers = "osD^v<>ph*"
    cmap = plt.get_cmap("tab10")
    for r in rows:
        si, mi = strategies.index(r["strategy"]), models.index(r["model"])
        lo_err = 1e3 * (r["measured_time_s"] - r["measured_min_s"])
        hi_err = 1e3 * (r["measured_max_s"] - r["measured_time_s"])
        ax.errorbar(1e3 * r["predicted_time_s"], 1e3 * r["measured_time_s"], yerr=[[lo_err], [hi_err]],
                    fmt=markers[mi % len(markers)], color=cmap(si % 10), ms=6, capsize=2)
    for si, s in enumerate(strategies):
        ax.plot([], [], "o", color=cmap(si % 10), label=s)
    for mi, m in enumerate(models):
        ax.plot([], [], markers[mi % len(markers)], color="0.4", label=m)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain milliseconds, not powers of ten
        axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted step time (ms, simulator)")
    ax.set_ylabel("measured step time (ms, median; bars: min-max)")
    ax.set_title(f"{summary['experiment'].get('name', '')}: median |error| "
                 f"{100 * summary['median_abs_time_error']:.1f}%, max {100 * summary['max_abs_time_error']:.1f}%\n"
                 f"peak memory max |error| {100 * summary['max_abs_memory_error']:.2f}%", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)


if __name__ == "__main__":
    main(sys.argv)
