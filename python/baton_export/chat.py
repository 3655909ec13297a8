"""A model's chat template (the Jinja program of tokenizer_config.json) compiled ahead of time
into chat.json: the text before a conversation, each role's prefix and suffix around its message,
the system message the template inserts when none is given, and the generation prompt (or, in its
place, the end some templates write after a conversation). baton's C
side (baton_chat_render in baton_tokenizer.h, `generate --chat`) renders conversations from it
with no template engine.

The compiler renders the template with transformers' apply_chat_template on conversations whose
contents are marker strings, reads the pieces off between the markers, and then renders a set of
conversations both ways (the template, and the pieces) and requires the same text. A template
that does more than place each message between fixed strings (Mistral's, which moves the system
message into the last user turn; Llama 2's <<SYS>> block) fails that check and is refused with
the first conversation where the two differ: never a chat.json that renders differently."""
import hashlib
import json

from ._base import ExportError

FORMAT = "baton.chat"
VERSION = 1

# The markers: lower-case letters and digits, which no template filter (trim, escaping) changes.
SYS, U1, A1, U2, A2, U3 = ("batonqsysq", "batonqu1q", "batonqa1q", "batonqu2q", "batonqa2q",
                           "batonqu3q")

# Python's str.isspace characters, which Jinja's trim filter (str.strip) removes; the C renderer
# strips the same set (text/chat.c).
_PAD = " \t\n\u3000\u00a0 "


class ChatTemplateError(ExportError):
    """The template is not one chat.json can express, with the reason."""


def _renderer(tokenizer):
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise ChatTemplateError("the tokenizer has no chat template")
    if not callable(getattr(tokenizer, "apply_chat_template", None)):
        raise ChatTemplateError(f"{type(tokenizer).__name__} has no apply_chat_template: give a "
                                "transformers tokenizer")
    if not isinstance(template, str):
        raise ChatTemplateError("the tokenizer has several named chat templates: set "
                                "tokenizer.chat_template to the one to compile")

    def render(messages, gen):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)

    return template, render


def _m(role, content):
    return {"role": role, "content": content}


def _between(text, markers):
    """text split at the markers (each exactly once, in order): len(markers) + 1 pieces."""
    pieces, at = [], 0
    for mk in markers:
        if text.count(mk) != 1 or text.index(mk) < at:
            raise ChatTemplateError("the template does not write each message's content once and "
                                    f"in order (marker {mk!r} in {text!r})")
        i = text.index(mk)
        pieces.append(text[at:i])
        at = i + len(mk)
    pieces.append(text[at:])
    return pieces


def _cut(whole, head, what):
    """whole less its beginning head, which it must have."""
    if not whole.startswith(head):
        raise ChatTemplateError(f"{what}: {whole!r} does not begin with {head!r}")
    return whole[len(head):]


def _raises(render, messages):
    try:
        render(messages, False)
        return False
    except Exception:
        return True


def render_compiled(chat, messages, add_generation_prompt):
    """A conversation rendered from a compiled chat (chat.json's dict), as baton_chat_render does:
    the Python statement of the C renderer, which the compiler's check runs."""
    roles = chat["roles"]
    out = [chat["begin"]]
    if (not messages or messages[0]["role"] != "system") and chat["default_system"] is not None:
        out += [roles["system"]["prefix"], chat["default_system"], roles["system"]["suffix"]]
    prev = None
    for i, m in enumerate(messages):  # the C renderer's refusals, in its words
        role = roles.get(m["role"])
        if role is None and m["role"] == "system" and chat["system_refused"]:
            raise ChatTemplateError(f"message {i}: a system message: {chat['system_refused']}")
        if role is None:
            raise ChatTemplateError(f"message {i}: the role \"{m['role']}\" is not one the "
                                    f"model's chat template writes ({' and '.join(roles)})")
        if m["role"] == "system" and i:
            raise ChatTemplateError(f"message {i}: a system message goes first, before the "
                                    "conversation")
        if chat["alternate"] and m["role"] == prev:
            raise ChatTemplateError(f"message {i}: two {prev} messages in a row, which the "
                                    "model's chat template refuses or writes otherwise: join "
                                    "them into one")
        content = m["content"].strip() if role["trim"] else m["content"]
        out += [role["prefix"], content, role["suffix"]]
        prev = m["role"]
    if prev == "assistant" and not chat["assistant_last"]:
        raise ChatTemplateError(f"message {len(messages) - 1}: the model's chat template writes "
                                "a conversation that ends with the assistant's message otherwise "
                                "than its other turns; end it with a user message")
    out.append(chat["generation_prompt"] if add_generation_prompt else chat["end"])
    return "".join(out)


