"""Small tokenizer.json fixtures shaped like the real Llama 3, Qwen2, GPT-2, SmolLM / StarCoder,
Llama 2 / Mistral (v0.1 and v0.3) and Gemma files (trained here with the `tokenizers` library on a
corpus written below, nothing downloaded),
and the texts that test_tokenizer.py encodes and decodes with both `baton tokenize` and
`tokenizers`."""
import json
import os
import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, \
    pre_tokenizers, processors, trainers

try:  # baton's Unicode tables come from unicodedata2 (scripts/gen-unicode-tables.py)
    import unicodedata2 as unicodedata
except ImportError:
    import unicodedata

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                  "<|end_header_id|>"]
QWEN2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2.5's files also carry added tokens that are not special (tool-call markers): they are split
# out of the text like special ones but kept by decode(skip_special_tokens=True).
QWEN2_PLAIN_ADDED = ["<tool_call>", "</tool_call>"]
GPT2_SPECIAL = ["<|endoftext|>"]
LLAMA2_SPECIAL = ["<unk>", "<s>", "</s>"]

# A word the byte-level vocabs get as one token although no merge builds it: with ignore_merges
# (Llama 3) a pre-token found whole in the vocab is taken as is, without it (Qwen2, GPT-2) the
# merges decide and this entry is never produced.
UNMERGED_WORDS = ["\u0120Zyzzyva", "Zyzzyva", "\u0120quixotry"]

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "I'LL be there at 10:30, he said; she's not sure they'll come.",
    "He's right, it's what we've always done and I'm sure you'd agree.",
    "DON'T SHOUT! We're LISTENING... aren't we? Isn't it?",
    "Numbers: 12345 3.14159 2.71828 1,000,000 and 0x1F; version 1.2.3-rc4.",
    "Prices rose 15% to $1,299.99 (about €1.199,00) in Q3 2024.",
    "def main(argv):\n\tif len(argv) > 1:\n\t\treturn 0\n    return 1\n",
    "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
    "    x = {'key': [1, 2, 3], \"other\": None}  # comment\n",
    "#include <stdio.h>\r\nint main(void) { printf(\"hi\\n\"); }\r\n",
    "Punctuation runs: !!! ??? ... --- === *** ### @@@ ~~~ ;;; ::: ,,,",
    "Emphasis -- and dashes — and quotes “like this” and ‘this’.",
    "Le cœur a ses raisons que la raison ne connaît point.",
    "À bientôt, chère amie; où est la forêt? Déjà vu, naïve façade.",
    "Grüße aus München! Die Straße ist schön, Äpfel und Öl kosten mäßig.",
    "Übermäßig große Gepäckstücke müssen aufgegeben werden.",
    "Привет, мир! Как дела? Всё хорошо, спасибо.",
    "Москва — столица России.",
    "Καλημέρα κόσμε! Η Αθήνα είναι όμορφη.",
    "你好，世界！今天天气很好。我们去公园散步吧。",
    "中华人民共和国成立于1949年。",
    "こんにちは、世界！私は学生です。カタカナとひらがな。",
    "東京タワーは高いです。",
    "안녕하세요, 세계! 저는 학생입니다.",
    "대한민국의 수도는 서울입니다.",
    "مرحبا بالعالم! كيف حالك؟ ١٢٣",
    "اللغة العربية جميلة.",
    "नमस्ते दुनिया! हिन्दी एक भाषा है।",
    "Emoji: 😀 🎉🎊 👍🏽 ❤\ufe0f 🔥",
    "Family 👨\u200d👩\u200d👧\u200d👦 and 🏳\ufe0f\u200d🌈 flags 🇫🇷 🇩🇪 🇯🇵",
    "Mixed: café über ščř łódź ångström Æsir øre þð",
    "Tabs\tand\tmore\t\ttabs, and    multiple     spaces   here.",
    "Line one\nLine two\n\nLine four\r\nWindows line\r\n",
    "URL https://example.com/path?q=1&r=two#frag and mail bob@example.org",
    "JSON {\"a\": 1, \"b\": [true, false, null], \"c\": \"\\u00e9\"}",
    "Markdown **bold** _italic_ `code` > quote\n- item\n1. first",
    "It's the end of the world as we know it, and I feel fine.",
    "They're here; we've won; you'll see; I'd go; she'd've known.",
    "1 22 333 4444 55555 666666 7777777 88888888 999999999",
    "The year 2023 had 365 days, 52 weeks and 12 months.",
]

