"""osdp's parameter counts against transformers' (issue 33): every bundled Hugging Face config and small
configs of each model_type osdp reads (DeepSeek-V3's latent attention with and without q_lora_rank),
built by transformers on the meta device (no weights, no download). osdp's counts come from osdp
itself (``osdp.workload``: costmodel::lower through the binding); transformers' from ``named_parameters()`` (a tied weight once). Asserted to the parameter:
- the total;
- per operator, the parameters of the transformers modules it stands for (written here from
  transformers' module names, independently of osdp's export):
      embedding          model.embed_tokens (gpt2: transformer.wte, transformer.wpe);
                         tied: also the final norm and lm_head (embed_tokens' weight)
      layer{i}.attention model.layers.{i}.input_layernorm + .self_attn (gpt2: transformer.h.{i}.ln_1 + .attn)
      layer{i}.mlp       model.layers.{i}.post_attention_layernorm + .mlp (gpt2: .ln_2 + .mlp)
      head (untied)      model.norm + lm_head (gpt2: transformer.ln_f + lm_head)
  and every transformers parameter in exactly one group;
- for the small configs, ``osdp export --to fsdp2`` without --map (a plan made by ``osdp plan``) names
  those groups' module paths, and says the model_type; ``osdp.torch.hf`` writes from the plan's model a
  config of the same parameter names and shapes.
Usage: python test_hf_parameters.py OSDP_BINARY   (the venv's python: torch, transformers, the osdp package)
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.utils import logging as hf_logging

import osdp
from osdp.torch import hf

hf_logging.set_verbosity_error()
OSDP = sys.argv[1]
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
passed = failed = 0


def check(desc: str, cond: bool, evidence: object = "") -> None:
    global passed, failed
    if cond:
        print(f"ok - {desc}")
        passed += 1
    else:
        print(f"not ok - {desc}\n#   {evidence}")
        failed += 1


def groups(model_type: str, operator: str, tied: bool) -> list[str]:
    """The transformers modules of one osdp operator (the table of the opening comment)."""
    gpt2 = model_type == "gpt2"
    final_norm = "transformer.ln_f" if gpt2 else "model.norm"
    if operator == "embedding":
        emb = ["transformer.wte", "transformer.wpe"] if gpt2 else ["model.embed_tokens"]
        return emb + ([final_norm, "lm_head"] if tied else [])
    if operator == "head":
        return [final_norm, "lm_head"]
    m = re.fullmatch(r"layer(\d+)\.(attention|mlp)", operator)
    assert m, operator
    i, kind = m.groups()
    if gpt2:
        return [f"transformer.h.{i}.ln_1", f"transformer.h.{i}.attn"] if kind == "attention" else \
            [f"transformer.h.{i}.ln_2", f"transformer.h.{i}.mlp"]
    return [f"model.layers.{i}.input_layernorm", f"model.layers.{i}.self_attn"] if kind == "attention" else \
        [f"model.layers.{i}.post_attention_layernorm", f"model.layers.{i}.mlp"]


def under(name: str, prefixes: list[str]) -> bool:
    return any(name.startswith(p + ".") for p in prefixes)


def compare(label: str, path: str, cfg: dict) -> None:
    """osdp's counts of the config file `path` against transformers' model of `cfg`."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
    params = dict(model.named_parameters())  # a tied weight under its first name only
    total = sum(p.numel() for p in params.values())
    w = osdp.workload(path)
    check(f"{label}: osdp counts {w['parameters']:,} parameters, transformers' {type(model).__name__} {total:,}",
          w["parameters"] == total, (w["parameters"], total))
    tied = bool(getattr(model.config, "tie_word_embeddings", False)) and \
        model.lm_head.weight is model.get_input_embeddings().weight
    owner: dict[str, str] = {}
    wrong = []
    for op in w["operators"]:
        prefixes = groups(cfg["model_type"], op["name"], tied)
        names = [n for n in params if under(n, prefixes)]
        if tied and op["name"] == "embedding":
            assert not any(n.startswith("lm_head.") for n in names)  # counted once, as embed_tokens'
        for n in names:
            if n in owner:
                wrong.append(f"{n} in {owner[n]} and {op['name']}")
            owner[n] = op["name"]
        got = sum(params[n].numel() for n in names)
        if got != op["parameters"]:
            wrong.append(f"{op['name']}: osdp {op['parameters']:,}, transformers {prefixes} {got:,}")
    left = sorted(set(params) - set(owner))
    check(f"{label}: each of {len(w['operators'])} operators holds its transformers modules' parameters, "
          "and every parameter is in one", not wrong and not left, (wrong[:5], left[:5]))


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([OSDP, *args], capture_output=True, text=True)


start = time.time()
bundled = []
for path in sorted(glob.glob(os.path.join(ROOT, "data", "models", "*.json"))):
    with open(path) as f:
        cfg = json.load(f)
    if "model_type" in cfg:
        bundled.append(os.path.basename(path)[:-5])
        compare(bundled[-1], path, cfg)
