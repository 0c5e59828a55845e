"""A minGPT-style GPT whose modules are osdp's operators, one to one.

osdp lowers a GPT of its ``gpt`` family (``data/models/*.json``) to operators; this module builds the
same network in PyTorch with one ``nn.Module`` per operator, at the paths of osdp's convention::

    operator              module path            parameters (h hidden, f ffn, V vocab, s seq)
    embedding             embedding              wte [V x h], wpe [s x h] (+ ln_f when tied)
    layer{i}.attention    layers.{i}.attention   ln, qkv [h -> 3h], proj [h -> h]: 4h^2 + 6h
    layer{i}.mlp          layers.{i}.mlp         ln, fc1 [h -> f], fc2 [f -> h]: 2hf + f + 3h
    stage{k}.projection   projections.{k}        a Linear between stage k-1 and stage k
    head                  head                   ln_f, lm_head [h -> V] without bias (untied only)

A tied model's LM head multiplies by the token table, so it belongs to the embedding operator (as in
osdp's lowering): ``GPT.forward`` calls ``self.embedding`` a second time for the logits, which keeps
the table inside one module for ``fully_shard``.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GPTConfig", "Stage", "GPT", "Embedding", "Attention", "Mlp", "Projection", "Head", "module_path"]


@dataclass
class Stage:
    layers: int
    hidden: int
    heads: int
    ffn: int = 0  # 0: 4 x hidden, as in osdp's model files

    def __post_init__(self) -> None:
        if self.ffn == 0:
            self.ffn = 4 * self.hidden
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")


@dataclass
class GPTConfig:
    """The fields of an osdp model file that shape the network."""

    vocab: int
    seq: int
    stages: list[Stage] = field(default_factory=list)
    tied_embeddings: bool = False
    dropout: float = 0.0
    name: str = "gpt"

    @classmethod
    def from_model(cls, model: Mapping[str, Any] | str | os.PathLike, dropout: float | None = None) -> "GPTConfig":
        """From an osdp model (a dict as ``osdp.load_model`` returns, or a model file's path), with
        osdp's defaults for what a file leaves out (tied embeddings, dropout on). ``dropout``: the
        probability; None gives 0.1 where the model has dropout on, else 0."""
        if not isinstance(model, Mapping):
            with open(model) as f:
                model = json.load(f)
        if model.get("family", "gpt") != "gpt":
            raise ValueError(f"model {model.get('name')}: family {model.get('family')!r} is not osdp's gpt family")
        raw = model["stages"] if "stages" in model else [model]  # a uniform model gives its one stage inline
        stages = [Stage(s["layers"], s["hidden"], s["heads"], s.get("ffn", 0)) for s in raw]
        if dropout is None:
            dropout = 0.1 if model.get("dropout", True) else 0.0
        return cls(vocab=model["vocab"], seq=model["seq"], stages=stages,
                   tied_embeddings=bool(model.get("tied_embeddings", True)), dropout=dropout,
                   name=model.get("name", "gpt"))


def module_path(operator: str) -> str:
    """osdp's operator name -> the module path in ``GPT`` (the default name mapping)."""
    if operator in ("embedding", "head"):
        return operator
    parts = operator.split(".")
    if len(parts) == 2 and parts[0].startswith("layer") and parts[1] in ("attention", "mlp"):
        return f"layers.{int(parts[0][5:])}.{parts[1]}"
    if len(parts) == 2 and parts[0].startswith("stage") and parts[1] == "projection":
        return f"projections.{int(parts[0][5:])}"
    raise KeyError(f"operator {operator!r} is not one of osdp's gpt family")


class Embedding(nn.Module):
    """Token and position tables; with tied embeddings also the final norm and the LM head."""

    def __init__(self, vocab: int, seq: int, hidden: int, dropout: float, tied: bool, head_hidden: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.drop = nn.Dropout(dropout)
        self.ln_f = nn.LayerNorm(head_hidden) if tied else None

    def forward(self, x: torch.Tensor, head: bool = False) -> torch.Tensor:
        if head:  # the tied LM head: logits on the token table (a sliced table sums its slices)
            x = self.ln_f(x)
            return F.linear(x, self.wte.weight) if isinstance(self.wte, nn.Embedding) else self.wte(x, head=True)
        pos = torch.arange(x.shape[1], device=x.device)
        return self.drop(self.wte(x) + self.wpe(pos))


class Attention(nn.Module):
    """LN, causal self-attention and the residual: osdp's ``layer{i}.attention``."""

    def __init__(self, hidden: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.dropout = dropout
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return x + self.resid_drop(self.proj(y.transpose(1, 2).reshape(b, s, h)))


class Mlp(nn.Module):
    """LN, fc1, GELU, fc2 and the residual: osdp's ``layer{i}.mlp``."""

    def __init__(self, hidden: int, ffn: int, dropout: float):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln(x)))))


class Projection(nn.Module):
    """The Linear between two stages of different widths: osdp's ``stage{k}.projection``."""

    def __init__(self, hidden_in: int, hidden_out: int):
        super().__init__()
        self.proj = nn.Linear(hidden_in, hidden_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Head(nn.Module):
    """Final LN and the LM head of an untied model: osdp's ``head``."""

    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(x))


class Block(nn.Module):
    def __init__(self, stage: Stage, dropout: float):
        super().__init__()
        self.attention = Attention(stage.hidden, stage.heads, dropout)
        self.mlp = Mlp(stage.hidden, stage.ffn, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attention(x))


class GPT(nn.Module):
    """A GPT of osdp's gpt family. ``forward(tokens, targets=None)`` returns logits, or the mean
    cross-entropy loss when targets are given."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not config.stages:
            raise ValueError("a GPT needs at least one stage")
        self.config = config
        first, last = config.stages[0].hidden, config.stages[-1].hidden
        self.embedding = Embedding(config.vocab, config.seq, first, config.dropout, config.tied_embeddings, last)
        self.layers = nn.ModuleList(Block(st, config.dropout) for st in config.stages for _ in range(st.layers))
        self.projections = nn.ModuleDict()
        self._stage_starts: dict[int, str] = {}
        layer = 0
        for k, st in enumerate(config.stages):
            if k > 0:
                self.projections[str(k)] = Projection(config.stages[k - 1].hidden, st.hidden)
                self._stage_starts[layer] = str(k)
            layer += st.layers
        self.head = None if config.tied_embeddings else Head(last, config.vocab)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    @classmethod
    def from_model(cls, model: Mapping[str, Any] | str | os.PathLike, dropout: float | None = None) -> "GPT":
        return cls(GPTConfig.from_model(model, dropout))

    def operators(self) -> list[str]:
        """osdp's operator names of this network, in forward order."""
        names = ["embedding"]
        for i in range(len(self.layers)):
            if i in self._stage_starts:
                names.append(f"stage{self._stage_starts[i]}.projection")
            names += [f"layer{i}.attention", f"layer{i}.mlp"]
        if self.head is not None:
            names.append("head")
        return names

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embedding(tokens)
        for i, block in enumerate(self.layers):
            if i in self._stage_starts:
                x = self.projections[self._stage_starts[i]](x)
            x = block(x)
        logits = self.embedding(x, head=True) if self.head is None else self.head(x)
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
