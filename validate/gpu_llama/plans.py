"""The inputs and predictions of validate/gpu-llama.sh, made with the osdp program (no GPU needed).

    python plans.py dry-inputs  --experiment EXP --out DIR      a tiny config and the experiment on it
    python plans.py seq-configs --experiment EXP --out DIR      the model config at each of the experiment's
                                                                sequences (for osdp calibrate --model)
    python plans.py predict --osdp BIN --experiment EXP --out DIR [--calibration NAME=FILE ...]
                            [--export] [--check-meta]
    python plans.py merge --gemm A.json --rest B.json --out C.json

``predict`` expands the experiment with ``osdp sweep`` (which also reads and checks every input), then for
each unit writes the same plan with ``osdp plan`` on a cluster file of the unit's world size (the sweep's
``h100-8@1``), once per calibration (``spec``: the cluster's own figures), and replays each with
``osdp simulate`` (step time, peak and its breakdown, the reserve included). ``--export`` writes each
unit's FSDP2 export (``osdp export``); ``--check-meta`` builds transformers' model of each export on the
meta device (no memory) and holds the export to it with ``osdp.torch.check_plan``. DIR/index.json lists
it all; the sweep's and the plan's spec-sheet predictions must agree (the cluster file is the sweep's).

``merge`` writes a calibration with A's GEMMs (peak, d_half, timed shapes) and B's memory passes, kernel
overhead and optimizer bandwidth: osdp's bf16 GEMMs with torch's own elementwise and Adam kernels, the
two that FSDP2's step runs and the nccl backend does not.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
from typing import Any

TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 224, "vocab_size": 512, "num_hidden_layers": 2}
DRY_SEQS = [32, 64]


def _load(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def _dump(doc: Any, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def _run(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def _seqs(exp: dict) -> list[int]:
    return list(exp.get("axes", {}).get("seq") or [exp["base"]["seq"]])


def dry_inputs(a: argparse.Namespace) -> int:
    """A tiny model of the same model_type and precision (every shape shrunk, the structure kept: GQA, untied
    head, bf16), and the experiment on it: same axes and strategies, tiny sequences, the fewest steps."""
    exp = _load(a.experiment)
    cfg = _load(exp["base"]["model"])
    cfg.update(TINY, max_position_embeddings=max(DRY_SEQS))
    cfg.pop("rope_scaling", None)  # llama3 scaling wants original_max_position_embeddings below the table
    model = os.path.join(a.out, "tiny-llama.json")
    _dump(cfg, model)
    exp["name"] += "-dry"
    exp["base"].update(model=model, seq=max(DRY_SEQS))
    if "seq" in exp.get("axes", {}):
        exp["axes"]["seq"] = DRY_SEQS
    exp["validation"].update(warmup=1, iterations=5)
    exp["output"] = os.path.join(a.out, "validate")
    _dump(exp, os.path.join(a.out, "experiment.json"))
    print(os.path.join(a.out, "experiment.json"))
    return 0


def seq_configs(a: argparse.Namespace) -> int:
    """osdp reads a Hugging Face config's sequence from max_position_embeddings (at most 8192), so the
    shapes at each sequence of the experiment come from a copy of the config at that length."""
    exp = _load(a.experiment)
    path = exp["base"]["model"]
    stem = os.path.splitext(os.path.basename(path))[0]
    for s in _seqs(exp):
        cfg = _load(path)
        cfg["max_position_embeddings"] = s
        if cfg.get("rope_scaling", {}).get("original_max_position_embeddings", 0) > s:
            cfg.pop("rope_scaling")  # no shape depends on it; transformers would refuse the copy
        out = os.path.join(a.out, f"{stem}-s{s}.json")
        _dump(cfg, out)
        print(out)
    return 0


def _cluster_file(osdp: str, name: str, world: int, out_dir: str) -> str:
    """The cluster of `name` resized to `world` devices on one node, as osdp sweep's NAME@WORLD."""
    path = name
    if not os.path.isfile(name):
        entries = {e["name"]: e["path"] for e in json.loads(_run([osdp, "clusters", "--json"]))}
        if name not in entries:
            raise RuntimeError(f"cluster {name!r} is neither a file nor one of osdp's ({', '.join(entries)})")
        path = entries[name]
    c = _load(path)
    if c["nodes"] * c["devices_per_node"] != world:
        if world > c["devices_per_node"]:
            raise RuntimeError(f"cluster {name}: a world of {world} is more than one node's {c['devices_per_node']}")
        c.update(nodes=1, devices_per_node=world)
    c["name"] = f"{c['name']}-w{world}"
    c["description"] = f"{world} device(s) of {name}: {c.get('description', '')}"
    out = os.path.join(out_dir, f"{c['name']}.json")
    _dump(c, out)
    return out


def _plan_args(k: dict, cluster: str) -> list[str]:
    args = ["--model", k["model"], "--cluster", cluster, "--strategy", k["strategy"], "--batch", str(k["batch"]),
            "--checkpoint", k["checkpoint"], "--split-max", str(k["split_max"]), "--prefetch", str(k["prefetch"]),
            "--tier", k["tier"], "--baseline", "none"]
    for key, flag in (("seq", "--seq"), ("memory", "--memory"), ("pp", "--pp"), ("tp", "--tp"),
                      ("micro_batches", "--micro-batches")):
        if key in k:
            args += [flag, str(k[key])]
    if k.get("checkpoint_regather"):
        args.append("--checkpoint-regather")
    return args


