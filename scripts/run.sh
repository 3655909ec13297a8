#!/bin/bash
# run.sh: sets up (scripts/setup.sh) and runs the main job: the bundled ExecuTorch-RFC plan
# (8 x [GEMM -> RMSNorm -> softshrink on cuda:0 -> add on the CPU]) once, then times it in the
# three sync modes. Without a GPU the cuda:0 steps run on the CPU, with a warning.
# Any arguments replace the plan: scripts/run.sh my_plan.json
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
build=${BATON_BUILD_DIR:-build}
plan=${1:-examples/plans/rfc.json}
"$build/baton" inspect "$plan" | sed -n '/^segments/,/^transfers/p' | head -12
echo
"$build/baton" run "$plan" --mode=graph
echo
"$build/baton" bench "$plan" --modes=strict,boundary,graph --iters=20 --warmup=2 -q
