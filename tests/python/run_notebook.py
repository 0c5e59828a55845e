"""Executes a notebook with nbclient (its cells in order, in the running Python's kernel) and fails on
the first cell that raises. Usage: python run_notebook.py NOTEBOOK OUTDIR"""
import os
import sys

import nbclient
import nbformat

path, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
os.environ["OSDP_NOTEBOOK_OUT"] = out
os.environ.setdefault("OSDP_ROOT", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
nb = nbformat.read(path, as_version=4)
client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                 resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
client.execute()
for cell in nb.cells:
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            sys.stdout.write(o.get("text", ""))
nbformat.write(nb, os.path.join(out, os.path.basename(path)))
print(f"ok - {path}: {len(nb.cells)} cells executed")
