"""osdp's executor arithmetic as an ``nn.Module``, to check that a plan applied with FSDP2 computes what
osdp's own executor computes (``osdp validate --backend torch``: the loss, the gradients and the weights
after one Adam step, from the same initial weights and tokens).

The arithmetic is validate/executor/numerics.hpp's, per operator of the workload IR (R = b s rows):

- embedding   Y[r, :] = wte[:, token_r] (wte: [h x V]); with a tied head also L = X wte;
- attention   Y = X + sum over query heads i of (c Q_i K_g(i)^T) V_g(i) W_proj, [Q K V] = X W_qkv,
  c = 1 / (s sqrt(d)), no softmax and no mask. Grouped-query attention: a query heads over g key/value
  heads of size d, query head i reading key/value head g(i) = i // (a / g); W_qkv is [h x (a d + 2 g d)]
  (Q columns, then K, then V), W_proj [a d x h]. The IR gives g (``heads``: the operator's split_units)
  and the weights the rest: d = (columns of W_qkv - rows of W_proj) / 2g, a = rows of W_proj / d.
  (The executor evaluates c Q (K^T V) where the IR saves no scores: the same function.)
- mlp         Y = X + relu(X W_1) W_2; gated (W_1 [h x 2f]: gate columns G, then up columns U):
  Y = X + (silu(X G) * (X U)) W_2, silu(x) = x / (1 + exp(-x)), * elementwise (SwiGLU; SiLU for
  GeGLU too, as the executor: the IR does not tell them apart);
- projection  Y = X W;
- head        L = X W, loss = sum (L - onehot(next token))^2 / (2 tokens);
- every operator's vector parameters (whatever it has: biases, norm gains, Q/K head norms, the position
  table), concatenated in IR order,
  are added to its output folded: element t goes to element t mod (s x width) of every sample.

Matrices are held as ``nn.Linear`` / ``nn.Embedding`` (weight = the IR's matrix transposed), so that
``apply_plan`` can split them like the GPT's. The module paths are the gpt family's default mapping
(``embedding``, ``layers.{i}.attention``, ``layers.{i}.mlp``, ``projections.{k}``, ``head``).
Each rank's loss is its own tokens' mean (sum / (2 local tokens)): FSDP2 averages the gradients over
the ranks, which gives the gradient of the global loss.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from .gpt import module_path

__all__ = ["ExecutorModel"]


def _fold(vectors: list[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """out [b, s, width] plus the vectors' concatenation folded over s x width."""
    if not vectors:
        return out
    v = torch.cat([x.reshape(-1) for x in vectors])
    period = out.shape[1] * out.shape[2]
    idx = torch.arange(v.numel(), device=v.device) % period
    folded = torch.zeros(period, dtype=v.dtype, device=v.device).index_add(0, idx, v)
    return out + folded.view(1, out.shape[1], out.shape[2])


def _linear(t: torch.Tensor) -> nn.Linear:
    """nn.Linear computing x t for the IR's [in x out] matrix t."""
    lin = nn.Linear(t.shape[0], t.shape[1], bias=False)
    with torch.no_grad():
        lin.weight.copy_(t.t())
    return lin


