"""The README of a validate/gpu-llama.sh run: what ran, on what, and predicted against measured.

    python report.py --out DIR [--validate-calibration NAME] [--dry]

Reads what the run left in DIR (each part optional: a phase that did not run leaves its table out):
provenance-start.json and provenance-end.json, phases.tsv (phase, exit, seconds, note), preflight.json,
predictions/index.json (each unit's plan replayed by osdp simulate per calibration), validate/rows.jsonl
and summary.json (osdp validate --backend torch), steps.json (steps.py: the step split in two and the
allocator's peak), bench.json (bench.py: torch's bf16 GEMMs and SDPA) and the calibration files the
predictions name. Writes DIR/README.md and prints its tables.

The price osdp puts on a single kernel is not printed by the osdp program, so the kernel tables mirror
CostModel::kernel_s (costmodel/cost_model.cpp) here: a GEMM shape the calibration timed costs its time
times the kernel's density, another overhead + max(flops / (peak x eff(d)), bytes / bandwidth) with
eff(d) = gemm_efficiency d / (d + d_half), d the smallest dimension; an elementwise pass overhead + bytes /
bandwidth. The fused attention of costmodel/workload.cpp: forward, a pass of e s (2 q + 2 kv) + 4 a s bytes
and the GEMMs S = Q K^T (s, s, d) and O = P V (s, d, s), a of them (count), density (s + 1) / 2s; backward,
a pass of e s (5 q + 4 kv) + 8 a s bytes and five GEMMs: (s, s, d), (s, d, s), (s, s, d), (s, d, s), (s, d, s).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

GiB = 2.0**30


def _load(path: str) -> Any:
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1e3 * x:.1f}"


def _gib(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x / GiB:.2f} GiB" if abs(x) >= GiB / 10 else f"{x / 2**20:.2f} MiB"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# ---- osdp's price of one kernel (a mirror of CostModel::kernel_s, for these tables only) ----------------

class Pricer:
    def __init__(self, cal: dict, elem_bytes: int):
        c = cal["compute"]
        self.peak, self.eff = c["bf16_flops"], c.get("gemm_efficiency", 1.0)
        self.d_half, self.overhead = c["gemm_half_efficiency_dim"], c["kernel_overhead"]
        self.bw, self.elem = c["memory_bandwidth"], elem_bytes
        self.timed = {(g["m"], g["n"], g["k"], g["count"]): g["time"] for g in cal.get("gemm_times", [])}

    def gemm(self, m: int, n: int, k: int, count: int = 1, density: float = 1.0) -> tuple[float, bool]:
        t = self.timed.get((m, n, k, count))
        if t is not None:
            return t * density, True
        d = min(m, n, k)
        flop_s = 2.0 * m * n * k * count * density / (self.peak * self.eff * d / (d + self.d_half))
        nbytes = count * (m * k + k * n + m * n) * self.elem * density
        return self.overhead + max(flop_s, nbytes / self.bw), False

    def elementwise(self, nbytes: float) -> float:
        return self.overhead + nbytes / self.bw

    def attention(self, s: int, heads: int, kv: int, d: int) -> dict:
        e, qd, kd, rho = self.elem, heads * d, kv * d, (s + 1) / (2 * s)
        fwd_g = [self.gemm(s, s, d, heads, rho), self.gemm(s, d, s, heads, rho)]
        bwd_g = [self.gemm(*shape, heads, rho) for shape in ((s, s, d), (s, d, s), (s, s, d), (s, d, s), (s, d, s))]
        return {"forward_s": self.elementwise(e * s * (2 * qd + 2 * kd) + 4 * heads * s) + sum(t for t, _ in fwd_g),
                "backward_s": self.elementwise(e * s * (5 * qd + 4 * kd) + 8 * heads * s) + sum(t for t, _ in bwd_g),
                "timed": sum(x for _, x in fwd_g + bwd_g), "gemms": len(fwd_g) + len(bwd_g)}


# ---- sections ----------------------------------------------------------------------------------------

def machine(out: str, dry: bool) -> str:
    start, end = _load(os.path.join(out, "provenance-start.json")), _load(os.path.join(out, "provenance-end.json"))
    pre = _load(os.path.join(out, "preflight.json")) or {}
    lines = []
    if start:
        gpus = start["gpus"] if isinstance(start["gpus"], str) else "; ".join(
            f"{g['name']}, driver {g['driver_version']}, {g['memory.total']}, SM clock max {g['clocks.max.sm']}, "
            f"power limit {g['power.limit']}" for g in start["gpus"])
        changed = start.get("tracked_files_changed")
        lines += [f"- **Date**: {start['date']} to {end['date'] if end else '?'} (UTC)",
                  f"- **Commit**: {start['commit']}" + (f" plus {changed} changed tracked files" if changed else "")
                  + (f" ({start['commit_subject']})" if start.get("commit_subject") else ""),
                  f"- **GPU**: {gpus}",
                  f"- **Host**: {start['host']}, {start['nproc']} cores, {start['kernel']}; load average "
                  f"{' '.join(f'{x:.2f}' for x in start['load_average'])} at the start, "
                  + (' '.join(f'{x:.2f}' for x in end['load_average']) if end else '?') + " at the end",
                  f"- **osdp**: {start['osdp_version'].splitlines()[0] if start['osdp_version'] else '?'}"]
    if pre:
        g = pre.get("gpu", {})
        lines.append(f"- **Python**: {pre.get('python')}, torch {pre.get('torch')} (CUDA {pre.get('torch_cuda')}"
                     + (f", cuDNN {g.get('cudnn')}, NCCL {g.get('nccl')}" if g else "")
                     + f"), transformers {pre.get('transformers')}")
    if dry:
        lines.append("- **Dry run**: a tiny Llama of the same structure on the CPU (gloo), the calibration on "
                     "`--backend mpi --quick`: the figures below test the script, they measure nothing")
    return "\n".join(lines)


def phases(out: str) -> str:
    path = os.path.join(out, "phases.tsv")
    if not os.path.isfile(path):
        return ""
    rows = [line.rstrip("\n").split("\t") for line in open(path) if line.strip()]
    return _table(["phase", "exit", "seconds", "what"], [r + [""] * (4 - len(r)) for r in rows])


def validation(out: str, val_cal: str) -> tuple[str, list[str]]:
    index = _load(os.path.join(out, "predictions", "index.json")) or {"units": [], "calibrations": {}}
    units = {u["index"]: u for u in index["units"]}
    rows_path = os.path.join(out, "validate", "rows.jsonl")
    vrows = {}
    if os.path.isfile(rows_path):
        for line in open(rows_path):
            if line.strip():
                r = json.loads(line)
                vrows[r["index"]] = r
    steps = {u["index"]: u for u in (_load(os.path.join(out, "steps.json")) or {}).get("units", [])}
    cals = [c for c in index["calibrations"] if c != val_cal]
    time_rows, mem_rows, notes = [], [], []
    for i in sorted(set(units) | set(vrows) | set(steps)):
        u, v, s = units.get(i, {}), vrows.get(i), steps.get(i, {})
        preds = u.get("predictions", {})
        m = (v or {}).get("measurement", {})
        ev = {e["evaluator"]: e for e in (v or {}).get("evaluations", [])}
        pred_t = ev.get("sim", {}).get("iteration_time_s") if v else preds.get(val_cal, {}).get("time_s")
        meas_t = ev.get("measured", {}).get("iteration_time_s")
        spread = (m["max_s"] - m["min_s"]) / meas_t if meas_t and "max_s" in m else None
        st = s.get("step", {})
        harness = f"{_ms(st.get('median_s'))} ({_ms(s['forward_backward']['median_s'])} + " \
                  f"{_ms(s['optimizer']['median_s'])}), spread {100 * st['spread']:.1f}%" if st else \
            (f"failed: {s['error'][:80]}" if "error" in s else "-")
        others = [f"{c} {_ms(preds.get(c, {}).get('time_s'))}" + (
            f" ({_pct(meas_t / preds[c]['time_s'] - 1)})" if meas_t and preds.get(c, {}).get("time_s") else "")
            for c in cals]
        time_rows.append([str(i), str(u.get("seq", "?")), u.get("checkpoint", "?"), _ms(pred_t),
                          f"{_ms(meas_t)} ({len(m.get('steps_s', []))})" if v else "-",
                          _pct(m.get("time_error")) if v else "-",
                          f"{100 * spread:.1f}% ({_ms(m['min_s'])}-{_ms(m['max_s'])})" if spread is not None else "-",
                          harness, "; ".join(others) or "-"])
        p = preds.get(val_cal) or preds.get("spec") or {}
        pred_peak = p["peak_bytes"] - p["reserve_bytes"] if "peak_bytes" in p else None
        meas_peak = s.get("max_allocated_bytes")
        bd = p.get("peak_breakdown", {})
        mem_rows.append([str(i), str(u.get("seq", "?")), u.get("checkpoint", "?"),
                         f"{_gib(m.get('predicted_state_bytes'))} / {_gib(m.get('state_bytes'))}" if v else "-",
                         _pct(m.get("memory_error")) if v else "-",
                         _gib(pred_peak), _gib(meas_peak),
                         _pct(meas_peak / pred_peak - 1) if meas_peak and pred_peak else "-",
                         _gib(s.get("max_reserved_bytes")),
                         ", ".join(f"{k} {_gib(x)}" for k, x in sorted(bd.items()) if k != "reserve") or "-"])
        for key in ("mismatch", "meta_check_error"):
            if key in u:
                notes.append(f"unit {i}: {key}: {u[key]}")
        if "error" in s:
            notes.append(f"unit {i}: steps.py: {s['error'][:300]}")
    text = "### Step time\n\n" + _table(
        ["unit", "seq", "ckpt", f"predicted ms ({val_cal})", "measured ms (steps)", "error", "spread (min-max ms)",
         "steps.py ms (fwd+bwd + optimizer)", "predicted ms by other calibrations (measured's error)"], time_rows)
    text += ("\n\n`predicted`: osdp's simulator on the plan, with the calibration osdp validate used; `measured`: "
             "the median of osdp validate's timed steps (the slowest rank's, here the one); `spread`: slowest "
             "less fastest step over the median. `steps.py`: the same plan in validate/gpu_llama/steps.py, the "
             "device synchronised between backward and the optimizer step.\n")
    text += "\n### Memory\n\n" + _table(
        ["unit", "seq", "ckpt", "states at rest, predicted / measured", "error", "peak predicted",
         "max_memory_allocated", "error", "max_memory_reserved", "predicted peak's parts"], mem_rows)
    text += ("\n\n`states at rest`: osdp validate's parameter, gradient and Adam bytes of the local shards "
             "against the plan's. `peak predicted`: osdp simulate's peak less its reserve; "
             "`max_memory_allocated`: torch's allocator over steps.py's timed steps.\n")
    summary = _load(os.path.join(out, "validate", "summary.json"))
    if summary:
        text += (f"\nosdp validate's summary: median |time error| {100 * summary['median_abs_time_error']:.1f}%, "
                 f"largest {100 * summary['max_abs_time_error']:.1f}%, memory at rest largest "
                 f"{100 * summary['max_abs_memory_error']:.2f}%, spread {100 * summary.get('spread', 0):.1f}%, "
                 f"verdict {'pass' if summary.get('ok') else 'not a pass'}" +
                 (f" ({'; '.join(summary['failures'][:6])})" if summary.get("failures") else "") + ".\n")
    return text, notes


def kernels(out: str) -> str:
    bench = _load(os.path.join(out, "bench.json"))
    if not bench:
        return ""
    index = _load(os.path.join(out, "predictions", "index.json")) or {"calibrations": {}}
    cal_name = next((n for n, p in index["calibrations"].items() if p and n != "spec"), None)
    pricer = Pricer(_load(index["calibrations"][cal_name]), 2) if cal_name else None
    text = (f"Device {bench['device']}, torch {bench['torch']}, bf16; median of {bench['repeats']} calls after "
            f"{bench['warmup']} warm-ups. osdp's price: calibration `{cal_name or 'none'}` "
            "(its time for a timed shape, else its formula).")
    rows = []
    for g in bench["gemms"]:
        price, timed = pricer.gemm(g["m"], g["n"], g["k"]) if pricer else (None, False)
        rows.append([g["layer"], g["kind"], f"{g['m']} x {g['n']} x {g['k']}", f"{g['median_s'] * 1e3:.3f}",
                     f"{g['tflops']:.3g}", f"{price * 1e3:.3f} ({'timed' if timed else 'formula'})" if price else "-",
                     _pct(price / g["median_s"] - 1) if price else "-"])
    text += "\n\n### bf16 GEMMs\n\n" + _table(
        ["layer", "pass", "m x n x k (osdp's)", "torch ms", "TFLOP/s", "osdp's price ms", "price against torch"], rows)
    cfg = _load(bench["model"]) or {}
    rows = []
    for r in bench["sdpa"]:
        if "error" in r:
            rows.append([str(r["seq"]), r["variant"], "-", "-", "-", "-", r["error"][:100]])
            continue
        price = pricer.attention(r["seq"], r["heads"], r["kv_heads"], r["head_dim"]) if pricer else None
        rows.append([str(r["seq"]), r["variant"], f"{r['forward']['median_s'] * 1e3:.3f}",
                     f"{r['backward_s'] * 1e3:.3f}",
                     f"{r['forward_tflops']:.3g} / {r['backward_tflops']:.3g}" if r.get("backward_tflops") else
                     f"{r['forward_tflops']:.3g} / -",
                     f"{price['forward_s'] * 1e3:.3f} / {price['backward_s'] * 1e3:.3f} "
                     f"({price['timed']} of {price['gemms']} GEMMs timed)" if price else "-", ""])
    text += (f"\n\n### Fused attention (SDPA, causal, batch 1, {cfg.get('num_attention_heads', '?')} query and "
             f"{cfg.get('num_key_value_heads', '?')} key/value heads)\n\n")
    text += _table(["seq", "kernel", "forward ms", "backward ms", "TFLOP/s fwd / bwd", "osdp's price ms fwd / bwd",
                    "note"], rows)
    text += f"\n\ntorch's own choice (`default`) ran `{bench.get('sdpa_default_op', '?')}`."
    steps = _load(os.path.join(out, "steps.json")) or {}
    ops = next((u.get("attention_ops") for u in steps.get("units", []) if u.get("attention_ops")), None)
    if ops:
        text += " In a step of transformers' model (steps.py, first unit, profiled): " + ", ".join(
            f"`{o['name'][:80]}` x{o['count']}" for o in ops[:6]) + "."
    return text + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--validate-calibration", default="spec")
    ap.add_argument("--dry", action="store_true")
    a = ap.parse_args(argv)
    val, notes = validation(a.out, a.validate_calibration)
    parts = ["# Llama-3.1-8B-shaped layers on one GPU: PyTorch FSDP2 against osdp's predictions" +
             (" (DRY RUN)" if a.dry else ""),
             "`validate/gpu-llama.sh`: experiments/validate-gpu-llama.json (4 of Llama 3.1 8B's layers, bf16, "
             "micro-batch 1, sequences 4096 and 8192, FSDP without and with checkpointing) through "
             "`osdp validate --backend torch`, with osdp's bf16 GEMM calibration, plus torch's own bf16 GEMMs and "
             "fused attention (bench.json) and the allocator's peak per plan (steps.json).",
             "## Machine and code", machine(a.out, a.dry), "## Phases", phases(a.out),
             "## Predicted against measured", val]
    if notes:
        parts += ["Notes:\n\n" + "\n".join(f"- {n}" for n in notes)]
    k = kernels(a.out)
    if k:
        parts += ["## Kernels: torch's against osdp's price", k]
    parts += ["## Files", "provenance-*.json, nvidia-smi*.txt (the machine); preflight.json (Python, torch, GPU); "
              "phases.tsv and *.log (each phase's output); inputs/ (the model's config per sequence; the dry "
              "run's tiny model and experiment); plans/ (each unit's plan, its osdp simulate figures and its FSDP2 "
              "export; real-plans/ in the dry run: the real experiment's); predictions/ (every plan with every "
              "calibration); calibration-*.json (+ .measurements.csv); validate/ (osdp validate: rows.jsonl, "
              "validation.csv, summary.json, predicted_vs_measured.png); steps.json; bench.json."]
    text = "\n\n".join(p for p in parts if p) + "\n"
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write(text)
    print(val)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
