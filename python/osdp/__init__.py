"""osdp: plan sharded data-parallel training before renting the cluster.

The C++ planner of the ``osdp`` program, from Python::

    import osdp
    r = osdp.plan(model="gpt2-1.5b", cluster="titan-rtx-8", memory="8GiB")
    r["throughput_samples_per_s"], r["batch_size"], r["plan"]["operators"][0]
    sim = osdp.simulate(r["plan"])            # the discrete-event simulator on that plan
    osdp.read_results("out/results.csv")      # a sweep's or a validation's rows

Everything comes back as plain Python objects (dicts, lists, numbers), the same fields as the
program's ``--json`` output; tables as a pandas DataFrame when pandas is installed (else a list of
dicts). ``osdp.torch`` (needs torch) builds osdp's GPT family as ``nn.Module`` s and applies exported
plans with FSDP2. Errors in inputs raise ``ValueError`` with the file, the JSON pointer and what was
expected.
"""
from __future__ import annotations

import csv
import json
import os
from typing import Any, Mapping, Sequence, Union

# The package's bundled models, clusters and calibrations come after the user's OSDP_DATA_DIR (a
# colon-separated search path: the first directory that has a name wins).
_bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
if os.path.isdir(os.path.join(_bundled, "models")):
    _dirs = [d for d in os.environ.get("OSDP_DATA_DIR", "").split(os.pathsep) if d]
    if _bundled not in _dirs:
        os.environ["OSDP_DATA_DIR"] = os.pathsep.join(_dirs + [_bundled])

try:  # after OSDP_DATA_DIR: the catalog reads it
    from . import _osdp
except ImportError as _error:  # a source tree without the build: osdp.torch still works
    _osdp = None
    _import_error: ImportError | None = _error
else:
    _import_error = None

__all__ = ["__version__", "models", "clusters", "calibrations", "load_model", "load_cluster", "load_calibration",
           "workload", "plan", "simulate", "load_plan", "save_plan", "read_results"]



def _native():
    if _osdp is None:
        raise ImportError("osdp's native module is not built here: install the package (pip install ./python, "
                          "or the README's set-up)") from _import_error
    return _osdp


__version__: str = _osdp.version() if _osdp is not None else "0.1.0 (native module not built)"

PathLike = Union[str, "os.PathLike[str]"]


def models() -> list[str]:
    """Names of the built-in models (``osdp models``)."""
    return list(_native().catalog("models"))


def clusters() -> list[str]:
    """Names of the built-in clusters (``osdp clusters``)."""
    return list(_native().catalog("clusters"))


def calibrations() -> list[str]:
    """Names of the built-in calibration files."""
    return list(_native().catalog("calibrations"))


def load_model(name_or_path: PathLike) -> dict:
    """A model (built-in name or JSON file), normalised: every field with osdp's defaults filled in."""
    return json.loads(_native().load("model", os.fspath(name_or_path)))


def load_cluster(name_or_path: PathLike) -> dict:
    """A cluster (built-in name or JSON file), normalised."""
    return json.loads(_native().load("cluster", os.fspath(name_or_path)))


def load_calibration(name_or_path: PathLike, cluster: PathLike | None = None) -> dict:
    """A calibration file; figures it leaves out come from ``cluster``'s compute figures when given."""
    return json.loads(_native().load("calibration", os.fspath(name_or_path), os.fspath(cluster) if cluster else ""))


def workload(model: PathLike, *, pp: int = 1) -> dict:
    """A model (built-in name, model file or Hugging Face ``config.json``) lowered to osdp's operators, as the
    planner sees it: ``{"model", "pp", "parameters", "operators": [{"name", "kind", "layer", "hidden",
    "parameters", "weights": [{"name", "rows", "cols"}]}]}``, in forward order. ``kind`` is one of
    embedding, attention, mlp, projection, head; ``pp`` > 1 lowers for a pipeline (a tied embedding
    untied)."""
    return json.loads(_native().workload(os.fspath(model), int(pp)))