# Sentences whose words are mostly not in the corpus, so the vocabs hold them only in pieces and
# the merges' order decides the encoding.
HELD_OUT = [
    "Quantum chromodynamics describes quarks and gluons.",
    "Unbelievably, the hippopotamus outswam the crocodile!",
    "SHE'S WATCHING; they'VE gone; We'Re late; you'D know",
    "Zyzzyva quixotry Zyzzyva, and quixotry zyzzyva",
    "Antidisestablishmentarianism vs. floccinaucinihilipilification",
    "Die Donaudampfschifffahrtsgesellschaft überprüft Kapitänsmützen.",
    "Электростанция вырабатывает энергию.",
    "Φιλοσοφία και ψυχολογία",
    "机器学习是人工智能的一个分支。",
    "寿司と天ぷらを食べました。",
    "프로그래밍 언어를 배우고 있습니다.",
    "الذكاء الاصطناعي",
    "कृत्रिम बुद्धिमत्ता",
    "while (ptr != NULL) {\n\t\tptr = ptr->next;  /* walk */\n\t}\n",
    "x=98765432109876543210;y=-0.000123e+45",
    "🧑\u200d💻 coding at 3am ☕☕ 🇺🇸🇮🇹",
    "Well...    that's   odd!!\n\n\n   Right?",
]

EDGE = [
    "", " ", "  ", "\n", "\n\n\n", "\r\n", "\r", "\r\n\r\n", "a   ", "   a", " a", "a ", "\t",
    "\t\tx", "x\t", "  \n  x", " \n", "\n ", "x \n\n y", "x  \n", "1234567", "12", "123",
    "\uff11\uff12\uff13", "\u0663\u0664\u0665", "3.14159", "-42", "'s 'S 'll 'LL don't",
    "'re'RE've'VE'm'M'd'D't'T", "I'LL WON'T he'S", "'", "''", "' s", "x's",
    "\u017f'\u017f 's'\u017f",  # long s: case-folds to s, so (?i:'s) matches "'\u017f"
    # combining marks: NFC-stable ones first (no precomposed form, or already composed), then
    # ones NFC would change (Qwen2's normalizer composes them first)
    "\u01c5ungla \u01c4 \u01c6", "q\u0301", "\u1e0d\u0307", "\u1ea1\u0301", "\u01df", "a\u0345",
    "\u0915\u093c", "e\u0301", "q\u0301\u0323", "a\u0308\u0304", "\u1e0b\u0323", "\u0928\u093c",
    "caf\u00e9", "Zo\u00eb", "\u00a0", "a\u00a0b", "x \u00a0 y", "\u3000", "\u3000\u3000x",
    "a\u2028b", "\u2028", "a\u2029b", "a\x0bb\x0cc", "a\x85b", "a\u200db", "\u200d",
    "\u200b", "\ufeffBOM", "\ue000\uf8ff", "\U000F0000", "\U00020000\U0002A6D6",
    "\U0001F600", "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F1EB\U0001F1F7",
    "\u2764\ufe0f", "\U0010FFFD", "\U0001D400\U0001D7CE", "\x00", "a\x00b", "\x7f",
    "\x01\x02\x1b[0m", "<", "<|", "|>", "<s", "s>", "<<s>>", "<|eot_id", "eot_id|>",
    "hi<|eot_id|>there", "<|eot_id|>", "<|begin_of_text|>hello", "a <|eot_id|> b",
    "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "<|im_start|>user\nhello<|im_end|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n",
    "<|endoftext|>", "x<|endoftext|>y", "<|endoftext|><|endoftext|>", " <|endoftext|> ",
    "<tool_call>{\"name\": \"f\"}</tool_call>", "<s>hi</s>", "<s> hi </s>", "a<unk>b", "<s><s>",
    "<|eot_id|><|eot_id|>", "<|<|eot_id|>|>", "<|eot_id|eot_id|>", "x <|im_end|>\n\n",
    "<|im_start|><|im_end|>", " <s> ", "<s>  </s>", "\n<s>\n", "</s><s>",
    "Zyzzyva", " Zyzzyva", "zyzzyva", "quixotry", " quixotry", "\t quixotry",
    # one long text: some 15,000 characters, 7,000 tokens
    "\n".join(CORPUS * 8),
]

