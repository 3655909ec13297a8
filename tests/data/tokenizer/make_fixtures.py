#!/usr/bin/env python3
"""make_fixtures.py: writes the two small tokenizer.json files of tests/test_tokenizer.c, trained
by the `tokenizers` library (0.23) on the corpus below and configured as Llama 3's (byte-level BPE,
its Split pattern, a BOS template) and Llama 2's (SentencePiece-converted BPE with byte fallback),
and prints the ids `tokenizers` gives for the texts the C test checks (pasted there).
python/tests/test_tokenizer.py compares the two implementations far more widely.

    python3 tests/data/tokenizer/make_fixtures.py
"""
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CORPUS = [
    "Hello world! I'LL be there. He's 12345 3.14159 don't",
    "The quick brown fox jumps over the lazy dog.",
    "Привет мир, как дела?",
    "日本語のテキストです。",
    "café naïve façade",
    "  indented\tcode\n\nx = 1\r\n",
] * 40
TEXTS = ["Hello world! I'LL be there.", "  x\n\n y  ", "hi<|eot_id|>there 99999",
         "Привет, мир! 日本"]


def byte_level():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|begin_of_text|>", "<|eot_id|>"]))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def spm():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator([t.replace(" ", "▁") for t in CORPUS], trainers.BpeTrainer(
        vocab_size=700, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    path = os.path.join(HERE, "spm.json")
    tok.save(path)
    # the byte tokens are vocabulary entries in Llama 2's file, not special added tokens
    d = json.load(open(path))
    d["added_tokens"] = [a for a in d["added_tokens"] if not a["content"].startswith("<0x")]
    json.dump(d, open(path, "w"), ensure_ascii=False)
    return Tokenizer.from_file(path)


def main():
    bl = byte_level()
    bl.save(os.path.join(HERE, "byte_level.json"))
    sp = spm()
    for name, tok in (("byte_level", bl), ("spm", sp)):
        for t in TEXTS:
            print(name, repr(t), tok.encode(t).ids)


if __name__ == "__main__":
    main()
