"""export_causal_lm on small Llama-family models built from a config with random weights (nothing
is downloaded): greedy tokens equal transformers' generate(do_sample=False) in f32 on the CPU,
through baton's `generate` example, and through the PyTorch plan interpreter (which needs no
baton build and checks the plans' structure)."""
import json
import os
import re
import subprocess

import pytest
import torch

import baton_export
from baton_export import ExportError
from baton_export.reference import Runner

SEED = int(os.environ.get("BATON_TEST_SEED", "0") or 0)
PROMPT = [1, 5, 7, 11, 3]
NEW = 12
SMALL = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


def _models():
    import transformers as tf

    return {
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**SMALL)),
        "llama-bias-llama3-rope": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
            **SMALL, attention_bias=True, mlp_bias=True, rope_scaling={
                "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
        "smollm-tied": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
            **dict(SMALL, num_key_value_heads=4), tie_word_embeddings=True)),
        "mistral": lambda: tf.MistralForCausalLM(tf.MistralConfig(**SMALL, sliding_window=None)),
        "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(**SMALL)),
        "qwen3": lambda: tf.Qwen3ForCausalLM(tf.Qwen3Config(**SMALL, head_dim=32)),
    }


def _build(kind):
    torch.manual_seed(SEED)
    m = _models()[kind]().eval()
    m.generation_config.eos_token_id = None  # exactly NEW tokens, as generate (the C one) does
    m.generation_config.pad_token_id = 0
    return m


def _hf_tokens(m, prompt=PROMPT, new=NEW):
    with torch.no_grad():
        out = m.generate(torch.tensor([prompt]), max_new_tokens=new, min_new_tokens=new,
                         do_sample=False)
    return out[0, len(prompt):].tolist()


def _exported_llama(tmp_path, caps, generate_exe):
    """The small Llama exported (fused) to tmp_path for the generate binary, or a skip."""
    caps.need("embedding", "rope_cache_update", "swiglu", "gemm_add", "attention", "safetensors")
    if not generate_exe:
        pytest.skip("no generate binary (built with the state-and-dims API)")
    m = _build("llama")
    baton_export.export_causal_lm(m, tmp_path, max_seq_len=32, verbose=False)
    return m


def _generate(exe, d, *args, new=NEW):
    """build/generate on the export in d after PROMPT: (exit code, the ids, stderr)."""
    r = subprocess.run([exe, str(d), "--prompt", ",".join(map(str, PROMPT)), "--max-new-tokens",
                        str(new), *args], capture_output=True, text=True, timeout=120)
    out = r.stdout.strip().splitlines()
    return r.returncode, [int(x) for x in out[-1].split()] if out else [], r.stderr


def _reference_tokens(d, prompt=PROMPT, new=NEW):
    pre, dec = Runner(os.path.join(d, "prefill.json")), Runner(os.path.join(d, "decode.json"))
    T = len(prompt)
    ins = {"input_ids": torch.tensor([prompt]), "cache_position": torch.arange(T)}
    if "last_row" in pre.tensors:
        sel = torch.zeros(1, 1, T)
        sel[0, 0, -1] = 1
        ins["last_row"] = sel.to(torch.float32)
    o = pre.run(ins, {"seq": T})
    toks = [int(o["logits"][0, -1].argmax())]
    dec.state = dict(pre.state)
    for i in range(new - 1):
        o = dec.run({"input_ids": torch.tensor([[toks[-1]]]),
                     "cache_position": torch.tensor([T + i])})
        toks.append(int(o["logits"][0, -1].argmax()))
    return toks


@pytest.mark.parametrize("fused", [True, False, "gemv"], ids=["fused", "unfused", "gemv"])
@pytest.mark.parametrize("kind", list(_models()))
def test_plans_generate_transformers_tokens(tmp_path, kind, fused):
    m = _build(kind)
    paths = baton_export.export_causal_lm(m, tmp_path, max_seq_len=32, verbose=False, fused=fused)
    assert _reference_tokens(str(tmp_path)) == _hf_tokens(m)
    dec = json.load(open(paths["decode"]))
    targets = [s.get("kernel") or s.get("delegate") for s in dec["steps"]]
    nl = m.config.num_hidden_layers
    qknorm = kind == "qwen3"
    biased = kind.startswith("llama-bias")  # o_proj/down_proj biases: gemm, add bias, add
    gemv = fused == "gemv"  # the norms and SwiGLU folded into the GEMMs after them, unbiased
    qkv_gemv = gemv and not qknorm and not biased and kind != "qwen2"  # qwen2: qkv bias
    mlp_gemv = gemv and not biased
    assert targets.count("rms_norm_gemm") == ((qkv_gemv + mlp_gemv) * nl + 1 if gemv else 0)
    assert targets.count("swiglu_gemm_add") == (nl if mlp_gemv else 0)
    assert targets.count("swiglu") == (nl if fused and not mlp_gemv else 0)
    assert targets.count("silu_mul") == (0 if fused else nl)
    assert targets.count("rope_cache_update") == (nl if fused and not qknorm else 0)
    assert targets.count("rope") == (0 if fused and not qknorm else 2 * nl)
    assert targets.count("gemm_add") == (0 if not fused or biased else nl if gemv else 2 * nl)
    if gemv:  # on the plan's device (cuda:0 here), and the prefill plan is the fused one
        assert {x["device"] for x in dec["steps"]
                if x.get("kernel") in ("rms_norm_gemm", "swiglu_gemm_add")} == {"cuda:0"}
        ptargets = [x.get("kernel") or x.get("delegate")
                    for x in json.load(open(paths["prefill"]))["steps"]]
        assert "rms_norm_gemm" not in ptargets and "swiglu_gemm_add" not in ptargets
    t = {x["name"]: x for x in dec["tensors"]}
    assert t["input_ids"]["shape"] == [1, 1] and t["cache_position"]["shape"] == [1]
    assert t["logits"]["shape"] == [1, 1, 97] and t["logits"]["role"] == "output"
    Hkv = m.config.num_key_value_heads
    Dh = getattr(m.config, "head_dim", None) or 16
    assert t["k_cache.0"] == {"name": "k_cache.0", "dtype": "f32", "shape": [32, Hkv * Dh],
                              "role": "state"}
    pre = json.load(open(paths["prefill"]))
    assert pre["dims"] == {"seq": {"min": 1, "max": 32}}
    tp = {x["name"]: x for x in pre["tensors"]}
    assert tp["input_ids"]["shape"] == [1, "seq"] and tp["logits"]["shape"] == [1, "seq", 97]


