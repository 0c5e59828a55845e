"""Where a REPLICATE step's time goes in FSDP2 (run: torchrun --standalone --nproc_per_node 2 breakdown.py,
OMP_NUM_THREADS=1, in the venv .ci/setup.sh makes). One flat parameter of S bytes whose forward sums
it, on a (world x 1) mesh (osdp's REPLICATE in FSDP2) and unsharded; FSDP2's gradient reduction
(foreach_reduce, called by its param group after backward) timed in place; medians of 15."""
import statistics as st
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp._fully_shard import _fsdp_param_group


class Flat(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.p = torch.nn.Parameter(torch.full((n,), 0.5))

    def forward(self):
        return self.p.sum()


real = _fsdp_param_group.foreach_reduce
reduce_s: list[float] = []


def timed(*args, **kwargs):
    t0 = time.perf_counter()
    out = real(*args, **kwargs)
    reduce_s.append(time.perf_counter() - t0)
    return out


def fb(mod):
    mod().backward()
    mod.zero_grad(set_to_none=True)


dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(), 1), mesh_dim_names=("replicate", "shard"))
for n in (1 << 16, 1 << 20, 1 << 22):
    m = fully_shard(Flat(n), mesh=mesh, reshard_after_forward=True)
    local = Flat(n)
    fb(m), fb(local)
    un, step, loc = [], [], []
    reduce_s.clear()
    for _ in range(15):
        dist.barrier()
        t0 = time.perf_counter()
        m.unshard()
        m.reshard()
        un.append(time.perf_counter() - t0)
        dist.barrier()
        _fsdp_param_group.foreach_reduce = timed
        t0 = time.perf_counter()
        fb(m)
        step.append(time.perf_counter() - t0)
        _fsdp_param_group.foreach_reduce = real
        dist.barrier()
        t0 = time.perf_counter()
        fb(local)
        loc.append(time.perf_counter() - t0)
    if dist.get_rank() == 0:
        s, l, r = st.median(step), st.median(loc), st.median(reduce_s)
        print(f"{4 * n / 2**20:.2f} MiB: (world x 1) step {1e3 * s:.2f} ms = unsharded step {1e3 * l:.2f}"
              f" + foreach_reduce {1e3 * r:.2f} + rest {1e3 * (s - l - r):.2f};"
              f" unshard+reshard alone {1e3 * st.median(un):.2f} ms", flush=True)
dist.destroy_process_group()
