#!/bin/bash
# generate-demo.sh: the whole path from PyTorch to tokens on a fresh machine (README, "From
# PyTorch"). Builds baton (scripts/setup.sh), makes the exporter's venv (scripts/py-venv.sh: pinned
# torch and transformers from PyPI), builds a small Llama-architecture model from a config with
# random weights (nothing is downloaded), exports it with baton_export.export_causal_lm, and
# generates with build/generate, printing transformers' greedy tokens beside baton's; then the same
# from a text prompt through a small tokenizer.json (generate --text).
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
# a byte-level BPE tokenizer configured as Llama 3's, trained on a sentence; the model's vocabulary
# is the tokenizer's (its weights are random, so its text is too: the point is the path, text in
# and text out, in C)
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
tok = Tokenizer(models.BPE(ignore_merges=True))
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
                         behavior="isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(["The capital of France is Paris. It's a city of museums and cafés."] * 8,
                        trainers.BpeTrainer(vocab_size=2048,
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                            special_tokens=["<|begin_of_text|>"]))
tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                   special_tokens=[("<|begin_of_text|>", 0)])
torch.manual_seed(0)
cfg = tf.LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=256, intermediate_size=640,
                     num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                     tie_word_embeddings=True)
m = tf.LlamaForCausalLM(cfg).eval()
t = time.time()
baton_export.export_causal_lm(m, sys.argv[1], max_seq_len=64)
tok.save(sys.argv[1] + "/tokenizer.json")  # beside the plans, where generate --text reads it
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
echo "text in, text out (generate --text, with the demo's tokenizer.json):"
"$build/generate" "$dir" --text "The capital of France is" --max-new-tokens 16 "$@" \
  2> "$dir/generate-text.log" | sed 's/^/  /' || { cat "$dir/generate-text.log" >&2; exit 1; }
