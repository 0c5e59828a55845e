"""osdp.torch.apply_plan under torchrun (4 CPU ranks over gloo, as 2 nodes x 2): every kind of
choice in one model, trained beside an unsharded copy.

Two small GPTs of osdp's gpt family (an untied one with two stages and a projection; a tied one whose
embedding is split), each operator given one of 12 combinations of mesh (world, node, replicate),
reshard_after_forward, checkpointing and splitting. Asserted:
- three SGD steps give the losses of the unsharded model on the whole global batch, and the same
  weights after them (fp32 tolerance: 1e-5);
- each parameter's local shard is what the plan's memory at rest means: 1/world of dimension 0 on the
  world mesh (rounded up, as FSDP2 pads), 1/per_node on a node mesh (HSDP), whole under REPLICATE.
"""
from __future__ import annotations

import copy
import math
import os
import sys

import torch
import torch.distributed as dist

from osdp.torch import GPT, GPTConfig, Stage, apply_plan, gather_sliced, module_path

COMBOS = [  # mesh, reshard_after_forward, checkpoint, split
    ("world", True, False, None),
    ("world", False, True, None),
    ("replicate", False, False, None),
    ("node", True, False, None),
    ("world", True, False, {"slices": 2, "resharded": 1}),
    ("world", False, True, {"slices": 4, "resharded": 4}),
    ("node", False, True, {"slices": 2, "resharded": 0}),
    ("replicate", False, True, None),
    ("node", True, True, None),
    ("world", True, True, {"slices": 2, "resharded": 2}),
    ("node", True, False, {"slices": 4, "resharded": 1}),
    ("world", False, False, None),
]


def spec_for(model: GPT, world: int, offset: int) -> dict:
    modules = []
    for i, op in enumerate(model.operators()):
        mesh, rf, ck, sp = COMBOS[(i + offset) % len(COMBOS)]
        modules.append({"operator": op, "path": module_path(op), "mesh": mesh, "reshard_after_forward": rf,
                        "checkpoint": ck, "split": sp})
    return {"kind": "osdp-fsdp2", "schema_version": 1, "world_size": world, "nodes": 2, "per_node": world // 2,
            "micro_batch_size": 2, "mixed_precision": None, "modules": modules}


def check_shards(model: torch.nn.Module, spec: dict, world: int) -> int:
    """Every parameter's local shard against its module's mesh; returns how many were checked."""
    sizes = {"world": world, "node": spec["per_node"], "replicate": 1}
    checked = 0
    for entry in spec["modules"]:
        ranks = sizes[entry["mesh"]]
        for name, p in model.get_submodule(entry["path"]).named_parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            rows = p.shape[0]
            expect_rows = math.ceil(rows / ranks)  # FSDP2 pads dim 0 to a multiple of the shard size
            rank_in_shard = dist.get_rank() % ranks
            expect_rows = max(0, min(expect_rows, rows - rank_in_shard * expect_rows))
            assert local.shape[0] == expect_rows, (entry["operator"], name, tuple(local.shape), rows, ranks)
            assert tuple(local.shape[1:]) == tuple(p.shape[1:]), (entry["operator"], name)
            checked += 1
    return checked


def run(config: GPTConfig, offset: int) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    ref = GPT(config)
    model = copy.deepcopy(ref)
    spec = spec_for(model, world, offset)
    apply_plan(model, spec)
    checked = check_shards(model, spec, world)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    gen = torch.Generator().manual_seed(1)
    worst = 0.0
    for _ in range(3):
        tokens = torch.randint(0, config.vocab, (2 * world, config.seq + 1), generator=gen)
        x, y = tokens[:, :-1], tokens[:, 1:]
        loss = model(x[2 * rank:2 * rank + 2], y[2 * rank:2 * rank + 2])
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_loss = ref(x, y)
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        worst = max(worst, abs(mean.item() / world - ref_loss.item()))
    assert worst < 1e-5, f"{config.name}: losses {worst:.3g} apart"
    state = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach() for k, v in model.state_dict().items()}
    diff = max((gather_sliced(state, k) - v).abs().max().item() for k, v in ref.state_dict().items())
    assert diff < 1e-5, f"{config.name}: weights {diff:.3g} apart"
    # The training moved the weights: the check compares something.
    moved = max((v - GPT(config).state_dict()[k]).abs().max().item() for k, v in ref.state_dict().items()
                if k.endswith("ln.weight"))
    assert moved > 1e-3, moved
    if rank == 0:
        print(f"ok - {config.name}: {len(spec['modules'])} operators, {checked} shards as planned, losses within "
              f"{worst:.1e}, weights within {diff:.1e} of the unsharded model", flush=True)


def main() -> int:
    dist.init_process_group("gloo")
    assert dist.get_world_size() == 4, "run with torchrun --nproc_per_node 4"
    run(GPTConfig(vocab=64, seq=16, stages=[Stage(2, 32, 4), Stage(2, 64, 4)], tied_embeddings=False,
                  dropout=0.0, name="untied-2-stages"), 0)
    run(GPTConfig(vocab=64, seq=16, stages=[Stage(3, 32, 4)], tied_embeddings=True, dropout=0.0,
                  name="tied-split-embedding"), 4)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