check("the bundled Hugging Face configs are osdp's built-in models, the MoE ones among them",
      len(bundled) >= 9 and {"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"} <= set(bundled) <= set(osdp.models()),
      (bundled, osdp.models()))

SMALL = {  # small configs of each model_type (transformers' defaults for what they leave out)
    "gpt2-tied": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 256,
                  "n_positions": 48},
    "gpt2-untied": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": 96, "vocab_size": 256,
                    "n_positions": 48, "tie_word_embeddings": False},
    "llama-gqa-tied": {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
                       "tie_word_embeddings": True},
    "llama-gqa-untied-bias": {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 3,
                              "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
                              "intermediate_size": 96, "vocab_size": 200, "tie_word_embeddings": False,
                              "attention_bias": True, "mlp_bias": True},
    "qwen2-qkv-bias": {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
                       "tie_word_embeddings": False},
    "qwen3-qk-norm": {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128, "vocab_size": 256,
                      "tie_word_embeddings": True},
    "mistral": {"model_type": "mistral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 1, "intermediate_size": 160, "vocab_size": 256, "sliding_window": 16,
                "tie_word_embeddings": False},
    "mixtral-4-experts": {"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                          "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 256, "num_local_experts": 4,
                          "num_experts_per_tok": 2, "tie_word_embeddings": False},
    "qwen3-moe-dense-layer": {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4,
                              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
                              "intermediate_size": 128, "moe_intermediate_size": 48, "vocab_size": 256,
                              "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
                              "mlp_only_layers": [1], "tie_word_embeddings": True},
    "qwen3-moe-step-2": {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
                         "num_key_value_heads": 4, "intermediate_size": 96, "moe_intermediate_size": 32,
                         "vocab_size": 256, "num_experts": 4, "num_experts_per_tok": 1, "decoder_sparse_step": 2,
                         "attention_bias": True, "tie_word_embeddings": False},
    "deepseek-v3-latent": {"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 3,
                           "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 96,
                           "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
                           "n_shared_experts": 2, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
                           "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                           "v_head_dim": 12, "vocab_size": 256, "tie_word_embeddings": False},
    "deepseek-v3-q-proj-bias": {"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 80,
                                "moe_intermediate_size": 24, "n_routed_experts": 8, "num_experts_per_tok": 3,
                                "n_shared_experts": 1, "first_k_dense_replace": 0, "n_group": 1, "topk_group": 1,
                                "q_lora_rank": None, "kv_lora_rank": 16, "qk_nope_head_dim": 4,
                                "qk_rope_head_dim": 8, "v_head_dim": 6, "attention_bias": True, "vocab_size": 256,
                                "tie_word_embeddings": True},
}
with tempfile.TemporaryDirectory() as tmp:
    for label, cfg in SMALL.items():
        path = os.path.join(tmp, f"{label}.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        compare(label, path, cfg)
        # The export's default mapping: the same groups, found by osdp from the plan's model alone.
        plan = os.path.join(tmp, f"{label}.plan.json")
        p = run("plan", "--model", path, "--cluster", "cpu-2", "--strategy", "fsdp", "--batch", "1", "--seq", "16",
                "--out", plan)
        x = run("export", plan, "--to", "fsdp2", "--out", os.path.join(tmp, label))
        if p.returncode or x.returncode:
            check(f"{label}: osdp plan and osdp export", False, p.stderr + x.stderr)
            continue
        with open(os.path.join(tmp, label, "fsdp2_plan.json")) as f:
            export = json.load(f)
        tied = cfg.get("tie_word_embeddings", cfg["model_type"] == "gpt2")
        bad = [(m["operator"], m["paths"]) for m in export["modules"]
               if m["paths"] != groups(cfg["model_type"], m["operator"], tied)]
        check(f"{label}: osdp export --to fsdp2 maps each operator onto its transformers modules by default",
              not bad and export["transformers"] == {"model_type": cfg["model_type"]}
              and export["source"]["name_mapping"] == f"transformers' module tree of model_type {cfg['model_type']}",
              (bad[:3], export["transformers"], export["source"]["name_mapping"]))
        # The config osdp.torch.hf writes again from the plan's model (what the torch backend builds).
        with torch.device("meta"):
            again = AutoModelForCausalLM.from_config(hf.transformers_config(export["model"], cfg["model_type"]))
        shapes = {n: tuple(p.shape) for n, p in again.named_parameters()}
        with torch.device("meta"):
            want = {n: tuple(p.shape) for n, p in
                    AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg)).named_parameters()}
        check(f"{label}: osdp.torch.hf rebuilds the config from the plan's model: the same parameters and shapes",
              shapes == want, sorted(set(shapes.items()) ^ set(want.items()))[:4])
print(f"{passed} passed, {failed} failed ({time.time() - start:.1f} s)")
sys.exit(1 if failed else 0)