def _check_meta(export_dir: str) -> str:
    """transformers' model of the export on the meta device, held to the export (osdp.torch.check_plan)."""
    from osdp.torch import check_plan, hf, load_export

    spec = load_export(export_dir)
    model = hf.build_model(spec, device="meta")
    check_plan(model, spec)
    n = sum(p.numel() for p in model.parameters())
    return f"{type(model).__name__}, {n:,} parameters, attention {model.config._attn_implementation}"


def predict(a: argparse.Namespace) -> int:
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    cals = [("spec", None)]
    for c in a.calibration or []:
        name, _, path = c.partition("=")
        if not path or not os.path.isfile(path):
            raise RuntimeError(f"--calibration {c}: expected NAME=FILE of an existing file")
        cals.append((name, os.path.abspath(path)))
    sweep = os.path.join(out, "sweep")
    _run([a.osdp, "sweep", a.experiment, "--out", sweep, "--force", "--quiet"])
    rows = sorted((json.loads(line) for line in open(os.path.join(sweep, "rows.jsonl"))), key=lambda r: r["index"])
    clusters: dict[tuple[str, int], str] = {}
    units = []
    failed = 0
    for row in rows:
        k = json.loads(row["key"])
        unit = {"index": row["index"], "label": k["label"], "model": row["model"], "seq": k.get("seq"),
                "batch": k["batch"], "checkpoint": k["checkpoint"], "world_size": row["world_size"],
                "feasible": row["feasible"], "plan_summary": row.get("plan_summary", ""),
                "sweep": {e["evaluator"]: {"time_s": e["iteration_time_s"], "peak_bytes": e["peak_memory_bytes"]}
                          for e in row.get("evaluations", [])},
                "predictions": {}}
        units.append(unit)
        if not row["feasible"]:
            continue
        ck = (k["cluster"], row["world_size"])
        if ck not in clusters:
            clusters[ck] = _cluster_file(a.osdp, *ck, out)
        for name, cal in cals:
            plan = os.path.join(out, name, f"unit{row['index']}.plan.json")
            os.makedirs(os.path.dirname(plan), exist_ok=True)
            try:
                _run([a.osdp, "plan", *_plan_args(k, clusters[ck]), *(["--calibration", cal] if cal else []),
                      "--out", plan])
                sim = json.loads(_run([a.osdp, "simulate", "--plan", plan, "--json"]))
            except RuntimeError as e:
                unit["predictions"][name] = {"error": str(e)}
                failed += 1
                continue
            unit["predictions"][name] = {
                "plan": plan, "calibration": cal, "time_s": sim["iteration_time_s"],
                "peak_bytes": sim["peak_memory_bytes"], "reserve_bytes": sim["peak_breakdown"].get("reserve", 0.0),
                "peak_breakdown": sim["peak_breakdown"]}
        spec = unit["predictions"].get("spec", {})
        swept = unit["sweep"].get("sim", {}).get("time_s")
        if "time_s" in spec and swept and abs(spec["time_s"] / swept - 1) > 1e-6:
            unit["mismatch"] = f"osdp plan predicts {spec['time_s']:.6g} s, osdp sweep {swept:.6g} s"
            failed += 1
        if a.export and "plan" in spec:
            unit["export"] = os.path.join(out, "exports", f"unit{row['index']}.fsdp2")
            _run([a.osdp, "export", spec["plan"], "--to", "fsdp2", "--out", unit["export"]])
            if a.check_meta:
                try:
                    unit["meta_check"] = _check_meta(unit["export"])
                except Exception as e:  # noqa: BLE001 - the finding, named per unit
                    unit["meta_check_error"] = f"{type(e).__name__}: {e}"
                    failed += 1
    _dump({"experiment": os.path.abspath(a.experiment), "calibrations": dict(cals), "units": units},
          os.path.join(out, "index.json"))
    for u in units:
        preds = ", ".join(f"{n} {p['time_s'] * 1e3:.1f} ms" if "time_s" in p else f"{n} failed"
                          for n, p in u["predictions"].items())
        line = f"unit {u['index']}: {u['model']} seq {u['seq']} batch {u['batch']} checkpoint {u['checkpoint']}: "
        line += preds if u["feasible"] else "no plan fits"
        if "meta_check" in u:
            line += f"; export holds for {u['meta_check']}"
        for key in ("mismatch", "meta_check_error"):
            if key in u:
                line += f"; {key}: {u[key]}"
        print(line)
    return 1 if failed else 0


def merge(a: argparse.Namespace) -> int:
    gemm, rest = _load(a.gemm), _load(a.rest)
    out = copy.deepcopy(gemm)
    for key in ("memory_bandwidth", "kernel_overhead", "optimizer_bandwidth"):
        if key in rest.get("compute", {}):
            out["compute"][key] = rest["compute"][key]
    out["name"] = os.path.splitext(os.path.basename(a.out))[0]
    out["provenance"]["merged"] = {
        "gemm_from": os.path.abspath(a.gemm), "memory_passes_and_adam_from": os.path.abspath(a.rest),
        "note": "GEMMs (peak, d_half, timed shapes) from the first; memory bandwidth, kernel overhead and "
                "optimizer bandwidth from the second (validate/gpu_llama/plans.py merge)"}
    _dump(out, a.out)
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("dry-inputs")
    p.add_argument("--experiment", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("seq-configs")
    p.add_argument("--experiment", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("predict")
    p.add_argument("--osdp", required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--calibration", action="append")
    p.add_argument("--export", action="store_true")
    p.add_argument("--check-meta", action="store_true")
    p = sub.add_parser("merge")
    p.add_argument("--gemm", required=True)
    p.add_argument("--rest", required=True)
    p.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        return {"dry-inputs": dry_inputs, "seq-configs": seq_configs, "predict": predict, "merge": merge}[a.cmd](a)
    except RuntimeError as e:
        print(f"plans.py {a.cmd}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
