#!/usr/bin/env python3
"""Speedup over FSDP per model family and memory limit, beside the OSDP paper's figures.

Usage: paper_table.py RESULTS_DIR [--evaluator analytic|sim] [--experiment FILE]
                      [--strategies exact,exact+split]

RESULTS_DIR is what `osdp sweep` wrote (results.csv, summary.json). Models are grouped into the
paper's families by name prefix: nd- (narrow & deep, N&D), ws- (wide & shallow, W&S), ic-
(inconsistent & consecutive, I&C); other models form "other". For every checkpoint setting,
family, memory limit and strategy the table gives the arithmetic mean and the maximum of
throughput(strategy) / throughput(fsdp) - 1 over the models where both fit, and counts the
configurations where only one of them fits or neither does. A configuration where the strategy
does not fit and FSDP does is not a speedup of 0: it is left out of the mean and maximum and
counted in "fsdp only" (for exact that would be a search defect: its space contains FSDP's plan);
one where only the strategy fits is an enabled configuration, counted in "ours only", with no
finite speedup. Rows "all" pool both memory limits, which is how the paper reports its figures.

results.csv has no checkpoint column; the checkpoint setting of each row comes from the unit
keys the sweep records in rows.jsonl, else from the experiment file (summary.json's copy, --experiment, or
experiments/NAME.json beside this script, NAME the results directory's name), expanded the way
`osdp sweep` expands it.

This module is also imported by plot.py for reading results.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import os
import re
import sys
from collections import OrderedDict

FAMILIES = OrderedDict([("nd-", "N&D"), ("ws-", "W&S"), ("ic-", "I&C")])
FAMILY_LONG = {"N&D": "narrow & deep", "W&S": "wide & shallow", "I&C": "inconsistent & consecutive",
               "other": "other models"}

# The paper's figures (arXiv 2209.13258 section 3.2, as in REFERENCE.md), in percent, pooled over
# its two memory limits. None: not given. Checkpointing: one figure over all families; the paper
# does not say whether those runs split operators.
PAPER = {
    ("off", "N&D", "exact"): (17.2, 18.0),
    ("off", "N&D", "exact+split"): (22.0, 23.0),
    ("off", "W&S", "exact"): None,  # "can hardly achieve promising acceleration"
    ("off", "W&S", "exact+split"): (50.0, 92.0),
    ("off", "I&C", "exact"): (10.0, 16.0),
    ("off", "I&C", "exact+split"): (24.0, 33.0),
    ("on", "all", "exact"): (52.9, 108.3),
    ("on", "all", "exact+split"): (52.9, 108.3),
}
PAPER_NOTES = {("off", "W&S", "exact"): "little gain"}


def family_of(model: str) -> str:
    for prefix, name in FAMILIES.items():
        if model.startswith(prefix):
            return name
    return "other"


def gib(x: float) -> str:
    """A memory limit as written in experiment files: whole GiB, else whole GB, else GiB."""
    v = x / 2**30
    if abs(v - round(v)) < 1e-9:
        return f"{v:.0f} GiB"
    if abs(x / 1e9 - round(x / 1e9)) < 1e-9:
        return f"{x / 1e9:.0f} GB"
    return f"{v:.2f} GiB"


_UNITS = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KIB": 2**10, "MIB": 2**20,
          "GIB": 2**30, "TIB": 2**40}


def parse_bytes(text) -> float | None:
    if isinstance(text, (int, float)):
        return float(text)
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        return None
    return float(m.group(1)) * _UNITS[m.group(2).upper()]


def _float(s):
    try:
        v = float(s)
        return v if math.isfinite(v) else None
    except (TypeError, ValueError):
        return None


def _feasible(s) -> bool:
    return str(s).strip().lower() in ("true", "1", "yes")


# ---------------------------------------------------------------------------------------------
# The configuration of each unit index


def _walk(obj):
    yield obj
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)


def _load_json_or_lines(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return []
    try:
        return [json.loads(text)]
    except ValueError:
        out = []
        for line in text.splitlines():
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out


def configs_from_keys(results_dir):
    """index -> effective config, from unit keys recorded anywhere in the results directory."""
    found = {}
    for name in sorted(os.listdir(results_dir)):
        if not (name.endswith(".json") or name.endswith(".jsonl")):
            continue
        for doc in _load_json_or_lines(os.path.join(results_dir, name)):
            for obj in _walk(doc):
                if isinstance(obj, dict) and "index" in obj and isinstance(obj.get("key"), str):
                    try:
                        key = json.loads(obj["key"])
                        idx = int(obj["index"])
                    except (ValueError, TypeError):
                        continue
                    if isinstance(key, dict) and "checkpoint" in key:
                        found[idx] = _effective(key, {"label": key.get("label"),
                                                      "split_max": key.get("strategy_split_max"),
                                                      "checkpoint": key.get("strategy_checkpoint")})
    return found


def _effective(config, strategy):
    c = dict(config)
    if strategy.get("split_max") is not None:
        c["split_max"] = strategy["split_max"]
    if strategy.get("checkpoint") is not None:
        c["checkpoint"] = strategy["checkpoint"]
    c["label"] = strategy.get("label") or strategy.get("strategy")
    return c


def find_experiment(results_dir, explicit=None):
    """The experiment document: --experiment, a copy in summary.json, or the bundled file."""
    if explicit:
        with open(explicit) as f:
            return json.load(f, object_pairs_hook=OrderedDict), explicit
    summary = os.path.join(results_dir, "summary.json")
    for doc in _load_json_or_lines(summary):
        for obj in _walk(doc):
            if isinstance(obj, dict) and "strategies" in obj and "base" in obj:
                return obj, summary + " (its copy of the experiment)"
        for obj in _walk(doc):
            if isinstance(obj, str) and obj.endswith(".json") and os.path.isfile(obj):
                try:
                    with open(obj) as f:
                        d = json.load(f, object_pairs_hook=OrderedDict)
                    if isinstance(d, dict) and "strategies" in d:
                        return d, obj
                except (OSError, ValueError):
                    pass
    here = os.path.dirname(os.path.abspath(__file__))
    guess = os.path.join(here, os.path.basename(os.path.normpath(results_dir)) + ".json")
    if os.path.isfile(guess):
        with open(guess) as f:
            return json.load(f, object_pairs_hook=OrderedDict), guess
    return None, None


def expand(exp, axis_order):
    base = {"checkpoint": "off", "split_max": 1, "world_size": 0, "memory": "", "prefetch": 0,
            "tier": "extended"}
    base.update(exp.get("base", {}))
    axes = exp.get("axes", {})
    strategies = []
    for s in exp.get("strategies", []):
        s = dict(s)
        s.setdefault("label", s.get("strategy"))
        strategies.append(s)
    units = []
    for point in itertools.product(*[axes[k] for k in axis_order]):
        c = dict(base)
        c.update(zip(axis_order, point))
        for s in strategies:
            units.append(_effective(c, s))
    return units


def _consistent(units, rows):
    for r in rows:
        try:
            i = int(r["index"])
        except (TypeError, ValueError):
            return False
        if i < 0 or i >= len(units):
            return False
        u = units[i]
        if u["label"] != r["strategy"]:
            return False
        m = str(u.get("model", ""))
        if m and "/" not in m and not m.endswith(".json") and m != r["model"]:
            return False
        want = parse_bytes(u.get("memory")) if u.get("memory") not in ("", None) else None
        got = _float(r.get("memory_limit_bytes"))
        if want is not None and got is not None and abs(want - got) > 0.5:
            return False
        ws = u.get("world_size") or 0
        if ws and str(ws) != str(r.get("world_size")):
            return False
    return True


def configs_from_experiment(exp, rows):
    """index -> effective config: the axes in file order (as documented) or in sorted key order,
    whichever agrees with every row's model, memory, world size and label (file order if both)."""
    axes = list(exp.get("axes", {}).keys())
    orders = [axes] + ([sorted(axes)] if sorted(axes) != axes else [])
    for order in orders:
        units = expand(exp, order)
        if _consistent(units, rows):
            return dict(enumerate(units)), order
    return None, None


