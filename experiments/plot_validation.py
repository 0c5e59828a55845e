#!/usr/bin/env python3
"""Predicted against measured step time of an `osdp validate` run.

Usage: plot_validation.py SUMMARY.json OUT.png

One point per plan (colour by strategy, marker by model), the y = x line and the band of the
experiment's largest allowed step-time error; the title gives the median and largest errors and
the largest peak-memory error; rows whose compute was emulated (osdp validate --compute emulate)
say so in the title and the axis.
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.lines  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullFormatter  # noqa: E402


def nice_ticks(lo, hi, min_gap):
    """Round numbers (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8 x 10^k) in [lo, hi], the roundest first,
    each at least min_gap from the others in log10: labels that never run into each other, however
    wide or narrow the range."""
    cands = []
    for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8):
            v = m * 10 ** k
            if lo <= v <= hi:
                cands.append(v)
    ticks = []
    for group in ((1,), (2, 5), (1.5, 3, 4, 6, 8), (1.2, 2.5, 7)):
        for v in cands:
            mant = round(v / 10 ** math.floor(math.log10(v)), 6)
            if mant in group and all(abs(math.log10(v) - math.log10(t)) >= min_gap for t in ticks):
                ticks.append(v)
    return sorted(ticks)


def coverage_text(summary):
    c = summary.get("coverage") or {}
    if not c.get("plans"):
        return ""
    return f"; {c['inside']} of {c['plans']} inside their {100 * c['level']:.0f}% intervals"


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    with open(argv[1]) as f:
        summary = json.load(f)
    rows = [r for r in summary["rows"] if r["feasible"]]
    if not rows:
        sys.exit("no measured plans in " + argv[1])
    tol = summary["tolerance"]["time_max"]
    fig, ax = plt.subplots(figsize=(7.6, 5.6))
    pred = [1e3 * r["predicted_time_s"] for r in rows]
    meas = [1e3 * r["measured_time_s"] for r in rows]
    lows = [1e3 * r["measured_min_s"] for r in rows] + [1e3 * r["predicted_interval_s"][0] for r in rows
                                                         if r.get("predicted_interval_s")]
    highs = [1e3 * r["measured_max_s"] for r in rows] + [1e3 * r["predicted_interval_s"][1] for r in rows
                                                          if r.get("predicted_interval_s")]
    lo, hi = 0.9 * min(pred + lows), 1.1 * max(pred + highs)
    xs = [lo, hi]
    ax.plot(xs, xs, color="black", lw=1, label="y = x")
    ax.fill_between(xs, [x * (1 - tol) for x in xs], [x * (1 + tol) for x in xs], color="0.88",
                    label=f"±{100 * tol:.0f}% (tolerance)")
    strategies = sorted({r["strategy"] for r in rows})
    models = sorted({r["model"] for r in rows})
    markers = "osD^v<>ph*"
    cmap = plt.get_cmap("tab10")
    for r in rows:
        si, mi = strategies.index(r["strategy"]), models.index(r["model"])
        lo_err = 1e3 * (r["measured_time_s"] - r["measured_min_s"])
        hi_err = 1e3 * (r["measured_max_s"] - r["measured_time_s"])
        xerr = None  # the prediction's 90% interval, where the calibration gave one
        if r.get("predicted_interval_s"):
            p_lo, p_hi = r["predicted_interval_s"]
            xerr = [[1e3 * (r["predicted_time_s"] - p_lo)], [1e3 * (p_hi - r["predicted_time_s"])]]
        ax.errorbar(1e3 * r["predicted_time_s"], 1e3 * r["measured_time_s"], yerr=[[lo_err], [hi_err]], xerr=xerr,
                    fmt=markers[mi % len(markers)], color=cmap(si % 10), ms=6, capsize=2, alpha=0.8,
                    markeredgecolor="white", markeredgewidth=0.5)
    handles = ax.get_legend_handles_labels()[0]
    names = ax.get_legend_handles_labels()[1]
    for si, s in enumerate(strategies):
        handles.append(matplotlib.lines.Line2D([], [], ls="", marker="o", color=cmap(si % 10)))
        names.append(s)
    if len(models) > 1:
        for mi, m in enumerate(models):
            handles.append(matplotlib.lines.Line2D([], [], ls="", marker=markers[mi % len(markers)], color="0.4"))
            names.append(m)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = nice_ticks(lo, hi, math.log10(hi / lo) / 9)
    for axis in (ax.xaxis, ax.yaxis):  # plain milliseconds at round values, never crowded
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted step time (ms, simulator; bars: 90% interval)")
    emulated = any(r.get("compute") == "emulated" for r in summary["rows"])
    ax.set_ylabel("measured step time (ms, median; bars: min-max)"
                  + ("; compute emulated" if emulated else ""))
    name = summary["experiment"].get("name", "")
    one_model = f" ({models[0]})" if len(models) == 1 else ""
    ax.set_title(f"{name}{one_model}{' (compute emulated)' if emulated else ''}: median |error| "
                 f"{100 * summary['median_abs_time_error']:.1f}%, max {100 * summary['max_abs_time_error']:.1f}%\n"
                 f"peak memory max |error| {100 * summary['max_abs_memory_error']:.2f}%"
                 + coverage_text(summary), fontsize=10)
    ax.legend(handles, names, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120, metadata={"Software": None})


if __name__ == "__main__":
    main(sys.argv)