def test_prefill_of_the_last_row_only_gives_the_same_tokens(tmp_path):
    m = _build("llama")
    paths = baton_export.export_causal_lm(m, tmp_path, max_seq_len=32, verbose=False,
                                          prefill_logits="last")
    pre = {t["name"]: t for t in json.load(open(paths["prefill"]))["tensors"]}
    assert pre["logits"]["shape"] == [1, 1, 97]
    assert pre["last_row"] == {"name": "last_row", "dtype": "f32", "shape": [1, 1, "seq"],
                               "role": "input"}
    assert _reference_tokens(str(tmp_path)) == _hf_tokens(m)


@pytest.mark.parametrize("kind,last,fused", [
    ("llama", False, True), ("qwen2", False, True), ("qwen3", False, True),
    ("smollm-tied", False, True), ("llama", True, True), ("llama-bias-llama3-rope", False, True),
    ("llama", False, False), ("qwen2", False, False), ("qwen3", False, False),
    ("llama", False, "gemv"), ("qwen2", False, "gemv"), ("smollm-tied", True, "gemv")])
def test_generate_example_matches_transformers(tmp_path, kind, last, fused, caps, generate_exe):
    caps.need("embedding", "rope", "kv_cache_update", "attention", "silu_mul", "safetensors",
              *(["view_of"] if kind == "qwen3" or last else []),
              *(["swiglu", "rope_cache_update", "gemm_add"] if fused else []),
              *(["rms_norm_gemm", "swiglu_gemm_add"] if fused == "gemv" else []))
    if not generate_exe:
        pytest.skip("no generate binary (built with the state-and-dims API)")
    m = _build(kind)
    baton_export.export_causal_lm(m, tmp_path, max_seq_len=32, verbose=False,
                                  prefill_logits="last" if last else "all", fused=fused)
    r = subprocess.run([generate_exe, str(tmp_path), "--prompt", ",".join(map(str, PROMPT)),
                        "--max-new-tokens", str(NEW), "--gpu=cpu"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = [int(x) for x in r.stdout.strip().splitlines()[-1].split()]
    assert got == _hf_tokens(m)
    assert "prefill:" in r.stderr and "decode:" in r.stderr


def test_generate_example_samples_reproducibly(tmp_path, caps, generate_exe):
    caps.need("embedding", "rope", "kv_cache_update", "attention", "silu_mul", "safetensors",
              "sample")
    if not generate_exe:
        pytest.skip("no generate binary (built with the state-and-dims API)")
    baton_export.export_causal_lm(_build("llama"), tmp_path, max_seq_len=32, verbose=False)

    def run(seed):
        r = subprocess.run([generate_exe, str(tmp_path), "--prompt", "1,2,3", "--max-new-tokens",
                            "10", "--gpu=cpu", "--temperature", "1.5", "--top-k", "20",
                            "--top-p", "0.95", "--seed", str(seed)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip().splitlines()[-1]

    a, b, c = run(1), run(1), run(2)
    assert a == b and len(a.split()) == 10
    assert a != c  # 10 tokens from 20 candidates each: equal by chance with negligible odds


def test_generate_example_stops_where_transformers_does(tmp_path, caps, generate_exe):
    # --stop ID,...: the ids end at the first of them, printed, as transformers' generate with
    # eos_token_id ends; --stop eos takes them from config.json's eos_token_id
    m = _exported_llama(tmp_path, caps, generate_exe)
    full = _hf_tokens(m)

    def run(*args):
        return _generate(generate_exe, tmp_path, "--gpu=cpu", *args)

    def hf(ids):
        with torch.no_grad():
            out = m.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False,
                             eos_token_id=list(ids), pad_token_id=0)
        return out[0, len(PROMPT):].tolist()

    # the last id the greedy run draws for the first time (so that decode runs come before it),
    # and an id it never draws
    new = [i for i in range(1, NEW) if full[i] not in full[:i]]
    k = new[-1] if new else 0
    unused = next(t for t in range(SMALL["vocab_size"]) if t not in full)
    for ids in ([full[k]], [unused, full[k]], [full[0]], [unused]):
        rc, got, err = run("--stop", ",".join(map(str, ids)))
        assert rc == 0, err
        assert got == hf(ids), (ids, got, err)
    rc, got, err = run("--stop", str(full[k]))
    assert got == full[:k + 1] and (k == NEW - 1 or "stopped at id" in err), err

    cfg_path = tmp_path / "config.json"
    cfg = json.loads(cfg_path.read_text())
    assert cfg["eos_token_id"] == m.config.eos_token_id  # no generation config's: the config's
    m.generation_config.eos_token_id = [full[k], unused]  # transformers stops at these
    baton_export.export_causal_lm(m, tmp_path / "g", max_seq_len=32, verbose=False)
    assert json.loads((tmp_path / "g" / "config.json").read_text())["eos_token_id"] == [
        full[k], unused]
    m.generation_config.eos_token_id = None

    def with_eos(value):
        cfg["eos_token_id"] = value
        cfg_path.write_text(json.dumps(cfg, indent=1))
        return run("--stop", "eos")

    rc, got, err = with_eos([unused, full[k]])
    assert rc == 0 and got == full[:k + 1], err
    rc, got, err = with_eos(full[0])
    assert rc == 0 and got == full[:1], err
    for value, says in ((None, "eos_token_id is null"), ("two", "is not an id or a list"),
                        ([], "empty list"), (SMALL["vocab_size"], "outside the vocabulary")):
        rc, _, err = with_eos(value)
        assert rc != 0 and says in err, (value, err)
        assert "config.json" in err, err
    cfg_path.unlink()
    rc, _, err = run("--stop", "eos")
    assert rc != 0 and "cannot open" in err and "--stop ID,ID" in err, err
    for bad in ("1,,2", "1,", "-3", "x"):
        rc, _, err = run("--stop", bad)
        assert rc == 2 and "--stop takes token ids" in err, (bad, err)


def test_queued_tokens_stop_where_waited_ones_do(tmp_path, caps, generate_exe):
    # --queue-tokens (greedy next_token on CUDA): the host sees the tokens at its waits, every 64;
    # the ids and a --stop inside or past the first stretch end where the waited decode ends
    caps.need("embedding", "rope_cache_update", "swiglu", "gemm_add", "attention", "safetensors")
    if not generate_exe:
        pytest.skip("no generate binary (built with the state-and-dims API)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: --queue-tokens queues the runs on CUDA only")
    n = 150
    baton_export.export_causal_lm(_build("llama"), tmp_path, max_seq_len=len(PROMPT) + n,
                                  verbose=False, decode_outputs=("next_token",))

    def run(*args):
        rc, ids, err = _generate(generate_exe, tmp_path, "--gpu=cuda", "--mode=graph", *args, new=n)
        assert rc == 0, err
        return ids, err

    full, _ = run()
    queued, err = run("--queue-tokens")
    assert queued == full
    assert "per token 0.0" in err, err  # a wait per 64 tokens, not one a token
    firsts = [i for i in range(2, n) if full[i] not in full[:i]]
    for k in sorted({firsts[0], firsts[-1]} if firsts else set()):
        for extra in ((), ("--queue-tokens",)):
            got, err = run("--stop", str(full[k]), *extra)
            assert got == full[:k + 1], (k, extra, err)


def test_cli_exports_a_saved_model_that_generates_transformers_tokens(tmp_path, caps,
                                                                     generate_exe):
    # python -m baton_export causal-lm: a save_pretrained directory, read from disk only
    import sys

    caps.need("embedding", "rms_norm_gemm", "swiglu_gemm_add", "rope_cache_update", "attention",
              "safetensors")
    import transformers as tf

    m = _build("qwen2")
    m.save_pretrained(tmp_path / "hf")
    # the tokenizer's files copied beside the plans, its chat template compiled into chat.json
    hf = tf.PreTrainedTokenizerFast(tokenizer_object=_fixed_tokenizer(320),
                                    bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    hf.chat_template = ("{% for m in messages %}<|begin_of_text|>{{ m['role'] }}: "
                        "{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}"
                        "assistant: {% endif %}")
    hf.save_pretrained(tmp_path / "hf")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "baton_export", "causal-lm", *args],
                              capture_output=True, text=True, timeout=300)

    r = cli(str(tmp_path / "hf"), "-o", str(tmp_path / "out"), "--max-seq-len", "32",
            "--fused", "gemv", "--decode-outputs", "next_token", "--prefill-logits", "last")
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and (tmp_path / "out" / "decode.json").exists()
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == \
        (tmp_path / "hf" / "tokenizer.json").read_bytes()
    assert "generation_config.json" in r.stdout  # save_pretrained writes one
    assert "compiled" in r.stdout and "chat.json" in r.stdout, r.stdout
    chat = json.loads((tmp_path / "out" / "chat.json").read_text())
    assert chat["roles"]["user"] == {"prefix": "<|begin_of_text|>user: ", "suffix": "\n",
                                     "trim": False} and chat["generation_prompt"] == "assistant: "
    # the template alone: python -m baton_export chat
    r = subprocess.run([sys.executable, "-m", "baton_export", "chat", str(tmp_path / "hf"), "-o",
                        str(tmp_path / "c.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "wrote" in r.stdout, r.stderr
    assert json.loads((tmp_path / "c.json").read_text()) == chat
    r = subprocess.run([sys.executable, "-m", "baton_export", "chat", str(tmp_path / "nothing"),
                        "-o", str(tmp_path / "d.json")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and "cannot load its tokenizer" in r.stderr, r.stderr
    dec = json.loads((tmp_path / "out" / "decode.json").read_text())
    assert [t["name"] for t in dec["tensors"] if t.get("role") == "output"] == ["next_token"]
    if generate_exe:
        rc, ids, err = _generate(generate_exe, tmp_path / "out", "--gpu=cpu")
        assert rc == 0, err
        assert ids == _hf_tokens(m)
    r = cli(str(tmp_path / "nothing"), "-o", str(tmp_path / "o2"), "--max-seq-len", "32")
    assert r.returncode == 1 and "has no config.json" in r.stderr, r.stderr

    tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50)) \
        .save_pretrained(tmp_path / "gpt2")
    r = cli(str(tmp_path / "gpt2"), "-o", str(tmp_path / "o3"), "--max-seq-len", "16")
    assert r.returncode == 1 and "model_type 'gpt2'" in r.stderr, r.stderr


def test_sampling_on_the_device_draws_the_hosts_tokens(tmp_path, caps, generate_exe):
    # --sample-on=device (here the test GPU device) binds the decode's logits output and the
    # sampler's input to one buffer on the GPU, and draws there; the sampler is one definition on
    # every device, so the tokens are the host sampler's over the same logits
    caps.need("embedding", "rope_cache_update", "swiglu", "gemm_add", "attention", "safetensors",
              "sample")
    if not generate_exe:
        pytest.skip("no generate binary (built with the state-and-dims API)")
    baton_export.export_causal_lm(_build("llama"), tmp_path, max_seq_len=32, verbose=False)

    def run(gpu, where):
        r = subprocess.run([generate_exe, str(tmp_path), "--prompt", "1,2,3", "--max-new-tokens",
                            "10", f"--gpu={gpu}", "--mode=graph", "--temperature", "1.5",
                            "--top-k", "20", "--top-p", "0.95", "--seed", "3",
                            f"--sample-on={where}"],
                           capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "", r.stderr

    rc, host, err = run("sim", "host")
    assert rc == 0 and "sampling: on the host" in err, err
    rc, dev, err = run("sim", "auto")  # auto: the decode's GPU
    assert rc == 0 and "sampling: on the decode's GPU" in err, err
    assert dev == host and len(dev.split()) == 10
    rc, cpu, err = run("cpu", "auto")
    assert rc == 0 and "sampling: on the host" in err and cpu == host, err
    rc, _, err = run("cpu", "device")
    assert rc != 0 and "--sample-on=device: the decode runs on no GPU" in err, err


def test_unsupported_architectures_are_refused_by_name(tmp_path):
    import transformers as tf

    m = tf.LlamaForCausalLM(tf.LlamaConfig(**SMALL, hidden_act="gelu"))
    with pytest.raises(ExportError, match="hidden_act 'gelu'"):
        baton_export.export_causal_lm(m, tmp_path, max_seq_len=16)
    m = tf.MistralForCausalLM(tf.MistralConfig(**SMALL, sliding_window=8))
    with pytest.raises(ExportError, match="sliding_window 8"):
        baton_export.export_causal_lm(m, tmp_path, max_seq_len=16)
    gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    with pytest.raises(ExportError, match="model_type 'gpt2'"):
        baton_export.export_causal_lm(gpt2, tmp_path, max_seq_len=16)


def test_weights_file_holds_hf_names_once(tmp_path):
    from safetensors.torch import load_file

    m = _build("smollm-tied")
    paths = baton_export.export_causal_lm(m, tmp_path, max_seq_len=16, dtype=torch.bfloat16,
                                          verbose=False)
    w = load_file(paths["weights"])
    assert "lm_head.weight" not in w  # tied: the plans read model.embed_tokens.weight twice
    assert w["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert w["model.rotary_emb.inv_freq"].dtype == torch.float32
    sd = {k for k in m.state_dict() if k != "lm_head.weight"}
    fused = {k for k in sd if any(f"{x}_proj" in k for x in ("q", "k", "v", "gate", "up"))}
    new = {f"model.layers.{i}.{n}.weight" for i in range(m.config.num_hidden_layers)
           for n in ("self_attn.qkv_proj", "mlp.gate_up_proj")}
    assert set(w) == (sd - fused) | new | {"model.rotary_emb.inv_freq"}
    sa = m.model.layers[1].self_attn
    want = torch.cat([sa.q_proj.weight, sa.k_proj.weight, sa.v_proj.weight]).to(torch.bfloat16)
    assert torch.equal(w["model.layers.1.self_attn.qkv_proj.weight"], want)
    mlp = m.model.layers[0].mlp
    want = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).to(torch.bfloat16)
    assert torch.equal(w["model.layers.0.mlp.gate_up_proj.weight"], want)
    baton_export.export_causal_lm(m, tmp_path / "u", max_seq_len=16, verbose=False, fused=False)
    assert set(load_file(str(tmp_path / "u" / "weights.safetensors"))) == sd | {
        "model.rotary_emb.inv_freq"}


def test_graph_decode_replays_one_graph_per_token_with_one_wait(tmp_path, caps, generate_exe):
    # the test GPU device (sim) captures graphs as CUDA does: after the first decode run a token
    # is one graph launch and one host wait (the logits), with no capture or graph update
    m = _exported_llama(tmp_path, caps, generate_exe)
    r = subprocess.run([generate_exe, str(tmp_path), "--prompt", ",".join(map(str, PROMPT)),
                        "--max-new-tokens", str(NEW), "--gpu=sim", "--mode=graph"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.strip().splitlines()[-1].split()] == _hf_tokens(m)
    assert "graph mode captures there: 1 captures" in r.stderr, r.stderr
    assert "per token 1.00 host waits, 1.00 graph launches, 0.00 kernel launches" in r.stderr
    assert "after the first run 0 captures, 0 graph updates\n" in r.stderr, r.stderr


@pytest.mark.parametrize("outputs", [("next_token",), ("logits", "next_token")])
def test_greedy_next_token_on_the_device_gives_transformers_tokens(tmp_path, caps, generate_exe,
                                                                   outputs):
    # decode_outputs=("next_token",): the decode plan ends in an argmax on its device and
    # generate reads 8 bytes a token; on the test GPU device (sim) and on the CPU alike
    caps.need("embedding", "rope_cache_update", "swiglu", "gemm_add", "attention", "safetensors")
    if not generate_exe:
        pytest.skip("no generate binary (built with the state-and-dims API)")
    m = _build("llama")
    paths = baton_export.export_causal_lm(m, tmp_path, max_seq_len=32, verbose=False,
                                          decode_outputs=outputs)
    dec = {t["name"]: t for t in json.load(open(paths["decode"]))["tensors"]}
    assert dec["next_token"] == {"name": "next_token", "dtype": "i64", "shape": [1, 1],
                                 "role": "output"}
    assert dec["logits"].get("role") == ("output" if "logits" in outputs else None)
    for gpu in ("cpu", "sim"):
        r = subprocess.run([generate_exe, str(tmp_path), "--prompt", ",".join(map(str, PROMPT)),
                            "--max-new-tokens", str(NEW), f"--gpu={gpu}", "--mode=graph"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert [int(x) for x in r.stdout.strip().splitlines()[-1].split()] == _hf_tokens(m), gpu
        if gpu == "sim":  # the argmax joins the graph: still one wait a token
            assert "per token 1.00 host waits, 1.00 graph launches" in r.stderr, r.stderr
    if "logits" not in outputs:  # sampling needs the logits on the host: refused by name
        r = subprocess.run([generate_exe, str(tmp_path), "--prompt", "1,2", "--max-new-tokens",
                            "3", "--gpu=cpu", "--temperature", "1.0"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "outputs no logits, only the greedy next_token" in r.stderr
    with pytest.raises(baton_export.ExportError, match="decode_outputs"):
        baton_export.export_causal_lm(m, tmp_path / "bad", max_seq_len=32, verbose=False,
                                      decode_outputs=("probs",))


def _fixed_tokenizer(vocab):
    """A byte-level BPE configured as Llama 3's, with a fixed vocabulary (training's ties would make
    a different prompt each run): the 256 byte-level characters after two special tokens, then the
    merges that spell a few words."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import Regex, decoders, models, pre_tokenizers, processors

    chars = sorted(pre_tokenizers.ByteLevel.alphabet())
    table = {"<|begin_of_text|>": 0, "<|end_of_text|>": 1}
    table.update({c: 2 + i for i, c in enumerate(chars)})
    merges = []
    for word in ("Hello", "Ġworld", "Ġit", "'s", "Ġtest"):
        for k in range(2, len(word) + 1):
            merges.append((word[:k - 1], word[k - 1]))
            table.setdefault(word[:k], len(table))
    tok = tokenizers.Tokenizer(models.BPE(vocab=table, merges=merges, ignore_merges=True))
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])
    assert tok.get_vocab_size() <= vocab
    return tok


def _chat_model(template):
    """(a transformers tokenizer with the fixed vocabulary and this chat template, a small Llama of
    its vocabulary with random weights and no eos)"""
    import transformers as tf

    vocab = 320
    hf = tf.PreTrainedTokenizerFast(tokenizer_object=_fixed_tokenizer(vocab),
                                    bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    hf.chat_template = template
    torch.manual_seed(SEED)
    m = tf.LlamaForCausalLM(tf.LlamaConfig(**dict(SMALL, vocab_size=vocab))).eval()
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = vocab - 1  # in no prompt: generate masks a prompt's pad ids
    return hf, m


# "### role" headers, contents trimmed, each message ended by the eos token
HEADERS = ("{{ bos_token }}{% for m in messages %}### {{ m['role'] }}\n{{ m['content'] | trim }}"
           "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}### assistant\n{% endif %}")


def test_generate_takes_and_gives_text_with_the_models_tokenizer(tmp_path, caps, generate_exe):
    # generate --text: the prompt encoded with DIR/tokenizer.json (a byte-level BPE configured as
    # Llama 3's) as transformers' tokenizer(text) encodes it, the model's greedy
    # tokens, and their text as decode(ids, skip_special_tokens=True) gives it
    caps.need("embedding", "rope_cache_update", "swiglu", "gemm_add", "attention", "safetensors")
    if not generate_exe:
        pytest.skip("no generate binary (built with the state-and-dims API)")
    vocab = 320
    tok = _fixed_tokenizer(vocab)
    torch.manual_seed(SEED)
    import transformers as tf
    m = tf.LlamaForCausalLM(tf.LlamaConfig(**dict(SMALL, vocab_size=vocab))).eval()
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = vocab - 1  # in no prompt: generate masks a prompt's pad ids
    paths = baton_export.export_causal_lm(m, tmp_path, max_seq_len=64, verbose=False,
                                          tokenizer=tok)
    assert paths["tokenizer"] == str(tmp_path / "tokenizer.json")
    with pytest.raises(ExportError, match="no tokenizer.json to write"):
        baton_export.export_causal_lm(m, tmp_path / "x", max_seq_len=64, verbose=False,
                                      tokenizer=object())
    small = tf.LlamaForCausalLM(tf.LlamaConfig(**dict(SMALL, vocab_size=100))).eval()
    with pytest.raises(ExportError, match="not this model's tokenizer"):
        baton_export.export_causal_lm(small, tmp_path / "y", max_seq_len=64, verbose=False,
                                      tokenizer=tok)
    text = "Hello world, it's 2026 — ça va?"
    prompt = tok.encode(text).ids
    want = _hf_tokens(m, prompt)
    r = subprocess.run([generate_exe, str(tmp_path), "--text", text, "--max-new-tokens", str(NEW),
                        "--gpu=cpu"], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    body, ids = r.stdout.decode("utf-8")[:-1].rsplit("\n", 1)  # the text, then the ids' line
    assert [int(x) for x in ids.split()] == want
    assert body == tok.decode(want, skip_special_tokens=True)
    # ids past the tokenizer's vocabulary (the model's is larger: 320 against what the corpus
    # trained) are left out of the text, as decode leaves them out, and said so
    missing = sum(t >= tok.get_vocab_size() for t in want)
    assert ("have no token in tokenizer.json" in r.stderr.decode()) == (missing > 0)
    # --stream prints the same bytes token by token (a byte token's part of a character held back
    # until the character is whole)
    s = subprocess.run([generate_exe, str(tmp_path), "--text", text, "--max-new-tokens", str(NEW),
                        "--gpu=cpu", "--stream"], capture_output=True, timeout=120)
    assert s.returncode == 0 and s.stdout == r.stdout, (s.stdout, r.stdout)
    # --no-special: a chat template written out, its special tokens split out of the text and no
    # BOS added, as tokenizer(text, add_special_tokens=False)
    chat = "<|begin_of_text|>Hello<|end_of_text|> world"
    c = subprocess.run([generate_exe, str(tmp_path), "--text", chat, "--no-special",
                        "--max-new-tokens", "4", "--gpu=cpu"], capture_output=True, timeout=120)
    assert c.returncode == 0, c.stderr.decode()
    chat_ids = tok.encode(chat, add_special_tokens=False).ids
    assert chat_ids[0] == 0 and chat_ids.count(0) == 1 and 1 in chat_ids
    assert [int(x) for x in c.stdout.decode().split("\n")[-2].split()] == _hf_tokens(m, chat_ids, 4)
    # --print-text with the same prompt as ids; no tokenizer.json: refused, naming the file
    rc, got, err = _generate(generate_exe, tmp_path, "--print-text", "--gpu=cpu")
    assert rc == 0, err
    (tmp_path / "tokenizer.json").unlink()
    r = subprocess.run([generate_exe, str(tmp_path), "--text", text, "--max-new-tokens", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "tokenizer.json" in r.stderr, r.stderr


def test_generate_chats_through_the_models_chat_template(tmp_path, caps, generate_exe):
    # generate --chat [--system]: the conversation through DIR/chat.json, which the export compiled
    # from the transformers tokenizer's chat template, gives the ids of
    # apply_chat_template(add_generation_prompt=True, tokenize=True) and the model's greedy tokens
    # after them; a template that does not compile leaves no chat.json and a warning that says why
    caps.need("embedding", "rope_cache_update", "swiglu", "gemm_add", "attention", "safetensors")
    if not generate_exe:
        pytest.skip("no generate binary (built with the state-and-dims API)")
    # the headers' template, with a default system message where none is given
    hf, m = _chat_model(HEADERS.replace("{% for m", "{% if messages[0]['role'] != 'system' %}"
                                        "### system\nBe kind.{{ eos_token }}\n{% endif %}"
                                        "{% for m", 1))
    paths = baton_export.export_causal_lm(m, tmp_path, max_seq_len=96, verbose=False,
                                          tokenizer=hf)
    assert paths["chat"] == str(tmp_path / "chat.json")
    for system in (None, "  Answer in French. "):
        conv = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": "user", "content": "Hello world, it's a test"}]
        prompt = list(hf.apply_chat_template(conv, tokenize=True,
                                             add_generation_prompt=True)["input_ids"])
        args = [generate_exe, str(tmp_path), "--chat", conv[-1]["content"], "--max-new-tokens",
                str(NEW), "--gpu=cpu"] + (["--system", system] if system else [])
        r = subprocess.run(args, capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        body, ids = r.stdout.decode("utf-8")[:-1].rsplit("\n", 1)
        want = _hf_tokens(m, prompt)
        assert [int(x) for x in ids.split()] == want, system
        assert body == hf.decode(want, skip_special_tokens=True)
    # --system needs --chat; --chat with --text is one prompt too many
    for bad, says in ((["--system", "x", "--text", "hi"], "--system is the system message"),
                      (["--chat", "hi", "--text", "hi"], "three ways to give the prompt")):
        r = subprocess.run([generate_exe, str(tmp_path), "--max-new-tokens", "2", *bad],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and says in r.stderr, r.stderr
    # a template that moves content around: no chat.json (an old one removed), a warning, and
    # generate --chat refused naming the file and the way out
    hf.chat_template = "{% for m in messages %}{{ m['content'] }}{{ m['content'] }}{% endfor %}"
    with pytest.warns(UserWarning, match="chat.json not written: the template does not write"):
        paths = baton_export.export_causal_lm(m, tmp_path, max_seq_len=96, verbose=False,
                                              tokenizer=hf)
    assert "chat" not in paths and not (tmp_path / "chat.json").exists()
    r = subprocess.run([generate_exe, str(tmp_path), "--chat", "hi", "--max-new-tokens", "2",
                        "--gpu=cpu"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "chat.json" in r.stderr and "--text TEXT --no-special" in \
        r.stderr, r.stderr


def _chat_ids(stdout):
    """Each reply's ids from build/chat --print-ids's output (its "ids: ..." lines)"""
    return [[int(x) for x in line[4:].split()] for line in stdout.decode("utf-8").split("\n")
            if line.startswith("ids: ")]


def test_chat_keeps_the_cache_between_turns(tmp_path, caps, generate_exe):
    # build/chat: user messages on stdin, one a line; each turn's reply ids are transformers'
    # greedy generate on apply_chat_template of the conversation so far (the replies joined as
    # their text), while only the tokens past what the KV cache holds run again
    caps.need("embedding", "rope_cache_update", "swiglu", "gemm_add", "attention", "safetensors")
    chat_exe = generate_exe and os.path.join(os.path.dirname(generate_exe), "chat")
    if not chat_exe or not os.access(chat_exe, os.X_OK):
        pytest.skip("no chat binary beside generate")
    hf, m = _chat_model(HEADERS)
    vocab = 320
    baton_export.export_causal_lm(m, tmp_path, max_seq_len=256, verbose=False, tokenizer=hf,
                                  decode_outputs=("logits", "next_token"), fused="gemv")
    baton_export.export_causal_lm(m, tmp_path / "last", max_seq_len=256, verbose=False,
                                  tokenizer=hf, prefill_logits="last")
    users = ["Hello world, it's a test", "  it's Hello again ", "test test world"]
    new = 10

    def reference(stops):
        conv, out = [{"role": "system", "content": "Be kind."}], []
        for u in users:
            conv.append({"role": "user", "content": u})
            prompt = list(hf.apply_chat_template(conv, tokenize=True,
                                                 add_generation_prompt=True)["input_ids"])
            with torch.no_grad():
                ids = m.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False,
                                 eos_token_id=stops, pad_token_id=vocab - 1)[0, len(prompt):]
            ids = ids.tolist()
            out.append(ids)
            kept = ids[:-1] if ids[-1] in stops else ids
            conv.append({"role": "assistant", "content": hf.decode(kept,
                                                                   skip_special_tokens=True)})
        return out

    # a token the model draws early in the first reply stops the replies too, so that they end
    # at different lengths and at the end of turn as well as at the token budget
    extra = reference([1])[0][2]
    want = reference([1, extra])
    # sim: the plans' GPU steps on the test device, in graph mode; the prefill padded to a power
    # of two of rows (CUDA's default), or not (elsewhere); its logits all rows' or the last's (a
    # one-hot last_row input, whose gemm contracts over the run's rows)
    for d, gpu, flags in ((tmp_path, "cpu", []), (tmp_path, "sim", ["--prefill-rows=pow2"]),
                          (tmp_path / "last", "cpu", ["--prefill-rows=pow2"]),
                          (tmp_path / "last", "cpu", ["--prefill-rows=exact"])):
        r = subprocess.run([chat_exe, str(d), "--system", "Be kind.", "--max-new-tokens",
                            str(new), "--stop", str(extra), "--print-ids", f"--gpu={gpu}",
                            "--mode=graph", *flags], input=("\n".join(users) + "\n").encode(),
                           capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        assert _chat_ids(r.stdout) == want, (d, gpu, flags)
        # each reply's text, then its ids (a text may hold newlines: the whole output compared)
        assert r.stdout.decode("utf-8") == "".join(
            hf.decode(w[:-1] if w[-1] in (1, extra) else w, skip_special_tokens=True) +
            "\nids: " + " ".join(map(str, w)) + "\n" for w in want)
        err = r.stderr.decode()
        reused = [int(x) for x in re.findall(r"(\d+) from the cache", err)]
        assert len(reused) == 3 and reused[0] == 0 and all(x > 0 for x in reused[1:]), err
    # a message that with its reply cannot fit max_seq_len ends the chat with the reason
    r = subprocess.run([chat_exe, str(tmp_path), "--max-new-tokens", "240", "--gpu=cpu"],
                       input=b"hi\n", capture_output=True, timeout=120)
    assert r.returncode == 1 and "do not fit the plans' max_seq_len 256" in r.stderr.decode()


def test_chat_leaves_out_the_oldest_exchanges_when_the_cache_is_full(tmp_path, caps,
                                                                      generate_exe):
    # a conversation past the cache loses its oldest user message and reply (the system message
    # stays), each turn's ids still transformers' on the conversation so shortened
    caps.need("embedding", "rope_cache_update", "swiglu", "gemm_add", "attention", "safetensors")
    chat_exe = generate_exe and os.path.join(os.path.dirname(generate_exe), "chat")
    if not chat_exe or not os.access(chat_exe, os.X_OK):
        pytest.skip("no chat binary beside generate")
    hf, m = _chat_model(HEADERS)
    max_seq, new = 96, 8
    baton_export.export_causal_lm(m, tmp_path, max_seq_len=max_seq, verbose=False, tokenizer=hf)
    users = ["Hello world", "it's a test", "Hello again", "test world", "it's Hello"]
    conv, want, dropped = [{"role": "system", "content": "Be kind."}], [], 0
    for u in users:
        conv.append({"role": "user", "content": u})
        while True:
            prompt = list(hf.apply_chat_template(conv, tokenize=True,
                                                 add_generation_prompt=True)["input_ids"])
            if len(prompt) + new <= max_seq:
                break
            del conv[1:3]
            dropped += 1
        with torch.no_grad():
            ids = m.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False,
                             eos_token_id=[1], pad_token_id=319)[0, len(prompt):].tolist()
        want.append(ids)
        conv.append({"role": "assistant", "content": hf.decode(
            ids[:-1] if ids[-1] == 1 else ids, skip_special_tokens=True)})
    assert dropped >= 2
    r = subprocess.run([chat_exe, str(tmp_path), "--system", "Be kind.", "--max-new-tokens",
                        str(new), "--print-ids", "--gpu=cpu"],
                       input=("\n".join(users) + "\n").encode(), capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    assert _chat_ids(r.stdout) == want
    assert r.stderr.decode().count("the oldest exchange left out") == dropped


def test_chat_samples_as_generate_does(tmp_path, caps, generate_exe):
    # build/chat --temperature: each token drawn by the sample kernel with the step counted over
    # the conversation, so the first turn's reply is generate --chat's with the same settings, and
    # a seed gives one conversation
    caps.need("embedding", "rope_cache_update", "swiglu", "gemm_add", "attention", "safetensors",
              "sample")
    chat_exe = generate_exe and os.path.join(os.path.dirname(generate_exe), "chat")
    if not chat_exe or not os.access(chat_exe, os.X_OK):
        pytest.skip("no chat binary beside generate")
    hf, m = _chat_model(HEADERS)
    baton_export.export_causal_lm(m, tmp_path, max_seq_len=128, verbose=False, tokenizer=hf)
    sampling = ["--temperature", "0.9", "--top-k", "40", "--top-p", "0.95", "--seed", "7"]
    g = subprocess.run([generate_exe, str(tmp_path), "--chat", "Hello world", "--system", "Hi",
                        "--max-new-tokens", "12", "--stop", "1", "--gpu=cpu", *sampling],
                       capture_output=True, text=True, timeout=120)
    assert g.returncode == 0, g.stderr
    want = [int(x) for x in g.stdout.strip().splitlines()[-1].split()]

    def chat(*extra, gpu="cpu"):
        r = subprocess.run([chat_exe, str(tmp_path), "--system", "Hi", "--max-new-tokens", "12",
                            "--print-ids", f"--gpu={gpu}", *extra],
                           input=b"Hello world\nit's a test\n", capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        return _chat_ids(r.stdout)

    a, b = chat(*sampling), chat(*sampling)
    assert a[0] == want
    assert a == b and len(a) == 2, (a, b)  # the same seed, the same conversation
    assert chat(*sampling, gpu="sim") == a  # drawn on the decode's (test) GPU: the same tokens
    assert chat("--temperature", "0.9", "--seed", "8") != a
    r = subprocess.run([chat_exe, str(tmp_path), "--top-p", "2"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "--top-p takes a number in [0, 1]" in r.stderr, r.stderr
