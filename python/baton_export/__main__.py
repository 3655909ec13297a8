"""python -m baton_export FILE.py:FACTORY -o DIR [--device D] [--cpu-op aten.add]... [--dtype bf16]
[--name NAME] [--check] [--baton PATH]: FACTORY() returns (module, example_inputs).

python -m baton_export causal-lm MODEL_DIR -o DIR --max-seq-len N [--device D] [--dtype bf16]
[--logits-dtype f32] [--prefill-logits all|last] [--fused true|false|gemv]
[--decode-outputs logits,next_token]: a Hugging Face causal LM saved in MODEL_DIR (config.json
and its weights, read from disk only) through export_causal_lm, for build/generate; the tokenizer's
files are copied beside the plans and its chat template compiled into chat.json.

python -m baton_export chat MODEL_DIR -o chat.json: the chat template alone."""
import argparse
import importlib.util
import os
import sys

import torch

from . import ExportError, export, export_causal_lm
from ._plan import TORCH_DTYPES


def load_factory(spec):
    path, sep, fn = spec.rpartition(":")
    if not sep or not path or not fn:
        raise SystemExit(f"baton_export: '{spec}': expected FILE.py:FACTORY")
    if not os.path.isfile(path):
        raise SystemExit(f"baton_export: {path}: no such file")
    ms = importlib.util.spec_from_file_location("_baton_export_user", path)
    mod = importlib.util.module_from_spec(ms)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    ms.loader.exec_module(mod)
    if not hasattr(mod, fn):
        raise SystemExit(f"baton_export: {path} has no '{fn}'")
    return getattr(mod, fn)


# What causal-lm copies from the model's directory when it is there.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "generation_config.json",
                   "chat_template.jinja", "chat_template.json")


def causal_lm_main(argv):
    ap = argparse.ArgumentParser(prog="python -m baton_export causal-lm",
                                 description="Export a Hugging Face causal LM saved in a directory "
                                 "to prefill and decode plans (docs/generate.md)")
    ap.add_argument("model_dir", help="a directory of save_pretrained: config.json and weights")
    ap.add_argument("-o", "--out", required=True, help="output directory")
    ap.add_argument("--max-seq-len", type=int, required=True,
                    help="KV-cache rows: the longest prompt plus the tokens to generate")
    ap.add_argument("--device", default="cuda:0", help="where the steps go (default cuda:0)")
    ap.add_argument("--dtype", choices=sorted(TORCH_DTYPES),
                    help="the weights' dtype (default: the checkpoint's)")
    ap.add_argument("--logits-dtype", choices=sorted(TORCH_DTYPES),
                    help="the logits' dtype (default: the weights')")
    ap.add_argument("--prefill-logits", choices=("all", "last"), default="all")
    ap.add_argument("--fused", choices=("true", "false", "gemv"), default="true")
    ap.add_argument("--decode-outputs", default="logits",
                    help="logits, next_token or both, comma-separated (default logits)")
    a = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(a.model_dir, "config.json")):
        print(f"baton_export: error: {a.model_dir} has no config.json: not a directory that "
              "save_pretrained wrote", file=sys.stderr)
        return 1
    import transformers

    transformers.utils.logging.disable_progress_bar()  # one line of output, as the other path
    try:  # from disk only: nothing is downloaded
        model = transformers.AutoModelForCausalLM.from_pretrained(
            a.model_dir, dtype=TORCH_DTYPES[a.dtype] if a.dtype else "auto",
            local_files_only=True).eval()
    except Exception as e:  # a missing or broken weights file, an unknown model type, ...
        print(f"baton_export: error: {a.model_dir}: transformers cannot load it as a causal LM: "
              f"{e}", file=sys.stderr)
        return 1
    fused = {"true": True, "false": False, "gemv": "gemv"}[a.fused]
    try:
        paths = export_causal_lm(
            model, a.out, max_seq_len=a.max_seq_len, device=a.device,
            logits_dtype=TORCH_DTYPES[a.logits_dtype] if a.logits_dtype else None,
            prefill_logits=a.prefill_logits, fused=fused,
            decode_outputs=tuple(x for x in a.decode_outputs.split(",") if x), verbose=False)
    except ExportError as e:
        print(f"baton_export: error: {e}", file=sys.stderr)
        return 1
    # the model's tokenizer and generation settings beside the plans, so that the directory is
    # all an application needs (baton reads none of them: a C app tokenizes with its own library)
    import shutil

    kept = []
    for name in TOKENIZER_FILES:
        src = os.path.join(a.model_dir, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(a.out, name))
            kept.append(name)
    # the chat template compiled for generate --chat (baton_export.chat), from the tokenizer
    # transformers loads from the directory
    chat = None
    if "tokenizer.json" in kept:
        from ._llm import write_chat_if_any

        try:
            tok = transformers.AutoTokenizer.from_pretrained(a.model_dir, local_files_only=True)
        except Exception as e:
            print(f"baton_export: note: no chat.json: transformers cannot load the tokenizer: {e}",
                  file=sys.stderr)
        else:
            chat = write_chat_if_any(tok, a.out)
    print(f"wrote {paths['prefill']}, {paths['decode']} and {paths['weights']}" +
          (f"; copied {', '.join(kept)}" if kept else "") + (f"; compiled {chat}" if chat else ""))
    return 0


