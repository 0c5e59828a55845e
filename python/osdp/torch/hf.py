"""osdp's plans on transformers' models: the model of an export whose model was read from a Hugging Face
config (``osdp plan --model config.json``).

A plan file carries osdp's model description (``costmodel::to_json``: family, sizes, key/value heads,
head size, ffn, biases, qk_norm, tied embeddings, vocabulary, sequence), not the config file itself, and
``osdp export --to fsdp2`` names the model_type (``export["transformers"]["model_type"]``). From them
:func:`transformers_config` writes the config again, with transformers' defaults for what osdp does not
model (``rms_norm_eps``, ``rope_theta``, ``rope_scaling``, token ids: they change no parameter and no
shape)::

    model_type          transformers class          from osdp's description
    gpt2                GPT2LMHeadModel             n_embd, n_layer, n_head, n_inner, n_positions, tied
    llama               LlamaForCausalLM            hidden_size, intermediate_size, heads, kv heads,
    mistral             MistralForCausalLM          head_dim, vocab, tied, attention_bias (llama, qwen3),
    qwen2               Qwen2ForCausalLM            mlp_bias (llama), sliding_window (mistral, qwen2,
    qwen3               Qwen3ForCausalLM            qwen3), hidden_act (silu for swiglu, gelu for geglu)
    mixtral             MixtralForCausalLM          as mistral, and the experts (moe)
    qwen3_moe           Qwen3MoeForCausalLM         as qwen3, and the experts, sparse step, dense layers
    deepseek_v3         DeepseekV3ForCausalLM       as llama, the latent attention (mla), the experts with
                                                    the shared one and the leading dense layers

A description transformers cannot express (a Qwen2 without its Q/K/V biases, a Mistral with biases,
several stages) is a ``ValueError``. ``apply_plan`` then holds every operator's parameter count to
its modules'.

The export's module paths (osdp's default mapping, validate/torch/fsdp2_export.hpp) are the groups of
transformers' tree: ``embedding`` -> ``model.embed_tokens`` (GPT-2: ``transformer.wte``,
``transformer.wpe``; tied: also the final norm and ``lm_head``), ``layer{i}.attention`` -> the input
norm and ``self_attn``, ``layer{i}.mlp`` -> the post-attention norm and ``mlp``, ``head`` -> the final
norm and ``lm_head``.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MODEL_TYPES", "transformers_config", "build_model", "causal_lm_loss"]

MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_v3")


def _cannot(model: Mapping[str, Any], model_type: str, what: str) -> ValueError:
    return ValueError(f"model {model.get('name')!r}: transformers' {model_type} has no {what}")


def transformers_config(model: Mapping[str, Any], model_type: str, *, dropout: float | None = None) -> Any:
    """The transformers config of osdp's model description ``model`` (an export's ``model``, or
    ``osdp.load_model``'s dict) as ``model_type``. ``dropout``: GPT-2's dropout probability (None: 0.1
    where the model has dropout on, else 0); the other types have none. Parameters in fp32."""
    from transformers import AutoConfig

    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type {model_type!r}: osdp builds {', '.join(MODEL_TYPES)}")
    stages = model["stages"]
    if len(stages) != 1:
        raise _cannot(model, model_type, f"form for {len(stages)} stages of different hidden sizes")
    st = stages[0]
    h, layers, heads = st["hidden"], st["layers"], st["heads"]
    kv, head_dim, ffn = st.get("kv_heads", heads), st.get("head_dim", h // heads), st["ffn"]
    vocab, seq, tied = model["vocab"], model["seq"], bool(model["tied_embeddings"])
    qkv_bias, proj_bias, mlp_bias = model["qkv_bias"], model["proj_bias"], model["mlp_bias"]
    window = model.get("sliding_window", 0) or None
    if model_type == "gpt2":
        if kv != heads or head_dim * heads != h:
            raise _cannot(model, model_type, "grouped-query attention or a head size other than hidden / heads")
        if not (qkv_bias and proj_bias and mlp_bias) or model.get("norm") != "layernorm":
            raise _cannot(model, model_type, "form without biases or LayerNorm")
        p = (0.1 if model.get("dropout", True) else 0.0) if dropout is None else dropout
        return AutoConfig.for_model("gpt2", n_embd=h, n_layer=layers, n_head=heads, n_inner=ffn, vocab_size=vocab,
                                    n_positions=model.get("max_positions", seq), tie_word_embeddings=tied,
                                    resid_pdrop=p, embd_pdrop=p, attn_pdrop=p, bos_token_id=None,
                                    eos_token_id=None, dtype=torch.float32)
    act = {"swiglu": "silu", "geglu": "gelu_pytorch_tanh"}.get(model.get("mlp"))
    if act is None:
        raise _cannot(model, model_type, f"{model.get('mlp')!r} MLP (a gated one: swiglu or geglu)")
    qwen3 = model_type in ("qwen3", "qwen3_moe")
    if model.get("qk_norm", False) != qwen3:
        raise _cannot(model, model_type, "form with qk_norm " + ("off" if qwen3 else "on"))
    moe, mla = model.get("moe") or {}, model.get("mla") or {}
    if bool(moe) != (model_type in ("mixtral", "qwen3_moe", "deepseek_v3")):
        raise _cannot(model, model_type, "form " + ("without experts" if moe else "with experts"))
    if bool(mla) != (model_type == "deepseek_v3"):
        raise _cannot(model, model_type, "form " + ("without latent attention" if mla else "with latent attention"))
    kw: dict[str, Any] = dict(hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads,
                              num_key_value_heads=kv, head_dim=head_dim, intermediate_size=ffn, vocab_size=vocab,
                              max_position_embeddings=max(seq, model.get("max_positions", 0)),
                              tie_word_embeddings=tied, hidden_act=act, attention_dropout=0.0,
                              bos_token_id=None, eos_token_id=None, pad_token_id=None, dtype=torch.float32)
    if model_type in ("llama", "qwen3", "qwen3_moe", "deepseek_v3"):
        if qkv_bias != proj_bias:
            raise _cannot(model, model_type, "form with biases on Q, K, V but not on the output projection")
        kw["attention_bias"] = qkv_bias
    elif model_type == "qwen2":
        if not qkv_bias or proj_bias:
            raise _cannot(model, model_type, "form without its Q, K, V biases or with an output projection bias")
    elif qkv_bias or proj_bias:
        raise _cannot(model, model_type, "attention biases")
    if model_type == "llama":
        kw["mlp_bias"] = mlp_bias
    elif mlp_bias:
        raise _cannot(model, model_type, "MLP biases")
    if model_type in ("mistral", "mixtral"):
        kw["sliding_window"] = window
    elif model_type in ("qwen2", "qwen3", "qwen3_moe"):
        kw.update(use_sliding_window=window is not None, sliding_window=window)
    elif window is not None:
        raise _cannot(model, model_type, "sliding window")
    if model_type == "mixtral":  # every layer an MoE of intermediate_size experts
        if moe.get("shared_ffn", 0) or moe.get("dense_layers", 0) or moe.get("step", 1) != 1 or moe.get("dense_list"):
            raise _cannot(model, model_type, "form with shared experts or dense layers")
        kw.update(num_local_experts=moe["experts"], num_experts_per_tok=moe["top_k"],
                  intermediate_size=moe["expert_ffn"])
    elif model_type == "qwen3_moe":
        if moe.get("shared_ffn", 0) or moe.get("dense_layers", 0):
            raise _cannot(model, model_type, "form with shared experts or leading dense layers")
        kw.update(num_experts=moe["experts"], num_experts_per_tok=moe["top_k"], moe_intermediate_size=moe["expert_ffn"],
                  decoder_sparse_step=moe.get("step", 1), mlp_only_layers=list(moe.get("dense_list", [])))
    elif model_type == "deepseek_v3":  # latent attention; experts after first_k_dense_replace dense layers
        shared, fe = moe.get("shared_ffn", 0), moe["expert_ffn"]
        if moe.get("step", 1) != 1 or moe.get("dense_list") or shared % fe:
            raise _cannot(model, model_type, "form with sparse steps, a list of dense layers, or a shared expert "
                          "width that is not a multiple of the experts'")
        # The router's groups change no parameter: one group, so that any number of experts builds.
        kw.update(n_routed_experts=moe["experts"], num_experts_per_tok=moe["top_k"], moe_intermediate_size=fe,
                  n_shared_experts=shared // fe, first_k_dense_replace=moe.get("dense_layers", 0), n_group=1,
                  topk_group=1, q_lora_rank=mla.get("q_rank") or None, kv_lora_rank=mla["kv_rank"],
                  qk_nope_head_dim=mla["nope_dim"], qk_rope_head_dim=mla["rope_dim"], v_head_dim=mla["v_dim"])
    return AutoConfig.for_model(model_type, **kw)


def build_model(spec: Mapping[str, Any], *, dropout: float | None = None, device: Any = None) -> nn.Module:
    """The transformers ``*ForCausalLM`` of an export (``spec["transformers"]`` names its model_type), with
    transformers' random initialisation (seed torch first), fp32, in training mode."""
    from transformers import AutoModelForCausalLM

    if not spec.get("transformers"):
        raise ValueError(f"model {spec['model'].get('name')!r} was not read from a Hugging Face config: "
                         "build it as osdp.torch.GPT")
    config = transformers_config(spec["model"], spec["transformers"]["model_type"], dropout=dropout)
    if device is not None:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.train()
    return model


def causal_lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean cross entropy of next tokens ``y`` given ``x`` (both [batch x seq]), over the logits in
    fp32 (as transformers computes its loss)."""
    logits = model(input_ids=x, use_cache=False).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
