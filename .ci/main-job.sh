#!/usr/bin/env bash
# The main job on the bundled data: the OSDP paper's Figure 5 setting, offline. The sweep plans every
# model of the paper's three families on its 8 x TITAN RTX server under 8 and 16 GiB, without and with
# checkpointing, with FSDP, the released code's search (osdp-ref) and the exact search without and
# with operator splitting, each scored by the analytic cost model and the simulator; then the table
# of speedups beside the paper's figures and the plots. --resume: a re-run continues where it stopped.
# The build is .ci/setup.sh's (build/).
set -euo pipefail
cd "$(dirname "$0")/.."
osdp=build/cli/osdp
python=/usr/bin/python3
jobs=$(nproc 2>/dev/null || echo 2)
out=build/results/paper-fig5
scaling=build/results/scaling
scaling_groups=build/results/scaling-groups

$osdp models
echo

$osdp sweep experiments/paper-fig5.json --jobs "$jobs" --resume --out "$out"
echo
# Speedup over FSDP against world size (8 to 1024 H100s), for the scaling figure: under a second.
$osdp sweep experiments/scaling.json --jobs "$jobs" --resume --out "$scaling"
echo
# The same on several nodes with node groups and two-level collectives (16 to 1024 H100s): a second.
$osdp sweep experiments/scaling-groups.json --jobs "$jobs" --resume --out "$scaling_groups"
echo

$python experiments/paper_table.py "$out"
echo
$python experiments/paper_table.py "$out" --evaluator sim
echo
$python experiments/plot.py "$out" --out "$out/plots" --scaling "$scaling"
echo
$python experiments/plot.py "$scaling_groups" --out "$scaling_groups/plots" --scaling "$scaling_groups"
echo

echo "main job: results in $out/ (results.csv, candidates.csv, summary.json),"
echo "          plots in $out/plots/, the scaling sweeps in $scaling/ and $scaling_groups/"