def chat_main(argv):
    ap = argparse.ArgumentParser(prog="python -m baton_export chat",
                                 description="Compile the chat template of a tokenizer saved in a "
                                 "directory into chat.json (docs/generate.md, Chat), for a model "
                                 "exported before, or for baton_chat_render in an app")
    ap.add_argument("model_dir", help="a directory of save_pretrained with the tokenizer's files")
    ap.add_argument("-o", "--out", required=True, help="the chat.json to write")
    a = ap.parse_args(argv)
    import transformers

    from .chat import ChatTemplateError, write_chat

    try:  # from disk only: nothing is downloaded
        tok = transformers.AutoTokenizer.from_pretrained(a.model_dir, local_files_only=True)
    except Exception as e:
        print(f"baton_export: error: {a.model_dir}: transformers cannot load its tokenizer: {e}",
              file=sys.stderr)
        return 1
    try:
        chat = write_chat(tok, a.out)
    except ChatTemplateError as e:
        print(f"baton_export: error: {a.model_dir}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}: roles {', '.join(chat['roles'])}" +
          (f"; a system message refused: {chat['system_refused']}" if chat["system_refused"]
           else ""))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "causal-lm":
        return causal_lm_main(argv[1:])
    if argv and argv[0] == "chat":
        return chat_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m baton_export",
                                 description="Export a PyTorch module to a baton plan")
    ap.add_argument("factory", help="FILE.py:FACTORY; FACTORY() returns (module, example inputs)")
    ap.add_argument("-o", "--out", required=True, help="output directory")
    ap.add_argument("--device", default="cuda:0", help="where steps go (default cuda:0)")
    ap.add_argument("--cpu-op", action="append", default=[], metavar="aten.OP",
                    help="place this op's steps on the CPU (repeatable)")
    ap.add_argument("--dtype", choices=sorted(TORCH_DTYPES), help="convert the module and its "
                    "float inputs to this dtype first")
    ap.add_argument("--name", help="the plan's name")
    ap.add_argument("--check", action="store_true", help="run the plan with the baton CLI and "
                    "report the max error per output")
    ap.add_argument("--baton", help="the baton CLI for --check (default $BATON, then PATH)")
    a = ap.parse_args(argv)
    made = load_factory(a.factory)()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise SystemExit("baton_export: FACTORY must return (module, example_inputs)")
    module, args = made
    if not isinstance(args, tuple):
        args = (args,)
    if a.dtype:
        dt = TORCH_DTYPES[a.dtype]
        module = module.to(dt)
        args = tuple(x.to(dt) if torch.is_tensor(x) and x.is_floating_point() else x for x in args)
    try:
        r = export(module, args, a.out, device=a.device, cpu_ops=a.cpu_op, name=a.name,
                   check=a.check, baton=a.baton)
    except ExportError as e:
        print(f"baton_export: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {r.plan_path}" + (f" and {r.weights_path}" if r.weights_path else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
