#!/usr/bin/env python3
"""Train osdp's GPT for a few steps with an exported plan applied (FSDP2), on synthetic tokens.

    osdp plan --model val-nd-8x256 --cluster cpu-2 --out p.json
    osdp export p.json --to fsdp2            # writes p.fsdp2/
    torchrun --nproc_per_node 2 python/examples/train_gpt.py p.fsdp2 --steps 5

CPU ranks talk over gloo, GPUs over NCCL (one rank per GPU). Every step prints the loss (the mean over
ranks) and the step time (the slowest rank's). --check also trains an unsharded copy of the model on
every rank, on the whole global batch, and fails unless the losses and the final weights agree within
fp32 tolerance: the plan changes where the bytes live, not what is computed. The check trains with
plain SGD: Adam divides by the root of tiny second moments, which turns rounding noise in a gradient
near zero into a step of the learning rate's size, and would compare Adam rather than the plan.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

try:
    import osdp.torch as otorch
except ImportError:  # run from the repository without the package installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import osdp.torch as otorch

import torch
import torch.distributed as dist


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", help="directory written by `osdp export PLAN --to fsdp2` (or its fsdp2_plan.json)")
    ap.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    ap.add_argument("--lr", type=float, default=None, help="learning rate (default: Adam 1e-3; --check: SGD 0.1)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights and the tokens (default 0)")
    ap.add_argument("--dropout", type=float, default=None,
                    help="dropout probability (default: 0.1 where the model has dropout, else 0)")
    ap.add_argument("--check", action="store_true",
                    help="train an unsharded copy beside it and require the same losses and weights")
    args = ap.parse_args()

    spec = otorch.load_export(args.export)
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    device = torch.device("cuda") if use_cuda else torch.device("cpu")
    if world != spec["world_size"]:
        if rank == 0:
            print(f"train_gpt: the plan is for {spec['world_size']} ranks; torchrun started {world} "
                  f"(use --nproc_per_node {spec['world_size']})", file=sys.stderr)
        dist.destroy_process_group()
        return 2

    dropout = 0.0 if args.check else args.dropout  # --check compares deterministic steps
    torch.manual_seed(args.seed)
    model = otorch.GPT.from_model(spec["model"], dropout=dropout).to(device)
    reference = copy.deepcopy(model) if args.check else None
    otorch.apply_plan(model, spec)
    if args.check:
        lr = 0.1 if args.lr is None else args.lr
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    else:
        opt, ref_opt = torch.optim.Adam(model.parameters(), lr=1e-3 if args.lr is None else args.lr), None

    b, seq, vocab = spec["micro_batch_size"], spec["model"]["seq"], spec["model"]["vocab"]
    gen = torch.Generator().manual_seed(args.seed + 1)
    if rank == 0:
        print(f"train_gpt: {spec['model']['name']} on {world} ranks ({device.type}), micro-batch {b}, "
              f"plan {spec['source']['plan']} ({spec['source']['strategy']}), predicted "
              f"{spec['source']['predicted']['iteration_time_s']:.4g} s a step on {spec['source']['cluster']}")
    worst = 0.0
    for step in range(args.steps):
        tokens = torch.randint(0, vocab, (b * world, seq + 1), generator=gen)  # the global batch
        x, y = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
        mine = slice(b * rank, b * (rank + 1))
        dist.barrier()
        start = time.perf_counter()
        loss = model(x[mine], y[mine])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if use_cuda:
            torch.cuda.synchronize()
        elapsed = torch.tensor([time.perf_counter() - start])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        line = f"step {step}: loss {mean.item():.6f}, {elapsed.item():.4f} s"
        if reference is not None:
            ref_loss = reference(x, y)
            ref_loss.backward()
            ref_opt.step()
            ref_opt.zero_grad(set_to_none=True)
            diff = abs(mean.item() - ref_loss.item())
            worst = max(worst, diff / max(1.0, abs(ref_loss.item())))
            line += f" (unsharded {ref_loss.item():.6f})"
        if rank == 0:
            print(line, flush=True)

    rc = 0
    if reference is not None:
        sharded = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu()
                   for k, v in model.state_dict().items()}
        ref_state = {k: v.detach().cpu() for k, v in reference.state_dict().items()}
        weight_diff = 0.0
        for name, value in ref_state.items():
            got = otorch.gather_sliced(sharded, name)
            weight_diff = max(weight_diff, (got - value).abs().max().item())
        ok = worst <= 1e-5 and weight_diff <= 1e-5
        if rank == 0:
            print(f"train_gpt: check {'passed' if ok else 'FAILED'}: losses within {worst:.2e} (relative), "
                  f"weights within {weight_diff:.2e} of the unsharded model")
        rc = 0 if ok else 1
    dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main())