# ---------------------------------------------------------------------------------------------
# Reading a results directory


class Results:
    def __init__(self, results_dir, experiment=None, quiet=False):
        self.dir = results_dir
        self.rows = []
        self.candidates = []
        self.notes = []
        path = os.path.join(results_dir, "results.csv")
        if os.path.isfile(path):
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                missing = [h for h in ("index", "model", "strategy", "evaluator", "feasible",
                                       "throughput_samples_per_s", "memory_limit_bytes") if h not in (reader.fieldnames or [])]
                if missing:
                    raise SystemExit(f"{path}: missing columns {', '.join(missing)}")
                for r in reader:
                    self.rows.append(r)
        cpath = os.path.join(results_dir, "candidates.csv")
        if os.path.isfile(cpath):
            with open(cpath, newline="") as f:
                self.candidates = list(csv.DictReader(f))
        self.configs = {}
        self.source = None
        if self.rows:
            keyed = configs_from_keys(results_dir)
            if keyed and all(_int(r["index"]) in keyed for r in self.rows):
                self.configs, self.source = keyed, "the unit keys recorded by the sweep (rows.jsonl)"
            else:
                exp, where = find_experiment(results_dir, experiment)
                if exp is not None:
                    configs, order = configs_from_experiment(exp, self.rows)
                    if configs is not None:
                        self.configs = configs
                        self.source = f"{where} (axes expanded in the order {', '.join(order) or '-'})"
                    else:
                        self.notes.append(f"{where} does not match {path}; checkpoint settings unknown")
                else:
                    self.notes.append("no experiment file found; checkpoint settings unknown "
                                      "(pass --experiment FILE)")
        self.n_labels = len(self.labels())
        for r in self.rows:
            c = self.configs.get(_int(r["index"]), {})
            if c.get("groups") is True:  # the multi-node choices searched too: its own label
                r["strategy"] = r["strategy"] + "+groups"
            r["checkpoint"] = str(c.get("checkpoint", "?"))
            r["split_max"] = str(c.get("split_max", "?"))
            r["config_id"] = self._config_id(r, c)
            r["feasible_b"] = _feasible(r["feasible"])
            r["throughput"] = _float(r.get("throughput_samples_per_s")) if r["feasible_b"] else None
            if r["throughput"] is None:
                r["feasible_b"] = False
            # The throughput's 90% interval (results.csv written with a calibration; None otherwise).
            low, high = _float(r.get("throughput_low")), _float(r.get("throughput_high"))
            r["throughput_interval"] = (low, high) if r["feasible_b"] and low and high else None
            r["family"] = family_of(r["model"])
            r["memory"] = _float(r.get("memory_limit_bytes")) or 0.0
        if not quiet:
            for n in self.notes:
                print(f"note: {n}", file=sys.stderr)

    def _config_id(self, r, c):
        # Everything that names a configuration, not the strategy.
        keys = ("model", "cluster", "world_size", "memory", "split_max", "checkpoint", "prefetch", "tier", "batch")
        if c:
            cfg = {k: c.get(k) for k in keys if k != "split_max"}
            cfg["model_name"] = r["model"]
            return json.dumps(cfg, sort_keys=True, default=str)
        # Without configurations: units are numbered with the strategies innermost.
        return json.dumps([_int(r["index"]) // max(1, self.n_labels), r["model"], r.get("cluster"),
                           r.get("world_size"), r.get("memory_limit_bytes")])

    def evaluators(self):
        return list(OrderedDict.fromkeys(r["evaluator"] for r in self.rows))

    def labels(self):
        return list(OrderedDict.fromkeys(r["strategy"] for r in self.rows))

    def select(self, evaluator):
        return [r for r in self.rows if r["evaluator"] == evaluator]


