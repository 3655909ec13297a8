"""export_1b.py: a Llama-3.2-1B-shaped causal LM (vocab 128256, hidden 2048, 16 layers, 32 heads,
8 KV heads, intermediate 8192, tied embeddings, Llama 3 rope scaling) with seeded random weights,
exported by baton_export.export_causal_lm to DIR; prints the export's wall time (the weights are
built on the GPU when there is one, then exported from the CPU, as a user's checkpoint would be).

    PYTHONPATH=python python3 bench/llm/export_1b.py DIR [--max-seq-len N] [--dtype bf16]
Lines starting with RESULT are for scripts/gpu-llm.sh.
"""
import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import baton_export


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--max-seq-len", type=int, default=1536)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                      num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                      head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
                      rope_theta=500000.0, tie_word_embeddings=True,
                      rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192})
    torch.manual_seed(0)
    t0 = time.perf_counter()
    torch.set_default_dtype(dt)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(dev):
        model = LlamaForCausalLM(cfg)
    model = model.to("cpu").eval()
    torch.set_default_dtype(torch.float32)
    t1 = time.perf_counter()
    print(f"model built in {t1 - t0:.1f} s")
    baton_export.export_causal_lm(model, a.out, max_seq_len=a.max_seq_len, device=a.device)
    t2 = time.perf_counter()
    print(f"export_causal_lm: {t2 - t1:.1f} s")
    print(f"RESULT export_1b seconds {t2 - t1:.2f}")


if __name__ == "__main__":
    main()