# Code point ranges the random strings draw from: the corpus's scripts and the awkward corners.
_RANGES = [
    (0x41, 0x5A), (0x61, 0x7A), (0x30, 0x39), (0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60),
    (0x7B, 0x7E), (0xC0, 0xFF), (0x100, 0x17F), (0x300, 0x36F), (0x391, 0x3C9),
    (0x410, 0x44F), (0x621, 0x64A), (0x660, 0x669), (0x900, 0x97F), (0x3041, 0x3096),
    (0x30A1, 0x30FA), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF10, 0xFF19), (0x1F300, 0x1F64F),
    (0x1F900, 0x1F9FF), (0x1F1E6, 0x1F1FF), (0xE000, 0xF8FF), (0x20000, 0x2A6DF),
    (0x2000, 0x206F),
]
_WHITESPACE = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000",
               "\u2028", "\x0b", "\x0c", "\x85", "\u200d", "\ufe0f"]
_SNIPPETS = ["'s", "'LL", "'ve", "don't", "123", "3.14", "...", "!!", "<|eot_id|>",
             "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "Zyzzyva"]


def _random_text(rng):
    parts = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.3:
            parts.append(rng.choice(_WHITESPACE))
        elif r < 0.4:
            parts.append(rng.choice(_SNIPPETS))
        elif r < 0.55:
            parts.append(rng.choice(CORPUS + HELD_OUT)[:rng.randint(1, 20)])
        else:
            lo, hi = rng.choice(_RANGES)
            parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 6))))
    return "".join(parts)


def texts(seed=0, n_random=200):
    """The corpus, held-out sentences, edge cases and n_random seeded random strings."""
    rng = random.Random(seed)
    return CORPUS + HELD_OUT + EDGE + [_random_text(rng) for _ in range(n_random)]


def is_nfc(text):
    return unicodedata.normalize("NFC", text) == text  # unicodedata2 has no is_normalized


# What NFC changes: letters and the marks that compose with them, marks in and out of canonical
# order, precomposed letters followed by more marks, Hangul jamo and syllables, singletons (the
# Angstrom and Ohm signs, CJK compatibility ideographs), composition exclusions (Devanagari and
# Hebrew letters with nukta / dagesh), Greek with breathing and iota subscript
_NFC_BASES = "aeiouAEIOUcnsyzgkrwCNSYZ" + "\u03b1\u03b5\u03b7\u03c9\u0391" + "\u0915\u0921\u05d1"
_NFC_MARKS = [chr(c) for c in (0x300, 0x301, 0x302, 0x303, 0x304, 0x306, 0x307, 0x308, 0x30A,
                               0x30B, 0x30C, 0x313, 0x314, 0x323, 0x327, 0x328, 0x331, 0x342,
                               0x345, 0x93C, 0x5BC)]
_NFC_WHOLE = [chr(c) for c in (0xE9, 0xC5, 0x1EA1, 0x1E0D, 0x1F00, 0x1FB7, 0x212B, 0x2126, 0x340,
                               0x341, 0x343, 0x344, 0x374, 0x37E, 0x387, 0x958, 0x95D, 0xFB2C,
                               0xF900, 0xFA10, 0x2F800, 0x1E9B, 0xD55C, 0xAC00)]
_NFC_JAMO = [chr(c) for c in list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) +
             list(range(0x11A8, 0x11C3))]


def nfc_texts(seed=0, n=300):
    """Texts for an NFC normalizer, most of which it changes: random runs of the above between
    words, spaces and added tokens."""
    rng = random.Random(seed + 17)
    out = ["cafe\u0301 au lait", "\u212b\u2126", "\u1100\u1161\u11a8", "a\u0301\u0328",
           "<|im_start|>e\u0301<|im_end|>\u0301", "\u0301 leading mark", "\ud55c\u1100\u1161"]
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            if r < 0.45:
                parts.append(rng.choice(_NFC_BASES) +
                             "".join(rng.choice(_NFC_MARKS) for _ in range(rng.randint(0, 3))))
            elif r < 0.65:
                parts.append(rng.choice(_NFC_WHOLE) +
                             "".join(rng.choice(_NFC_MARKS) for _ in range(rng.randint(0, 2))))
            elif r < 0.8:
                parts.append("".join(rng.choice(_NFC_JAMO) for _ in range(rng.randint(1, 4))))
            elif r < 0.9:
                parts.append(rng.choice([" ", "  ", "\n", " the ", "123", "<|im_end|>",
                                         "<|endoftext|>"]))
            else:
                parts.append(rng.choice(_NFC_MARKS))
        out.append("".join(parts))
    return out


