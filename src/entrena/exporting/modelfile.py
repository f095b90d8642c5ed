"""An Ollama ``Modelfile`` whose ``TEMPLATE`` renders chats exactly as the training chat
template did, for every common template family (ChatML, Llama 3, Gemma, Phi-3, Mistral).

Ollama does not read a GGUF file's Jinja template reliably (it matches it against templates
it knows, and an imported fine-tune often falls back to a plain one), so the bundle spells
the template out in Ollama's Go-template syntax. It is derived, not hand-written per family:
:func:`chat_structure` renders the training template on probe conversations whose contents
are markers and reads off, per role, the text before and after a message's content, the
text before the first turn (a BOS), the generation prompt, the system prompt inserted when a
chat has none, and where a system message goes. Two rules make the reading unambiguous:

- **Turn boundaries** (:func:`_turn_end`): a turn's closing text is what follows its content
  both when another turn follows and when the chat ends there, cut back so that it never
  ends inside a ``<…>`` or ``[…]`` marker (Phi-3 ends a chat with ``<|endoftext|>`` after
  ``<|end|>\\n``, and ``<|assistant|>`` follows it too: the shared ``<|`` is not the turn's).
- **System placement** (:func:`_system_placement`): a system message is either a turn of
  its own (ChatML, Llama 3, Phi-3) or folded into a user turn as ``system + separator +
  content``: the first user turn (Gemma 3, Mistral v0.1) or the last (Mistral v0.3), as
  the template does; a template that raises on a system message gets a Modelfile that
  drops system messages (``caveats`` says so).

The result is then checked, not trusted: the Modelfile's ``TEMPLATE`` is rendered with
Ollama's rules (:mod:`entrena.exporting.ollama`) on several conversations — with and without
a system message, multi-turn — and must give the Jinja template's text exactly; a template
that does not is refused with one line (:class:`~entrena.errors.DataError`, exit 2).

Not mirrored, and recorded in ``caveats``: Go templates have no ``trim``, so a template that
trims contents (Llama 3, Gemma) matches training only for contents without surrounding white
space (what Ollama's clients send for typed text); Ollama merges consecutive messages of one
role with a blank line, which the Jinja templates do not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from entrena.errors import DataError

__all__ = ["ChatStructure", "chat_structure", "ollama_template", "render_modelfile"]

_MARK = "\u2063entrena-{}\u2063"
ROLES = ("system", "user", "assistant")
PROBES = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c\nd"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
     {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
     {"role": "user", "content": "z"}, {"role": "assistant", "content": "w"},
     {"role": "user", "content": "v"}],
]
"""Conversations (each ending with a user turn, as Ollama renders prompts) on which the
Modelfile's TEMPLATE must equal the Jinja template."""


@dataclass(frozen=True)
class ChatStructure:
    """A chat template as turns: ``start`` once, then per message ``prefixes[role] + content +
    suffixes[role]``, then ``generation_prompt``.

    Attributes:
        start: Text before the first turn (a BOS string, or empty).
        prefixes: Per role, the text before a message's content.
        suffixes: Per role, the text after it.
        generation_prompt: What follows the last turn when the model is to answer (the
            assistant header; empty where the user turn already ends with it).
        default_system: The system prompt inserted when a chat has none, or ``None``.
        system_placement: ``"turn"``, ``"first_user"``, ``"last_user"`` (folded into that
            user turn as ``system + system_separator + content``) or ``"dropped"``.
        system_separator: Between a folded system text and the user's content.
        bos_token: The tokenizer's BOS text (``None`` without one).
        caveats: What the Modelfile cannot mirror (module docstring).
    """

    start: str
    prefixes: dict[str, str]
    suffixes: dict[str, str]
    generation_prompt: str
    default_system: str | None
    system_placement: str = "turn"
    system_separator: str = ""
    bos_token: str | None = None
    caveats: tuple[str, ...] = field(default=())

    @property
    def stop(self) -> list[str]:
        """Stop strings the template implies: the assistant turn's closing marker."""
        end = self.suffixes["assistant"].strip()
        return [end] if end else []


def _after(text: str, marker: str) -> tuple[str, str]:
    before, found, after = text.partition(marker)
    if not found:
        raise ValueError("a message's content is not in its rendering (the template changes "
                         "or drops it)")
    return before, after


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _turn_end(followed: str, at_end: str) -> str:
    """The closing text of a turn: the common start of what follows its content when
    another turn follows (``followed``) and when the chat ends there (``at_end``), cut back
    to before an unclosed ``<`` or ``[`` (a special marker is never split)."""
    common = _common_prefix(followed, at_end)
    for opening, closing in (("<", ">"), ("[", "]")):
        cut = common.rfind(opening)
        if cut > common.rfind(closing):
            common = common[:cut]
    return common


