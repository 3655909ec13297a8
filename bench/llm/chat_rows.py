"""chat_rows.py: what a prefill of a row count not seen before costs, as build/chat meets it. A
Llama-3.2-1B-shaped model (bench_generate's CFG, random bf16 weights, the gemv plans) is exported
once with a byte-level tokenizer and a "### role" chat template; then each CHAT binary holds the
same six-turn conversation, whose turns run row counts it has not seen (and the last, one it has),
with --prefill-rows=exact --no-warmup unless other flags are given. Prints each turn's rows and
milliseconds and one JSON line per run.

  python3 bench/llm/chat_rows.py --out DIR --run NAME=CHAT[:FLAGS] [--run ...] [--env NAME=K=V]
                                 [--repeat N] [--small]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()


def export(out, small):
    import torch
    import transformers as tf
    import baton_export
    import bench_generate as bg
    from test_llm import HEADERS, _fixed_tokenizer
    hf = tf.PreTrainedTokenizerFast(tokenizer_object=_fixed_tokenizer(320),
                                    bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    hf.chat_template = HEADERS
    torch.manual_seed(0)
    cfg = dict(bg.CFG)
    if small:  # a model of the same family small enough for a CPU, to try this script out
        cfg.update(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    m, how = bg.make_model(cfg, "cpu" if small else "cuda")
    t = time.time()
    baton_export.export_causal_lm(m, out, max_seq_len=2048, device="cpu" if small else "cuda:0",
                                  verbose=False,
                                  prefill_logits="last", fused="gemv", tokenizer=hf)
    print(f"exported in {time.time() - t:.1f} s ({how})", flush=True)


def turns():
    # lines of 60 to 400 characters: each turn's new rows a count the run has not met, but the last
    lens = [400, 130, 260, 75, 330, 130]
    return ["".join(f"{WORDS[(i * 7 + j) % len(WORDS)]} " for j in range(n // 5)).strip()
            for i, n in enumerate(lens)]


def run(name, exe, flags, model, env, gpu):
    cmd = [exe, model, f"--gpu={gpu}", "--max-new-tokens", "4"] + (
        flags.split() if flags else ["--prefill-rows=exact", "--no-warmup"])
    t = time.time()
    r = subprocess.run(cmd, input="\n".join(turns()) + "\n", capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, **env))
    wall = time.time() - t
    rows, seen = [], set()
    for line in r.stderr.splitlines():
        g = re.match(r"turn (\d+): (\d+) prompt tokens, (\d+) from the cache, (\d+) run in "
                     r"([0-9.]+) ms", line)
        if g:
            n = int(g.group(4))
            rows.append({"turn": int(g.group(1)), "rows": n, "ms": float(g.group(5)),
                         "seen": n in seen})
            seen.add(n)
    warm = re.search(r"warmed up in ([0-9.]+) ms", r.stderr)
    print(f"== {name}: rc {r.returncode}, {wall:.1f} s wall, env {env or '-'}, flags "
          f"{flags or 'exact, no warm-up'}" + (f", warm-up {warm.group(1)} ms" if warm else ""))
    for x in rows:
        print(f"  turn {x['turn']}: {x['rows']} rows{' (seen)' if x['seen'] else ''} "
              f"{x['ms']:.2f} ms")
    if r.returncode:
        print(r.stderr[-2000:])
    print("RESULT " + json.dumps({"run": name, "rc": r.returncode, "env": env, "flags": flags,
                                  "turns": rows, "warmup_ms": float(warm.group(1)) if warm
                                  else None, "wall_s": wall}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--run", action="append", default=[], help="NAME=CHAT[:FLAGS]")
    ap.add_argument("--env", action="append", default=[], help="NAME=K=V (for run NAME)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--small", action="store_true", help="a tiny model on the CPU (a smoke test)")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.out, "chat.json")):
        export(a.out, a.small)
    envs = {}
    for e in a.env:
        name, kv = e.split("=", 1)
        k, v = kv.split("=", 1)
        envs.setdefault(name, {})[k] = v
    for _ in range(a.repeat):
        for spec in a.run:
            name, rest = spec.split("=", 1)
            exe, _, flags = rest.partition(":")
            run(name, exe, flags, a.out, envs.get(name, {}), "cpu" if a.small else "cuda")


if __name__ == "__main__":
    main()
