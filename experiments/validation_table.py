#!/usr/bin/env python3
"""A Markdown table of an `osdp validate` run: one line per configuration, the strategies'
predicted and measured step times side by side, then the verdict.

    experiments/validation_table.py OUT/summary.json [OUT2/summary.json ...]

Each summary gives one table (its directory as the heading when there are several). Columns:
the configuration (model, memory limit), then per strategy "measured ms (error)"; the last
columns are the predicted and measured speedup of the experiment's speedup checks. Standard
library only.
"""
import json
import os
import sys


def mib(b):
    return f"{b / 2**20:.0f} MiB" if b < 2**30 else f"{b / 2**30:.0f} GiB"


def table(path):
    with open(path) as f:
        s = json.load(f)
    rows = [r for r in s["rows"] if r["feasible"] and r["measured_time_s"] > 0]
    strategies = []
    for r in s["rows"]:
        if r["strategy"] not in strategies:
            strategies.append(r["strategy"])
    configs = {}
    for r in rows:
        key = (r["model"], r["memory_limit_bytes"])
        configs.setdefault(key, {})[r["strategy"]] = r
    out = []
    head = ["model", "memory"] + strategies + ["speedup (pred / meas)"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for (model, mem), by in configs.items():
        cells = [model, mib(mem)]
        for st in strategies:
            r = by.get(st)
            if r is None:
                cells.append("-")
            else:
                cells.append(f"{1e3 * r['measured_time_s']:.0f} ({100 * r['time_error']:+.1f}%)")
        # The speedup checks of this configuration, matched by the configuration's JSON.
        group = next(iter(by.values()))["config"]
        cfg = json.loads(group) if group.startswith("{") else group
        sp = [f"{x['faster']}/{x['than']} {x['predicted']:.2f}x / {x['measured']:.2f}x"
              for x in s.get("speedups", []) if x["config"] == cfg]
        cells.append(", ".join(sp) or "-")
        out.append("| " + " | ".join(cells) + " |")
    order = s.get("order", {})
    out.append("")
    out.append(
        f"{s['plans']} plans; step time |error| median {100 * s['median_abs_time_error']:.1f}%, "
        f"max {100 * s['max_abs_time_error']:.1f}%; peak memory |error| max "
        f"{100 * s['max_abs_memory_error']:.2f}%; order as predicted in "
        f"{order.get('as_predicted', '?')} of {order.get('checked', '?')} pairs predicted further apart "
        f"than their measured spread ({order.get('pairs', '?')} pairs); "
        f"{'within' if s['ok'] else 'over'} tolerance.")
    return "\n".join(out)


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for i, path in enumerate(sys.argv[1:]):
        if len(sys.argv) > 2:
            print(f"{'' if i == 0 else chr(10)}**{os.path.dirname(path) or '.'}**\n")
        print(table(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