def plan(model: PathLike, cluster: PathLike, *, memory: str | int | float | None = None, strategy: str = "exact",
         baseline: str | Sequence[str] | None = None, batch: int | str = "auto", split_max: int = 4, checkpoint: str = "auto",
         groups: bool | str = "auto", prefetch: int = 0, calibration: PathLike | None = None,
         tier: str = "extended", checkpoint_regather: bool = False, dfs_budget: int = 2_000_000,
         pp: int | Sequence[int] | None = None, tp: int | Sequence[int] | None = None,
         ep: int | Sequence[int] | None = None, expert_imbalance: float = 1.0,
         cp: int | Sequence[int] | None = None, max_cp: int = 16, cp_variant: str = "ring",
         micro_batches: int | None = None, max_micro_batches: int = 8, global_batch: int | None = None,
         schedule: str = "1f1b", sequence_parallel: bool = False, world_size: int | None = None,
         time_budget_s: float = 60.0, draws: int = 100, objective: str = "throughput") -> dict:
    """Search the best plan, as ``osdp plan --json`` does (the same C++ code builds the dict).

    Arguments mirror the program's options (``memory="8GiB"`` or a number of bytes; ``batch`` the
    samples per device per micro-batch or ``"auto"``; ``strategy`` a name of ``osdp plan --help``'s
    strategies; ``baseline`` one name or a list of them, ``"none"`` for none, fsdp when left out). The
    space is the whole one the cluster allows (pipeline stages, micro-batches, TP degrees, expert
    parallelism for MoE layers; node groups and two-level collectives on clusters of several nodes);
    ``pp``, ``tp``, ``ep`` (``ep=1``: no expert parallelism), ``cp`` and ``max_cp`` (context
    parallelism's degrees; ``cp_variant`` ring, all-to-all or both), ``micro_batches``,
    ``global_batch`` and ``groups="off"`` narrow it; the search stops within ``time_budget_s``. Returns
    a dict with ``feasible``, ``batch_size``, ``micro_batches``, ``pp``, ``global_batch``,
    ``throughput_samples_per_s``, ``iteration_time_s``, ``peak_memory_bytes``, ``stages`` (the TP
    degrees of each stage), ``candidates`` (a data-parallel search: every batch size, searched or
    bounded out) or ``layouts`` (the others), ``baselines`` (each baseline's plan and the speedup over
    it) and, when a plan fits, ``plan``: the plan file's content (``save_plan`` writes it). When nothing
    fits, ``feasible`` is False and ``min_fit_memory_bytes``
    says what memory would. With a calibration, each plan is also priced under ``draws`` draws of the
    calibration's uncertainty: ``iteration_time_interval_s`` and ``throughput_interval`` are the 90%
    intervals ([low, high]) and each baseline has a ``speedup_interval``; without one they are absent.
    ``objective="robust"`` maximizes the throughput with every price the calibration fitted at its
    95th percentile instead (``robust_throughput_samples_per_s``; the other figures stay the plan's
    predictions).
    """
    request: dict[str, Any] = {
        "model": os.fspath(model), "cluster": os.fspath(cluster), "strategy": strategy, "batch": str(batch),
        "split_max": int(split_max), "checkpoint": checkpoint,
        "groups": groups if isinstance(groups, str) else ("on" if groups else "off"), "prefetch": int(prefetch),
        "tier": tier, "checkpoint_regather": bool(checkpoint_regather), "dfs_budget": int(dfs_budget),
        "max_micro_batches": int(max_micro_batches), "schedule": schedule,
        "sequence_parallel": bool(sequence_parallel), "time_budget_s": float(time_budget_s), "draws": int(draws),
        "objective": objective, "expert_imbalance": float(expert_imbalance), "max_cp": int(max_cp),
        "cp_variant": cp_variant}
    if memory is not None:
        request["memory"] = str(memory)
    if baseline is not None:
        request["baseline"] = str(baseline) if isinstance(baseline, str) else [str(b) for b in baseline]
    if calibration is not None:
        request["calibration"] = os.fspath(calibration)
    for key, value in (("pp", pp), ("tp", tp), ("ep", ep), ("cp", cp)):
        if value is not None:
            request[key] = [int(v) for v in value] if isinstance(value, Sequence) else int(value)
    for key, value in (("micro_batches", micro_batches), ("global_batch", global_batch), ("world_size", world_size)):
        if value is not None:
            request[key] = int(value)
    return json.loads(_native().plan(json.dumps(request)))


def _plan_document(p: Mapping[str, Any] | PathLike) -> tuple[str, str]:
    if isinstance(p, Mapping):
        doc = p["plan"] if "plan" in p and "operators" not in p else p  # a plan() result or a plan
        return json.dumps(doc), "<plan>"
    path = os.fspath(p)
    with open(path) as f:
        return f.read(), path


def load_plan(path: PathLike) -> dict:
    """A plan file (``osdp plan --out``), checked against its model as ``osdp simulate`` checks it."""
    text, origin = _plan_document(path)
    _native().read_plan(text, origin)  # checks it against its model, as osdp simulate does
    return json.loads(text)


def save_plan(p: Mapping[str, Any], path: PathLike) -> None:
    """Writes a plan (or a ``plan()`` result's plan) as a plan file for ``osdp simulate``/``export``."""
    doc = p["plan"] if "plan" in p and "operators" not in p else p
    tmp = os.fspath(path) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def simulate(p: Mapping[str, Any] | PathLike, *, symmetric: bool = False, draws: int = 100) -> dict:
    """Replay a plan (a dict from ``plan()``, a plan dict, or a plan file) in the discrete-event simulator,
    as ``osdp simulate --json``: simulated step time and peak memory, per-stream busy times, and the
    plan's analytic figures with the relative difference. ``symmetric``: simulate one period of ranks
    (the same result on homogeneous clusters, faster at large world sizes). With a calibration in the
    plan, ``iteration_time_interval_s`` (simulated) and ``analytic.iteration_time_interval_s`` are the
    step time's 90% intervals over ``draws`` draws of its uncertainty (null without one)."""
    text, origin = _plan_document(p)
    return json.loads(_native().simulate(text, origin, symmetric, int(draws)))


def _number(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def read_results(path: PathLike) -> Any:
    """Rows of a sweep (``results.csv``, ``rows.jsonl``) or a validation (``validation.csv``): a pandas
    DataFrame when pandas is installed, else a list of dicts with numbers as numbers. A directory is
    read through the results.csv or validation.csv in it."""
    path = os.fspath(path)
    if os.path.isdir(path):
        for name in ("results.csv", "validation.csv"):
            if os.path.exists(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
        else:
            raise ValueError(f"{path}: no results.csv or validation.csv in this directory")
    if path.endswith(".jsonl"):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        with open(path, newline="") as f:
            rows = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]
    try:
        import pandas as pd
    except ImportError:
        return rows
    return pd.DataFrame(rows)
