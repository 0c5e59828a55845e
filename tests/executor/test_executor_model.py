"""osdp.torch.ExecutorModel, the PyTorch mirror of the executor's arithmetic, against the executor itself:
for each test model (the GPT, and the llama family's grouped-query attention, gated MLP, RMSNorm, rotary
positions, QKV biases, Q/K head norms, tied and untied; executor_fixtures.hpp) the executor's unsharded
step (executor_reference) and one step of the mirror from the same weights and tokens, on the whole
batch in one process, must agree: the loss to 1e-6 relative, every operator's gradient to 1e-5 of its
norm (fp32 rounding in different orders gives 2e-7).
Usage: python test_executor_model.py path/to/executor_reference
"""
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from osdp.torch.executor_model import ExecutorModel  # noqa: E402


def read(path: str, dtype: torch.dtype) -> torch.Tensor:
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype)


def check(reference: str, model: str, tmp: str) -> list[str]:
    run = subprocess.run([reference, tmp, model], check=True, capture_output=True, text=True)
    chk = json.loads(run.stdout)
    blob, total = read(chk["weights_file"], torch.float32), chk["parameters"]
    weights = []
    for op in chk["operators"]:
        at, ws = op["offset"], []
        for w in op["weights"]:
            n = w["rows"] * w["cols"]
            ws.append(blob[at:at + n].reshape(w["rows"], w["cols"]).clone())
            at += n
        weights.append(ws)
    mirror = ExecutorModel(chk, weights)
    tokens = read(chk["tokens_file"], torch.int32).reshape(-1, chk["seq"] + 1).long()
    loss = mirror(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    errors = []
    if abs(loss.item() - chk["loss"]) > 1e-6 * abs(chk["loss"]):
        errors.append(f"{model}: loss {loss.item()} in torch, {chk['loss']} in osdp")
    for op, g in zip(chk["operators"], mirror.logical(grads=True)):
        at, n = op["offset"], op["parameters"]
        ref = blob[2 * total + at:2 * total + at + n]
        diff = (g - ref).norm().item() / max(ref.norm().item(), 1e-30) if g.numel() == n else float("inf")
        if diff > 1e-5:
            errors.append(f"{model}: {op['name']} gradient off by {diff:.2e} of its norm")
    return errors


def main() -> int:
    reference = sys.argv[1]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model in ("gpt", "llama", "llama-materialized", "qwen2", "qwen3", "qwen3-tied"):
            errors = check(reference, model, tmp)
            failures += bool(errors)
            print(("FAIL: " if errors else "ok  : ") + model + "".join("\n  " + e for e in errors))
    print(f"{failures} of 6 models failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
