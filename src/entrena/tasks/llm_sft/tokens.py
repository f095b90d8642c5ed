"""Chats of ``task: llm-sft`` as token ids: the prompt rendered by the model's chat template
(with the generation prompt, the assistant header, exactly as prediction renders it), then
the response's tokens and the EOS token, so the model learns to stop. Ids per example:
``prompt + response + [EOS]`` (at most ``model.max_length``), with the prompt's length kept
to mask the loss.

An example over ``model.max_length`` is made to fit in two steps (:func:`fit_example`):

1. a conversation loses whole earlier exchanges, oldest first (:func:`history_cuts`); the
   system turn and the turn being answered (the last user turn) are always kept, so the
   question is never cut while older turns stand;
2. only when the system turn and the last question alone are still too long, the rule of
   single-turn prompts applies: the longest text (the last user turn, or the template's
   longest field) is cut at its end, its first tokens kept, and the prompt rendered again.

The response is never cut (a cut response teaches the model not to stop): when it does not
fit beside the prompt's fixed part, the example is refused with both sizes.

"EOS" here is the token that ends an assistant turn in the chat template
(:func:`turn_end_token`: ``<|im_end|>`` for ChatML, ``<|eot_id|>`` for Llama 3,
``<end_of_turn>`` for Gemma, ``<|end|>`` for Phi-3, ``</s>`` for Mistral), which is not
always the tokenizer's own EOS (Gemma's is ``<eos>``, Phi-3's ``<|endoftext|>``, a Llama 3
base's ``<|end_of_text|>``): a model taught to end with the tokenizer's EOS would write a
turn end the template never shows, and a runtime stopping at the turn end would never see it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from entrena.errors import DataError
from entrena.tasks.llm_sft.chats import SftExample, is_empty, template_fields

__all__ = ["render_prompt", "history_cuts", "Fitted", "fit_example", "tokenize_example",
           "turn_end_token"]

_CUT_MARGIN = 4
"""Extra tokens cut from a too-long prompt text (decoding and re-encoding a cut text can
merge or split a token at the cut)."""


_ANSWER = "entrena0answer0probe"
"""A response no template changes (no spaces to trim, no markup), to find what follows it."""


def turn_end_token(tokenizer: Any) -> str | None:
    """The special token the chat template writes right after an assistant's answer, or
    ``None`` when it writes none there (the tokenizer's EOS then ends a response).

    A two-turn chat (user, assistant) is rendered without a generation prompt, and the
    text after the answer is matched against the tokenizer's special and added tokens
    (longest first); whitespace before the token is skipped (``[/INST] answer </s>``).
    """
    messages = [{"role": "user", "content": "Hello"},
                {"role": "assistant", "content": _ANSWER}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=False)
    except Exception:  # noqa: BLE001 - a template that refuses this chat names no turn end
        return None
    if not isinstance(text, str) or _ANSWER not in text:
        return None
    after = text[text.index(_ANSWER) + len(_ANSWER):].lstrip(" ")
    specials = {str(t) for t in tokenizer.all_special_tokens}
    specials |= {str(t) for t in tokenizer.get_added_vocab()}
    for token in sorted(specials, key=len, reverse=True):
        if token and after.startswith(token) and len(_encode(tokenizer, token)) == 1:
            return token
    return None


def render_prompt(tokenizer: Any, messages: list[dict[str, str]],
                  where: str | None = None) -> str:
    """The prompt as the model sees it: the chat template with the assistant header.

    Args:
        tokenizer: The tokenizer with the chat template.
        messages: The prompt's turns.
        where: The example's place (``file:line``), for the error.

    Raises:
        DataError: The template refuses the conversation (Mistral's and Gemma 2's refuse a
            system turn; roles that do not alternate).
    """
    from jinja2 import TemplateError

    try:
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=True)
    except TemplateError as exc:
        roles = "/".join(m["role"] for m in messages)
        raise DataError(f"{where or 'a conversation'}: the model's chat template refuses "
                        f"this conversation ({roles}): {exc}; write the conversations as the "
                        f"template takes them (a system turn folded into the first user turn, "
                        f"no data.system_prompt, alternating turns) or set "
                        f"data.chat_template") from None


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def history_cuts(messages: list[dict[str, str]]) -> Iterator[list[dict[str, str]]]:
    """The prompt's turns with ever more of the earlier conversation dropped: each cut drops
    the oldest remaining exchange whole (a user turn and the assistant turns that answer it,
    so the kept history still starts with a user turn, as strict templates require).
    System turns and the last user turn, with any turn after it, are always kept; a prompt
    with nothing before its last user turn gives no cut.

    Args:
        messages: The prompt's turns (``{"role", "content"}``), without the response.

    Yields:
        Shorter and shorter lists of turns, the last one the system turns and the question.
    """
    users = [i for i, turn in enumerate(messages) if turn["role"] == "user"]
    if not users:
        return
    last = users[-1]
    earlier = [i for i in range(last) if messages[i]["role"] != "system"]
    while earlier:
        drop = {earlier.pop(0)}
        while earlier and messages[earlier[0]]["role"] != "user":
            drop.add(earlier.pop(0))  # the answers of the dropped question go with it
        messages = [turn for i, turn in enumerate(messages) if i not in drop]
        shift = len(drop)
        earlier = [i - shift for i in earlier]
        last -= shift
        yield messages


@dataclass
class Fitted:
    """One example as token ids.

    Attributes:
        prompt: The rendered prompt text.
        ids: Prompt + response + EOS, (L,) int64.
        prompt_length: Tokens of the prompt.
        turns_dropped: Earlier turns dropped whole to fit (0: none).
        prompt_cut: Whether the last question (or the template's longest field) was cut
            inside, after every earlier turn was dropped.
    """

    prompt: str
    ids: np.ndarray
    prompt_length: int
    turns_dropped: int = 0
    prompt_cut: bool = False

    @property
    def truncated(self) -> bool:
        """Whether the prompt lost anything to fit."""
        return self.turns_dropped > 0 or self.prompt_cut


def _refuse(example: SftExample, response: int, fixed: int, max_length: int,
            system: bool) -> DataError:
    part = "the chat template and the system turn" if system else "the chat template"
    return DataError(
        f"{example.where}: the prompt's fixed part ({part}) is {fixed} tokens and the "
        f"response {response} (EOS included): together over model.max_length = {max_length} "
        f"even with every earlier turn dropped and the question cut; responses are never "
        f"cut (a cut response teaches the model not to stop): raise model.max_length, or "
        f"shorten the system turn or the response")


def fit_example(tokenizer: Any, example: SftExample, max_length: int, *,
                template: str | None = None) -> Fitted:
    """One example as ids of at most ``max_length`` tokens (module docstring: earlier turns
    dropped whole first, then the question cut).

    Raises:
        DataError: The response (with EOS) and the prompt's fixed part do not fit
            ``max_length``.
    """
    response = _encode(tokenizer, example.response) + [int(tokenizer.eos_token_id)]

    def over(turns: list[dict[str, str]]) -> tuple[str, list[int], int]:
        prompt = render_prompt(tokenizer, turns, example.where)
        prompt_ids = _encode(tokenizer, prompt)
        return prompt, prompt_ids, len(prompt_ids) + len(response) - max_length

    messages = [dict(m) for m in example.messages]
    prompt, prompt_ids, excess = over(messages)
    written, cut = len(messages), False
    if excess > 0 and template is None:
        for shorter in history_cuts(messages):
            messages = shorter
            prompt, prompt_ids, excess = over(messages)
            if excess <= 0:
                break
    row = dict(example.row)
    for _ in range(3):
        if excess <= 0:
            ids = np.array(prompt_ids + response, dtype=np.int64)
            return Fitted(prompt, ids, len(prompt_ids), written - len(messages), cut)
        cut = True
        if template is not None:
            fields = [c for c in template_fields(template) if isinstance(row.get(c), str)]
            if not fields:
                break  # no text column left to cut
            longest = max(fields, key=lambda c: len(row[c]))
            text = row[longest]
        else:
            users = [m for m in messages if m["role"] == "user"]
            text = users[-1]["content"] if users else ""
        tokens = _encode(tokenizer, text)
        keep = len(tokens) - excess - _CUT_MARGIN
        if keep <= 0:
            break
        cut_text = tokenizer.decode(tokens[:keep])
        if template is not None:
            row[longest] = cut_text
            messages[-1] = {"role": "user", "content": template.format(
                **{c: ("" if is_empty(v) else v) for c, v in row.items()})}
        else:
            users[-1]["content"] = cut_text
        prompt, prompt_ids, excess = over(messages)
    fixed = _fixed_length(tokenizer, messages, template, row)
    raise _refuse(example, len(response), fixed, max_length,
                  any(m["role"] == "system" for m in messages))


def _fixed_length(tokenizer: Any, messages: list[dict[str, str]], template: str | None,
                  row: dict[str, Any]) -> int:
    """Tokens of the prompt that no cut removes: the system turns and the question's turn
    (the template with its fields) rendered with the texts emptied."""
    if template is not None:  # text fields emptied; a number keeps its format spec valid
        try:
            text = template.format(**{c: "" if isinstance(v, str) or is_empty(v) else v
                                      for c, v in row.items()})
        except (ValueError, TypeError):  # a spec such as {n:.2f} on an emptied field
            text = ""
        bare = [m for m in messages if m["role"] == "system"] + [
            {"role": "user", "content": text}]
    else:
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        question = users[-1] if users else len(messages)
        bare = [{**m, "content": ""} if i == question else m
                for i, m in enumerate(messages) if m["role"] == "system" or i >= question]
    return len(_encode(tokenizer, render_prompt(tokenizer, bare)))


def tokenize_example(tokenizer: Any, example: SftExample, max_length: int, *,
                     template: str | None = None) -> tuple[str, np.ndarray, int, bool]:
    """``(prompt text, ids (L,) int64, prompt tokens, truncated)`` of one example: the
    tuple form of :func:`fit_example` (``truncated``: any cut).

    Raises:
        DataError: As :func:`fit_example`.
    """
    fitted = fit_example(tokenizer, example, max_length, template=template)
    return fitted.prompt, fitted.ids, fitted.prompt_length, fitted.truncated
