import statistics as st, time, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

class M(torch.nn.Module):
    def __init__(self, n, k):
        super().__init__()
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.full((n // k,), 0.5)) for _ in range(k)])
    def forward(self):
        return sum(p.sum() for p in self.ps)

def fb(m):
    m().backward(); m.zero_grad(set_to_none=True)

dist.init_process_group("gloo")
w = dist.get_world_size()
rep = init_device_mesh("cpu", (w, 1), mesh_dim_names=("replicate", "shard"))
world = init_device_mesh("cpu", (w,), mesh_dim_names=("shard",))
for n in (1 << 16, 1 << 19, 1 << 21):
    res = {}
    for k in (1, 6, 12):
        mods = {"rep": fully_shard(M(n, k), mesh=rep, reshard_after_forward=False),
                "zdp": fully_shard(M(n, k), mesh=world, reshard_after_forward=True),
                "local": M(n, k)}
        for name, m in mods.items():
            fb(m); ts = []
            for _ in range(21):
                dist.barrier(); t0 = time.perf_counter(); fb(m); ts.append(time.perf_counter() - t0)
            res[(name, k)] = st.median(ts)
    if dist.get_rank() == 0:
        print(f"{4*n/2**20:.2f} MiB: " + "  ".join(f"{a}/{k}={1e3*v:.2f}" for (a, k), v in res.items()), flush=True)
dist.destroy_process_group()