def _system_placement(render: Any, system: str, user: str, assistant: str, head: str,
                      first_prefix: str) -> tuple[str, str, str, str]:
    """``(placement, separator, prefix, suffix)`` of the system message (module docstring);
    ``prefix`` includes ``start`` here (split later)."""
    try:
        text = render([{"role": "system", "content": system},
                       {"role": "user", "content": user}], True)
    except Exception:  # noqa: BLE001 - a Jinja raise_exception: no system role
        return "dropped", "", "", ""
    before, rest = _after(text, system)
    between, _ = _after(rest, user)
    if between.endswith(first_prefix) and len(between) > len(first_prefix):
        return "turn", "", before, between[:len(between) - len(first_prefix)]
    if before == head + first_prefix:
        long = render([{"role": "system", "content": system}, {"role": "user", "content": user},
                       {"role": "assistant", "content": assistant},
                       {"role": "user", "content": user + "2"}], True)
        where = long.find(system)
        if where < long.find(assistant):
            return "first_user", between, "", ""
        return "last_user", between, "", ""
    raise ValueError("the system message is neither a turn nor put before a user message's "
                     "content")


def _derive(render: Any, bos: str | None) -> ChatStructure:
    s, u, a = (_MARK.format(n) for n in ROLES)
    u2 = _MARK.format("user2")
    t0, t3 = _after(render([{"role": "user", "content": u}], True), u)
    _, end_user = _after(render([{"role": "user", "content": u}], False), u)
    three = render([{"role": "user", "content": u}, {"role": "assistant", "content": a},
                    {"role": "user", "content": u2}], True)
    _, rest = _after(three, u)
    t1, rest = _after(rest, a)
    t2, _ = _after(rest, u2)
    _, end_assistant = _after(render([{"role": "user", "content": u},
                                      {"role": "assistant", "content": a}], False), a)
    suffix_user = _turn_end(t1, end_user)
    suffix_assistant = _turn_end(t2, end_assistant)
    prefix_assistant, prefix_user = t1[len(suffix_user):], t2[len(suffix_assistant):]
    if not t3.startswith(suffix_user) or not t0.endswith(prefix_user):
        raise ValueError("the text around a user message differs between the first and a "
                         "later turn")
    generation = t3[len(suffix_user):]
    head = t0[:len(t0) - len(prefix_user)]  # start, and a default system turn if any
    placement, separator, before, suffix_system = _system_placement(
        render, s, u, a, head, prefix_user)
    start, prefix_system, default = head, "", None
    if placement == "turn":
        if before.startswith(head):
            prefix_system = before[len(head):]
        elif head.startswith(before) and head.endswith(suffix_system):
            default = head[len(before):len(head) - len(suffix_system)]
            opener = _turn_end(prefix_user, prefix_assistant)  # e.g. <|im_start|>
            start = (before[:before.find(opener)] if opener and opener in before else
                     bos if bos and before.startswith(bos) else "")
            prefix_system = before[len(start):]
        else:
            raise ValueError("the text before the first turn differs with and without a "
                             "system message")
    trimmed = [role for role in ROLES
               if (role != "system" or placement != "dropped") and _trims(render, role)]
    caveats = []
    if trimmed:
        caveats.append(f"the chat template trims the white space around {', '.join(trimmed)} "
                       f"contents and Ollama's template cannot: contents are rendered as sent")
    if placement == "dropped":
        caveats.append("the chat template has no system role: Ollama drops system messages")
    return ChatStructure(start, {"system": prefix_system, "user": prefix_user,
                                 "assistant": prefix_assistant},
                         {"system": suffix_system, "user": suffix_user,
                          "assistant": suffix_assistant}, generation, default, placement,
                         separator, bos, tuple(caveats))


def _trims(render: Any, role: str) -> bool:
    content = " x \n"
    messages = {"system": [{"role": "system", "content": content},
                           {"role": "user", "content": "u"}],
                "user": [{"role": "user", "content": content}],
                "assistant": [{"role": "user", "content": "u"},
                              {"role": "assistant", "content": content},
                              {"role": "user", "content": "u"}]}[role]
    try:
        return content not in render(messages, True)
    except Exception:  # noqa: BLE001 - the template refuses the probe: nothing to learn
        return False


def chat_structure(tokenizer: Any) -> ChatStructure:
    """The :class:`ChatStructure` of a tokenizer's chat template, checked: the Modelfile's
    ``TEMPLATE`` rendered with Ollama's rules equals the Jinja template on :data:`PROBES`.

    Raises:
        DataError: No Go template equal to the chat template can be written (one line).
    """
    from entrena.exporting.ollama import ollama_prompt

    def render(messages: list[dict[str, str]], generation: bool) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=generation)

    bos = getattr(tokenizer, "bos_token", None)
    try:
        structure = _derive(render, bos if isinstance(bos, str) else None)
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - ValueError of a reading, a Jinja raise
        raise DataError(_refusal(f"its turns cannot be read ({str(exc)[:100]})")) from None
    template = ollama_template(structure, add_bos=False)
    for probe in PROBES:
        jinja = render([m for m in probe if m["role"] != "system"
                        or structure.system_placement != "dropped"], True)
        try:
            go = ollama_prompt(template, probe, system=structure.default_system)
        except ValueError as exc:  # GoTemplateError
            go = f"<error: {exc}>"
        if go != jinja:
            at = len(_common_prefix(go, jinja))
            raise DataError(_refusal(
                f"on a chat of {'/'.join(m['role'] for m in probe)} the derived TEMPLATE "
                f"gives {go[at:at + 24]!r} where the template gives {jinja[at:at + 24]!r} "
                f"(character {at})"))
    return structure


