"""Chats of ``task: llm-sft`` as token ids: the prompt rendered by the model's chat template
(with the generation prompt, the assistant header, exactly as prediction renders it), then
the response's tokens and the EOS token, so the model learns to stop. Ids per example:
``prompt + response + [EOS]`` (at most ``model.max_length``), with the prompt's length kept
to mask the loss.

"EOS" here is the token that ends an assistant turn in the chat template
(:func:`turn_end_token`: ``<|im_end|>`` for ChatML, ``<|eot_id|>`` for Llama 3,
``<end_of_turn>`` for Gemma, ``<|end|>`` for Phi-3, ``</s>`` for Mistral), which is not
always the tokenizer's own EOS (Gemma's is ``<eos>``, Phi-3's ``<|endoftext|>``, a Llama 3
base's ``<|end_of_text|>``): a model taught to end with the tokenizer's EOS would write a
turn end the template never shows, and a runtime stopping at the turn end would never see it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from entrena.errors import DataError
from entrena.tasks.llm_sft.chats import SftExample, is_empty, template_fields

__all__ = ["render_prompt", "tokenize_example", "turn_end_token"]

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


def tokenize_example(tokenizer: Any, example: SftExample, max_length: int, *,
                     template: str | None = None) -> tuple[str, np.ndarray, int, bool]:
    """``(prompt text, ids (L,) int64, prompt tokens, truncated)`` of one example.

    ``ids`` is prompt + response + EOS. A too-long prompt is cut in its longest text (the
    template's longest field, or the last user turn) and rendered again.

    Raises:
        DataError: The response (with EOS) and the prompt's fixed part do not fit
            ``max_length``.
    """
    response = _encode(tokenizer, example.response) + [int(tokenizer.eos_token_id)]
    messages = [dict(m) for m in example.messages]
    row = dict(example.row)
    truncated = False
    for _ in range(3):
        prompt = render_prompt(tokenizer, messages, example.where)
        prompt_ids = _encode(tokenizer, prompt)
        over = len(prompt_ids) + len(response) - max_length
        if over <= 0:
            ids = np.array(prompt_ids + response, dtype=np.int64)
            return prompt, ids, len(prompt_ids), truncated
        truncated = True
        if template is not None:
            fields = [c for c in template_fields(template) if isinstance(row.get(c), str)]
            longest = max(fields, key=lambda c: len(row[c]), default=None)
            text = row[longest] if longest else ""
        else:
            users = [m for m in messages if m["role"] == "user"]
            text = users[-1]["content"] if users else ""
        tokens = _encode(tokenizer, text)
        keep = len(tokens) - over - _CUT_MARGIN
        if keep <= 0:
            break
        cut = tokenizer.decode(tokens[:keep])
        if template is not None:
            row[longest] = cut
            messages[-1] = {"role": "user", "content": template.format(
                **{c: ("" if is_empty(v) else v) for c, v in row.items()})}
        else:
            users[-1]["content"] = cut
    raise DataError(f"{example.where}: the response is {len(response)} tokens (EOS included) "
                    f"and does not fit model.max_length = {max_length} with the prompt's fixed "
                    f"part; responses are never cut (a cut response teaches the model not to "
                    f"stop): raise model.max_length or shorten the response")
