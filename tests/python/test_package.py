"""The osdp Python package (issue 15) against the osdp program: the same names, plans and simulations
as its --json output, errors as ValueError naming the file, results read back with their numbers.
Usage: python test_package.py OSDP_BINARY   (the venv's python, with the package installed)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import osdp

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


def cli(*args: str) -> dict:
    p = subprocess.run([OSDP, *args, "--json"], capture_output=True, text=True)
    assert p.returncode in (0, 3), (args, p.returncode, p.stderr)
    return json.loads(p.stdout)


names = [m["name"] for m in cli("models")]
check("models() lists the program's built-in models", osdp.models() == names, (osdp.models(), names))
check("clusters() lists the program's clusters", osdp.clusters() == [c["name"] for c in cli("clusters")])
m = osdp.load_model("val-nd-8x256")
check("load_model fills in osdp's defaults", m["tied_embeddings"] is True and m["stages"][0]["ffn"] == 1024, m)
c = osdp.load_cluster("lab-2x2")
check("load_cluster: 2 nodes x 2", c["nodes"] == 2 and c["devices_per_node"] == 2, c)

# plan() against `osdp plan --json` with the same options: the same search, so the same numbers.
for kw, args in [
    (dict(model="gpt2-1.5b", cluster="titan-rtx-8", memory="8GiB"),
     ["--model", "gpt2-1.5b", "--cluster", "titan-rtx-8", "--memory", "8GiB"]),
    (dict(model="val-nd-8x256", cluster="lab-2x2", memory="100MiB", groups=True, split_max=2, prefetch=1),
     ["--model", "val-nd-8x256", "--cluster", "lab-2x2", "--memory", "100MiB", "--groups", "--split-max", "2",
      "--prefetch", "1"]),
    (dict(model="nd-48x1024", cluster="titan-rtx-8", strategy="fsdp", batch=2, checkpoint="on"),
     ["--model", "nd-48x1024", "--cluster", "titan-rtx-8", "--strategy", "fsdp", "--batch", "2",
      "--checkpoint", "on"]),
]:
    r = osdp.plan(**kw)
    want = cli("plan", *args)
    same = all(r[k] == want[k] for k in ("feasible", "batch_size", "throughput_samples_per_s", "iteration_time_s",
                                         "peak_memory_bytes", "strategy"))
    check(f"plan({kw}) equals osdp plan --json", same,
          {k: (r.get(k), want.get(k)) for k in ("batch_size", "throughput_samples_per_s")})
    check(f"plan({kw}): the plan's operators as the program wrote them",
          r["plan"]["operators"] == want["plan"]["operators"])
r = osdp.plan(model="val-nd-8x256", cluster="lab-2x2", memory="100MiB", baseline=["fsdp", "ddp", "hsdp"])
want = cli("plan", "--model", "val-nd-8x256", "--cluster", "lab-2x2", "--memory", "100MiB", "--baseline", "fsdp",
           "ddp", "hsdp")
check("plan(baseline=[...]): each baseline in order, as osdp plan --baseline a b c prints them",
      [b["strategy"] for b in r["baselines"]] == ["fsdp", "ddp", "hsdp"]
      and [{k: v for k, v in b.items() if k != "search_seconds"} for b in r["baselines"]]
      == [{k: v for k, v in b.items() if k != "search_seconds"} for b in want["baselines"]],
      (r["baselines"], want["baselines"]))
check("plan(baseline=[...]): the speedup over each is the plan's throughput over the baseline's",
      all(abs(b["speedup_over_baseline"] * b["throughput_samples_per_s"] - r["throughput_samples_per_s"])
          <= 1e-9 * r["throughput_samples_per_s"] for b in r["baselines"] if b["feasible"]),
      r["baselines"])
r = osdp.plan(model="gpt2-1.5b", cluster="titan-rtx-8", memory="1GiB")
check("a plan that does not fit: feasible False and the memory that would",
      r["feasible"] is False and r["min_fit_memory_bytes"] > 2**30, {k: r.get(k) for k in ("feasible",)})

with tempfile.TemporaryDirectory() as tmp:
    best = osdp.plan(model="val-ic-256-512", cluster="lab-2x2", memory="200MiB")
    path = os.path.join(tmp, "p.json")
    osdp.save_plan(best, path)
    sim = osdp.simulate(path)
    want = cli("simulate", "--plan", path)
    check("simulate(file) equals osdp simulate --json on the saved plan",
          sim["iteration_time_s"] == want["iteration_time_s"] and sim["peak_memory_bytes"] == want["peak_memory_bytes"],
          (sim["iteration_time_s"], want["iteration_time_s"]))
    check("simulate(plan() result) is the same", osdp.simulate(best)["iteration_time_s"] == sim["iteration_time_s"])
    check("the simulator agrees with the analytic step at prefetch 0",
          abs(sim["relative_difference"]["iteration_time"]) < 1e-9, sim["relative_difference"])
    check("load_plan reads the saved plan back", osdp.load_plan(path) == best["plan"])
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        json.dump({"schema_version": 1, "name": "x", "seq": 8, "vocab": 16, "layers": 1, "hiden": 8, "heads": 2}, f)
    try:
        osdp.plan(model=bad, cluster="cpu-2")
        check("a misspelled key raises ValueError", False, "no error")
    except ValueError as e:
        check("a misspelled key raises ValueError naming the file, the key and the near miss",
              "bad.json" in str(e) and "hiden" in str(e) and "hidden" in str(e), e)
    try:
        osdp.plan(model="val-nd-8x256", cluster="cpu-2", split_max=3)
        check("split_max=3 raises ValueError", False, "no error")
    except ValueError as e:
        check("split_max=3 raises ValueError saying powers of two", "power of two" in str(e), e)

csv_path = os.path.join(ROOT, "data", "results", "lab", "epyc-200mbit-c", "validation.csv")
rows = osdp.read_results(csv_path)
with open(csv_path) as f:
    lines = sum(1 for _ in f) - 1
records = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
check("read_results: every row of a validation, numbers as numbers",
      len(records) == lines and isinstance(records[0]["measured_time_s"], float)
      and isinstance(records[0]["batch_size"], int), records[0])
try:
    import pandas  # noqa: F401  (.ci/setup-python.sh installs it)
    check("read_results gives a pandas DataFrame", type(rows).__name__ == "DataFrame", type(rows))
except ImportError:
    check("pandas is installed in the environment (.ci/setup-python.sh)", False, "no pandas")
check("the native module has type stubs, and the package says it is typed",
      os.path.exists(os.path.join(os.path.dirname(osdp.__file__), "_osdp.pyi"))
      and os.path.exists(os.path.join(os.path.dirname(osdp.__file__), "py.typed")))
# A user's OSDP_DATA_DIR adds to the bundled models: a fresh interpreter with a directory of its own model
# sees that model and the bundled ones.
with tempfile.TemporaryDirectory() as d:
    os.makedirs(os.path.join(d, "models"))
    with open(os.path.join(d, "models", "mine.json"), "w") as f:
        json.dump({"schema_version": 1, "name": "mine", "seq": 8, "vocab": 10, "layers": 1, "hidden": 8,
                   "heads": 2, "ffn": 32}, f)
    env = dict(os.environ, OSDP_DATA_DIR=d)
    p = subprocess.run([sys.executable, "-c", "import json, osdp; print(json.dumps(osdp.models()))"],
                       capture_output=True, text=True, env=env)
    seen = json.loads(p.stdout) if p.returncode == 0 else p.stderr
    check("OSDP_DATA_DIR adds to the bundled models", isinstance(seen, list) and "mine" in seen
          and set(names) <= set(seen), seen)
check("plan() has a docstring", "osdp plan --json" in (osdp.plan.__doc__ or ""))
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
