#!/usr/bin/env bash
# Plans of Hugging Face configs on transformers' modules (issue 33): a tiny Llama (untied, grouped-query
# attention) and a tiny Qwen2 (tied embeddings, Q/K/V biases) planned by `osdp plan` on cpu-2, exported by
# `osdp export --to fsdp2` with no --map (the default mapping onto transformers' module tree), and applied
# with osdp.torch.apply_plan to LlamaForCausalLM / Qwen2ForCausalLM on 2 CPU ranks (test_hf_apply.py:
# losses, gradients and weights against the unsharded model; the errors apply_plan raises).
# Plans: FSDP (all ZDP), DDP (all REPLICATE), and each model's FSDP plan with its choices rewritten to mix
# every kind: REPLICATE, ZDP and DP, full and selective checkpointing, splits of the MLP (gate, up and down cut) and of the
# LM head (lm_head, a leaf Linear, cut), and for the tied Qwen2 a split of the embedding whose slices
# embed_tokens and lm_head share.
# A tiny GPT-2 (tied, no dropout) runs the same plans on transformers' Conv1D layers (c_attn, c_proj, c_fc:
# weights [in x out], cut along their rows), with its token and position tables split.
# Usage: OSDP=path/to/osdp bash test_hf_apply.sh VENV
set -uo pipefail
VENV=${1:?usage: test_hf_apply.sh VENV}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=../cli/harness.sh
source "$ROOT/tests/cli/harness.sh"
cd "$TMP" || exit 1
export OMP_NUM_THREADS=1
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"  # this tree's osdp.torch
cp "$ROOT"/tests/torch/hf/tiny-{llama,qwen2,gpt2}.json .  # small configs of each model_type

# choices NAME: rewrites NAME-fsdp.json's operators into NAME-mix.json (osdp export checks them again).
choices() {
  python3 - "$1" <<'PY'
import json, sys
name = sys.argv[1]
plan = json.load(open(f"{name}-fsdp.json"))
mix = {  # operator -> mode, split, zdp_slices, checkpoint
    "embedding": ("replicate", 1, 0, False) if name == "llama" else ("mixed", 2, 1, False),
    "layer0.attention": ("zdp", 1, 1, True),
    "layer0.mlp": ("mixed", 2, 1, True),
    "layer1.attention": ("dp", 2, 0, True),
    "layer1.mlp": ("zdp", 1, 1, "selective") if name == "llama" else ("replicate", 1, 0, "selective"),
    "head": ("mixed", 4, 2, False),
}
for o in plan["operators"]:
    o["mode"], o["split"], o["zdp_slices"], o["checkpoint"] = mix[o["name"]]
json.dump(plan, open(f"{name}-mix.json", "w"))
PY
}
dirs=()
for name in llama qwen2 gpt2; do
  run "plan-$name" "$OSDP" plan --model "tiny-$name.json" --cluster cpu-2 --strategy fsdp --batch 2 --out "$name-fsdp.json"
  expect_rc "osdp plan --strategy fsdp of tiny-$name" "plan-$name" 0
  run "ddp-$name" "$OSDP" plan --model "tiny-$name.json" --cluster cpu-2 --strategy ddp --batch 2 --out "$name-ddp.json"
  expect_rc "osdp plan --strategy ddp of tiny-$name" "ddp-$name" 0
  choices "$name"
  for plan in fsdp ddp mix; do
    run "x-$name-$plan" "$OSDP" export "$name-$plan.json" --to fsdp2 --out "$name-$plan"
    expect_rc "osdp export $name-$plan.json --to fsdp2 (no --map)" "x-$name-$plan" 0
    dirs+=("$name-$plan")
  done
done
jcheck "the llama export: transformers' paths, lm_head a leaf of the split head" llama-mix/fsdp2_plan.json '
assert j["transformers"] == {"model_type": "llama"}, j["transformers"]
p = {m["operator"]: m["paths"] for m in j["modules"]}
assert p["embedding"] == ["model.embed_tokens"] and p["head"] == ["model.norm", "lm_head"], p
assert p["layer1.mlp"] == ["model.layers.1.post_attention_layernorm", "model.layers.1.mlp"], p
s = {m["operator"]: (m["mesh"], m["reshard_after_forward"], m["checkpoint"], m["split"]) for m in j["modules"]}
assert s["embedding"][0] == "replicate" and s["layer1.mlp"][1] is True and s["layer0.attention"][1:3] == (True, True)
r = {m["operator"]: m["recompute"] for m in j["modules"]}
assert r["layer0.attention"] == "full" and r["layer1.mlp"] == "selective" and r["head"] == "none", r
assert s["head"][3] == {"slices": 4, "resharded": 2} and s["layer0.mlp"][3] == {"slices": 2, "resharded": 1}'
jcheck "the tied qwen2 export: embed_tokens, the final norm and lm_head one operator" qwen2-mix/fsdp2_plan.json '
p = {m["operator"]: m["paths"] for m in j["modules"]}
assert p["embedding"] == ["model.embed_tokens", "model.norm", "lm_head"] and "head" not in p, p'
jcheck "the gpt2 export: transformer.wte, wpe, ln_f and lm_head one operator" gpt2-mix/fsdp2_plan.json '
p = {m["operator"]: m["paths"] for m in j["modules"]}
assert p["embedding"] == ["transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head"], p
assert p["layer0.mlp"] == ["transformer.h.0.ln_2", "transformer.h.0.mlp"], p'

run apply "$VENV/bin/torchrun" --standalone --nproc_per_node 2 "$ROOT/tests/torch/test_hf_apply.py" "${dirs[@]}"
expect_rc "torchrun --nproc_per_node 2 test_hf_apply.py on ${#dirs[@]} exports" apply 0
cat "$TMP/apply.out"
finish
