#!/bin/bash
# gpu-llm.sh: decode and prefill of a Llama-3.2-1B-shaped model (random weights, bf16, batch 1)
# through baton (bench/llm/export_1b.py, then build/generate in graph mode) against the gpt-fast
# PyTorch recipe (bench/llm/torch_decode.py) in the same call. Run by scripts/gpu-round.sh when
# PARTS has llm; BUILD names the CUDA build directory.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build-gpu}
dir=$(mktemp -d)/llm1b
ctx=${CONTEXT:-1024}
new=${NEW_TOKENS:-256}
echo "== export (bench/llm/export_1b.py)"
PYTHONPATH=$root/python timeout 300 python3 bench/llm/export_1b.py "$dir" --max-seq-len $((ctx + new + 8)) 2>&1 | tail -4
prompt=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(128000)) for _ in range($ctx)))")
for mode in graph boundary; do
  echo "== generate, $mode mode, prompt $ctx tokens, $new new"
  /usr/bin/time -f "generate: %e s wall, %M KB max RSS" timeout 300 "$BUILD/generate" "$dir" \
    --prompt "$prompt" --max-new-tokens "$new" --gpu=cuda --mode=$mode 2>&1 >"$dir/ids-$mode.txt" | tail -8
  tail -c 200 "$dir/ids-$mode.txt"; echo
done
cmp -s "$dir/ids-graph.txt" "$dir/ids-boundary.txt" && echo "graph and boundary tokens: equal" ||
  echo "graph and boundary tokens: DIFFER"
echo "== PyTorch peer (bench/llm/torch_decode.py)"
timeout 400 python3 bench/llm/torch_decode.py --context "$ctx" --prefill "$ctx" --steps 200 2>&1 |
  grep -vE "Warning|warn\(" | tail -12
rm -rf "$(dirname "$dir")"
