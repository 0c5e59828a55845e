"""Applying an exported osdp plan (``osdp export PLAN --to fsdp2``) to an ``nn.Module`` with FSDP2.

The export lists, per operator, the module path and how to wrap it:

- ``fully_shard(module, mesh=..., reshard_after_forward=...)``: ``True`` is osdp's ZDP (ZeRO-3:
  gathered again for backward), ``False`` osdp's DP (gathered once, kept until its backward);
- the mesh: ``world`` (1-D over every rank), ``node`` (HSDP: a 2-D mesh, replicated across nodes,
  sharded within the node) or ``replicate`` (osdp's REPLICATE: a 2-D mesh whose shard dimension is 1,
  so FSDP2 keeps whole copies and all-reduces the gradients);
- checkpointing (``torch.distributed._composable.checkpoint``);
- splitting into n slices: every ``nn.Linear`` of the module becomes a :class:`SlicedLinear` (and
  every ``nn.Embedding`` a :class:`SlicedEmbedding`) whose slices are sharded on their own, the
  first k of each resharded after forward (osdp's ``split{n}:{k}zdp``).

A two-level plan's collectives have no FSDP2 form: such operators shard over the world mesh with flat
collectives (the export says so in a note).
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["SlicedLinear", "SlicedEmbedding", "load_export", "apply_plan", "split_module", "make_meshes",
           "gather_sliced"]

EXPORT_KIND = "osdp-fsdp2"


class SlicedLinear(nn.Module):
    """A drop-in for ``nn.Linear`` that holds its weight as n slices along the input dimension and runs
    them one after another, summing the partial outputs: y = sum_j x[..., cols_j] W_j^T + b. Each
    slice is its own module (``slices[j]``), so FSDP2 can gather and free one slice at a time."""

    def __init__(self, linear: nn.Linear, n: int):
        super().__init__()
        if n < 1 or linear.in_features % n:
            raise ValueError(f"cannot cut a Linear of {linear.in_features} inputs into {n} slices")
        self.in_features, self.out_features, self.n = linear.in_features, linear.out_features, n
        width = linear.in_features // n
        self.slices = nn.ModuleList()
        with torch.no_grad():
            for j in range(n):
                s = nn.Linear(width, linear.out_features, bias=False,
                              device=linear.weight.device, dtype=linear.weight.dtype)
                s.weight.copy_(linear.weight[:, j * width:(j + 1) * width])
                self.slices.append(s)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        width = self.in_features // self.n
        y = None
        for j, s in enumerate(self.slices):
            part = s(x[..., j * width:(j + 1) * width])
            y = part if y is None else y + part
        return y if self.bias is None else y + self.bias


class _EmbeddingSlice(nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight)

    def forward(self, x: torch.Tensor, head: bool = False) -> torch.Tensor:
        # head: x holds this slice's columns of the hidden state; logits' partial sum on the table
        return nn.functional.linear(x, self.weight) if head else nn.functional.embedding(x, self.weight)


class SlicedEmbedding(nn.Module):
    """A drop-in for ``nn.Embedding`` whose table is n slices of its columns, each its own module.
    ``forward(tokens)`` concatenates the slices' lookups; ``forward(x, head=True)`` is the tied LM
    head, x W^T, summed over the slices."""

    def __init__(self, emb: nn.Embedding, n: int):
        super().__init__()
        if n < 1 or emb.embedding_dim % n:
            raise ValueError(f"cannot cut an Embedding of width {emb.embedding_dim} into {n} slices")
        self.num_embeddings, self.embedding_dim, self.n = emb.num_embeddings, emb.embedding_dim, n
        width = emb.embedding_dim // n
        self.slices = nn.ModuleList(
            _EmbeddingSlice(emb.weight.detach()[:, j * width:(j + 1) * width].clone()) for j in range(n))

    def forward(self, x: torch.Tensor, head: bool = False) -> torch.Tensor:
        width = self.embedding_dim // self.n
        if head:
            out = None
            for j, s in enumerate(self.slices):
                part = s(x[..., j * width:(j + 1) * width], head=True)
                out = part if out is None else out + part
            return out
        return torch.cat([s(x) for s in self.slices], dim=-1)


def gather_sliced(state: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
    """The tensor ``name`` of the unsliced model from a state dict of the sliced one: the weight of a
    sliced Linear or Embedding is its slices' weights side by side (both cut along dimension 1)."""
    if name in state:
        return state[name]
    if name.endswith(".weight"):
        stem = name[: -len(".weight")]
        parts = []
        while f"{stem}.slices.{len(parts)}.weight" in state:
            parts.append(state[f"{stem}.slices.{len(parts)}.weight"])
        if parts:
            return torch.cat(parts, dim=1)
    raise KeyError(f"{name}: neither in the state dict nor the weight of a sliced module")


