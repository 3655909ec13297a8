#!/bin/bash
# generate-demo.sh: the whole path from PyTorch to tokens on a fresh machine (README, "From
# PyTorch"). Builds baton (scripts/setup.sh), makes the exporter's venv (scripts/py-venv.sh: pinned
# torch and transformers from PyPI), builds a small Llama-architecture model from a config with
# random weights (nothing is downloaded), exports it with baton_export.export_causal_lm, and
# generates with build/generate, printing transformers' greedy tokens beside baton's.
#
#   bash scripts/generate-demo.sh [GENERATE ARGS...]   env: BATON_BUILD_DIR (default build),
#                                                       DEMO_DIR (default BUILD/demo-llm)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
build=${BATON_BUILD_DIR:-build}
dir=${DEMO_DIR:-$build/demo-llm}
if [ ! -x "$build/generate" ]; then
  echo "generate-demo: $build/generate was not built (it needs baton_runtime_set_dims)" >&2
  exit 1
fi
venv=$(bash scripts/py-venv.sh | tail -n 1)
"$venv/bin/python" - "$dir" <<'PY'
import sys, time, torch, transformers as tf, baton_export
torch.manual_seed(0)
cfg = tf.LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=640, num_hidden_layers=4,
                     num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=True)
m = tf.LlamaForCausalLM(cfg).eval()
t = time.time()
baton_export.export_causal_lm(m, sys.argv[1], max_seq_len=64)
print(f"exported a {sum(p.numel() for p in m.parameters()) / 1e6:.1f} M-parameter Llama to "
      f"{sys.argv[1]} in {time.time() - t:.2f} s")
m.generation_config.eos_token_id = None
out = m.generate(torch.tensor([[1, 5, 7]]), max_new_tokens=16, min_new_tokens=16, do_sample=False,
                 pad_token_id=0)
print("transformers:", " ".join(map(str, out[0, 3:].tolist())))
PY
ids=$("$build/generate" "$dir" --prompt 1,5,7 --max-new-tokens 16 "$@" 2> "$dir/generate.log" |
      tail -n 1) || { cat "$dir/generate.log" >&2; exit 1; }
echo "baton:        $ids"
sed 's/^/  /' "$dir/generate.log"
