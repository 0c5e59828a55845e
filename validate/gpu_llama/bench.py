"""torch's own bf16 kernels at a Hugging Face config's shapes: the GEMMs of its linear layers and the fused
attention of F.scaled_dot_product_attention (SDPA), what an FSDP2 step of transformers' model runs.

    python bench.py --model CONFIG.json --tokens 4096,8192 --out bench.json [--repeats 10] [--cpu]

GEMMs: for every distinct linear layer (in -> out) and token count M, the forward Y = X W^T, the input
gradient dX = dY W and the weight gradient dW = dY^T X as autograd runs them, named by osdp's (m, n, k):
forward (M, out, in), dX (M, in, out), dW (in, out, M) (costmodel/workload.cpp, add_gemms). SDPA: causal,
batch 1, the config's query and key/value heads, for each sequence (= token count): forward, and forward
plus backward, with grouped-query heads as transformers passes them (enable_gqa, no mask), under torch's
own choice of kernel and under each of its fused kernels forced (flash, efficient, cudnn; one that
refuses the shapes is recorded with its error). FLOPs of causal attention: 4 s^2 d per head forward over
the (s + 1) / 2s of the scores a causal kernel computes, 2.5 times that backward (osdp's density rho and
its 2 and 5 GEMMs).

Each point: warm-up calls, then `repeats` calls timed one by one (CUDA events on a GPU, perf_counter on
the CPU); the median, min and max are recorded. Operands are allocated once per point (no rotation: the
operands of these shapes, 32 MiB and up, are mostly larger than an H100's 50 MB L2).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable


def _timer(device):
    import torch

    if device.type == "cuda":
        def run(fn: Callable[[], None]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
    else:
        def run(fn: Callable[[], None]) -> float:
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t
    return run


def _point(run, fn: Callable[[], None], warmup: int, repeats: int) -> dict:
    for _ in range(warmup):
        fn()
    ts = [run(fn) for _ in range(repeats)]
    return {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts), "repeats": repeats}


def _linears(cfg: dict) -> list[tuple[str, int, int]]:
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv, d = cfg.get("num_key_value_heads", heads), cfg.get("head_dim") or h // heads
    ffn, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    named = [("q_proj, o_proj", h, heads * d), ("k_proj, v_proj", h, kv * d), ("gate_proj, up_proj", h, ffn),
             ("down_proj", ffn, h), ("lm_head", h, vocab)]
    seen, out = set(), []
    for name, i, o in named:
        if (i, o) not in seen:
            seen.add((i, o))
            out.append((name, i, o))
    return out


def gemms(cfg: dict, tokens: list[int], device, run, warmup: int, repeats: int) -> list[dict]:
    import torch

    rows = []
    for m in tokens:
        for name, fin, fout in _linears(cfg):
            x = torch.randn(m, fin, device=device, dtype=torch.bfloat16)
            w = torch.randn(fout, fin, device=device, dtype=torch.bfloat16)
            dy = torch.randn(m, fout, device=device, dtype=torch.bfloat16)
            for kind, fn, shape in (("forward", lambda: x @ w.t(), (m, fout, fin)),
                                    ("dX", lambda: dy @ w, (m, fin, fout)),
                                    ("dW", lambda: dy.t() @ x, (fin, fout, m))):
                r = _point(run, fn, warmup, repeats)
                flops = 2.0 * m * fin * fout
                r.update(layer=name, kind=kind, tokens=m, m=shape[0], n=shape[1], k=shape[2], count=1,
                         flops=flops, tflops=flops / r["median_s"] / 1e12)
                rows.append(r)
                print(f"gemm {name} {kind} (m {shape[0]}, n {shape[1]}, k {shape[2]}): "
                      f"{r['median_s'] * 1e3:.3f} ms, {r['tflops']:.1f} TFLOP/s", flush=True)
            del x, w, dy
    return rows


def sdpa(cfg: dict, seqs: list[int], device, run, warmup: int, repeats: int) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv, d = cfg.get("num_key_value_heads", heads), cfg.get("head_dim") or h // heads
    variants = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    if device.type == "cuda":
        variants.append(("cudnn", SDPBackend.CUDNN_ATTENTION))
    rows = []
    for s in seqs:
        q = torch.randn(1, heads, s, d, device=device, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, kv, s, d, device=device, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, kv, s, d, device=device, dtype=torch.bfloat16, requires_grad=True)
        do = torch.randn(1, heads, s, d, device=device, dtype=torch.bfloat16)
        rho = (s + 1) / (2 * s)
        fwd_flops = 4.0 * heads * s * s * d * rho

        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != heads)

        def fwd_bwd():
            forward().backward(do)
            q.grad = k.grad = v.grad = None

        for name, backend in variants:
            row = {"seq": s, "variant": name, "heads": heads, "kv_heads": kv, "head_dim": d, "density": rho,
                   "forward_flops": fwd_flops, "backward_flops": 2.5 * fwd_flops}
            try:
                if backend is None:
                    f, fb = _point(run, forward, warmup, repeats), _point(run, fwd_bwd, warmup, repeats)
                else:
                    with sdpa_kernel([backend]):
                        f, fb = _point(run, forward, warmup, repeats), _point(run, fwd_bwd, warmup, repeats)
            except Exception as e:  # noqa: BLE001 - a kernel that refuses the shapes is a row, not the end
                row["error"] = (str(e).splitlines() or [type(e).__name__])[0][:300]
                print(f"sdpa seq {s} {name}: not available ({row['error']})", flush=True)
                rows.append(row)
                continue
            bwd = fb["median_s"] - f["median_s"]
            row.update(forward=f, forward_backward=fb, backward_s=bwd,
                       forward_tflops=fwd_flops / f["median_s"] / 1e12,
                       backward_tflops=2.5 * fwd_flops / bwd / 1e12 if bwd > 0 else None)
            rows.append(row)
            print(f"sdpa seq {s} {name}: forward {f['median_s'] * 1e3:.3f} ms "
                  f"({row['forward_tflops']:.1f} TFLOP/s), backward {bwd * 1e3:.3f} ms", flush=True)
        del q, k, v, do
    return rows


def _default_backend(cfg: dict, seq: int, device) -> str:
    """The aten op torch runs for the default variant (its name says the kernel), from the profiler."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv, d = cfg.get("num_key_value_heads", heads), cfg.get("head_dim") or h // heads
    q = torch.randn(1, heads, seq, d, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, kv, seq, d, device=device, dtype=torch.bfloat16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=kv != heads)
    names = sorted({e.key for e in prof.key_averages() if "attention" in e.key and e.key.startswith("aten::_")})
    return ", ".join(names) or "?"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="token counts (= sequences at batch 1), comma-separated")
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--cpu", action="store_true", help="the dry run: on the CPU")
    a = ap.parse_args(argv)
    import torch

    device = torch.device("cpu" if a.cpu or not torch.cuda.is_available() else "cuda")
    with open(a.model) as f:
        cfg = json.load(f)
    tokens = [int(t) for t in a.tokens.split(",")]
    run = _timer(device)
    torch.manual_seed(0)
    doc = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__,
           "model": a.model, "dtype": "bfloat16", "warmup": a.warmup, "repeats": a.repeats, "gemms": [], "sdpa": []}

    def save() -> None:  # after each part: a run stopped at its time limit keeps what it measured
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")

    doc["gemms"] = gemms(cfg, tokens, device, run, a.warmup, a.repeats)
    save()
    doc["sdpa"] = sdpa(cfg, tokens, device, run, a.warmup, a.repeats)
    doc["sdpa_default_op"] = _default_backend(cfg, tokens[0], device)
    print(f"sdpa: torch's own choice runs {doc['sdpa_default_op']}")
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