class _Op(nn.Module):
    def __init__(self, op: Mapping[str, Any], weights: list[torch.Tensor], seq: int, vocab: int):
        super().__init__()
        self.kind, self.hidden, self.seq, self.vocab = op["kind"], op["hidden"], seq, vocab
        self.heads = op.get("heads", 1)
        self.is_matrix = [spec["matrix"] for spec in op["weights"]]  # the IR's order of its weights
        mats = [w for w, spec in zip(weights, op["weights"]) if spec["matrix"]]
        self.vector_names = []
        for i, (w, spec) in enumerate(zip(weights, op["weights"])):
            if not spec["matrix"]:
                name = f"v{i}"
                setattr(self, name, nn.Parameter(w.reshape(-1).clone()))
                self.vector_names.append(name)
        h = self.hidden
        if self.kind == "embedding":
            (wte,) = mats
            assert wte.shape == (h, vocab), (op["name"], wte.shape)
            self.table = nn.Embedding(vocab, h)
            with torch.no_grad():
                self.table.weight.copy_(wte.t())
        elif self.kind == "attention":
            qkv, proj = mats
            g = op.get("kv_heads", self.heads)
            q, kv = proj.shape[0], qkv.shape[1] - proj.shape[0]
            if qkv.shape[0] != h or proj.shape[1] != h or kv <= 0 or kv % (2 * g) or q % (kv // (2 * g)):
                raise ValueError(f"operator {op['name']}: QKV {tuple(qkv.shape)} and projection "
                                 f"{tuple(proj.shape)} do not make heads over {g} key/value heads")
            self.kv_heads, self.head_dim = g, kv // (2 * g)
            self.heads = q // self.head_dim  # query heads
            if self.heads % g:
                raise ValueError(f"operator {op['name']}: {self.heads} query heads over {g} key/value heads")
            self.qkv, self.proj = _linear(qkv), _linear(proj)
        elif self.kind == "mlp":
            w1, w2 = mats
            self.gated = w1.shape[1] == 2 * w2.shape[0]
            self.fc1, self.fc2 = _linear(w1), _linear(w2)
        elif self.kind in ("projection", "head"):
            (w,) = mats
            self.lin = _linear(w)
        else:
            raise ValueError(f"operator {op['name']}: unknown kind {self.kind!r}")

    def vectors(self) -> list[torch.Tensor]:
        return [getattr(self, n) for n in self.vector_names]

    def forward(self, x: torch.Tensor, head: bool = False) -> torch.Tensor:
        if self.kind == "embedding":
            if head:  # the tied head: L = X wte, no folding (as the executor's site 1)
                t = self.table
                return F.linear(x, t.weight) if isinstance(t, nn.Embedding) else t(x, head=True)
            return _fold(self.vectors(), self.table(x))
        if self.kind == "attention":
            b, s, _ = x.shape
            a, g, d = self.heads, self.kv_heads, self.head_dim
            q, k, v = self.qkv(x).split([a * d, g * d, g * d], dim=-1)
            q = q.reshape(b, s, a, d).transpose(1, 2)
            # Key/value head j serves query heads j r .. j r + r - 1 (r = a / g).
            k, v = (t.reshape(b, s, g, d).transpose(1, 2).repeat_interleave(a // g, dim=1) for t in (k, v))
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / (s * math.sqrt(d)))
            o = torch.matmul(scores, v).transpose(1, 2).reshape(b, s, a * d)
            return _fold(self.vectors(), x + self.proj(o))
        if self.kind == "mlp":
            if self.gated:
                gate, up = self.fc1(x).chunk(2, dim=-1)
                return _fold(self.vectors(), x + self.fc2(F.silu(gate) * up))
            return _fold(self.vectors(), x + self.fc2(torch.relu(self.fc1(x))))
        return _fold(self.vectors(), self.lin(x))  # projection, head (logits)


class ExecutorModel(nn.Module):
    """The executor's arithmetic over the IR ``ir`` (as osdp writes it for the torch backend's check:
    ``operators`` with name, kind, hidden, heads (an attention's key/value heads), tied and weights
    [{name, rows, cols, matrix}]), with
    ``weights[i]`` the list of operator i's weights, each [rows x cols] as the IR lays it out."""

    def __init__(self, ir: Mapping[str, Any], weights: list[list[torch.Tensor]]):
        super().__init__()
        self.seq, self.vocab = ir["seq"], ir["vocab"]
        self.order: list[str] = []
        self.layers = nn.ModuleList()
        self.projections = nn.ModuleList()
        self.tied = False
        for op, ws in zip(ir["operators"], weights):
            path = module_path(op["name"])
            module = _Op(op, ws, self.seq, self.vocab)
            parts = path.split(".")
            if parts[0] == "layers":
                i = int(parts[1])
                while len(self.layers) <= i:
                    self.layers.append(nn.Module())
                setattr(self.layers[i], parts[2], module)
            elif parts[0] == "projections":
                k = int(parts[1])
                while len(self.projections) <= k:
                    self.projections.append(nn.Module())
                self.projections[k] = module
            else:
                setattr(self, parts[0], module)
            self.order.append(path)
            if op["kind"] == "embedding" and op.get("tied"):
                self.tied = True

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = tokens
        for path in self.order:
            x = self.get_submodule(path)(x)
        logits = self.embedding(x, head=True) if self.tied else x
        onehot = F.one_hot(targets, self.vocab).to(logits.dtype)
        return ((logits - onehot) ** 2).sum() / (2 * targets.numel())

    def logical(self, grads: bool = False) -> list[torch.Tensor]:
        """Every operator's weights (or gradients) as the IR lays them out, flattened and concatenated
        per operator in IR order: the full tensors of FSDP2's shards, sliced matrices put together."""

        def full(t: torch.Tensor | None) -> torch.Tensor:
            if t is None:
                raise ValueError("a parameter has no gradient")
            t = t.full_tensor() if hasattr(t, "full_tensor") else t
            return t.detach().float().cpu()

        def pick(p: nn.Parameter) -> torch.Tensor:
            return full(p.grad if grads else p)

        def matrix(m: nn.Module) -> torch.Tensor:  # nn.Linear / nn.Embedding weight, or their slices
            if hasattr(m, "slices"):
                return torch.cat([pick(s.weight) for s in m.slices], dim=1)
            return pick(m.weight)

        out = []
        for path in self.order:
            op = self.get_submodule(path)
            if op.kind == "embedding":
                mats = [matrix(op.table)]  # [V x h] = wte^T
            elif op.kind == "attention":
                mats = [matrix(op.qkv), matrix(op.proj)]
            elif op.kind == "mlp":
                mats = [matrix(op.fc1), matrix(op.fc2)]
            else:
                mats = [matrix(op.lin)]
            mats_left = iter(m.t().reshape(-1) for m in mats)
            vectors_left = iter(pick(v).reshape(-1) for v in op.vectors())
            out.append(torch.cat([next(mats_left) if m else next(vectors_left) for m in op.is_matrix]))
        return out