def _int(s):
    try:
        return int(s)
    except (TypeError, ValueError):
        return -1


# ---------------------------------------------------------------------------------------------
# The table


def pct(x):
    return "" if x is None else f"{x * 100:+.1f}%"


def compare(rows, label, baseline="fsdp"):
    """Per configuration: (model, speedup or None, status) of label against baseline."""
    by_cfg = OrderedDict()
    for r in rows:
        by_cfg.setdefault(r["config_id"], {})[r["strategy"]] = r
    out = []
    for cfg, strategies in by_cfg.items():
        ours, base = strategies.get(label), strategies.get(baseline)
        if ours is None or base is None:
            continue
        if ours["feasible_b"] and base["feasible_b"]:
            out.append((ours["model"], ours["throughput"] / base["throughput"], "both"))
        elif ours["feasible_b"]:
            out.append((ours["model"], None, "ours only"))
        elif base["feasible_b"]:
            out.append((ours["model"], None, "fsdp only"))
        else:
            out.append((ours["model"], None, "neither"))
    return out


def summarize(cmp):
    sp = [(s, m) for m, s, st in cmp if st == "both"]
    counts = {k: sum(1 for _, _, st in cmp if st == k) for k in ("both", "ours only", "fsdp only", "neither")}
    if not sp:
        return None, None, None, counts
    mean = sum(s for s, _ in sp) / len(sp) - 1
    best = max(sp, key=lambda t: t[0])
    return mean, best[0] - 1, best[1], counts


