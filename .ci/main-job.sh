#!/usr/bin/env bash
# The main job on the bundled data: the best plan for GPT-2 1.5B on the OSDP paper's 8 x TITAN RTX
# server under the paper's two memory limits, with FSDP beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
osdp=build/cli/osdp
$osdp models
echo
for memory in 8GiB 16GiB; do
  $osdp plan --model gpt2-1.5b --cluster titan-rtx-8 --memory "$memory" --split-max 4 --checkpoint auto \
    --out "build/plan-gpt2-1.5b-titan-$memory.json"
  echo
done
