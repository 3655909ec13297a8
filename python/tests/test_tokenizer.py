"""`baton tokenize` against the Hugging Face `tokenizers` library on small tokenizer.json files of
each family baton reads (built by tokenizer_cases.py, BUILDERS): the same ids for each text, with
and without the special tokens, the same text for each id list, and refusals with the exit codes the
CLI promises. The random texts and id lists follow BATON_TEST_SEED (printed by pytest's header)."""
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("tokenizers", reason="the Hugging Face tokenizers package is not installed "
                    "(pip install tokenizers): it is the reference these tests compare with")
from tokenizers import Tokenizer  # noqa: E402

import tokenizer_cases as tc  # noqa: E402

SEED = int(os.environ.get("BATON_TEST_SEED", "0") or 0)
N_RANDOM = 200
# Each CLI call is a process that loads the tokenizer.json: run a few at once.
WORKERS = max(2, 2 * (os.cpu_count() or 1))
SHOW = 8  # failures spelt out in a message, shortest text first


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    paths = tc.build_all(str(d))
    return {name: (path, Tokenizer.from_file(path)) for name, path in paths.items()}


@pytest.fixture(scope="module")
def text_files(tmp_path_factory):
    """Each test text written once as UTF-8: (text, path) pairs."""
    d = tmp_path_factory.mktemp("texts")
    out = []
    for i, t in enumerate(tc.texts(SEED, N_RANDOM)):
        p = os.path.join(str(d), f"t{i}.txt")
        with open(p, "wb") as f:
            f.write(t.encode("utf-8"))
        out.append((t, p))
    return out


def _cli(baton, *args):
    return subprocess.run([baton, "tokenize", *args], capture_output=True, timeout=60)


def _answer(r, key):
    """(value under key of the CLI's one-line JSON, None) or (None, what was wrong)."""
    err = r.stderr.decode("utf-8", "replace").strip()
    if r.returncode != 0:
        return None, f"exit {r.returncode}: {err}"
    out = r.stdout[:-1] if r.stdout.endswith(b"\n") else r.stdout
    # split on b"\n" only: a decoded text may hold U+2028, which str.splitlines also splits on
    if b"\n" in out:
        return None, f"more than one line: {r.stdout[:300]!r}"
    try:
        obj = json.loads(out.decode("utf-8"))
        return obj[key], None
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        return None, f"not {{\"{key}\": ...}} ({e}): {r.stdout[:300]!r}"


def _refused(r):
    """A refusal as the contract words it: exit 1, a `baton tokenize:` line, no answer."""
    return (r.returncode == 1 and r.stdout == b"" and
            r.stderr.decode("utf-8", "replace").startswith("baton tokenize:"))


def _parallel(fn, items):
    with ThreadPoolExecutor(WORKERS) as ex:
        return list(ex.map(fn, items))


def _fail(name, what, total, bad):
    """Fails with the failures spelt out (ascii(), so that look-alike characters differ)."""
    bad.sort(key=lambda b: len(b[0]))
    lines = [f"{name}: {len(bad)} of {total} {what} differ from tokenizers "
             f"(BATON_TEST_SEED={SEED}); shortest first:"]
    for case, flags, want, got, *note in bad[:SHOW]:
        lines += [f"  {ascii(case)} {flags}", *(f"    {n}" for n in note),
                  f"    tokenizers: {ascii(want)}", f"    baton:      {ascii(got)}"]
    pytest.fail("\n".join(lines), pytrace=False)


NAMES = list(tc.BUILDERS)


@pytest.mark.parametrize("name", NAMES)
def test_encode_matches_tokenizers(baton, fixtures, text_files, name):
    path, tok = fixtures[name]
    cases = [(t, p, special) for t, p in text_files for special in (True, False)]

    def one(case):
        t, p, special = case
        want = tok.encode(t, add_special_tokens=special).ids
        r = _cli(baton, path, "--json", "--encode-file", p, *([] if special else ["--no-special"]))
        got, why = _answer(r, "ids")
        if why or got != want:
            return (t, "" if special else "--no-special", want, why or got)
        return None

    bad = [b for b in _parallel(one, cases) if b]
    if bad:
        _fail(name, "encodings", len(cases), bad)


def _check_decodes(baton, path, tok, name, id_lists):
    cases = [(ids, skip) for ids in id_lists for skip in (False, True)]

    def one(case):
        ids, skip = case
        want = tok.decode(ids, skip_special_tokens=skip)
        r = _cli(baton, path, "--json", "--decode", ",".join(map(str, ids)),
                 *(["--skip-special"] if skip else []))
        got, why = _answer(r, "text")
        if why or got != want:
            return (ids, "--skip-special" if skip else "", want, why or got,
                    f"tokens: {ascii([tok.id_to_token(i) for i in ids])}")
        return None

    bad = [b for b in _parallel(one, cases) if b]
    if bad:
        _fail(name, "decodes", len(cases), bad)


@pytest.mark.parametrize("name", NAMES)
def test_decode_of_encodings_matches_tokenizers(baton, fixtures, text_files, name):
    path, tok = fixtures[name]
    # Qwen2's and GPT-2's encoding of "" is [], passed as `--decode ""`.
    _check_decodes(baton, path, tok, name, [tok.encode(t).ids for t, _ in text_files])


@pytest.mark.parametrize("name", NAMES)
def test_decode_of_random_ids_matches_tokenizers(baton, fixtures, name):
    path, tok = fixtures[name]
    _check_decodes(baton, path, tok, name, tc.id_sequences(tok, name not in tc.SPM, SEED))