def build_table(res, evaluator, strategies, baseline="fsdp"):
    rows = res.select(evaluator)
    table = []
    checkpoints = list(OrderedDict.fromkeys(r["checkpoint"] for r in rows))
    families = [f for f in list(FAMILIES.values()) + ["other"] if any(r["family"] == f for r in rows)]
    memories = sorted({r["memory"] for r in rows})
    for ck in checkpoints:
        for fam in families + (["all"] if len(families) > 1 else []):
            for mem in (memories + ["all"] if fam != "all" else ["all"]):
                for label in strategies:
                    sel = [r for r in rows if r["checkpoint"] == ck and (fam == "all" or r["family"] == fam)
                           and (mem == "all" or r["memory"] == mem)]
                    cmp = compare(sel, label, baseline)
                    if not cmp:
                        continue
                    mean, mx, arg, counts = summarize(cmp)
                    paper = PAPER.get((ck, fam, label)) if mem == "all" else None
                    note = PAPER_NOTES.get((ck, fam, label), "") if mem == "all" else ""
                    table.append({"checkpoint": ck, "family": fam, "memory": mem, "strategy": label,
                                  "configs": len(cmp), "mean": mean, "max": mx, "argmax": arg,
                                  "counts": counts, "paper": paper, "paper_note": note})
    return table


def print_table(table, out=sys.stdout):
    head = ["ckpt", "family", "memory", "strategy", "configs", "both fit", "ours only", "fsdp only", "neither",
            "avg speedup", "max speedup", "at", "paper avg", "paper max"]
    lines = []
    for t in table:
        paper = t["paper"]
        lines.append([t["checkpoint"], t["family"], "all" if t["memory"] == "all" else gib(t["memory"]),
                      t["strategy"], str(t["configs"]), str(t["counts"]["both"]), str(t["counts"]["ours only"]),
                      str(t["counts"]["fsdp only"]), str(t["counts"]["neither"]), pct(t["mean"]) or "-",
                      pct(t["max"]) or "-", t["argmax"] or "",
                      f"{paper[0]:+.1f}%" if paper else t["paper_note"], f"{paper[1]:+.1f}%" if paper else ""])
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(head)]
    fmt = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    print(fmt(head), file=out)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", file=out)
    for l in lines:
        print(fmt(l), file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results_dir")
    ap.add_argument("--evaluator", default="analytic", help="analytic (default) or sim")
    ap.add_argument("--strategies", default="exact,exact+split",
                    help="comma-separated strategy labels to compare with fsdp (default exact,exact+split)")
    ap.add_argument("--baseline", default="fsdp", help="the label compared against (default fsdp)")
    ap.add_argument("--experiment", help="the experiment file (when the results directory does not say)")
    args = ap.parse_args(argv)

    res = Results(args.results_dir, args.experiment)
    if not res.rows:
        print(f"paper_table: no results in {os.path.join(args.results_dir, 'results.csv')}", file=sys.stderr)
        return 1
    if args.evaluator not in res.evaluators():
        print(f"paper_table: no rows for evaluator {args.evaluator!r} (have: {', '.join(res.evaluators())})",
              file=sys.stderr)
        return 1
    labels = res.labels()
    if args.baseline not in labels:
        print(f"paper_table: no strategy labelled {args.baseline!r} (have: {', '.join(labels)})", file=sys.stderr)
        return 1
    strategies = [s for s in args.strategies.split(",") if s in labels]
    if not strategies:
        print(f"paper_table: none of {args.strategies} in the results (have: {', '.join(labels)})", file=sys.stderr)
        return 1

    print(f"Speedup over {args.baseline}: throughput(strategy) / throughput({args.baseline}) - 1, "
          f"evaluator {args.evaluator}, from {os.path.join(args.results_dir, 'results.csv')}")
    if res.source:
        print(f"checkpoint settings from {res.source}")
    print("avg: arithmetic mean over the configurations where both fit; max: the largest, 'at' the model; "
          "'ours only': the strategy fits and fsdp does not (no finite speedup); 'fsdp only': fsdp fits and the "
          "strategy does not (left out of avg and max, not counted as 0). Paper figures pool both memory limits, "
          "so they stand on the 'all' rows; with checkpointing the paper gives one figure over all families.")
    print()
    print_table(build_table(res, args.evaluator, strategies, args.baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
