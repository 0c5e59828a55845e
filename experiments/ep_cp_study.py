#!/usr/bin/env python3
"""The expert- and context-parallelism study of docs/parallelism.md: every figure predicted by osdp's
cost model (nothing is trained), with the plans each strategy chose.

  python3 experiments/ep_cp_study.py OSDP_BINARY [--out data/results/ep-cp-study] [--tables-only]

Cases (sequence 4096 for the MoE models; the clusters are data/clusters/h100-2x8.json with as many
nodes of 8 as the case needs, h100-8 for 8 GPUs):
  - Mixtral 8x7B and Qwen3-30B-A3B on 8, 16, 32 and 64 H100s: the exact search (EP free per MoE
    layer), the same without EP (--ep 1), the uniform choice users make by hand (EP = the experts
    within a node: --ep 8), and FSDP;
  - Llama 3.1 8B on 8 H100s at 8k to 256k tokens: the exact search (CP free, ring and all-to-all),
    without CP (--cp 1), the smallest CP degree that fits with ring attention (--cp c), and FSDP.
Writes OUT/rows.json (one row per case and strategy: throughput, step, peak, layout, choices) and
OUT/tables.md (the tables docs/parallelism.md shows).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def plan(osdp, model, cluster, seq, extra):
    cmd = [osdp, "plan", "--model", model, "--cluster", cluster, "--seq", str(seq), "--json", "--draws", "0",
           "--baseline", "none"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 3):
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr}")
    return json.loads(p.stdout)


def row(label, d):
    if not d.get("feasible"):
        return {"strategy": label, "feasible": False, "min_fit_memory_bytes": d.get("min_fit_memory_bytes")}
    layout = d["plan"]
    ops = layout["operators"]
    eps = sorted({o.get("ep", 1) for o in ops if o.get("ep", 1) > 1})
    cp = layout["pipeline"].get("context_parallel")
    return {"strategy": label, "feasible": True, "throughput": d["throughput_samples_per_s"],
            "tokens_per_s": d["throughput_samples_per_s"] * layout["model"]["seq"], "step_s": d["iteration_time_s"],
            "peak_gib": d["peak_memory_bytes"] / 2**30, "pp": d["pp"], "micro_batches": d["micro_batches"],
            "global_batch": d["global_batch"], "ep": eps, "cp": cp, "choices": d.get("choices"),
            "search_s": d.get("search_seconds")}


def tokens(rs, strategy):
    r = rs.get(strategy)
    if r is None:
        return "none fits"
    return f"{r['tokens_per_s']:,.0f}" if r["feasible"] else "does not fit"


def layout_text(r):
    if not r["feasible"]:
        return "does not fit"
    parts = [f"pp {r['pp']}", f"m {r['micro_batches']}"]
    if r["ep"]:
        parts.append("EP " + "/".join(str(e) for e in r["ep"]))
    if r["cp"]:
        parts.append(f"CP {r['cp']['degree']} {r['cp']['variant']}")
    return ", ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("osdp")
    ap.add_argument("--out", default=os.path.join(ROOT, "data", "results", "ep-cp-study"))
    ap.add_argument("--tables-only", action="store_true", help="write tables.md from OUT/rows.json, run nothing")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.tables_only:
        with open(os.path.join(a.out, "rows.json")) as f:
            write_tables(a.out, json.load(f))
        return
    with open(os.path.join(ROOT, "data", "clusters", "h100-2x8.json")) as f:
        base = json.load(f)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        def cluster(gpus):
            if gpus == 8:
                return "h100-8"
            path = os.path.join(tmp, f"h100-{gpus // 8}x8.json")
            c = dict(base, name=f"h100-{gpus // 8}x8", nodes=gpus // 8)
            with open(path, "w") as f:
                json.dump(c, f)
            return path

        for model in ["mixtral-8x7b", "qwen3-30b-a3b"]:
            for gpus in [8, 16, 32, 64]:
                c = cluster(gpus)
                for label, extra in [("exact", []), ("exact, no EP", ["--ep", "1"]), ("uniform EP 8", ["--ep", "8"]),
                                     ("fsdp", ["--strategy", "fsdp"])]:
                    r = row(label, plan(a.osdp, model, c, 4096, extra))
                    r.update(model=model, gpus=gpus, seq=4096)
                    rows.append(r)
                    print(f"{model} {gpus} {label}: {layout_text(r)} {r.get('throughput', 0):.2f}", file=sys.stderr)
        for seq in [8192, 16384, 32768, 65536, 131072, 262144]:
            cases = [("exact", ["--cp-variant", "both"]), ("exact, no CP", ["--cp", "1"]),
                     ("fsdp", ["--strategy", "fsdp"])]
            for label, extra in cases:
                r = row(label, plan(a.osdp, "llama3.1-8b", "h100-8", seq, extra))
                r.update(model="llama3.1-8b", gpus=8, seq=seq)
                rows.append(r)
            for c in [1, 2, 4, 8]:  # the smallest ring degree that fits
                r = row("smallest CP that fits", plan(a.osdp, "llama3.1-8b", "h100-8", seq, ["--cp", str(c)]))
                if r["feasible"]:
                    r.update(model="llama3.1-8b", gpus=8, seq=seq)
                    rows.append(r)
                    break
            print(f"llama3.1-8b {seq} done", file=sys.stderr)
    with open(os.path.join(a.out, "rows.json"), "w") as f:
        json.dump(rows, f, indent=1)
    write_tables(a.out, rows)


def write_tables(out, rows):
    lines = []
    for model in ["mixtral-8x7b", "qwen3-30b-a3b"]:
        lines += [f"### {model}, sequence 4096 (predicted)", "",
                  "| GPUs | exact | exact, no EP | uniform EP 8 | fsdp | exact's plan |", "|---|---|---|---|---|---|"]
        for gpus in [8, 16, 32, 64]:
            rs = {r["strategy"]: r for r in rows if r["model"] == model and r["gpus"] == gpus}
            cells = " | ".join(tokens(rs, s) for s in ["exact", "exact, no EP", "uniform EP 8", "fsdp"])
            lines.append(f"| {gpus} | {cells} | {layout_text(rs['exact'])} |")
        lines.append("")
    lines += ["### llama3.1-8b on 8 H100s (predicted)", "",
              "| sequence | exact | exact, no CP | smallest CP that fits (ring) | fsdp | exact's plan |",
              "|---|---|---|---|---|---|"]
    for seq in [8192, 16384, 32768, 65536, 131072, 262144]:
        rs = {r["strategy"]: r for r in rows if r["model"] == "llama3.1-8b" and r["seq"] == seq}
        small = rs.get("smallest CP that fits")
        small_text = f"{tokens(rs, 'smallest CP that fits')} (CP {small['cp']['degree'] if small['cp'] else 1})" \
            if small else "none fits"
        lines.append(f"| {seq:,} | {tokens(rs, 'exact')} | {tokens(rs, 'exact, no CP')} | {small_text} | "
                     f"{tokens(rs, 'fsdp')} | {layout_text(rs['exact'])} |")
    lines.append("")
    with open(os.path.join(out, "tables.md"), "w") as f:
        f.write("Tokens per second over the whole cluster, predicted by osdp's cost model.\n\n" + "\n".join(lines))
    print(f"wrote {out}/tables.md", file=sys.stderr)


if __name__ == "__main__":
    main()
