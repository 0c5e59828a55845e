"""osdp.torch.apply_plan on transformers' modules (issue 33), under torchrun (2 CPU ranks, gloo).

Usage: torchrun --standalone --nproc_per_node 2 test_hf_apply.py EXPORT_DIR...
Each EXPORT_DIR is what ``osdp export PLAN --to fsdp2`` wrote (no --map) for a plan of a model read from a
Hugging Face config (test_hf_apply.sh makes them). Per export:
- the transformers model of its config (``osdp.torch.hf.build_model``, random weights, fp32) and an
  unsharded copy; the plan applied to the first;
- every layer the plan splits is cut: each nn.Linear, transformers Conv1D and nn.Embedding under a split
  operator's modules (a leaf module given directly, lm_head, included) is now a sliced drop-in of the
  plan's slice count;
- the parameters at rest: a rank holds P/2 of an operator on the world mesh and P of a replicated one
  (every dimension is even here), summed over the local shards;
- two SGD steps: each step's loss (the mean over the ranks of their halves of the global batch) equals
  the unsharded model's on the whole batch, the first step's gradients and the weights after the second
  equal the unsharded model's: within 1e-5 of each tensor's largest element (fp32 sums in another order).
Then the checks apply_plan makes before it wraps anything (each a ValueError naming the operator, the
model left as it was): a split whose slice count does not divide a layer's width, a split of modules that
hold no layer to cut, a plan applied to a model of other sizes (parameter counts), and to a model of
another module tree (a missing path).
"""
from __future__ import annotations

import copy
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from osdp.torch import SlicedEmbedding, SlicedLinear, apply_plan, full_parameters, load_export, module_paths
from osdp.torch import hf
from osdp.torch.apply import _cuttable

TOL = 1e-5
failed = 0


def say(line: str) -> None:
    if dist.get_rank() == 0:
        print(line, flush=True)


def check(desc: str, cond: bool, evidence: object = "") -> None:
    global failed
    if cond:
        say(f"ok - {desc}")
    else:
        failed += 1
        say(f"not ok - {desc}\n#   {evidence}")


def worst(a: dict, b: dict) -> tuple[float, str]:
    """The largest difference of two name -> tensor maps, relative to each tensor's largest element."""
    assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
    out = (0.0, "")
    for k in a:
        d = (a[k] - b[k]).abs().max().item() / max(b[k].abs().max().item(), 1e-30)
        out = max(out, (d, k))
    return out


def cut_as_planned(ref: nn.Module, model: nn.Module, spec: dict) -> tuple[int, list[str]]:
    """How many layers the plan's splits cut, and those it should have cut but did not."""
    cut, missed = 0, []
    for entry in spec["modules"]:
        split = entry.get("split")
        if not split:
            continue
        for path in module_paths(entry):
            for name, layer in ref.get_submodule(path).named_modules():
                full = f"{path}.{name}" if name else path
                if _cuttable(layer):
                    got = model.get_submodule(full)
                    if isinstance(got, (SlicedLinear, SlicedEmbedding)) and got.n == split["slices"]:
                        cut += 1
                    else:
                        missed.append(f"{entry['operator']}: {full} is {type(got).__name__}")
    return cut, missed


