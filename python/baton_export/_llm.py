"""export_causal_lm(): the prefill and decode plans of a Hugging Face Llama-family causal LM, built
from the model's config and state_dict with a Llama template (as gpt-fast and llama.cpp's
converters do) rather than by tracing generate(). Plan shape: docs/generate.md."""
import json
import os
import warnings

import torch

from ._plan import ExportError, Plan, dtype_name, write_plan, write_weights

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "smollm3")


def _cfg(cfg, name, default=None):
    v = getattr(cfg, name, None)
    return default if v is None else v


def _layer_prefix(sd):
    for p in ("model.layers.", "layers."):
        if any(k.startswith(p) for k in sd):
            return p[:-len("layers.")]
    raise ExportError("state_dict has no model.layers.*: not a Llama-family causal LM")


def _check_config(model, cfg, max_seq_len):
    mt = getattr(cfg, "model_type", "?")
    if mt not in SUPPORTED:
        raise ExportError(f"model_type '{mt}' is not one export_causal_lm knows; it supports "
                          f"{', '.join(SUPPORTED)} (Llama-architecture decoders)")
    act = _cfg(cfg, "hidden_act", "silu")
    if act != "silu":
        raise ExportError(f"hidden_act '{act}': the Llama template's MLP is silu(gate) * up")
    rs = _cfg(cfg, "rope_scaling") or {}
    rtype = rs.get("rope_type", rs.get("type", "default")) if isinstance(rs, dict) else "default"
    if rtype not in ("default", "llama3", "linear"):
        # these change inv_freq only, which the template reads from the model; others (yarn's
        # per-position mscale, dynamic's length-dependent base, longrope) change more
        raise ExportError(f"rope_scaling type '{rtype}' is not supported (default, llama3, linear)")
    sw = _cfg(cfg, "sliding_window")
    use_sw = _cfg(cfg, "use_sliding_window", mt == "mistral")
    if sw and use_sw and max_seq_len > sw:
        raise ExportError(f"sliding_window {sw} < max_seq_len {max_seq_len}: baton's attention "
                          "is full causal; export with max_seq_len <= sliding_window")
    lt = _cfg(cfg, "layer_types")
    if lt and any(t != "full_attention" for t in lt) and not (max_seq_len <= (sw or 0)):
        raise ExportError(f"layer_types {sorted(set(lt))}: only full_attention layers are supported")
    if mt == "smollm3":
        nope = _cfg(cfg, "no_rope_layers")
        if nope and not all(nope):
            raise ExportError("smollm3 with no_rope_layers (layers without rope) is not supported")


def _rotary(model):
    m = getattr(model, "model", model)
    rot = getattr(m, "rotary_emb", None)
    if rot is None or not hasattr(rot, "inv_freq"):
        raise ExportError("the model has no model.rotary_emb.inv_freq buffer; export_causal_lm "
                          "reads rope frequencies from it")
    return rot.inv_freq.detach().to(torch.float32).cpu(), float(
        getattr(rot, "attention_scaling", 1.0) or 1.0)


def _fuse_weights(weights, pre, nl):
    """Concatenates each layer's q/k/v projections into self_attn.qkv_proj.{weight,bias}
    ([(H + 2 Hkv) Dh, D], q rows first: rope_cache_update's layout) and gate/up into
    mlp.gate_up_proj.{weight,bias} ([2F, D], gate rows first: swiglu's layout), so one GEMM reads
    each. Layers with Qwen3's q/k norms keep q/k/v apart (the norms sit between the GEMM and rope).
    Returns the set of layers whose attention was fused."""
    fused_attn = set()
    for i in range(nl):
        L = f"{pre}layers.{i}."
        a, m = L + "self_attn.", L + "mlp."
        if a + "q_norm.weight" not in weights and all(
                a + f"{x}_proj.weight" in weights for x in "qkv"):
            for kind in ("weight", "bias"):
                parts = [a + f"{x}_proj.{kind}" for x in "qkv"]
                have = [k in weights for k in parts]
                if all(have):
                    weights[a + f"qkv_proj.{kind}"] = torch.cat([weights.pop(k) for k in parts])
                elif any(have):
                    raise ExportError(f"{L}: some of q/k/v_proj have a {kind} and some do not")
            fused_attn.add(i)
        if all(m + f"{x}_proj.weight" in weights for x in ("gate", "up")):
            for kind in ("weight", "bias"):
                parts = [m + f"{x}_proj.{kind}" for x in ("gate", "up")]
                if all(k in weights for k in parts):
                    weights[m + f"gate_up_proj.{kind}"] = torch.cat([weights.pop(k) for k in parts])
    return fused_attn


