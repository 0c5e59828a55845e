"""What validate/gpu-llama.sh runs on, before it runs anything: the Python's torch, CUDA and transformers,
the GPU torch sees (name, capability, memory, bf16, which SDPA kernels are enabled), and osdp.torch
importable from this tree. Writes one JSON file; prints one line per finding.

    python preflight.py OUT.json [--require-gpu]

Exit: 0 ready; 2 something the run needs is missing (the message names it): no GPU with
--require-gpu, torch or transformers not importable, osdp.torch not importable.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--require-gpu", action="store_true")
    a = ap.parse_args(argv)
    info: dict = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform()}
    missing: list[str] = []
    try:
        import torch
        info.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    except Exception as e:  # noqa: BLE001 - any import failure is the finding
        missing.append(f"torch does not import ({e})")
        torch = None
    try:
        import transformers
        info["transformers"] = transformers.__version__
    except Exception as e:  # noqa: BLE001
        missing.append(f"transformers does not import ({e}); the run builds the model from its Hugging Face config")
    try:
        import osdp.torch  # noqa: F401
        import osdp.torch.hf  # noqa: F401
        import osdp.torch.measure  # noqa: F401
        info["osdp_torch"] = osdp.torch.__file__
    except Exception as e:  # noqa: BLE001
        missing.append(f"osdp.torch does not import ({e}); PYTHONPATH should start with this tree's python/")
    if torch is not None and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info["gpu"] = {
            "count": torch.cuda.device_count(), "name": p.name, "capability": f"{p.major}.{p.minor}",
            "total_memory_bytes": p.total_memory, "multiprocessors": p.multi_processor_count,
            "bf16": torch.cuda.is_bf16_supported(),
            "sdpa_enabled": {"flash": torch.backends.cuda.flash_sdp_enabled(),
                             "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                             "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
                             "math": torch.backends.cuda.math_sdp_enabled()},
            "cudnn": torch.backends.cudnn.version(),
        }
        try:
            v = torch.cuda.nccl.version()
            info["gpu"]["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception as e:  # noqa: BLE001 - a version string, not a requirement
            info["gpu"]["nccl"] = f"? ({e})"
        if not info["gpu"]["bf16"]:
            missing.append(f"the GPU ({p.name}) has no bf16")
    elif a.require_gpu:
        why = "torch was built without CUDA" if torch is not None and torch.version.cuda is None else \
            "torch.cuda.is_available() is False"
        missing.append(f"no GPU: {why}; this script times a GPU (OSDP_GPU_DRY=1 runs its dry mode on the CPU)")
    info["missing"] = missing
    with open(a.out, "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print(f"python {info['python']}, torch {info.get('torch', '-')} (CUDA {info.get('torch_cuda')}), "
          f"transformers {info.get('transformers', '-')}")
    if "gpu" in info:
        g = info["gpu"]
        print(f"GPU: {g['count']} x {g['name']} (sm {g['capability']}, {g['total_memory_bytes'] / 2**30:.1f} GiB, "
              f"bf16 {g['bf16']}, SDPA enabled {g['sdpa_enabled']})")
    for m in missing:
        print(f"missing: {m}", file=sys.stderr)
    return 2 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
