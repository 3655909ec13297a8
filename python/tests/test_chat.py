"""Chat templates compiled by baton_export.chat into chat.json and rendered by baton's C side
(`baton tokenize --chat`, baton_chat_render) against transformers' apply_chat_template: for each
template of chat_templates.py (modeled on the families' own), every conversation gives the same
text and the same ids (tokenize=True), with and without the generation prompt, or is refused by
both (the template raises) or by baton with the reason chat.json records (a system message the
template moves into a user turn, a last assistant turn written otherwise, a role twice in a row).
"""
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("transformers", reason="transformers is not installed: it renders the "
                    "templates these tests compare with")
from tokenizers import AddedToken, Tokenizer  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

import chat_templates as ct  # noqa: E402
import tokenizer_cases as tc  # noqa: E402
from baton_export.chat import ChatTemplateError, compile_chat_template, render_compiled, \
    write_chat  # noqa: E402

WORKERS = max(2, 2 * (os.cpu_count() or 1))


def _m(role, content):
    return {"role": role, "content": content}


# Besides the fixtures' conversations: a system message alone with the user's, one after the first
# message, conversations that end with the assistant's turn, a role twice in a row, and contents
# with every kind of white space Python's strip removes at their ends (and U+200B, which it keeps),
# and NUL bytes (a model's reply may hold one; `baton tokenize --chat` reads them from \u0000).
EXTRA = [
    [_m("system", "\x1c\u2028 Be brief. \u3000\x85"), _m("user", "\u200b hi \t")],
    [_m("user", "hi"), _m("assistant", "Hello! How can I help?")],
    [_m("system", "S"), _m("user", "a"), _m("assistant", "b")],
    [_m("user", "a"), _m("user", "b")],
    [_m("user", "a"), _m("assistant", "b"), _m("assistant", "c"), _m("user", "d")],
    [_m("user", "a"), _m("system", "late")],
    [_m("user", "  \n ")],
    [_m("user", "a\x00b"), _m("assistant", "\"\x00"), _m("user", " \x00 ")],  # NUL bytes kept
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{template name: (directory with tokenizer.json and chat.json, transformers tokenizer)}: the
    Llama 3 byte-level fixture with the template's special tokens added."""
    base = str(tmp_path_factory.mktemp("chat") / "base.json")
    tc.BUILDERS["llama3"](base)
    out = {}
    for name, t in ct.TEMPLATES.items():
        d = tmp_path_factory.mktemp(name.replace(".", "_"))
        backend = Tokenizer.from_file(base)
        tokens = [x for x in (t["special"] + [t["bos"], t["eos"]]) if x]
        backend.add_special_tokens([AddedToken(x, special=True) for x in dict.fromkeys(tokens)])
        tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=t["bos"],
                                      eos_token=t["eos"])
        tok.chat_template = t["template"]
        backend.save(str(d / "tokenizer.json"))
        write_chat(tok, str(d / "chat.json"))
        out[name] = (str(d), tok)
    return out