def byte_chars():
    """GPT-2's byte-level alphabet: byte value -> the character that stands for it in a vocab."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    for b in range(256):
        if b not in bs:  # the unprintable bytes get U+0100 onwards, in order
            cs.append(0x100 + len(bs) - 188)
            bs.append(b)
    return {b: chr(c) for b, c in zip(bs, cs)}


# Byte strings that are not UTF-8, each testing a case of the "maximal subpart" rule by which
# tokenizers (Rust's from_utf8_lossy) puts U+FFFD in a byte-level decode: a cut character, an
# impossible second byte, an overlong form, a surrogate, a code point past U+10FFFF, stray
# continuation bytes, and invalid bytes next to valid ones.
BAD_UTF8 = [b"\xe4\xbd", b"\xf0\x9f\x98", b"\xf0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xff", b"\xfe\xff", b"\x80\x80\x80", b"\xe4\xbda",
            b"a\xf0\x9f", b"\xc3", b"\xf0\x9f\x98\x80\x80", b"\xe2\x82\xe2\x82\xac", b"\xf5\x80",
            b"\xc3\xa9\xa9", b"x\xe4\xbd\xa0\xe5\xa5"]


def id_sequences(tok, byte_level, seed=0, n_uniform=60, n_slices=40):
    """Id lists to decode: uniform draws over the whole vocab (added tokens included), slices of
    real encodings (which cut multi-byte characters), and the bytes of BAD_UTF8 as byte tokens
    (the byte-level alphabet, or Llama 2's <0xNN>), alone and between other tokens."""
    rng = random.Random(seed)
    size = tok.get_vocab_size(with_added_tokens=True)
    out = [[rng.randrange(size) for _ in range(rng.randint(1, 10))] for _ in range(n_uniform)]
    wide = [t for t in CORPUS + HELD_OUT if any(ord(c) > 0x7F for c in t)]
    for _ in range(n_slices):
        ids = tok.encode(rng.choice(wide)).ids
        i = rng.randrange(len(ids))
        out.append(ids[i:i + rng.randint(1, 6)])
    chars = byte_chars()
    byte_id = (lambda b: tok.token_to_id(chars[b])) if byte_level else \
        (lambda b: tok.token_to_id(f"<0x{b:02X}>"))
    # each added token between others, so that --skip-special meets every kind
    for i in range(tok.get_vocab_size(with_added_tokens=False), size):
        out.append([rng.randrange(size), i, rng.randrange(size)])
    for bad in BAD_UTF8:
        ids = [byte_id(b) for b in bad]
        out.append(ids)
        out.append([rng.randrange(size)] + ids + [rng.randrange(size)])
    return out


def _trainer(special=(), byte_level=True):
    # Small enough that training stops before every corpus word is one token, so the corpus too
    # is encoded by merges (byte-level: 256 bytes and ~750 merges; Llama 2: ~300 characters, ~600
    # merges, then the 256 byte tokens).
    return trainers.BpeTrainer(
        vocab_size=1000 if byte_level else 900, special_tokens=list(special), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if byte_level else [])


def _edit(path, fn):
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    fn(d)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, indent=2)


def _merges_as_strings(d):
    # Files saved before tokenizers 0.20 (Llama 2, Llama 3) list merges as "a b" strings; newer
    # ones as [a, b] pairs. Both are read by tokenizers, so the fixtures carry both forms.
    d["model"]["merges"] = [" ".join(m) for m in d["model"]["merges"]]


def _add_unmerged_words(d):
    # Ids stay contiguous, model vocab first and added tokens after it, as in the real files:
    # tokenizers ignores a file's added-token ids when they do not follow the vocab.
    vocab = d["model"]["vocab"]
    added = {t["content"] for t in d["added_tokens"]}
    order = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t not in added]
    order += UNMERGED_WORDS + [t["content"] for t in d["added_tokens"]]
    ids = {t: i for i, t in enumerate(order)}
    d["model"]["vocab"] = {t: ids[t] for t in order if t in vocab or t in UNMERGED_WORDS}
    for t in d["added_tokens"]:
        t["id"] = ids[t["content"]]
    for t in (d["post_processor"] or {}).get("special_tokens", {}).values():
        t["ids"] = [ids[x] for x in t["tokens"]]


def _byte_level(pattern, ignore_merges, special, plain_added=(), trim_offsets=True):
    """A trained byte-level BPE: Split(pattern) then ByteLevel without its regex (Llama 3, Qwen2),
    or ByteLevel with its GPT-2 regex when pattern is None. Added tokens come after the vocab, as
    in the real files."""
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if pattern is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                     use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=trim_offsets,
                                     use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, _trainer())
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain_added])
    return tok


def _llama3(path):
    tok = _byte_level(LLAMA3_RE, True, LLAMA3_SPECIAL)
    bos = LLAMA3_SPECIAL[0]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
        special_tokens=[(bos, tok.token_to_id(bos))])
    tok.save(path)

    def fix(d):
        _add_unmerged_words(d)
        _merges_as_strings(d)
    _edit(path, fix)