def _checks(system):
    """Conversations the compiled pieces must render as the template does: one to three turns,
    with and without a system message, ending with the user's or the assistant's message;
    contents with white space at their ends, markup-like text, Unicode, empty ones."""
    contents = ["Hello!", "  padded both ends \n", "\tx\u00a0", "line one\nline two",
                "{{ not a template }} {% if x %}", "<b>bold</b> & \"quotes\" 'single'",
                "é 日本 🙂", "", "a" * 300]
    convs, k = [], 0
    for turns in (1, 2, 3):
        for with_sys in ((False, True) if system else (False,)):
            for end_assistant in (False, True):
                msgs = []
                for t in range(turns * 2 - (not end_assistant) + with_sys):
                    role = "system" if with_sys and t == 0 else \
                        ("user", "assistant")[(t - with_sys) % 2]
                    msgs.append(_m(role, contents[k % len(contents)]))
                    k += 1
                convs.append(msgs)
    return convs


def _mismatch(render, chat, msgs, gen):
    """Where the template and the pieces render msgs differently, or None."""
    want = render(msgs, gen)
    try:
        got = render_compiled(chat, msgs, gen)
    except ChatTemplateError as e:
        return str(e)
    if got == want:
        return None
    i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]),
             min(len(got), len(want)))
    return (f"for {[m['role'] for m in msgs]} (generation prompt {gen}) the template writes "
            f"{want[max(0, i - 40):i + 40]!r} where fixed pieces give "
            f"{got[max(0, i - 40):i + 40]!r}")


def _pieces(tokenizer, template, render):
    """The candidate compilations the markers allow (more than one where the text before a
    conversation may or may not hold a default system message), each chat.json's dict."""
    # user, assistant, user: the user's and the assistant's prefixes and suffixes
    head, x1, x2, tail = _between(render([_m("user", U1), _m("assistant", A1), _m("user", U2)],
                                         False), [U1, A1, U2])
    tail2 = _between(render([_m("user", U1), _m("assistant", A1)], False), [U1, A1])[2]
    # the text after the last message (without a generation prompt) is its suffix, then what the
    # template writes at the end of a conversation (Phi-3's end of text): an end that leaves
    # suffixes which begin the text between messages; none if that works, else the end-of-text
    # token, else the longest
    def splits(k):
        end = tail[len(tail) - k:]
        return (tail2.endswith(end) and x1.startswith(tail[:len(tail) - k]) and
                x2.startswith(tail2[:len(tail2) - k]))

    eos = getattr(tokenizer, "eos_token", None) or ""
    valid = [k for k in range(min(len(tail), len(tail2)) + 1) if splits(k)]
    if not valid:
        raise ChatTemplateError(f"the text after a user message ({tail!r}) does not begin the "
                                f"text between it and an assistant message ({x1!r})")
    k = 0 if 0 in valid else len(eos) if eos and tail.endswith(eos) and len(eos) in valid \
        else valid[-1]
    end = tail[len(tail) - k:]
    user_suffix, assistant_suffix = tail[:len(tail) - k], tail2[:len(tail2) - k]
    assistant_prefix = x1[len(user_suffix):]
    user_prefix = x2[len(assistant_suffix):]
    if not head.endswith(user_prefix):
        raise ChatTemplateError(f"the first user message's prefix {head!r} does not end as the "
                                f"others' {user_prefix!r}")
    opening = head[:len(head) - len(user_prefix)]  # begin, and maybe a default system message
    generation_prompt = _cut(_between(render([_m("user", U1)], True), [U1])[1], user_suffix,
                             "the generation prompt after a user message")
    roles = {"user": {"prefix": user_prefix, "suffix": user_suffix},
             "assistant": {"prefix": assistant_prefix, "suffix": assistant_suffix}}
    base = {"format": FORMAT, "version": VERSION, "begin": opening, "default_system": None,
            "roles": roles, "generation_prompt": generation_prompt, "end": end,
            "system_refused": None}
    if _raises(render, [_m("system", SYS), _m("user", U1)]):
        return [base]  # no system role (Gemma's raises)
    try:
        sys_head, y, _ = _between(render([_m("system", SYS), _m("user", U1)], False), [SYS, U1])
        if not y.endswith(user_prefix):
            raise ChatTemplateError(f"the text after the system message ({y!r}) does not end "
                                    f"with the user's prefix ({user_prefix!r})")
    except ChatTemplateError as e:
        # a template that moves the system message into a user turn (Mistral's, Llama 2's,
        # Gemma 3's): conversations without one still compile, and baton refuses one with this
        return [dict(base, system_refused=f"the chat template does not place it between fixed "
                                          f"strings ({e}): give it in the user's message")]
    system_suffix = y[:len(y) - len(user_prefix)]  # (no end: a user message follows)
    out = []
    if sys_head.startswith(opening):  # no system message unless one is given (Llama 3)
        out.append(dict(base, roles=dict(roles, system={"prefix": sys_head[len(opening):],
                                                        "suffix": system_suffix})))
    if opening.startswith(sys_head) and opening.endswith(system_suffix) and \
            len(opening) >= len(sys_head) + len(system_suffix):
        # a default system message (Qwen 2.5's, SmolLM2's; Llama 3.1's empty one)
        bos = getattr(tokenizer, "bos_token", None) or ""  # where the template writes it
        begin = bos if bos and sys_head.startswith(bos) and "bos_token" in template else ""
        out.append(dict(base, begin=begin,
                        default_system=opening[len(sys_head):len(opening) - len(system_suffix)],
                        roles=dict(roles, system={"prefix": sys_head[len(begin):],
                                                  "suffix": system_suffix})))
    if not out:
        raise ChatTemplateError(f"the text before a conversation without a system message "
                                f"({opening!r}) is not that before one with it ({sys_head!r}), "
                                "with or without a default message")
    return out


