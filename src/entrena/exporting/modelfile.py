"""An Ollama ``Modelfile`` whose ``TEMPLATE`` renders chats exactly as the training chat
template did.

Ollama does not read a GGUF file's Jinja template reliably (it matches it against templates
it knows, and an imported fine-tune often falls back to a plain one), so the bundle spells
the template out in Ollama's Go-template syntax. It is derived, not hand-written: the
training template is rendered on probe conversations with marker contents, which gives per
turn ``<begin><role><middle><content><end>``, the generation prompt (the assistant header)
and the system prompt the template inserts when a conversation has none. Templates that do
not render every turn that way (e.g. ones that treat the first user turn specially) are
refused rather than approximated: :func:`chat_structure` checks its result against the
Jinja template on several conversations.

Ollama prepends the Modelfile's ``SYSTEM`` as a system message when a request has none and
the template iterates ``.Messages`` (Ollama's docs, "Template" and "SYSTEM"); the template
below relies on that for the default system prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from entrena.errors import DataError

__all__ = ["ChatStructure", "chat_structure", "render_modelfile"]

_MARK = "\u2063entrena-{}\u2063"


@dataclass(frozen=True)
class ChatStructure:
    """A chat template as turns: ``start`` once, then per message ``turn_prefix + role +
    turn_middle + content + turn_suffix``, then ``generation_prompt``.

    Attributes:
        start: Text before the first turn (a BOS string, or empty).
        turn_prefix: Before the role name (``<|im_start|>``).
        turn_middle: Between the role and the content (a newline).
        turn_suffix: After the content (``<|im_end|>`` and a newline).
        generation_prompt: The assistant header the model answers after.
        default_system: The system prompt inserted when a chat has none, or ``None``.
    """

    start: str
    turn_prefix: str
    turn_middle: str
    turn_suffix: str
    generation_prompt: str
    default_system: str | None

    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt of ``messages`` (with the generation prompt)."""
        if self.default_system is not None and (not messages
                                                or messages[0]["role"] != "system"):
            messages = [{"role": "system", "content": self.default_system}, *messages]
        turns = "".join(f"{self.turn_prefix}{m['role']}{self.turn_middle}{m['content']}"
                        f"{self.turn_suffix}" for m in messages)
        return f"{self.start}{turns}{self.generation_prompt}"


def _split_turn(text: str, role: str, content: str) -> tuple[str, str, str]:
    before, marker, after = text.partition(content)
    head, found, middle = before.rpartition(role)
    if not marker or not found:
        raise ValueError(role)
    return head, middle, after


def chat_structure(tokenizer: Any) -> ChatStructure:
    """The :class:`ChatStructure` of a tokenizer's chat template.

    Raises:
        DataError: The template does not render turns uniformly (see the module docstring).
    """
    def render(messages: list[dict[str, str]], generation: bool) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=generation)

    system, user, assistant = (_MARK.format(n) for n in ("system", "user", "assistant"))
    try:
        plain = render([{"role": "system", "content": system}], False)
        start_and_prefix, middle, suffix = _split_turn(plain, "system", system)
        with_user = render([{"role": "system", "content": system},
                            {"role": "user", "content": user}], False)
        prefix, _, _ = _split_turn(with_user[len(plain):], "user", user)
        start = start_and_prefix[:len(start_and_prefix) - len(prefix)]
        prompted = render([{"role": "user", "content": user}], True)
        bare = render([{"role": "user", "content": user}], False)
        generation = prompted[len(bare):]
        default = None
        first = bare[len(start):]
        if first.startswith(prefix + "system" + middle):
            default = first[len(prefix + "system" + middle):].partition(suffix)[0]
        structure = ChatStructure(start, prefix, middle, suffix, generation, default)
    except (ValueError, IndexError):
        structure = None
    probes = [
        [{"role": "user", "content": "Hello"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
         {"role": "user", "content": "c\nd"}],
    ]
    if structure is None or any(structure.render(p) != render(p, True) for p in probes):
        raise DataError("the model's chat template does not render each turn as "
                        "<prefix><role><middle><content><suffix>, so no Ollama TEMPLATE "
                        "equal to it can be written; use the GGUF's embedded template "
                        "(llama.cpp) instead of the Modelfile")
    return structure


def _quoted(text: str, what: str) -> str:
    if '"""' in text or "{{" in text or "}}" in text:
        raise DataError(f"the chat template's {what} holds '\"\"\"' or '{{{{', which a "
                        f"Modelfile cannot quote; no Modelfile can be written")
    return text


def render_modelfile(structure: ChatStructure, *, stop: list[str],
                     model_file: str = "model.gguf") -> str:
    """The ``Modelfile``: ``FROM``, ``TEMPLATE``, ``SYSTEM`` (when the template has a
    default), ``PARAMETER stop`` per stop string and ``PARAMETER temperature 0`` (greedy, as
    the parity check generates).

    Args:
        structure: The chat template as turns.
        stop: Strings that end a response (the EOS token's text first).
        model_file: The GGUF file, relative to the Modelfile.
    """
    s = structure
    template = (f"{_quoted(s.start, 'start')}{{{{ range .Messages }}}}"
                f"{_quoted(s.turn_prefix, 'turn prefix')}{{{{ .Role }}}}"
                f"{_quoted(s.turn_middle, 'turn middle')}{{{{ .Content }}}}"
                f"{_quoted(s.turn_suffix, 'turn suffix')}{{{{ end }}}}"
                f"{_quoted(s.generation_prompt, 'generation prompt')}")
    lines = [f"FROM ./{model_file}", f'TEMPLATE """{template}"""']
    if s.default_system is not None:
        lines.append(f'SYSTEM """{_quoted(s.default_system, "default system prompt")}"""')
    lines += [f'PARAMETER stop "{text}"' for text in dict.fromkeys(stop) if text]
    lines.append("PARAMETER temperature 0")
    return "\n".join(lines) + "\n"