def _refusal(why: str) -> str:
    return (f"the model's chat template is not read as turns of <prefix><content><suffix> "
            f"with the system message as a turn or folded into the first or last user turn: "
            f"{why}; so no Ollama TEMPLATE equal to it can be written: use the GGUF's "
            f"embedded template (llama.cpp) instead of the Modelfile")


def _quoted(text: str, what: str) -> str:
    if '"""' in text or "{{" in text or "}}" in text:
        raise DataError(f"the chat template's {what} holds '\"\"\"' or '{{{{', which a "
                        f"Modelfile cannot quote; no Modelfile can be written")
    return text


def _uniform(structure: ChatStructure) -> tuple[str, str] | None:
    """``(before, after)`` the role name when every role's prefix is ``before + role +
    after`` and every suffix is the same (ChatML, Llama 3, Phi-3), else ``None``."""
    s = structure
    if s.system_placement != "turn" or len(set(s.suffixes.values())) != 1:
        return None
    split = [s.prefixes[role].rpartition(role) for role in ROLES]
    if not all(found for _, found, _ in split) or len({(b, a) for b, _, a in split}) != 1:
        return None
    return split[0][0], split[0][2]


def ollama_template(structure: ChatStructure, *, add_bos: bool = False) -> str:
    """The ``TEMPLATE`` (Go template over Ollama's ``.Messages``).

    Args:
        structure: The chat template as turns.
        add_bos: The GGUF file asks the runtime to add a BOS token (its
            ``tokenizer.ggml.add_bos_token``): the template leaves out a BOS it starts with,
            so that the prompt does not hold two.

    Raises:
        DataError: A piece of the template cannot be quoted in a Modelfile.
    """
    s = structure
    start = s.start
    if add_bos and s.bos_token and start.startswith(s.bos_token):
        start = start[len(s.bos_token):]
    q = {what: {role: _quoted(text, f"{role} {what}") for role, text in parts.items()}
         for what, parts in (("prefix", s.prefixes), ("suffix", s.suffixes))}
    head = _quoted(start, "start")
    tail = _quoted(s.generation_prompt, "generation prompt")
    uniform = _uniform(s)
    if uniform is not None:
        before, after = (_quoted(t, "turn prefix") for t in uniform)
        return (f"{head}{{{{ range .Messages }}}}{before}{{{{ .Role }}}}{after}"
                f"{{{{ .Content }}}}{q['suffix']['user']}{{{{ end }}}}{tail}")
    separator = _quoted(s.system_separator, "system separator")
    turn = {role: f"{q['prefix'][role]}{{{{ .Content }}}}{q['suffix'][role]}" for role in ROLES}
    fold = {"first_user": "{{ if $fold }}{{ $system }}" + separator
                          + "{{ $fold = false }}{{ end }}",
            "last_user": "{{ if and $fold (eq (len (slice $.Messages $i)) 1) }}{{ $system }}"
                         + separator + "{{ end }}"}.get(s.system_placement)
    if fold is not None:
        system = "{{ $system = .Content }}{{ $fold = true }}"
        turn["user"] = f"{q['prefix']['user']}{fold}{{{{ .Content }}}}{q['suffix']['user']}"
        head += '{{ $system := "" }}{{ $fold := false }}'
    else:
        system = turn["system"] if s.system_placement == "turn" else ""
    return (f"{head}{{{{ range $i, $_ := .Messages }}}}{{{{ if eq .Role \"system\" }}}}{system}"
            f"{{{{ else if eq .Role \"user\" }}}}{turn['user']}"
            f"{{{{ else if eq .Role \"assistant\" }}}}{turn['assistant']}{{{{ end }}}}"
            f"{{{{ end }}}}{tail}")


def render_modelfile(structure: ChatStructure, *, stop: list[str],
                     model_file: str = "model.gguf", add_bos: bool = False) -> str:
    """The ``Modelfile``: ``FROM``, ``TEMPLATE``, ``SYSTEM`` (when the template has a
    default), ``PARAMETER stop`` per stop string (``stop``, then the template's own
    :attr:`ChatStructure.stop`) and ``PARAMETER temperature 0`` (greedy, as the parity check
    generates).

    Args:
        structure: The chat template as turns.
        stop: Strings that end a response (the EOS token's text first).
        model_file: The GGUF file, relative to the Modelfile.
        add_bos: See :func:`ollama_template`.
    """
    s = structure
    lines = [f"FROM ./{model_file}",
             f'TEMPLATE """{ollama_template(s, add_bos=add_bos)}"""']
    if s.default_system is not None:
        lines.append(f'SYSTEM """{_quoted(s.default_system, "default system prompt")}"""')
    lines += [f'PARAMETER stop "{text}"' for text in dict.fromkeys([*stop, *s.stop]) if text]
    lines.append("PARAMETER temperature 0")
    return "\n".join(lines) + "\n"