@pytest.mark.parametrize("name", NAMES)
def test_decode_leaves_out_ids_past_the_vocabulary(baton, fixtures, name):
    # A model's vocabulary is often padded past its tokenizer's (Qwen2's 151936 rows for 151665
    # tokens), and a model may draw those ids: they have no text, and tokenizers leaves them out.
    path, tok = fixtures[name]
    n = tok.get_vocab_size()
    ids = tok.encode("Hello world").ids
    _check_decodes(baton, path, tok, name, [ids[:1] + [n, n + 7] + ids[1:], [n + 100]])


def test_llama3_with_its_real_post_processor(baton, fixtures, text_files, tmp_path):
    """Meta's Llama 3 files wrap the BOS template in Sequence[ByteLevel, TemplateProcessing]; the
    ByteLevel step changes only offsets, so the ids are the plain fixture's."""
    with open(fixtures["llama3"][0], encoding="utf-8") as f:
        d = json.load(f)
    d["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        d["post_processor"]]}
    real = str(tmp_path / "llama3-real.json")
    with open(real, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False)
    ref = Tokenizer.from_file(real)
    bad, some = [], text_files[::8]
    for t, p in some:
        want = ref.encode(t).ids
        got, why = _answer(_cli(baton, real, "--json", "--encode-file", p), "ids")
        if why or got != want:
            bad.append((t, "", want, why or got))
    if bad:
        _fail("llama3 (Sequence post_processor)", "encodings", len(some), bad)


def _write(tmp_path, name, data):
    p = tmp_path / name
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return str(p)


def _assert_refused(r, path):
    err = r.stderr.decode("utf-8", "replace")
    assert _refused(r), f"want exit 1 with a 'baton tokenize:' line and no output, got exit " \
                        f"{r.returncode}, stdout {r.stdout[:200]!r}, stderr {err!r}"
    assert len(err.strip().splitlines()) == 1, f"want a one-line message, got {err!r}"
    assert os.path.basename(path) in err, f"the message should name {path}: {err!r}"


def test_refuses_a_wordpiece_model(baton, tmp_path):
    from tokenizers import models
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "hello": 1, "##s": 2}, unk_token="[UNK]"))
    path = str(tmp_path / "wordpiece.json")
    tok.save(path)
    text = _write(tmp_path, "t.txt", b"hellos")
    _assert_refused(_cli(baton, path, "--json", "--encode-file", text), path)
    _assert_refused(_cli(baton, path, "--json", "--decode", "1,2"), path)


def test_refuses_an_unknown_pre_tokenizer_regex(baton, fixtures, tmp_path):
    with open(fixtures["llama3"][0], encoding="utf-8") as f:
        d = json.load(f)
    d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\w+|\s+|[^\w\s]+"
    path = _write(tmp_path, "other-regex.json", d)
    Tokenizer.from_file(path)  # a valid file for tokenizers, only not one baton knows
    text = _write(tmp_path, "t.txt", b"hello world")
    _assert_refused(_cli(baton, path, "--json", "--encode-file", text), path)


def test_qwen2_normalizes_to_nfc_as_tokenizers_does(baton, fixtures, tmp_path):
    """Qwen 2's normalizer is NFC: texts it changes (letters and their marks apart, marks out of
    canonical order, Hangul jamo, singletons, composition exclusions, compatibility ideographs,
    next to added tokens) give the library's ids."""
    path, tok = fixtures["qwen2"]
    texts = tc.nfc_texts(SEED)
    assert sum(not tc.is_nfc(t) for t in texts) > len(texts) // 2
    files = [(t, _write(tmp_path, f"nfc{i}.txt", t.encode("utf-8"))) for i, t in enumerate(texts)]

    def one(case):
        t, p = case
        want = tok.encode(t).ids
        got, why = _answer(_cli(baton, path, "--json", "--encode-file", p), "ids")
        return None if got == want else (t, "", want, why or got)

    bad = [b for b in _parallel(one, files) if b]
    if bad:
        _fail("qwen2", "NFC encodings", len(files), bad)


def test_refuses_a_text_that_is_not_utf8(baton, fixtures, tmp_path):
    for name in NAMES:
        path = fixtures[name][0]
        for i, data in enumerate((b"ab\xffcd", b"ab\xed\xa0\x80", b"\xe4\xbd", b"\xc0\xaf")):
            text = _write(tmp_path, f"bad{i}.txt", data)
            r = _cli(baton, path, "--json", "--encode-file", text)
            assert _refused(r), (name, data, r.returncode, r.stdout, r.stderr)


def test_missing_files_exit_4(baton, fixtures, tmp_path):
    text = _write(tmp_path, "t.txt", b"hello")
    missing = str(tmp_path / "no-such-tokenizer.json")
    r = _cli(baton, missing, "--json", "--encode-file", text)
    assert r.returncode == 4 and r.stdout == b"", (r.returncode, r.stdout, r.stderr)
    r = _cli(baton, fixtures["llama3"][0], "--json", "--encode-file", str(tmp_path / "no.txt"))
    assert r.returncode == 4 and r.stdout == b"", (r.returncode, r.stdout, r.stderr)


def test_bad_usage_exits_2(baton, fixtures):
    path = fixtures["gpt2"][0]
    for args in ([], [path, "--json", "--decode", "1", "--no-such-flag"]):
        r = _cli(baton, *args)
        assert r.returncode == 2 and r.stdout == b"", (args, r.returncode, r.stdout, r.stderr)
