"""Applying an exported osdp plan (``osdp export PLAN --to fsdp2``) to an ``nn.Module`` with FSDP2.

The export lists, per operator, its modules (``paths``: one, or several that shard as one group,
``fully_shard([...])``) and how to wrap them:

- ``fully_shard(modules, mesh=..., reshard_after_forward=...)``: ``True`` is osdp's ZDP (ZeRO-3:
  gathered again for backward), ``False`` osdp's DP (gathered once, kept until its backward);
- the mesh: ``world`` (1-D over every rank), ``node`` (HSDP: a 2-D mesh, replicated across nodes,
  sharded within the node) or ``replicate`` (osdp's REPLICATE: a 2-D mesh whose shard dimension is 1,
  so FSDP2 keeps whole copies and all-reduces the gradients);
- checkpointing (``torch.distributed._composable.checkpoint``, on each of the operator's modules):
  ``recompute`` ``full``, or ``selective`` with :func:`selective_context` (the outputs of GEMMs and
  of fused attention saved, everything else recomputed: torchtitan's "selective op");
- splitting into n slices: every ``nn.Linear`` and transformers ``Conv1D`` of the modules (a module
  that is one itself included) becomes a :class:`SlicedLinear`, every ``nn.Embedding`` a
  :class:`SlicedEmbedding`, whose slices are sharded on their own, the first k of each resharded after
  forward (osdp's ``split{n}:{k}zdp``). Layers that share a weight (a tied embedding and LM head)
  share their slices, and each slice shards once with both.

Before it wraps anything, :func:`apply_plan` checks the plan against the module (:func:`check_plan`):
every path exists, every split has layers to cut whose input width the slice count divides, and every
operator's parameter count (osdp's, ``parameters``) equals that of its modules; a mismatch is a
``ValueError`` that names the operator.

A two-level plan's collectives have no FSDP2 form: such operators shard over the world mesh with flat
collectives (the export says so in a note).
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

__all__ = ["SlicedLinear", "SlicedEmbedding", "load_export", "apply_plan", "check_plan", "split_module",
           "make_meshes", "gather_sliced", "full_parameters", "module_paths"]

EXPORT_KIND = "osdp-fsdp2"


def _is_conv1d(layer: nn.Module) -> bool:
    """transformers' ``Conv1D`` (GPT-2's linear layers: weight [in x out], y = x W + b), recognised without
    importing transformers."""
    return type(layer).__name__ == "Conv1D" and type(layer).__module__.startswith("transformers") \
        and hasattr(layer, "nf") and getattr(layer, "weight", None) is not None


def _cuttable(layer: nn.Module) -> bool:
    return isinstance(layer, (nn.Linear, nn.Embedding)) or _is_conv1d(layer)


def _input_width(layer: nn.Module) -> int:
    """The width a split cuts: a Linear's inputs, a Conv1D's (its weight's rows), an Embedding's columns."""
    if isinstance(layer, nn.Linear):
        return layer.in_features
    if isinstance(layer, nn.Embedding):
        return layer.embedding_dim
    return layer.weight.shape[0]


class _Slice(nn.Module):
    """One slice of a cut layer's weight, its own module for ``fully_shard``. ``kind``: ``linear``
    (weight [out x w], y = x W^T), ``conv1d`` (weight [w x out], y = x W) or ``embedding`` (weight
    [V x w]: a lookup, or with ``head=True`` the tied LM head x W^T)."""

    def __init__(self, weight: nn.Parameter, kind: str, padding_idx: int | None = None):
        super().__init__()
        self.weight = weight
        self.kind = kind
        self.padding_idx = padding_idx  # an embedding's row that gets no gradient, as nn.Embedding's

    def forward(self, x: torch.Tensor, head: bool = False) -> torch.Tensor:
        if self.kind == "conv1d":
            return torch.matmul(x, self.weight)
        if self.kind == "embedding" and not head:
            return F.embedding(x, self.weight, self.padding_idx)
        return F.linear(x, self.weight)


def _cut(weight: torch.Tensor, n: int, dim: int, shared: Sequence[nn.Parameter] | None) -> list[nn.Parameter]:
    if shared is not None:
        return list(shared)
    width = weight.shape[dim] // n
    with torch.no_grad():
        return [nn.Parameter(weight.detach().narrow(dim, j * width, width).clone()) for j in range(n)]


class SlicedLinear(nn.Module):
    """A drop-in for ``nn.Linear`` (or transformers' ``Conv1D``) that holds its weight as n slices along
    the input dimension and runs them one after another, summing the partial outputs:
    y = sum_j x[..., cols_j] W_j^T + b. Each slice is its own module (``slices[j]``), so FSDP2 can
    gather and free one slice at a time. ``shared``: the slices' parameters, when another sliced layer
    already holds them (a weight tied to an embedding's)."""

    def __init__(self, layer: nn.Module, n: int, shared: Sequence[nn.Parameter] | None = None):
        super().__init__()
        conv = _is_conv1d(layer)
        if not (conv or isinstance(layer, nn.Linear)):
            raise TypeError(f"SlicedLinear cuts an nn.Linear or a transformers Conv1D, not {type(layer).__name__}")
        self.kind = "conv1d" if conv else "linear"
        self.cut_dim = 0 if conv else 1  # the weight's input dimension
        self.in_features = _input_width(layer)
        self.out_features = layer.nf if conv else layer.out_features
        self.n = n
        if n < 1 or self.in_features % n:
            raise ValueError(f"cannot cut a {type(layer).__name__} of {self.in_features} inputs into {n} slices")
        self.slices = nn.ModuleList(_Slice(w, self.kind) for w in _cut(layer.weight, n, self.cut_dim, shared))
        self.bias = None if layer.bias is None else nn.Parameter(layer.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        width = self.in_features // self.n
        y = None
        for j, s in enumerate(self.slices):
            part = s(x[..., j * width:(j + 1) * width])
            y = part if y is None else y + part
        return y if self.bias is None else y + self.bias

    def full_weight(self, grad: bool = False) -> torch.Tensor | None:
        """The weight (or its gradient) of the layer it replaced: the slices side by side."""
        return _join([s.weight for s in self.slices], self.cut_dim, grad)


class SlicedEmbedding(nn.Module):
    """A drop-in for ``nn.Embedding`` whose table is n slices of its columns, each its own module.
    ``forward(tokens)`` concatenates the slices' lookups; ``forward(x, head=True)`` is the tied LM
    head, x W^T, summed over the slices."""

    def __init__(self, emb: nn.Embedding, n: int, shared: Sequence[nn.Parameter] | None = None):
        super().__init__()
        if n < 1 or emb.embedding_dim % n:
            raise ValueError(f"cannot cut an Embedding of width {emb.embedding_dim} into {n} slices")
        self.num_embeddings, self.embedding_dim, self.n = emb.num_embeddings, emb.embedding_dim, n
        self.padding_idx = emb.padding_idx
        self.cut_dim = 1
        self.slices = nn.ModuleList(_Slice(w, "embedding", emb.padding_idx) for w in _cut(emb.weight, n, 1, shared))

    def forward(self, x: torch.Tensor, head: bool = False) -> torch.Tensor:
        width = self.embedding_dim // self.n
        if head:
            out = None
            for j, s in enumerate(self.slices):
                part = s(x[..., j * width:(j + 1) * width], head=True)
                out = part if out is None else out + part
            return out
        return torch.cat([s(x) for s in self.slices], dim=-1)

    def full_weight(self, grad: bool = False) -> torch.Tensor | None:
        return _join([s.weight for s in self.slices], 1, grad)


def _full(t: torch.Tensor) -> torch.Tensor:
    """A tensor whole on every rank (a DTensor gathered: collective)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _join(params: Sequence[torch.Tensor], dim: int, grad: bool) -> torch.Tensor | None:
    parts = [p.grad if grad else p for p in params]
    if any(p is None for p in parts):
        return None
    return torch.cat([_full(p.detach()) for p in parts], dim=dim)


def gather_sliced(state: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
    """The tensor ``name`` of the unsliced model from a state dict of the sliced one: the weight of a
    sliced Linear or Embedding is its slices' weights side by side (both cut along dimension 1; a sliced
    Conv1D's are cut along dimension 0: :func:`full_parameters` knows each layer's)."""
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


def full_parameters(model: nn.Module, grads: bool = False) -> dict[str, torch.Tensor | None]:
    """Every parameter (or its gradient) of ``model`` by its name in the model before ``apply_plan``:
    whole tensors (DTensors gathered, which is collective: call it on every rank), a sliced layer's
    weight as its slices side by side. A tied parameter appears under its first name only."""
    out: dict[str, torch.Tensor | None] = {}
    seen: set[int] = set()

    def walk(module: nn.Module, prefix: str) -> None:
        if isinstance(module, (SlicedLinear, SlicedEmbedding)):
            key = id(module.slices[0].weight)
            if key not in seen:
                seen.add(key)
                out[prefix + "weight"] = module.full_weight(grads)
            bias = getattr(module, "bias", None)
            if isinstance(bias, nn.Parameter) and id(bias) not in seen:
                seen.add(id(bias))
                out[prefix + "bias"] = _full((bias.grad if grads else bias).detach()) \
                    if (bias.grad if grads else bias) is not None else None
            return
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            t = p.grad if grads else p
            out[prefix + name] = None if t is None else _full(t.detach())
        for name, child in module.named_children():
            walk(child, prefix + name + ".")

    walk(model, "")
    return out


def module_paths(entry: Mapping[str, Any]) -> list[str]:
    """An export entry's module paths: ``paths``, or the one ``path`` of exports before lists."""
    paths = entry.get("paths")
    if paths is None:
        paths = [entry["path"]]
    return list(paths)


def _layers(model: nn.Module, path: str) -> list[tuple[str, nn.Module, str, nn.Module]]:
    """The cuttable layers at or under ``path``: (qualified name, parent, attribute, layer), in order."""
    module = model.get_submodule(path)
    if _cuttable(module):
        parent_path, _, attr = path.rpartition(".")
        return [(path, model.get_submodule(parent_path), attr, module)]
    out = []
    for name, sub in module.named_modules(remove_duplicate=False):
        for attr, child in sub.named_children():
            if _cuttable(child):
                out.append((".".join(x for x in (path, name, attr) if x), sub, attr, child))
    return out


def _split_layers(layers: Sequence[tuple[str, nn.Module, str, nn.Module]], n: int) -> list[list[list[nn.Module]]]:
    """Cuts the layers into n slices each; returns per weight the n slice units, each a list of the slice
    modules that hold that slice (more than one where layers share the weight: a tied embedding and LM
    head), for one ``fully_shard`` each."""
    units: dict[int, list[list[nn.Module]]] = {}
    made: dict[int, list[nn.Parameter]] = {}
    order: list[int] = []
    done: set[int] = set()
    for _, parent, attr, layer in layers:
        if id(layer) in done:  # one module reachable twice
            continue
        done.add(id(layer))
        key = id(layer.weight)
        shared = made.get(key)
        sliced = SlicedEmbedding(layer, n, shared) if isinstance(layer, nn.Embedding) else SlicedLinear(layer, n, shared)
        setattr(parent, attr, sliced)
        if shared is None:
            made[key] = [s.weight for s in sliced.slices]
            units[key] = [[s] for s in sliced.slices]
            order.append(key)
        else:
            for j, s in enumerate(sliced.slices):
                units[key][j].append(s)
    return [units[k] for k in order]


def split_module(module: nn.Module, n: int) -> list[list[nn.Module]]:
    """Replaces every ``nn.Linear``, transformers ``Conv1D`` and ``nn.Embedding`` inside ``module``
    (itself included only through its children) by its sliced drop-in; returns, per sliced weight, its n
    slice modules (the slices of layers tied to it hold the same parameters)."""
    if n == 1:
        return []
    layers = [(name, parent, attr, child) for name, parent, attr, child in _layers(module, "") if name]
    return [[unit[0] for unit in units] for units in _split_layers(layers, n)]


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


def check_plan(model: nn.Module, plan: Mapping[str, Any] | str | os.PathLike) -> None:
    """Checks an export against ``model`` without changing it; raises ``ValueError`` naming the operator
    (and what to do) where they disagree:
    - a module path the model does not have;
    - a split whose modules hold no layer to cut (``nn.Linear``, transformers ``Conv1D``,
      ``nn.Embedding``), or a layer whose input width the slice count does not divide;
    - an operator whose modules hold another number of parameters than osdp's operator (the entry's
      ``parameters``; a tied parameter counted once);
    - a parameter under the modules of two operators (FSDP2 shards a parameter in one group)."""
    spec = load_export(plan)
    owner: dict[int, str] = {}
    for entry in spec["modules"]:
        op = entry["operator"]
        paths = module_paths(entry)
        modules = []
        for path in paths:
            try:
                modules.append(model.get_submodule(path))
            except AttributeError as e:
                raise ValueError(f"operator {op}: the model ({type(model).__name__}) has no module {path!r} ({e}); "
                                 "map the operators to your modules with osdp export --map") from None
        params: dict[int, nn.Parameter] = {}
        for m in modules:
            for p in m.parameters():
                params.setdefault(id(p), p)
        for key in params:
            if key in owner and owner[key] != op:
                raise ValueError(f"operator {op}: its modules {paths} share a parameter with operator {owner[key]}'s; "
                                 "tied modules belong to one operator (one fully_shard group)")
            owner[key] = op
        count = sum(p.numel() for p in params.values())
        if "parameters" in entry and count != entry["parameters"]:
            raise ValueError(f"operator {op}: osdp's plan counts {entry['parameters']:,} parameters, the model's "
                             f"modules {paths} hold {count:,}: the plan was made for another model")
        split = entry.get("split")
        if split:
            n = split["slices"]
            layers = [x for path in paths for x in _layers(model, path)]
            if not layers:
                raise ValueError(f"operator {op}: the plan splits it into {n} slices, but its modules {paths} hold no "
                                 "layer to cut (nn.Linear, transformers Conv1D, nn.Embedding)")
            for name, _, _, layer in layers:
                if _input_width(layer) % n:
                    raise ValueError(f"operator {op}: the plan splits it into {n} slices, but layer {name} "
                                     f"({type(layer).__name__}) has an input width of {_input_width(layer)}, "
                                     f"which {n} does not divide")


# The ops whose outputs selective checkpointing keeps (osdp's selective form: GEMM outputs and the
# attention's output and log-sum-exp); the rest (norms, rotary, activations, residuals) is recomputed.
def _saved_ops() -> set:
    aten = torch.ops.aten
    names = ["mm", "addmm", "bmm", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"]
    return {getattr(aten, n).default for n in names if hasattr(aten, n)}


def selective_context():
    """The ``context_fn`` of selective checkpointing: GEMM and fused-attention outputs must be saved,
    everything else is recomputed before the backward."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    saved = _saved_ops()

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in saved else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def apply_plan(model: nn.Module, plan: Mapping[str, Any] | str | os.PathLike,
               mesh: Mapping[str, Any] | None = None, *, device_type: str | None = None) -> nn.Module:
    """Applies an exported plan to ``model`` in place (and returns it): the checks of
    :func:`check_plan` first, then splitting, checkpointing and ``fully_shard`` per the export's
    operators (one group of the operator's modules each), then ``fully_shard`` on the root for what is
    left.

    ``mesh``: the meshes by name (``world``, ``node``, ``replicate``) where the caller made them;
    otherwise they are made from the process group (the job must have the plan's world size).
    """
    from torch.distributed._composable import checkpoint
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    spec = load_export(plan)
    check_plan(model, spec)
    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() and dist.get_backend() == "nccl" else "cpu"
    meshes = dict(mesh) if mesh is not None else make_meshes(spec, device_type)
    mp = MixedPrecisionPolicy()
    if spec.get("mixed_precision"):
        p = spec["mixed_precision"]
        mp = MixedPrecisionPolicy(param_dtype=getattr(torch, p["param_dtype"]),
                                  reduce_dtype=getattr(torch, p["reduce_dtype"]))
    for entry in spec["modules"]:
        paths = module_paths(entry)
        m = meshes[entry["mesh"]]
        split = entry.get("split")
        if split:
            layers = [x for path in paths for x in _layers(model, path)]
            for units in _split_layers(layers, split["slices"]):
                for j, unit in enumerate(units):
                    fully_shard(unit if len(unit) > 1 else unit[0], mesh=m,
                                reshard_after_forward=j < split["resharded"], mp_policy=mp)
        modules = [model.get_submodule(path) for path in paths]  # after the split: a cut leaf is its drop-in
        recompute = entry.get("recompute", "full" if entry.get("checkpoint") else "none")
        if recompute == "full":
            for module in modules:
                checkpoint(module)
        elif recompute == "selective":
            for module in modules:
                checkpoint(module, context_fn=selective_context)
        elif recompute != "none":
            raise ValueError(f"operator {entry['operator']!r}: recompute {recompute!r} is not none, full or selective")
        fully_shard(modules if len(modules) > 1 else modules[0], mesh=m,
                    reshard_after_forward=entry["reshard_after_forward"], mp_policy=mp)
    fully_shard(model, mesh=meshes["world"], reshard_after_forward=False, mp_policy=mp)
    return model