def _qwen2(path):
    tok = _byte_level(QWEN2_RE, False, QWEN2_SPECIAL, QWEN2_PLAIN_ADDED, trim_offsets=False)
    tok.normalizer = normalizers.NFC()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    tok.save(path)
    _edit(path, _add_unmerged_words)


def _gpt2(path):
    tok = _byte_level(None, False, GPT2_SPECIAL)
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.save(path)

    def fix(d):
        # GPT-2's <|endoftext|> is the last entry of the model's vocab as well as an added token.
        for t in d["added_tokens"]:
            d["model"]["vocab"][t["content"]] = t["id"]
        _add_unmerged_words(d)
    _edit(path, fix)


def _starcoder(path, individual=True):
    """StarCoder's and SmolLM's: numbers split out (each digit alone) before GPT-2's pattern."""
    tok = _byte_level(None, False, ["<|endoftext|>"])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=individual),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.save(path)


def _spm(path, normalizer, pre_tokenizer, strip, special=LLAMA2_SPECIAL, bos="<s>"):
    """SentencePiece-converted BPE: "▁" for spaces, byte fallback to <0x00>..<0xFF> (the ids after
    the special tokens, as in Llama 2 and Mistral), as transformers' converters configure it."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    # SentencePiece never merges across a word start, so train on "▁word" pieces; the saved file
    # then gets the family's own normalizer and pre-tokenizer.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never",
                                                 split=True)
    tok.train_from_iterator(CORPUS, _trainer(special, byte_level=False))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse()] + ([decoders.Strip(" ", 1, 0)] if strip else []))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
        special_tokens=[(bos, tok.token_to_id(bos))])
    tok.save(path)

    def fix(d):
        old = d["model"]["vocab"]
        assert [old[t] for t in special] == list(range(len(special)))
        vocab = {t: i for i, t in enumerate(special)}
        vocab.update({f"<0x{b:02X}>": len(special) + b for b in range(256)})
        for t, _ in sorted(old.items(), key=lambda kv: kv[1]):
            vocab.setdefault(t, len(vocab))
        d["model"]["vocab"] = vocab
        _merges_as_strings(d)
    _edit(path, fix)


def _llama2(path):
    """Llama 2, Mistral v0.1, TinyLlama (legacy conversion): the normalizer puts a "▁" before every
    span and for every space; no pre-tokenizer; the decoder strips the first space."""
    _spm(path, normalizers.Sequence([normalizers.Prepend("\u2581"),
                                     normalizers.Replace(" ", "\u2581")]), None, True)


def _mistral(path):
    """The non-legacy conversion (Mistral v0.3 and later Llama 2 derivatives): no normalizer, a
    Metaspace pre-tokenizer that puts a "▁" before the text's first span only, unsplit."""
    _spm(path, None, pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first",
                                              split=False), True)


def _gemma(path):
    """Gemma: spaces as "▁" and no "▁" prepended, so the decoder strips nothing."""
    _spm(path, normalizers.Replace(" ", "\u2581"), None, False,
         special=["<pad>", "<eos>", "<bos>", "<unk>"], bos="<bos>")


def _metaspace_split(path):
    """An older Metaspace form: a "▁" before every span, the text split before each "▁"."""
    _spm(path, None, pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                              split=True), True)


BUILDERS = {"llama3": _llama3, "qwen2": _qwen2, "gpt2": _gpt2, "llama2": _llama2,
            "mistral": _mistral, "gemma": _gemma, "metaspace-split": _metaspace_split,
            "smollm": _starcoder, "digit-runs": lambda path: _starcoder(path, False)}
# the SentencePiece-converted ones: characters and <0xNN> byte tokens, not a byte-level alphabet
SPM = {"llama2", "mistral", "gemma", "metaspace-split"}


def build_all(dirpath):
    """Writes the four fixtures into dirpath: {name: path of its tokenizer.json}."""
    out = {}
    for name, build in BUILDERS.items():
        path = os.path.join(dirpath, f"{name}.tokenizer.json")
        build(path)
        # The edits must leave a file that tokenizers reads with the ids it states.
        tok = Tokenizer.from_file(path)
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        for t in d["added_tokens"]:
            assert tok.token_to_id(t["content"]) == t["id"], (path, t)
        for t, i in d["model"]["vocab"].items():
            assert tok.id_to_token(i) == t, (path, t, i)
        out[name] = path
    return out