def run(export_dir: str) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = load_export(export_dir)
    name = f"{spec['model']['name']} ({os.path.basename(export_dir.rstrip('/'))})"
    torch.manual_seed(0)
    ref = hf.build_model(spec)
    model = copy.deepcopy(ref)
    initial = {k: v.clone() for k, v in full_parameters(ref).items()}
    apply_plan(model, spec)
    cut, missed = cut_as_planned(ref, model, spec)
    splits = sum(1 for e in spec["modules"] if e.get("split"))
    check(f"{name}: {splits} split operators, {cut} layers cut into slices", not missed and (cut > 0) == (splits > 0),
          missed)
    local = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())
    assert all(e["parameters"] % world == 0 for e in spec["modules"])
    want = sum(e["parameters"] if e["mesh"] == "replicate" else e["parameters"] // world for e in spec["modules"])
    held = torch.tensor([local])
    dist.all_reduce(held, op=dist.ReduceOp.MAX)
    check(f"{name}: the local shards hold {local:,} parameters, the plan's {want:,}", held.item() == want == local,
          (local, held.item(), want))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    batch, seq, vocab = spec["micro_batch_size"], spec["model"]["seq"], spec["model"]["vocab"]
    gen = torch.Generator().manual_seed(1)
    for step in range(2):
        tokens = torch.randint(0, vocab, (batch * world, seq + 1), generator=gen)
        x, y = tokens[:, :-1], tokens[:, 1:]
        mine = slice(batch * rank, batch * (rank + 1))
        loss = hf.causal_lm_loss(model, x[mine], y[mine])
        loss.backward()
        ref_loss = hf.causal_lm_loss(ref, x, y)
        ref_loss.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean = mean.item() / world
        check(f"{name}: step {step + 1}: loss {mean:.6f}, the unsharded model's {ref_loss.item():.6f}",
              abs(mean - ref_loss.item()) <= TOL * abs(ref_loss.item()), (mean, ref_loss.item()))
        if step == 0:
            d, where = worst(full_parameters(model, grads=True), full_parameters(ref, grads=True))
            check(f"{name}: gradients equal the unsharded model's (largest difference {d:.1e}, {where})", d <= TOL,
                  (d, where))
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    after = full_parameters(model)
    d, where = worst(after, full_parameters(ref))
    moved = min((after[k] - v).abs().max().item() for k, v in initial.items())
    check(f"{name}: weights after two steps equal the unsharded model's (largest difference {d:.1e}, {where}); "
          f"every tensor moved (at least {moved:.1e})", d <= TOL and moved > 0, (d, where, moved))


def expect_error(desc: str, model: nn.Module, spec: dict, *words: str) -> None:
    before = [type(m).__name__ for m in model.modules()]
    try:
        apply_plan(model, spec)
    except ValueError as e:
        same = before == [type(m).__name__ for m in model.modules()]
        check(f"{desc}: a ValueError naming {', '.join(words)}; the model untouched",
              all(w in str(e) for w in words) and same, (str(e), same))
        return
    check(f"{desc}: a ValueError", False, "apply_plan accepted it")


def errors(export_dir: str) -> None:
    """What apply_plan refuses, on the first (a llama) export."""
    spec = load_export(export_dir)
    assert spec["transformers"]["model_type"] == "llama", spec["transformers"]
    model = hf.build_model(spec)
    bad = copy.deepcopy(spec)
    mlp = next(e for e in bad["modules"] if e["operator"] == "layer0.mlp")
    mlp["split"] = {"slices": 3, "resharded": 1}
    expect_error("a split of 3 slices on widths 64 and 128", model, bad, "operator layer0.mlp", "does not divide")
    bad = copy.deepcopy(spec)
    attn = next(e for e in bad["modules"] if e["operator"] == "layer0.attention")
    attn["paths"] = ["model.layers.0.input_layernorm"]  # a norm: nothing to cut
    attn["parameters"] = sum(p.numel() for p in model.get_submodule(attn["paths"][0]).parameters())
    attn["split"] = {"slices": 2, "resharded": 1}
    expect_error("a split on modules with no layer to cut", model, bad, "operator layer0.attention",
                 "no layer to cut")
    cfg = hf.transformers_config(spec["model"], "llama")
    cfg.intermediate_size += 32
    from transformers import AutoModelForCausalLM
    wider = AutoModelForCausalLM.from_config(cfg)
    expect_error("the plan on a model of another ffn", wider, spec, "operator layer0.mlp", "parameters")
    gpt2 = AutoModelForCausalLM.from_config(hf.transformers_config(
        dict(spec["model"], family="gpt", norm="layernorm", qkv_bias=True, proj_bias=True, mlp_bias=True,
             stages=[dict(spec["model"]["stages"][0], kv_heads=spec["model"]["stages"][0]["heads"])]), "gpt2"))
    expect_error("the plan on another module tree (GPT-2)", gpt2, spec, "operator embedding", "model.embed_tokens")


def main() -> int:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    for d in sys.argv[1:]:
        run(d)
    errors(sys.argv[1])
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