def compile_chat_template(tokenizer):
    """tokenizer's chat template as chat.json's dict, or ChatTemplateError with the reason."""
    template, render = _renderer(tokenizer)
    try:
        candidates = _pieces(tokenizer, template, render)
        system = "system" in candidates[0]["roles"]
        marker = {"system": SYS, "user": U1, "assistant": A1}
        trims = {}
        for name in candidates[0]["roles"]:  # what the template does to a content's end spaces
            padded = _PAD + marker[name] + _PAD
            msgs = {"system": [_m("system", padded), _m("user", U1)],
                    "user": [_m("user", padded)],
                    "assistant": [_m("user", U1), _m("assistant", padded)]}[name]
            trims[name] = padded not in render(msgs, False)
        first_error = None
        for chat in candidates:
            chat = dict(chat, roles={r: dict(chat["roles"][r], trim=trims[r])
                                     for r in ("system", "user", "assistant")
                                     if r in chat["roles"]},
                        alternate=False, assistant_last=True)
            # a conversation that ends with the assistant's message (an answer begun), and two
            # turns of a role in a row: rendered as the pieces render them, else refused by baton
            # (Qwen3 writes the last assistant turn otherwise; Gemma's template raises on pairs)
            ends = [c for c in _checks(system) if c[-1]["role"] == "assistant"]
            chat["assistant_last"] = all(_mismatch(render, chat, c, g) is None
                                         for c in ends for g in (False, True))
            for pair in ([_m("user", U1), _m("user", U2)],
                         [_m("user", U1), _m("assistant", A1), _m("assistant", A2),
                          _m("user", U3)]):
                try:
                    chat["alternate"] |= _mismatch(render, chat, pair, False) is not None
                except Exception:  # the template raised
                    chat["alternate"] = True
            error = None
            for msgs in _checks(system):
                if msgs[-1]["role"] == "assistant" and not chat["assistant_last"]:
                    continue
                for gen in (False, True):
                    error = error or _mismatch(render, chat, msgs, gen)
            if error is None:
                chat["template_sha256"] = hashlib.sha256(template.encode()).hexdigest()
                return chat
            first_error = first_error or error
    except ChatTemplateError:
        raise
    except Exception as e:  # the template raised on a plain conversation
        raise ChatTemplateError(f"the template failed on a plain conversation: {e}") from e
    raise ChatTemplateError("the template does not place messages between fixed strings: " +
                            first_error)


def write_chat(tokenizer, path):
    """chat.json at path from tokenizer's chat template; the compiled dict, or ChatTemplateError
    (nothing written)."""
    chat = compile_chat_template(tokenizer)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(chat, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return chat
