#!/usr/bin/env bash
# The Python side: a virtual environment in build/venv (Debian's python3, everything else from PyPI)
# with torch (CPU ranks run FSDP2 over gloo), transformers (the models of Hugging Face configs), the
# build tools of the osdp package, pandas, matplotlib and the notebook runner, each installed only when
# missing; then the osdp package itself
# (pip install ./python: nanobind, built by scikit-build-core, incrementally in python/build/).
# Usage: bash .ci/setup-python.sh   (from .ci/setup.sh; torch is about 5 GB and takes a few minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: making the virtual environment $venv"
  /usr/bin/python3 -m venv "$venv"
fi
py=$venv/bin/python
missing=()
for spec in "torch:torch" "transformers:transformers" "nanobind:nanobind" "scikit_build_core:scikit-build-core" "pandas:pandas" \
            "matplotlib:matplotlib" "nbclient:nbclient" "nbformat:nbformat" "ipykernel:ipykernel"; do
  module=${spec%%:*}
  "$py" -c "import $module" 2>/dev/null || missing+=("${spec#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: pip install ${missing[*]} (into $venv)"
  "$py" -m pip install --quiet --disable-pip-version-check "${missing[@]}"
fi
echo "setup: pip install ./python (the osdp package)"
"$py" -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps ./python
