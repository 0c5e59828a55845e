"""The torch backend's ranks: what ``osdp validate --backend torch`` and ``osdp calibrate --backend torch``
run under torchrun (one process per rank; gloo on CPU ranks, NCCL on GPUs).

    python -m torch.distributed.run --standalone --nproc_per_node N -m osdp.torch.measure JOB.json OUT.json

JOB.json is written by osdp; rank 0 writes OUT.json (atomically). Two kinds of job:

``validate``: plans exported for FSDP2 (``export``: what ``osdp export --to fsdp2`` writes), each built as
osdp's GPT (``osdp.torch.GPT``) or, for a model read from a Hugging Face config (the export's
``transformers``), as transformers' model of that config (``osdp.torch.hf``), applied with
``apply_plan`` and trained with Adam on synthetic tokens.
The plans of the job run side by side: warm-up steps, then timed steps, one step of each plan in turn,
so that a machine whose speed drifts slows them alike. A step is forward, backward, the optimizer step
and zeroing the gradients, after a barrier; its time is the slowest rank's (an all-reduce of the
elapsed times with MAX). The bytes of parameters, gradients and optimizer states are counted from the
local shards (``DTensor.to_local()``) during the last timed step (gradients after backward, the
optimizer's states after its step), the largest rank's; so is the loss (the mean over ranks).
A plan with a ``check`` is first run for one step on osdp's executor arithmetic
(``osdp.torch.executor_model``) from the executor's initial weights and tokens, and its loss,
gradients and updated weights are compared with the executor's step that osdp wrote (``_check``);
a transformers model's plan instead runs one step of the transformers model, sharded as planned, beside
the same model unsharded on the global batch (the executor's tokens and Adam), and the two are compared
alike (``_check_transformers``).

``calibrate``: the sweeps of ``osdp calibrate`` in torch's own kernels: all-gather, reduce-scatter and
all-reduce of a full buffer of S bytes as FSDP2 runs them (``_fsdp2_collectives`` says how: with
FSDP2's copies into and out of its buffers and its gradient division, which the plans pay for every
collective); an elementwise kernel moving S bytes
(``torch.add(x, 1, out=y)``: 8 bytes per element); Adam's step over S/28 parameters; ``torch.mm`` /
``torch.bmm`` GEMMs. Each point is timed as a batch of identical operations lasting at least
``batch_target_s`` (the count agreed by every rank), after a barrier, the slowest rank's time per
operation; the repetitions of a sweep's points are interleaved, one of each point a pass, and a
point's time is the median of its repetitions. osdp fits these points exactly as it fits its own
backends' (costmodel/calibration_fit.hpp).
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist


def _write_json(path: str, doc: Any) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _max_over_ranks(x: float) -> float:
    t = torch.tensor([float(x)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _local_bytes(t: torch.Tensor | None) -> int:
    if t is None:
        return 0
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


# ---- validate ----------------------------------------------------------------------------------------

class _Plan:
    """One exported plan, built and sharded, with its optimizer and its measurements."""

    def __init__(self, entry: dict, device: torch.device, seed: int):
        from . import GPT, apply_plan, load_export

        self.label = entry["label"]
        self.spec = load_export(entry["export"])
        torch.manual_seed(seed)
        if self.spec.get("transformers"):
            from . import hf

            self.model = hf.build_model(self.spec).to(device)
            self.loss = lambda x, y: hf.causal_lm_loss(self.model, x, y)
        else:
            self.model = GPT.from_model(self.spec["model"]).to(device)
            self.loss = lambda x, y: self.model(x, y)
        apply_plan(self.model, self.spec)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.batch = self.spec["micro_batch_size"]
        self.seq, self.vocab = self.spec["model"]["seq"], self.spec["model"]["vocab"]
        self.device = device
        self.gen = torch.Generator().manual_seed(seed + 1)
        self.steps: list[float] = []
        self.last_loss = 0.0
        self.param_bytes = self.grad_bytes = self.optimizer_bytes = 0

    def step(self, timed: bool, last: bool) -> None:
        rank, world = dist.get_rank(), dist.get_world_size()
        tokens = torch.randint(0, self.vocab, (self.batch * world, self.seq + 1), generator=self.gen)
        mine = tokens[self.batch * rank:self.batch * (rank + 1)].to(self.device)
        x, y = mine[:, :-1], mine[:, 1:]
        _sync(self.device)
        dist.barrier()
        start = time.perf_counter()
        loss = self.loss(x, y)
        loss.backward()
        if last:
            _sync(self.device)
            elapsed_before = time.perf_counter() - start
            self.grad_bytes = sum(_local_bytes(p.grad) for p in self.model.parameters())
            resumed = time.perf_counter()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        _sync(self.device)
        elapsed = time.perf_counter() - start
        if last:  # the gradient count is not part of the step
            elapsed = elapsed_before + (time.perf_counter() - resumed)
        if timed:
            self.steps.append(_max_over_ranks(elapsed))
        if last:
            self.param_bytes = sum(_local_bytes(p) for p in self.model.parameters())
            self.optimizer_bytes = sum(_local_bytes(v) for state in self.opt.state.values()
                                       for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
            mean = loss.detach().clone().to(torch.float64)
            dist.all_reduce(mean)
            self.last_loss = mean.item() / world

    def result(self) -> dict:
        return {"label": self.label, "steps_s": self.steps, "loss": self.last_loss,
                "param_bytes": _max_over_ranks(self.param_bytes), "grad_bytes": _max_over_ranks(self.grad_bytes),
                "optimizer_bytes": _max_over_ranks(self.optimizer_bytes)}


def _read(path: str, dtype: torch.dtype) -> torch.Tensor:
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype)


def _check(entry: dict, device: torch.device) -> dict:
    """One step of the plan on osdp's executor arithmetic (``ExecutorModel``) from the executor's own
    initial weights and tokens, against the executor's step written by osdp:
      loss       relative difference;
      gradients  per operator the norm of the difference over the norm of osdp's gradient (not the
                 largest element: where a pre-activation rounds to either side of relu's kink in the two
                 implementations, that unit's gradient differs outright, and with it the rows of the
                 operators below it: 1e-4-1e-3 of the largest element, 1e-4 of the norm where few tokens
                 share an embedding row, against fp32 rounding's 1e-7);
      weights    the largest difference after Adam's first step, over the elements whose osdp gradient
                 is at least 1e-3 of the operator's largest: Adam's first step is lr g / (|g| + eps), about
                 lr times the sign of g, so where g is near zero a rounding flips a step of 2 lr.
    A plan applied wrongly (a gradient scaled, a shard or slice lost) differs by far more."""
    from . import apply_plan, load_export
    from .executor_model import ExecutorModel

    chk = entry["check"]
    blob = _read(chk["weights_file"], torch.float32)
    total = chk["parameters"]
    weights = []
    for op in chk["operators"]:
        at, ws = op["offset"], []
        for w in op["weights"]:
            n = w["rows"] * w["cols"]
            ws.append(blob[at:at + n].reshape(w["rows"], w["cols"]).clone())
            at += n
        weights.append(ws)
    model = ExecutorModel(chk, weights).to(device)
    apply_plan(model, load_export(entry["export"]))
    a = chk["adam"]
    lr = a["lr"] * float(os.environ.get("OSDP_TORCH_TEST_LR_SCALE", "1"))  # test hook: a step that differs
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(a["beta1"], a["beta2"]), eps=a["eps"])
    rank, world = dist.get_rank(), dist.get_world_size()
    seq = chk["seq"]
    tokens = _read(chk["tokens_file"], torch.int32).reshape(-1, seq + 1).long()
    b = tokens.shape[0] // world
    mine = tokens[b * rank:b * (rank + 1)].to(device)
    loss = model(mine[:, :-1], mine[:, 1:])
    loss.backward()
    grads = model.logical(grads=True)
    opt.step()
    updated = model.logical()
    mean = loss.detach().to(torch.float64)
    dist.all_reduce(mean)
    got_loss = mean.item() / world
    out = {"loss": got_loss, "loss_ref": chk["loss"],
           "loss_error": abs(got_loss - chk["loss"]) / max(abs(chk["loss"]), 1e-30),
           "weight_diff": 0.0, "weight_op": "", "grad_diff": 0.0, "grad_op": ""}
    for op, g, w in zip(chk["operators"], grads, updated):
        at, n = op["offset"], op["parameters"]
        ref_w, ref_g = blob[total + at:total + at + n], blob[2 * total + at:2 * total + at + n]
        if g.numel() != n or w.numel() != n:
            raise ValueError(f"operator {op['name']}: {w.numel()} parameters in torch, {n} in osdp's IR")
        gd = (g - ref_g).norm().item() / max(ref_g.norm().item(), 1e-30)
        stable = ref_g.abs() >= 1e-3 * ref_g.abs().max()
        wd = (w - ref_w)[stable].abs().max().item() if bool(stable.any()) else 0.0
        if wd >= out["weight_diff"]:
            out["weight_diff"], out["weight_op"] = wd, op["name"]
        if gd >= out["grad_diff"]:
            out["grad_diff"], out["grad_op"] = gd, op["name"]
    return out


def _check_transformers(entry: dict, device: torch.device, seed: int) -> dict:
    """One step of a transformers model's plan against the same model unsharded (``_check``'s figures):
    both built from the export's config with the same seed (no dropout); the sharded one with the plan
    applied, on each rank's share of the global batch (the executor's tokens), the unsharded one on all
    of it; Adam with the executor's parameters on both. Gradients and weights are compared per operator
    over the parameters under its modules (a tied weight once), in the names of the model before
    ``apply_plan`` (a sliced layer's weight as its slices side by side)."""
    import copy

    from . import apply_plan, full_parameters, hf, load_export, module_paths

    spec = load_export(entry["export"])
    chk = entry["check"]
    torch.manual_seed(seed)
    ref = hf.build_model(spec, dropout=0.0).to(device)
    model = copy.deepcopy(ref)
    apply_plan(model, spec)
    a = chk["adam"]
    scale = float(os.environ.get("OSDP_TORCH_TEST_LR_SCALE", "1"))  # test hook: a step that differs
    opt = torch.optim.Adam(model.parameters(), lr=a["lr"] * scale, betas=(a["beta1"], a["beta2"]), eps=a["eps"])
    ref_opt = torch.optim.Adam(ref.parameters(), lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"])
    rank, world = dist.get_rank(), dist.get_world_size()
    seq = chk["seq"]
    tokens = _read(chk["tokens_file"], torch.int32).reshape(-1, seq + 1).long().to(device)
    b = tokens.shape[0] // world
    loss = hf.causal_lm_loss(model, tokens[b * rank:b * (rank + 1), :-1], tokens[b * rank:b * (rank + 1), 1:])
    loss.backward()
    ref_loss = hf.causal_lm_loss(ref, tokens[:, :-1], tokens[:, 1:])
    ref_loss.backward()
    grads, ref_grads = full_parameters(model, grads=True), full_parameters(ref, grads=True)
    opt.step()
    ref_opt.step()
    weights, ref_weights = full_parameters(model), full_parameters(ref)
    mean = loss.detach().to(torch.float64)
    dist.all_reduce(mean)
    got_loss, want_loss = mean.item() / world, ref_loss.item()
    out = {"loss": got_loss, "loss_ref": want_loss,
           "loss_error": abs(got_loss - want_loss) / max(abs(want_loss), 1e-30),
           "weight_diff": 0.0, "weight_op": "", "grad_diff": 0.0, "grad_op": ""}
    for m in spec["modules"]:
        paths = module_paths(m)
        names = [n for n in ref_grads if any(n.startswith(p + ".") for p in paths)]
        if not names:
            raise ValueError(f"operator {m['operator']}: no parameter under {paths}")
        g = torch.cat([grads[n].reshape(-1) for n in names])
        ref_g = torch.cat([ref_grads[n].reshape(-1) for n in names])
        w = torch.cat([weights[n].reshape(-1) for n in names])
        ref_w = torch.cat([ref_weights[n].reshape(-1) for n in names])
        gd = (g - ref_g).norm().item() / max(ref_g.norm().item(), 1e-30)
        stable = ref_g.abs() >= 1e-3 * ref_g.abs().max()
        wd = (w - ref_w)[stable].abs().max().item() if bool(stable.any()) else 0.0
        if wd >= out["weight_diff"]:
            out["weight_diff"], out["weight_op"] = wd, m["operator"]
        if gd >= out["grad_diff"]:
            out["grad_diff"], out["grad_op"] = gd, m["operator"]
    return out


def _validate(job: dict, device: torch.device, status: Callable[[str], None]) -> dict:
    checks = {}
    for i, entry in enumerate(job["plans"]):
        if "check" in entry:
            if entry["export"].get("transformers"):
                status(f"plan {i + 1} of {len(job['plans'])} ({entry['label']}): one step against the unsharded "
                       "transformers model")
                checks[i] = _check_transformers(entry, device, job.get("seed", 0))
                continue
            status(f"plan {i + 1} of {len(job['plans'])} ({entry['label']}): one step on osdp's executor arithmetic")
            checks[i] = _check(entry, device)
    plans = []
    for i, entry in enumerate(job["plans"]):
        status(f"plan {i + 1} of {len(job['plans'])} ({entry['label']}): building and sharding")
        plans.append(_Plan(entry, device, job.get("seed", 0)))
    warmup, iterations = job["warmup"], job["iterations"]
    for k in range(warmup):
        for p in plans:
            status(f"plan {p.label}: warm-up step {k + 1} of {warmup}")
            p.step(timed=False, last=False)
    for k in range(iterations):
        for p in plans:
            status(f"plan {p.label}: timed step {k + 1} of {iterations}")
            p.step(timed=True, last=k == iterations - 1)
    results = [p.result() for p in plans]
    for i, c in checks.items():
        results[i]["check"] = c
    return {"plans": results}


# ---- calibrate ---------------------------------------------------------------------------------------

def _sizes(lo: float, hi: float, steps: int, quantum: float) -> list[float]:
    """As validate/calibrate/calibrate.cpp: lo to hi, `steps` per doubling, multiples of quantum."""
    out: list[float] = []
    steps = max(1, steps)
    i = 0
    while True:
        s = lo * 2.0 ** (i / steps)
        if s > hi * (1 + 1e-12):
            return out
        q = max(quantum, round(s / quantum) * quantum)
        if not out or q > out[-1]:
            out.append(q)
        i += 1


class _Sweep:
    """Points of one sweep, each an operation `run(call)`; timed in interleaved passes."""

    def __init__(self, job: dict, device: torch.device, status: Callable[[str], None]):
        self.job, self.device, self.status = job, device, status

    def _time_batch(self, op: Callable[[int], None], count: int) -> float:
        _sync(self.device)
        dist.barrier()
        start = time.perf_counter()
        for call in range(count):
            op(call)
        _sync(self.device)
        return _max_over_ranks((time.perf_counter() - start) / count)

    def times(self, name: str, ops: list[Callable[[int], None]],
              before: Callable[[int], None] | None = None,
              after: Callable[[int, int], None] | None = None) -> list[list[float]]:
        """Each operation's time per repetition (seconds per operation, the slowest rank's). ``before(i)``
        and ``after(i, count)``, where given, run around each timed batch of operation i (count calls)."""
        job = self.job
        counts, repeats, times = [], [], []
        for op in ops:  # one operation each: how many make a batch, agreed by every rank
            op(0)  # untimed: a first call pays for torch's lazy set-up (allocations, kernel choice, threads)
            once = self._time_batch(op, 1)
            large = once >= job["large_s"]
            counts.append(1 if large else int(min(1000, max(1, job["batch_target_s"] / max(once, 1e-9)))))
            repeats.append(job["large_repeats"] if large else job["repeats"])
            if not large:
                for _ in range(job["warmup"]):
                    self._time_batch(op, counts[-1])
            times.append([])
        self.counts = counts
        for rep in range(max(repeats)):
            self.status(f"{name}: pass {rep + 1} of {max(repeats)} over {len(ops)} points")
            for i, op in enumerate(ops):
                if rep < repeats[i]:
                    if before:
                        before(i)
                    times[i].append(self._time_batch(op, counts[i]))
                    if after:
                        after(i, counts[i])
        return times

    def rows(self, name: str, fields: list[dict], times: list[list[float]], counts: list[int]) -> list[dict]:
        out = []
        for f, ts, count in zip(fields, times, counts):
            row = {"sweep": name, "bytes": 0.0, "m": 0, "n": 0, "k": 0, "count": 0, "batch": count,
                   "repeats": len(ts), "seconds": statistics.median(ts), "min_s": min(ts), "max_s": max(ts),
                   "times_s": list(ts)}
            row.update(f)
            out.append(row)
        return out

    def run(self, name: str, points: list[tuple[dict, Callable[[int], None]]]) -> list[dict]:
        times = self.times(name, [op for _, op in points])
        return self.rows(name, [f for f, _ in points], times, self.counts)


class _Flat(torch.nn.Module):
    """One 1-D parameter of n floats; forward sums it (backward: a gradient of ones)."""

    def __init__(self, n: int, device: torch.device):
        super().__init__()
        self.p = torch.nn.Parameter(torch.full((n,), 0.5, dtype=torch.float32, device=device))

    def forward(self) -> torch.Tensor:
        return self.p.sum()


class _ReduceClock:
    """FSDP2's gradient reduction timed in place: its param groups call ``foreach_reduce`` after backward
    (the copies into the reduction's buffer, the division, the reduce-scatter and, on a 2-D mesh, the
    all-reduce); while ``on``, each call's time is added to ``seconds`` (the device synchronized before
    and after, so that a GPU's streams are inside the interval). ``available`` is False where this torch
    has no such function."""

    def __init__(self, device: torch.device):
        self.device, self.on, self.seconds = device, False, 0.0
        try:
            from torch.distributed.fsdp._fully_shard import _fsdp_param_group as group
            self.group, self.real = group, group.foreach_reduce
        except (ImportError, AttributeError):
            self.group = self.real = None
        if self.real is None:
            return

        def timed(*args, **kwargs):
            if not self.on:
                return self.real(*args, **kwargs)
            _sync(self.device)
            start = time.perf_counter()
            try:
                return self.real(*args, **kwargs)
            finally:
                _sync(self.device)
                self.seconds += time.perf_counter() - start

        self.group.foreach_reduce = timed

    @property
    def available(self) -> bool:
        return self.real is not None

    def close(self) -> None:
        if self.real is not None:
            self.group.foreach_reduce = self.real


def _fsdp2_collectives(sweep: _Sweep, sizes: list[float], device: torch.device) -> list[dict]:
    """The collectives as FSDP2 runs them for a module whose parameters are S bytes, with its copies
    into and out of the communication buffers and its gradient division:
      all-gather        unshard() + reshard() (world mesh);
      reduce-scatter    forward + backward (all-gather, then the post-backward reduce-scatter), less the
                        all-gather above and the same forward + backward of an unsharded module;
      all-reduce        the gradient reduction of a module on a (world x 1) mesh (osdp's REPLICATE, as
                        the export makes it: reshard_after_forward=False), timed in place around FSDP2's
                        foreach_reduce during its forward + backward;
      replicate-copies  what that module's forward + backward pays beyond the unsharded module's and its
                        reduction (the unshard on a shard group of one rank, the gradient's copies),
                        which osdp prices apart (ComputeSpec replicate_overhead, replicate_bandwidth).
    Where this torch cannot time the reduction in place, all-reduce is the (world x 1) module's forward +
    backward less the unsharded module's, and no replicate-copies points are made.
    A derived point's time is the difference of the medians (the passes interleave the points, so a slow
    spell touches every term alike)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    world = dist.get_world_size()
    world_mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("shard",))
    replicate_mesh = init_device_mesh(device.type, (world, 1), mesh_dim_names=("replicate", "shard"))
    clock = _ReduceClock(device)
    reductions: dict[int, list[float]] = {}  # point -> the in-place reduction per pass (s per call)
    ops, fields = [], []

    def fwd_bwd(call: int, m) -> None:
        m().backward()
        m.zero_grad(set_to_none=True)

    def replicated(call: int, m) -> None:
        clock.on = True
        try:
            fwd_bwd(call, m)
        finally:
            clock.on = False

    for s in sizes:
        n = int(s // 4)
        gather = reduce = fully_shard(_Flat(n, device), mesh=world_mesh, reshard_after_forward=True)
        whole = fully_shard(_Flat(n, device), mesh=replicate_mesh, reshard_after_forward=False)
        local = _Flat(n, device)

        def unshard(call: int, m=gather) -> None:
            m.unshard()
            m.reshard()

        ops += [unshard, lambda c, m=reduce: fwd_bwd(c, m), lambda c, m=whole: replicated(c, m),
                lambda c, m=local: fwd_bwd(c, m)]
        fields.append({"bytes": s})

    def before(i: int) -> None:
        clock.seconds = 0.0

    def after(i: int, count: int) -> None:
        if i % 4 == 2:
            reductions.setdefault(i // 4, []).append(_max_over_ranks(clock.seconds / count))

    try:
        times = sweep.times("fsdp2 collectives", ops, before=before, after=after)
    finally:
        clock.close()
    counts = sweep.counts
    batch = [counts[4 * i] for i in range(len(sizes))]
    out = sweep.rows("all-gather", fields, [times[4 * i] for i in range(len(sizes))], batch)

    def derived(name: str, terms: list[list[list[float]]]) -> None:
        """Point i: the first term's median less the others' (each a list over the passes)."""
        for i, f in enumerate(fields):
            t = terms[i]
            passes = min(len(x) for x in t)
            # The difference of the medians (each robust to a slow pass); min and max over the passes.
            seconds = statistics.median(t[0]) - sum(statistics.median(x) for x in t[1:])
            per_pass = [t[0][j] - sum(x[j] for x in t[1:]) for j in range(passes)]
            out.append({"sweep": name, "bytes": f["bytes"], "m": 0, "n": 0, "k": 0, "count": 0, "batch": batch[i],
                        "repeats": passes, "seconds": max(seconds, 1e-7), "min_s": min(per_pass),
                        "max_s": max(per_pass), "times_s": per_pass})

    derived("reduce-scatter", [[times[4 * i + 1], times[4 * i], times[4 * i + 3]] for i in range(len(sizes))])
    if clock.available:
        out += sweep.rows("all-reduce", fields, [reductions[i] for i in range(len(sizes))],
                          [counts[4 * i + 2] for i in range(len(sizes))])
        derived("replicate-copies",
                [[times[4 * i + 2], times[4 * i + 3], reductions[i]] for i in range(len(sizes))])
    else:
        derived("all-reduce", [[times[4 * i + 2], times[4 * i + 3]] for i in range(len(sizes))])
    return out


def _calibrate(job: dict, device: torch.device, status: Callable[[str], None]) -> dict:
    world = dist.get_world_size()
    sweep = _Sweep(job, device, status)
    f32 = dict(dtype=torch.float32, device=device)
    measurements: list[dict] = []
    if world >= 2:
        sizes = _sizes(job["min_bytes"], job["max_bytes"], job["steps_per_doubling"], 4.0 * world)
        measurements += _fsdp2_collectives(sweep, sizes, device)
    # Elementwise: y = x + 1 over S/8 floats, each call on another part of a pool larger than the caches.
    pool_floats = max(int(job["elementwise_max_bytes"] // 8), 8 << 20)
    xs, ys = torch.ones(pool_floats, **f32), torch.empty(pool_floats, **f32)

    def touch(n: int) -> Callable[[int], None]:
        slots = max(1, pool_floats // n)
        return lambda call: torch.add(xs[(call % slots) * n:(call % slots + 1) * n], 1.0,
                                      out=ys[(call % slots) * n:(call % slots + 1) * n])

    esizes = _sizes(job["elementwise_min_bytes"], job["elementwise_max_bytes"], job["steps_per_doubling"], 8.0)
    measurements += sweep.run("elementwise", [({"bytes": s}, touch(int(s // 8))) for s in esizes])
    del xs, ys

    def adam(n: int) -> Callable[[int], None]:
        p = torch.nn.Parameter(torch.full((n,), 0.5, **f32))
        p.grad = torch.full((n,), 1e-3, **f32)
        opt = torch.optim.Adam([p], lr=1e-4)
        return lambda call: opt.step()

    asizes = _sizes(job["elementwise_min_bytes"], job["elementwise_max_bytes"], job["steps_per_doubling"], 28.0)
    measurements += sweep.run("adam", [({"bytes": s}, adam(int(s // 28))) for s in asizes])

    # Every call of a GEMM takes the next copy of its operands, as many copies as fill a pool of twice
    # the last-level cache (at least 64 MiB): in a step its weights and activations were last touched
    # many kernels earlier. One pool per operand serves every shape.
    shapes = [tuple(s) for s in job["gemm_shapes"]]
    cache = _last_level_cache_bytes(device)
    cold = max(64 << 20, 2 * cache)

    def copies(m: int, n: int, k: int, count: int) -> int:
        return max(1, -(-cold // (4 * count * (m * k + k * n + m * n))))

    extents = [[copies(m, n, k, c) * c * e for e in (m * k, k * n, m * n)] for m, n, k, c in shapes]
    # A and B hold values like a step's, uniform in [-1, 1) (a 4 MiB pattern repeated), not constants: a
    # GPU's clock depends on the bits its multipliers toggle (validate/calibrate/calibrate.hpp).
    pa, pb = (_operand_pool(max((x[j] for x in extents), default=1), seed, device) for j, seed in ((0, 1), (1, 2)))
    pc = torch.zeros(max((x[2] for x in extents), default=1), **f32)

    def gemm(m: int, n: int, k: int, count: int) -> Callable[[int], None]:
        r = copies(m, n, k, count)
        a = pa[:r * count * m * k].view(r, count, m, k)
        b = pb[:r * count * k * n].view(r, count, k, n)
        c = pc[:r * count * m * n].view(r, count, m, n)
        if count == 1:
            return lambda call: torch.mm(a[call % r, 0], b[call % r, 0], out=c[call % r, 0])
        return lambda call: torch.bmm(a[call % r], b[call % r], out=c[call % r])

    measurements += sweep.run("gemm", [({"m": m, "n": n, "k": k, "count": c,
                                         "bytes": 4.0 * c * (m * k + k * n + m * n)}, gemm(m, n, k, c))
                                        for m, n, k, c in shapes])
    return {"measurements": measurements,
            "gemm_operands": {"rotation_bytes": cold, "last_level_cache_bytes": cache}}


def _operand_pool(n: int, seed: int, device: torch.device) -> torch.Tensor:
    """n floats: a pattern of at most 2**20 uniform in [-1, 1) (generator seeded with `seed`), repeated."""
    g = torch.Generator().manual_seed(seed)
    pattern = torch.rand(min(n, 1 << 20), generator=g, dtype=torch.float32) * 2 - 1
    return pattern.repeat(-(-n // pattern.numel()))[:n].contiguous().to(device)


def _last_level_cache_bytes(device: torch.device) -> int:
    """The device's last-level cache: a GPU's L2, else the largest data cache /sys lists for cpu0 (0 where
    neither says)."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
    largest = 0
    for i in range(16):
        d = f"/sys/devices/system/cpu/cpu0/cache/index{i}/"
        try:
            with open(d + "type") as f:
                kind = f.read().strip()
            with open(d + "size") as f:
                size = f.read().strip()
        except OSError:
            continue
        if kind == "Instruction" or not size:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
        try:
            largest = max(largest, int(size.rstrip("KMG")) * unit)
        except ValueError:
            continue
    return largest


# ---- the job -----------------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m torch.distributed.run ... -m osdp.torch.measure JOB.json OUT.json", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        job = json.load(f)
    use_cuda = torch.cuda.is_available() and job.get("device", "auto") != "cpu"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = datetime.timedelta(seconds=float(job.get("timeout_s", 120)))
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timeout)
    rank = dist.get_rank()
    if use_cuda:
        torch.cuda.set_device(local_rank)
    else:
        torch.set_num_threads(int(job.get("threads", 1)))
    device = torch.device("cuda") if use_cuda else torch.device("cpu")
    status_file = job.get("status_file")

    def status(line: str) -> None:  # what the rank is doing, for a job that ends without a word
        if status_file and rank == 0:
            with open(status_file, "w") as f:
                f.write(line + "\n")
        if job.get("progress") and rank == 0:
            print(f"torch: {line}", file=sys.stderr, flush=True)

    try:
        if os.environ.get("OSDP_TORCH_TEST_FAIL_RANK") == str(rank):  # test hook: a rank that dies
            status("failing on purpose (OSDP_TORCH_TEST_FAIL_RANK)")
            raise RuntimeError(f"rank {rank} fails on purpose (OSDP_TORCH_TEST_FAIL_RANK)")
        result = (_validate if job["kind"] == "validate" else _calibrate)(job, device, status)
    except Exception:
        print(f"osdp.torch.measure: rank {rank}: {traceback.format_exc()}", file=sys.stderr, flush=True)
        return 1
    result.update({"torch": torch.__version__, "backend": dist.get_backend(), "world_size": dist.get_world_size(),
                   "device": torch.cuda.get_device_name() if use_cuda else "cpu",
                   "threads": torch.get_num_threads()})
    if rank == 0:
        _write_json(argv[2], result)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    # Out without the interpreter's teardown: on a loaded machine, destroying gloo's and FSDP2's C++
    # state there aborts a rank now and then ("terminate called without an active exception") after
    # its work is done and rank 0's result written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