def export_causal_lm(model, out_dir, *, max_seq_len, device="cuda:0", dtype=None, verbose=True,
                     logits_dtype=None, prefill_logits="all", fused=True,
                     decode_outputs=("logits",), tokenizer=None):
    """Writes out_dir/prefill.json, out_dir/decode.json and out_dir/weights.safetensors for a
    Hugging Face Llama-family causal LM (LlamaForCausalLM, Mistral, Qwen2 with its qkv bias,
    Qwen3 with its q/k norms, SmolLM). max_seq_len: rows of the KV cache (the longest prompt plus
    generated tokens); dtype: convert the weights (default: the model's); logits_dtype: the
    logits' dtype (default: the weights'); prefill_logits: "all" (logits [1, seq, vocab]) or
    "last" (an extra input `last_row`, a one-hot [1, 1, seq] of the weights' dtype selecting the
    prompt's last token, and logits [1, 1, vocab]: the lm_head runs on one row); fused (default
    True): one qkv GEMM then rope_cache_update, one gate_up GEMM then swiglu, o_proj and down_proj
    as gemm_add with the residual (weights renamed, docs/export.md); False: one step per HF op;
    "gemv": as True, and the decode plan also folds each RMSNorm into the GEMM after it
    (rms_norm_gemm: qkv, gate_up, lm_head) and SwiGLU into down_proj (swiglu_gemm_add): 6 steps a
    layer, for baton's decode GEMV; the prefill plan stays as with True.
    decode_outputs: the decode plan's outputs, "logits" [1, 1, vocab] and/or "next_token" (i64
    [1, 1], the logits' argmax computed on the plan's device: a greedy program then reads 8
    bytes a token instead of the logits, and picks nothing on the host).
    tokenizer: the model's tokenizer (a transformers fast tokenizer or a tokenizers.Tokenizer),
    written as out_dir/tokenizer.json, which `generate --text` and baton_tokenizer.h read; a
    transformers tokenizer's chat template is compiled into out_dir/chat.json (baton_export.chat,
    for `generate --chat` and baton_chat_render), or, where it does not place messages between
    fixed strings, left out with a warning that says why.
    Returns {"prefill": path, "decode": path, "weights": path} (and "tokenizer", "chat": paths)."""
    cfg = model.config
    if fused not in (True, False, "gemv"):
        raise ExportError(f"fused={fused!r}: use True, False or 'gemv'")
    if max_seq_len < 1:
        raise ExportError("max_seq_len must be >= 1")
    _check_config(model, cfg, max_seq_len)
    if prefill_logits not in ("all", "last"):
        raise ExportError(f"prefill_logits '{prefill_logits}': use 'all' or 'last'")
    decode_outputs = (decode_outputs,) if isinstance(decode_outputs, str) else tuple(decode_outputs)
    if not decode_outputs or set(decode_outputs) - {"logits", "next_token"}:
        raise ExportError(f"decode_outputs {decode_outputs!r}: name 'logits', 'next_token' or both")
    # a fast tokenizer's backend, or a tokenizers.Tokenizer itself: both save tokenizer.json
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if tokenizer is not None and not callable(getattr(backend, "save", None)):
        raise ExportError(f"tokenizer: {type(tokenizer).__name__} has no tokenizer.json to write: "
                          "give a fast tokenizer (AutoTokenizer's default) or a tokenizers.Tokenizer")
    if tokenizer is not None and callable(getattr(backend, "get_vocab_size", None)):
        n_tok = backend.get_vocab_size(with_added_tokens=True)
        if n_tok > cfg.vocab_size:
            raise ExportError(f"tokenizer: {n_tok} ids against the model's vocabulary of "
                              f"{cfg.vocab_size}: not this model's tokenizer")
    sd = {k: v for k, v in model.state_dict().items()}
    pre = _layer_prefix(sd)
    D = cfg.hidden_size
    H = cfg.num_attention_heads
    Hkv = _cfg(cfg, "num_key_value_heads", H)
    Dh = _cfg(cfg, "head_dim", D // H)
    V = cfg.vocab_size
    nl = cfg.num_hidden_layers
    eps = float(_cfg(cfg, "rms_norm_eps", 1e-6))
    inv_freq, rope_scale = _rotary(model)
    if inv_freq.numel() * 2 != Dh:
        raise ExportError(f"rotary_emb.inv_freq has {inv_freq.numel()} entries; a head_dim of "
                          f"{Dh} needs {Dh // 2} (partial rotary is not supported)")
    wdt = dtype or sd[f"{pre}embed_tokens.weight"].dtype
    wname = dtype_name(wdt, "dtype")
    if wname not in ("bf16", "f16", "f32", "f64"):
        raise ExportError(f"dtype {wdt}: weights must be a float dtype")
    idt = "f64" if wname == "f64" else "f32"  # rms_norm_fwd's invvar
    ldt = dtype_name(logits_dtype, "logits_dtype") if logits_dtype is not None else wname

    # the weights both plans read: the state_dict (in dtype) and rope's frequencies in f32
    weights = {}
    for k, v in sd.items():
        if k.endswith("rotary_emb.inv_freq"):
            continue
        weights[k] = v.detach().to(wdt) if v.is_floating_point() else v.detach()
    rope_key = f"{pre}rotary_emb.inv_freq"
    weights[rope_key] = inv_freq
    head = "lm_head.weight"
    if head not in weights or _cfg(cfg, "tie_word_embeddings", False):
        head = f"{pre}embed_tokens.weight"  # tied: the embedding table is the output projection
        weights.pop("lm_head.weight", None)
    scale = Dh ** -0.5
    mt = cfg.model_type
    fused_attn = _fuse_weights(weights, pre, nl) if fused else set()

    def build(name, rows):
        """rows: 1 (decode) or "seq" (prefill)."""
        p = Plan(name, device=device, verbose=verbose)
        used = set()
        gemv = fused == "gemv" and rows == 1  # decode: the norms and SwiGLU fused into GEMVs

        def W(key):
            if key not in weights:
                raise ExportError(f"state_dict has no '{key}' ({mt} layout expected)")
            used.add(key)
            if key in p.tensors:
                return p_vals[key]
            t = weights[key]
            v = p.tensor(key, dtype_name(t.dtype, key), list(t.shape), role="constant",
                         init={"kind": "safetensors", "path": "weights.safetensors", "key": key})
            p_vals[key] = v
            return v

        p_vals = {}
        if rows == "seq":
            p.dims = {"seq": {"min": 1, "max": max_seq_len}}
        ids = p.tensor("input_ids", "i64", [1, rows], role="input")
        pos = p.tensor("cache_position", "i64", [rows], role="input")
        caches = []
        for i in range(nl):
            caches.append((p.tensor(f"k_cache.{i}", wname, [max_seq_len, Hkv * Dh], role="state"),
                           p.tensor(f"v_cache.{i}", wname, [max_seq_len, Hkv * Dh],
                                    role="state")))
        inv = W(rope_key)

        def T(base, width, dt=wname):
            return p.temp(base, dt, [1, rows, width])

        def linear(base, x, key, width, out=None):
            y = out or T(base, width)
            bias = key[:-len("weight")] + "bias"
            if bias in weights:
                mm = T(base + ".mm", width)
                p.step("gemm", [x, W(key)], [mm], {"trans_b": True}, name=base + ".mm")
                p.step("add", [mm, W(bias)], [y], name=base)
            else:
                p.step("gemm", [x, W(key)], [y], {"trans_b": True}, name=base)
            return y

        def residual(base, x, key, res, rname):
            """res + x @ W^T: one gemm_add (the residual as c) when fused and unbiased."""
            y = T(rname, D)
            if fused and key[:-len("weight")] + "bias" not in weights:
                p.step("gemm_add", [x, W(key), res], [y], {"trans_b": True}, name=base)
            else:
                a = linear(base, x, key, D)
                p.step("add", [res, a], [y], name=rname)
            return y

        def norm(base, x, key):
            y = T(base, x.shape[-1])
            r = p.temp(base + ".invvar", idt, [1, rows])
            p.step("rms_norm_fwd", [x, W(key)], [y, r], {"eps": eps}, name=base)
            return y

        def norm_linear(nbase, base, h, nkey, key, width, out=None):
            """linear(norm(h)): one rms_norm_gemm where the GEMV plan has it and W has no bias."""
            if gemv and key[:-len("weight")] + "bias" not in weights:
                y = out or T(base, width)
                p.step("rms_norm_gemm", [h, W(nkey), W(key)], [y], {"eps": eps}, name=base)
                return y
            return linear(base, norm(nbase, h, nkey), key, width, out)

        def head_norm(base, x, key, heads):
            # Qwen3's q/k norm: RMSNorm over each head's Dh features, through zero-copy views
            xv = p.view(base + ".in", x, [1, rows, heads, Dh])
            y = p.temp(base + ".y", wname, [1, rows, heads, Dh])
            r = p.temp(base + ".invvar", idt, [1, rows, heads])
            p.step("rms_norm_fwd", [xv, W(key)], [y, r], {"eps": eps}, name=base)
            return p.view(base, y, [1, rows, heads * Dh])

        h = T("embed", D)
        p.step("embedding", [ids, W(f"{pre}embed_tokens.weight")], [h], name="embed")
        for i in range(nl):
            L = f"{pre}layers.{i}."
            n = f"l{i}."
            an = (n + "attn_norm", L + "input_layernorm.weight")
            rattrs = {"head_dim": Dh}
            if rope_scale != 1.0:
                rattrs["scale"] = rope_scale
            kc, vc = caches[i]
            qr = T(n + "q_rope", H * Dh)
            if i in fused_attn:
                qkv = norm_linear(an[0], n + "qkv", h, an[1], L + "self_attn.qkv_proj.weight",
                                  (H + 2 * Hkv) * Dh)
                p.step("rope_cache_update", [qkv, pos, inv, kc, vc], [qr, kc, vc],
                       dict(rattrs, n_heads=H, n_kv_heads=Hkv), name=n + "rope_cache")
            else:
                x = norm(an[0], h, an[1])
                q = linear(n + "q", x, L + "self_attn.q_proj.weight", H * Dh)
                k = linear(n + "k", x, L + "self_attn.k_proj.weight", Hkv * Dh)
                v = linear(n + "v", x, L + "self_attn.v_proj.weight", Hkv * Dh)
                if L + "self_attn.q_norm.weight" in weights:
                    q = head_norm(n + "q_norm", q, L + "self_attn.q_norm.weight", H)
                    k = head_norm(n + "k_norm", k, L + "self_attn.k_norm.weight", Hkv)
                kr = T(n + "k_rope", Hkv * Dh)
                p.step("rope", [q, pos, inv], [qr], rattrs, name=n + "q_rope")
                p.step("rope", [k, pos, inv], [kr], rattrs, name=n + "k_rope")
                p.step("kv_cache_update", [kc, kr, pos], [kc], name=n + "k_cache")
                p.step("kv_cache_update", [vc, v, pos], [vc], name=n + "v_cache")
            o = T(n + "attn", H * Dh)
            p.step("attention", [qr, kc, vc, pos], [o],
                   {"head_dim": Dh, "n_heads": H, "n_kv_heads": Hkv, "scale": scale},
                   name=n + "attn")
            h1 = residual(n + "o", o, L + "self_attn.o_proj.weight", h, n + "resid1")
            mn = (n + "mlp_norm", L + "post_attention_layernorm.weight")
            gu_key = L + "mlp.gate_up_proj.weight"
            down = L + "mlp.down_proj.weight"
            if gu_key in weights:
                F = weights[gu_key].shape[0] // 2
                gu = norm_linear(mn[0], n + "gate_up", h1, mn[1], gu_key, 2 * F)
                if gemv and down[:-len("weight")] + "bias" not in weights:
                    h = T(n + "resid2", D)
                    p.step("swiglu_gemm_add", [gu, W(down), h1], [h], name=n + "down")
                    continue
                m = T(n + "swiglu", F)
                p.step("swiglu", [gu], [m], name=n + "swiglu")
            else:
                x2 = norm(mn[0], h1, mn[1])
                F = weights[L + "mlp.gate_proj.weight"].shape[0]
                g = linear(n + "gate", x2, L + "mlp.gate_proj.weight", F)
                u = linear(n + "up", x2, L + "mlp.up_proj.weight", F)
                m = T(n + "silu_mul", F)
                p.step("silu_mul", [g, u], [m], name=n + "silu_mul")
            h2 = residual(n + "down", m, down, h1, n + "resid2")
            h = h2
        fn = ("final_norm", f"{pre}norm.weight")
        x = None if gemv else norm(fn[0], h, fn[1])  # gemv: the norm runs inside the lm_head
        lrows = rows
        if rows == "seq" and prefill_logits == "last":
            # last_row (one-hot [1, 1, seq]) @ x [seq, D]: the last token's row, exactly (a sum of
            # one product by 1 and zeros), so the lm_head runs on one row and one row goes back
            sel = p.tensor("last_row", wname, [1, 1, "seq"], role="input")
            xl = p.temp("final_norm.last", wname, [1, 1, D])
            p.step("gemm", [sel, p.view("final_norm.rows", x, ["seq", D])], [xl],
                   name="last_row")
            x, lrows = xl, 1
        outs = decode_outputs if rows == 1 else ("logits",)
        if "logits" in outs:
            logits = p.tensor("logits", ldt, [1, lrows, V], role="output")
        else:
            logits = p.temp("logits", ldt, [1, lrows, V])
        lw = logits if ldt == wname else p.temp("lm_head", wname, [1, lrows, V])
        if gemv:
            norm_linear(fn[0], "lm_head", h, fn[1], head, V, out=lw)
        else:
            p.step("gemm", [x, W(head)], [lw], {"trans_b": True}, name="lm_head")
        if ldt != wname:
            p.step("cast", [lw], [logits], name="logits_cast")
        if "next_token" in outs:
            tok = p.tensor("next_token", "i64", [1, lrows], role="output")
            p.step("argmax", [logits], [tok], name="next_token")
        unused = [k for k in weights if k not in used and not k.endswith(".inv_freq")]
        if unused:
            raise ExportError(f"weights the Llama template does not use: {unused[:5]}"
                              f"{' ...' if len(unused) > 5 else ''}; the model is not the Llama "
                              "architecture this exporter knows")
        return p

    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for name, rows in (("prefill", "seq"), ("decode", 1)):
        p = build(f"{getattr(cfg, 'model_type', 'llm')}-{name}", rows)
        paths[name] = os.path.join(out_dir, f"{name}.json")
        p.write(paths[name])
    paths["weights"] = os.path.join(out_dir, "weights.safetensors")
    write_weights(paths["weights"], weights)
    # the ids transformers' generate stops at: the generation config's (Llama 3 Instruct's lists
    # <|eot_id|>), else the model config's
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump({"format": "baton.causal_lm", "version": 1, "model_type": cfg.model_type,
                   "vocab_size": V, "max_seq_len": max_seq_len, "n_layers": nl,
                   "eos_token_id": eos if eos is not None else _cfg(cfg, "eos_token_id"),
                   "bos_token_id": _cfg(cfg, "bos_token_id")}, f, indent=1)
    if tokenizer is not None:
        paths["tokenizer"] = os.path.join(out_dir, "tokenizer.json")
        backend.save(paths["tokenizer"])
        chat = write_chat_if_any(tokenizer, out_dir)
        if chat:
            paths["chat"] = chat
    return paths


def write_chat_if_any(tokenizer, out_dir):
    """out_dir/chat.json from tokenizer's chat template: its path; None where the tokenizer has no
    template, or (with a warning that says why) one that does not compile."""
    from .chat import ChatTemplateError, write_chat

    if not getattr(tokenizer, "chat_template", None):
        return None
    path = os.path.join(out_dir, "chat.json")
    try:
        write_chat(tokenizer, path)
    except ChatTemplateError as e:
        if os.path.exists(path):  # an earlier export's, for another template
            os.remove(path)
        warnings.warn(f"chat.json not written: {e}. `generate --text --no-special` takes the "
                      "conversation written out as the template would write it", stacklevel=3)
        return None
    return path
