"""The steps of each exported plan in FSDP2 on one device, with the peak of torch's allocator: what
``osdp validate --backend torch`` does not measure yet (its ranks count the states at rest only).

    python steps.py --index DIR/index.json --out steps.json [--warmup 3] [--iterations 10] [--profile]

One process, the plans one after the other (each freed before the next: a GPU holds one 1.9 B-parameter
model with its Adam states, not several). Each plan as osdp.torch.measure's ranks build it: transformers'
model of the export (``osdp.torch.hf.build_model``, seed 0, fp32, built on the device rather than moved
there), ``apply_plan`` (FSDP2 with the export's bf16 policy), Adam (lr 1e-4), synthetic tokens, the mean
cross entropy of ``hf.causal_lm_loss``. A step is forward and backward, then the optimizer step and
zeroing the gradients, timed apart with a device synchronisation between them (perf_counter).

Memory, on a GPU: ``torch.cuda.reset_peak_memory_stats`` after the warm-up, then over the timed steps
``max_memory_allocated`` (the peak of live tensors, what osdp's peak less its reserve predicts) and
``max_memory_reserved`` (the allocator's cached segments), and ``memory_allocated`` after the last step
(the states at rest: weights and Adam's moments; gradients freed). ``--profile`` runs one more step of
the first plan under torch.profiler and lists the attention operators and kernels it ran (which SDPA
kernel transformers' model reached).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import traceback


def _stats(ts: list[float]) -> dict:
    med = statistics.median(ts)
    return {"median_s": med, "min_s": min(ts), "max_s": max(ts), "spread": (max(ts) - min(ts)) / med,
            "stdev_s": statistics.stdev(ts) if len(ts) > 1 else 0.0, "steps_s": ts}


def _attention_ops(prof) -> list[dict]:
    out = []
    for e in prof.key_averages():
        name = e.key
        low = name.lower()
        if name.startswith("FSDP::") or "layernorm" in low:  # FSDP2's hooks on the attention's modules
            continue
        if any(w in low for w in ("scaled_dot_product", "flash", "fmha", "attention", "cudnn")):
            dev = getattr(e, "device_time_total", None)
            if dev is None:
                dev = getattr(e, "cuda_time_total", 0.0)
            out.append({"name": name[:200], "count": e.count, "device_time_total_us": dev,
                        "cpu_time_total_us": e.cpu_time_total})
    return sorted(out, key=lambda r: -r["device_time_total_us"])


def run_unit(unit: dict, device, warmup: int, iterations: int, profile: bool) -> dict:
    import torch

    from osdp.torch import apply_plan, hf, load_export

    cuda = device.type == "cuda"
    spec = load_export(unit["export"])
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = hf.build_model(spec, device=device)
    apply_plan(model, spec)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    build_s = time.perf_counter() - t0
    batch, seq, vocab = spec["micro_batch_size"], spec["model"]["seq"], spec["model"]["vocab"]
    gen = torch.Generator().manual_seed(1)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def step() -> tuple[float, float, float]:
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)
        sync()
        start = time.perf_counter()
        loss = hf.causal_lm_loss(model, tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        sync()
        mid = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        end = time.perf_counter()
        return end - start, mid - start, loss.item()

    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    total, fwd_bwd, losses = [], [], []
    for _ in range(iterations):
        t, fb, loss = step()
        total.append(t)
        fwd_bwd.append(fb)
        losses.append(loss)
    out = {"index": unit["index"], "seq": seq, "batch": batch, "checkpoint": unit["checkpoint"],
           "build_s": build_s, "warmup": warmup, "iterations": iterations, "step": _stats(total),
           "forward_backward": _stats(fwd_bwd), "optimizer": _stats([t - f for t, f in zip(total, fwd_bwd)]),
           "loss_first": losses[0], "loss_last": losses[-1],
           "parameters": sum(p.numel() for p in model.parameters())}
    if cuda:
        out.update(max_allocated_bytes=torch.cuda.max_memory_allocated(),
                   max_reserved_bytes=torch.cuda.max_memory_reserved(),
                   at_rest_allocated_bytes=torch.cuda.memory_allocated())
    if profile:
        from torch.profiler import ProfilerActivity, profile as torch_profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with torch_profile(activities=acts) as prof:
            step()
        out["attention_ops"] = _attention_ops(prof)
    del model, opt
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    with open(a.index) as f:
        units = [u for u in json.load(f)["units"] if u.get("export")]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(0)
    else:
        torch.set_num_threads(1)  # as osdp.torch.measure's CPU ranks (the dry run)
    store = os.path.join(tempfile.mkdtemp(prefix="osdp-gpu-llama-"), "store")
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{store}", rank=0, world_size=1)
    results, failed = [], 0
    for i, unit in enumerate(units):
        print(f"steps: unit {unit['index']} (seq {unit['seq']}, checkpoint {unit['checkpoint']}): "
              f"{a.warmup} + {a.iterations} steps", flush=True)
        try:
            r = run_unit(unit, device, a.warmup, a.iterations, a.profile and i == 0)
        except Exception as e:  # noqa: BLE001 - one plan's failure (out of memory, say) is its row
            failed += 1
            r = {"index": unit["index"], "error": f"{type(e).__name__}: {e}"[:2000]}
            traceback.print_exc()
            gc.collect()
            if cuda:
                r["max_allocated_bytes_before_error"] = torch.cuda.max_memory_allocated()
                torch.cuda.empty_cache()
        else:
            peak = f", peak allocated {r['max_allocated_bytes'] / 2**30:.2f} GiB" if cuda else ""
            ms = {k: r[k]["median_s"] * 1e3 for k in ("step", "forward_backward", "optimizer")}
            print(f"steps: unit {unit['index']}: built in {r['build_s']:.1f} s; step {ms['step']:.1f} ms (spread "
                  f"{100 * r['step']['spread']:.1f}%), forward+backward {ms['forward_backward']:.1f} ms, optimizer "
                  f"{ms['optimizer']:.1f} ms{peak}", flush=True)
        results.append(r)
        with open(a.out, "w") as f:  # after every plan: a run stopped by its time limit keeps what it has
            json.dump({"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
                       "units": results}, f, indent=2)
            f.write("\n")
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as osdp.torch.measure: no interpreter teardown of gloo's and FSDP2's state