def _cli(baton, d, conv, gen, tmpdir, k):
    path = os.path.join(tmpdir, f"conv{k}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(conv, f, ensure_ascii=False)
    args = [baton, "tokenize", os.path.join(d, "tokenizer.json"), "--chat", path, "--json"]
    return subprocess.run(args + ([] if gen else ["--no-generation-prompt"]), capture_output=True,
                          timeout=60)


@pytest.mark.parametrize("name", sorted(ct.TEMPLATES))
def test_conversations_render_as_the_template_writes_them(baton, models, name, tmp_path):
    d, tok = models[name]
    with open(os.path.join(d, "chat.json"), encoding="utf-8") as f:
        chat = json.load(f)
    cases = [(c, g) for c in ct.CONVERSATIONS + EXTRA for g in (True, False)]
    with ThreadPoolExecutor(WORKERS) as ex:
        runs = list(ex.map(lambda kc: _cli(baton, d, kc[1][0], kc[1][1], str(tmp_path), kc[0]),
                           enumerate(cases)))
    bad, rendered = [], 0
    for (conv, gen), r in zip(cases, runs):
        roles = [m["role"] for m in conv]
        try:
            want = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
            want_ids = list(tok.apply_chat_template(conv, tokenize=True,
                                                    add_generation_prompt=gen)["input_ids"])
        except Exception:  # the template refuses it: so must baton
            want = None
        try:
            render_compiled(chat, conv, gen)
            refused = None
        except ChatTemplateError as e:
            refused = str(e)
        err = r.stderr.decode("utf-8", "replace").strip()
        if refused or want is None:
            # refused by baton for a reason chat.json records, or refused by the template too
            if r.returncode != 1 or (refused and refused.split(": ", 1)[1][:40] not in err):
                bad.append(f"{roles} gen={gen}: baton exit {r.returncode} ({err[:200]}); the "
                           f"compiled pieces say {refused!r}, the template "
                           f"{'refuses' if want is None else 'renders'} it")
            if refused and want is not None and not conv[-1]["role"] == "assistant" and \
                    not any(a["role"] == b["role"] for a, b in zip(conv, conv[1:])) and \
                    not (roles.count("system") and (roles[0] != "system" or
                                                   chat["system_refused"])):
                bad.append(f"{roles} gen={gen}: refused ({refused}), but nothing in it is one of "
                           "the refusals chat.json records")
            continue
        if r.returncode != 0:
            bad.append(f"{roles} gen={gen}: baton exit {r.returncode}: {err[:300]}")
            continue
        got = json.loads(r.stdout)
        rendered += 1
        if got["text"] != want:
            bad.append(f"{roles} gen={gen}: text {got['text'][:300]!r} != {want[:300]!r}")
        elif got["ids"] != want_ids:
            bad.append(f"{roles} gen={gen}: ids {got['ids'][:20]} != {want_ids[:20]}")
    assert not bad, f"{name}: {len(bad)} of {len(cases)}:\n" + "\n".join(bad[:8])
    # the plain conversations (alternating, ending with the user's) render, system and all where
    # the template places it
    plain = [c for c in ct.CONVERSATIONS if c[0]["role"] != "system" or "system" in chat["roles"]]
    assert rendered >= 2 * len(plain), (name, rendered, len(plain))


def test_which_templates_place_a_system_message(models):
    """The families whose template moves the system message into a user turn (or drops it) compile
    without the system role, with the reason; the others with it."""
    placed = {n for n, (d, _) in models.items()
              if "system" in json.load(open(os.path.join(d, "chat.json")))["roles"]}
    assert placed == {"llama3", "llama3.2", "qwen2.5", "chatml", "smollm2", "qwen3", "phi3",
                      "zephyr"}, placed
    for n in {"gemma3", "mistral-v0.3", "llama2", "phi3-early"}:
        with open(os.path.join(models[n][0], "chat.json"), encoding="utf-8") as f:
            assert "give it in the user's message" in json.load(f)["system_refused"], n


def test_a_template_that_renders_messages_otherwise_is_refused(tmp_path):
    """One that writes a message's content twice, or numbers the turns, cannot be fixed pieces:
    ChatTemplateError with where it differs, and nothing written."""
    tc.BUILDERS["llama3"](str(tmp_path / "t.json"))
    backend = Tokenizer.from_file(str(tmp_path / "t.json"))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|eot_id|>")
    for template, says in (
            ("{% for m in messages %}{{ m.content }}{{ m.content }}{% endfor %}", "once and in "
             "order"),
            ("{% for m in messages %}[{{ loop.index }}] {{ m.role }}: {{ m.content }}\n"
             "{% endfor %}", "does not end as the others'")):
        tok.chat_template = template
        with pytest.raises(ChatTemplateError, match=says):
            write_chat(tok, str(tmp_path / "chat.json"))
        assert not os.path.exists(tmp_path / "chat.json")
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        compile_chat_template(tok)