def split_module(module: nn.Module, n: int) -> list[list[nn.Module]]:
    """Replaces every ``nn.Linear`` and ``nn.Embedding`` inside ``module`` (itself included only through
    its children) by its sliced drop-in; returns, per sliced layer, its n slice modules."""
    if n == 1:
        return []
    out: list[list[nn.Module]] = []
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            sliced = SlicedLinear(child, n)
        elif isinstance(child, nn.Embedding):
            sliced = SlicedEmbedding(child, n)
        else:
            out += split_module(child, n)
            continue
        setattr(module, name, sliced)
        out.append(list(sliced.slices))
    return out


def load_export(plan: Mapping[str, Any] | str | os.PathLike) -> dict:
    """An export as a dict: the dict itself, an export directory, or its ``fsdp2_plan.json``."""
    if isinstance(plan, Mapping):
        spec = dict(plan)
    else:
        path = os.fspath(plan)
        if os.path.isdir(path):
            path = os.path.join(path, "fsdp2_plan.json")
        with open(path) as f:
            spec = json.load(f)
    if spec.get("kind") != EXPORT_KIND:
        raise ValueError(f"not an osdp FSDP2 export (kind {spec.get('kind')!r}, expected {EXPORT_KIND!r}); "
                         "write one with: osdp export PLAN --to fsdp2")
    if spec.get("schema_version") != 1:
        raise ValueError(f"FSDP2 export schema_version {spec.get('schema_version')!r}: this osdp reads 1")
    return spec


def make_meshes(spec: Mapping[str, Any], device_type: str) -> dict:
    """The device meshes the export's modules name: world, node (HSDP) and replicate."""
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if world != spec["world_size"]:
        raise ValueError(f"the plan is for {spec['world_size']} ranks; this job has {world}")
    nodes, per_node = spec["nodes"], spec["per_node"]
    needed = {m["mesh"] for m in spec["modules"]}
    meshes = {"world": init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))}
    if "node" in needed:
        meshes["node"] = init_device_mesh(device_type, (nodes, per_node), mesh_dim_names=("replicate", "shard"))
    if "replicate" in needed:
        meshes["replicate"] = init_device_mesh(device_type, (world, 1), mesh_dim_names=("replicate", "shard"))
    return meshes


def apply_plan(model: nn.Module, plan: Mapping[str, Any] | str | os.PathLike,
               mesh: Mapping[str, Any] | None = None, *, device_type: str | None = None) -> nn.Module:
    """Applies an exported plan to ``model`` in place (and returns it): splitting, checkpointing and
    ``fully_shard`` per the export's modules, then ``fully_shard`` on the root for what is left.

    ``mesh``: the meshes by name (``world``, ``node``, ``replicate``) where the caller made them;
    otherwise they are made from the process group (the job must have the plan's world size).
    """
    from torch.distributed._composable import checkpoint
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    spec = load_export(plan)
    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() and dist.get_backend() == "nccl" else "cpu"
    meshes = dict(mesh) if mesh is not None else make_meshes(spec, device_type)
    mp = MixedPrecisionPolicy()
    if spec.get("mixed_precision"):
        p = spec["mixed_precision"]
        mp = MixedPrecisionPolicy(param_dtype=getattr(torch, p["param_dtype"]),
                                  reduce_dtype=getattr(torch, p["reduce_dtype"]))
    for entry in spec["modules"]:
        try:
            module = model.get_submodule(entry["path"])
        except AttributeError as e:
            raise ValueError(f"operator {entry['operator']}: the model has no module {entry['path']!r} ({e}); "
                             "map the operators to your modules with osdp export --map") from None
        m = meshes[entry["mesh"]]
        split = entry.get("split")
        if split:
            for slices in split_module(module, split["slices"]):
                for j, s in enumerate(slices):
                    fully_shard(s, mesh=m, reshard_after_forward=j < split["resharded"], mp_policy=mp)
        if entry.get("checkpoint"):
            checkpoint(module)
        fully_shard(module, mesh=m, reshard_after_forward=entry["reshard_after_forward"], mp_policy=mp)
    fully_shard(model, mesh=meshes["world"], reshard_after_forward=False, mp_policy=mp)
    return model
