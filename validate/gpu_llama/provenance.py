"""The machine and the code a run of validate/gpu-llama.sh ran on, at its start and at its end.

    python provenance.py --root ROOT --osdp BIN --phase start|end --out DIR

Writes DIR/provenance-PHASE.json: UTC date, the git commit of ROOT and how many tracked files differ
from it (a copy without .git: $OSDP_GPU_LLAMA_COMMIT, as the launcher gives it), the load average and core count, the kernel, the osdp program's --version, and the GPUs as
nvidia-smi reports them (name, driver, memory, clocks, power limit, temperature, utilisation; the full
`nvidia-smi` and `nvidia-smi -q` text beside it at the start). Anything missing (no nvidia-smi, not a git
checkout) is recorded as such, never an error.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys

GPU_FIELDS = ["name", "driver_version", "memory.total", "memory.used", "clocks.max.sm", "clocks.sm", "power.limit",
              "temperature.gpu", "utilization.gpu", "pci.bus_id"]


def _out(cmd: list[str]) -> tuple[int, str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)
    return r.returncode, (r.stdout if r.returncode == 0 else r.stderr or r.stdout).strip()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--osdp", required=True)
    ap.add_argument("--phase", choices=["start", "end"], required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    doc: dict = {"phase": a.phase, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "load_average": list(os.getloadavg()), "nproc": os.cpu_count(), "host": platform.node(),
                 "kernel": platform.platform()}
    git_rc, commit = _out(["git", "-C", a.root, "rev-parse", "HEAD"])
    if git_rc == 0:
        doc["commit"] = commit
    elif os.environ.get("OSDP_GPU_LLAMA_COMMIT"):  # a copy of the tree without .git: the launcher says
        doc["commit"] = f"{os.environ['OSDP_GPU_LLAMA_COMMIT']} (OSDP_GPU_LLAMA_COMMIT; the tree has no .git)"
    else:
        doc["commit"] = "unknown: the tree has no .git and OSDP_GPU_LLAMA_COMMIT is not set (osdp's build: below)"
    if git_rc == 0:
        _, changed = _out(["git", "-C", a.root, "status", "--porcelain", "--untracked-files=no"])
        doc["tracked_files_changed"] = len([x for x in changed.splitlines() if x.strip()])
        _, doc["commit_subject"] = _out(["git", "-C", a.root, "log", "-1", "--format=%cI %s"])
    rc, version = _out([a.osdp, "--version"])
    doc["osdp_version"] = version if rc == 0 else f"osdp --version failed ({rc}): {version[:500]}"
    if shutil.which("nvidia-smi"):
        rc, csv = _out(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader"])
        doc["gpus"] = [dict(zip(GPU_FIELDS, (c.strip() for c in line.split(","))))
                       for line in csv.splitlines()] if rc == 0 else f"nvidia-smi failed ({rc}): {csv[:500]}"
        if a.phase == "start":
            for args, name in ((["nvidia-smi"], "nvidia-smi.txt"), (["nvidia-smi", "-q"], "nvidia-smi-q.txt")):
                with open(os.path.join(a.out, name), "w") as f:
                    f.write(_out(args)[1] + "\n")
    else:
        doc["gpus"] = "no nvidia-smi on PATH"
    with open(os.path.join(a.out, f"provenance-{a.phase}.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    gpus = doc["gpus"] if isinstance(doc["gpus"], str) else \
        "; ".join(f"{g['name']} (driver {g['driver_version']}, {g['memory.total']})" for g in doc["gpus"])
    print(f"{a.phase}: {doc['date']}, commit {doc['commit'][:12] if git_rc == 0 else doc['commit']}"
          f"{' + %d changed files' % doc['tracked_files_changed'] if doc.get('tracked_files_changed') else ''}, "
          f"load {' '.join(f'{x:.2f}' for x in doc['load_average'])} on {doc['nproc']} cores, GPUs: {gpus}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
