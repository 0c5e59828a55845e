#!/usr/bin/env python3
# Two osdp binaries taking turns per case, N runs each, on the study's 36 cases (three models, three
# clusters, 8-20 GB): exact's search time (median, min, max), labels and throughput, printed and
# written to OUT.json. From the repository root:
#   python3 data/results/bench/hybrid-2026-11-27/exact-before-after.py OLD_OSDP NEW_OSDP 3 OUT.json
import json, subprocess, sys, os, statistics
old, new, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
models = ["bert-huge-32", "t5-large-48", "gpt-64l"]
clusters = ["a100-8", "a100-2x8", "a100-8x8"]
env = dict(os.environ, OSDP_DATA_DIR=os.environ.get("OSDP_DATA_DIR", os.path.abspath("data")))
rows = []
for mo in models:
    for cl in clusters:
        for gb in [8, 12, 16, 20]:
            r = {"model": mo, "cluster": cl, "gb": gb, "old": [], "new": [], "load": []}
            for k in range(n):
                for tag, b in (("old", old), ("new", new)):
                    out = subprocess.run([b, "plan", "--model", mo, "--cluster", cl, "--memory", f"{gb}GB", "--hybrid",
                                          "--evaluate", "analytic", "--baseline", "none", "--json"],
                                         capture_output=True, text=True, env=env).stdout
                    d = json.loads(out)
                    r[tag].append(d["search_seconds"])
                    r[tag + "_labels"] = d["labels"]
                    r[tag + "_thr"] = d["plan"]["predicted_throughput_samples_per_s"]
                    r["load"].append(float(open("/proc/loadavg").read().split()[0]))
            rows.append(r)
            print(f"{mo:13s} {cl:9s} {gb:2d} | old {statistics.median(r['old']):7.3f} ({min(r['old']):.3f}-{max(r['old']):.3f}) "
                  f"new {statistics.median(r['new']):7.3f} ({min(r['new']):.3f}-{max(r['new']):.3f}) "
                  f"x{statistics.median(r['old'])/statistics.median(r['new']):5.1f} | labels {r['old_labels']} -> {r['new_labels']} "
                  f"| thr {r['old_thr']:.4f} {r['new_thr']:.4f} {'SAME' if abs(r['old_thr']-r['new_thr']) <= 1e-9*r['old_thr'] else 'DIFF'} "
                  f"| load {min(r['load']):.2f}-{max(r['load']):.2f}", flush=True)
json.dump(rows, open(sys.argv[4], "w"), indent=1)
