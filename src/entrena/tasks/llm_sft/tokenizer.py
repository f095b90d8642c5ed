"""The tokenizer of ``task: llm-sft``: read from a model folder or hub id with the token that
ends an assistant turn in its chat template as its EOS (:func:`build_tokenizer`), and saved
with what llama.cpp's converter reads and transformers 5 no longer writes
(:func:`save_tokenizer`).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from entrena.core.console import quiet_transformers
from entrena.errors import ConfigError

__all__ = ["SENTENCEPIECE_FILE", "build_tokenizer", "padding_id", "save_tokenizer"]

log = logging.getLogger("entrena")


def build_tokenizer(source: str, chat_template: str | None = None,
                    key: str = "model.name") -> Any:
    """The tokenizer of a model folder or hub id, padding on the right, whose EOS is the
    token that ends an assistant turn in its chat template
    (:func:`~entrena.tasks.llm_sft.tokens.turn_end_token`; the tokenizer's own EOS when the
    template writes none), so that training, generation, the saved folder and its exports
    all stop where the template ends a turn.

    Args:
        source: A folder or hub id.
        chat_template: A Jinja chat template (``data.chat_template``) used instead of the
            tokenizer's own.
        key: The config key ``source`` came from, for messages.

    Raises:
        ConfigError: It has no chat template and none is given, the given one does not
            render a chat, or there is no EOS token.
    """
    from transformers import AutoTokenizer

    from entrena.tasks.llm_sft.tokens import turn_end_token

    quiet_transformers()
    tokenizer = AutoTokenizer.from_pretrained(source)
    if chat_template:
        tokenizer.chat_template = chat_template
        try:
            tokenizer.apply_chat_template([{"role": "user", "content": "Hello"}],
                                          tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - jinja's errors, a template's raise_exception
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ConfigError(f"data.chat_template: the template does not render a one-turn "
                              f"chat ({type(exc).__name__}: {first}); give a Jinja chat "
                              f"template over `messages` with `add_generation_prompt`, such "
                              f"as the model family's published one") from None
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"{key}: the tokenizer of {source} has no chat template, so prompts "
                          f"cannot be written as chats; set data.chat_template to the model "
                          f"family's template (Jinja text, or a .jinja file), or use an "
                          f"instruct (chat) model such as smollm2-135m")
    stop = turn_end_token(tokenizer)
    if stop is not None and stop != tokenizer.eos_token:
        log.info("stop token: %s ends an assistant turn in the chat template (the tokenizer's "
                 "EOS is %s): responses end with it, generation stops at it, and the saved "
                 "tokenizer names it as EOS", stop, tokenizer.eos_token)
        tokenizer.eos_token = stop
    if tokenizer.eos_token_id is None:
        raise ConfigError(f"{key}: the tokenizer of {source} has no EOS token and its chat "
                          f"template ends no turn with a special token; use a chat model's "
                          f"tokenizer")
    tokenizer.padding_side = "right"
    return tokenizer


def padding_id(tokenizer: Any) -> int:
    """The id in padding slots: the tokenizer's pad token, else its EOS."""
    return int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None
               else tokenizer.eos_token_id)


SENTENCEPIECE_FILE = "tokenizer.model"
"""A sentencepiece tokenizer's model file (Gemma, Phi-3, Mistral v0.1-v0.3, Llama 2)."""


def save_tokenizer(tokenizer: Any, directory: Path) -> None:
    """``tokenizer.save_pretrained(directory)`` plus what llama.cpp's converter reads and
    transformers 5 no longer writes: the sentencepiece model file (``tokenizer.model``,
    copied from the folder the tokenizer was read from; the converter's Gemma 2 and Phi-3
    classes read the vocabulary from it), and in ``tokenizer_config.json``
    ``added_tokens_decoder`` (which special tokens are control tokens: without it a
    sentencepiece GGUF tokenizes ``<start_of_turn>`` as text) and ``add_bos_token`` /
    ``add_eos_token`` (without them a sentencepiece GGUF whose tokenizer adds no BOS, as
    Phi-3's, gets llama.cpp's default, which adds one).

    Args:
        tokenizer: A transformers tokenizer.
        directory: The folder to write (created if missing).
    """
    directory = Path(directory)
    tokenizer.save_pretrained(directory)
    target = directory / SENTENCEPIECE_FILE
    vocab_file = tokenizer.init_kwargs.get("vocab_file")
    for source in (Path(str(tokenizer.name_or_path)) / SENTENCEPIECE_FILE,
                   Path(vocab_file) if isinstance(vocab_file, str) else None):
        if (source is not None and source.is_file() and not target.exists()
                and source.resolve() != target.resolve()):
            shutil.copyfile(source, target)
    config_file = directory / "tokenizer_config.json"
    settings = json.loads(config_file.read_text(encoding="utf-8"))
    settings.setdefault("added_tokens_decoder", {
        str(index): {"content": str(token.content), "lstrip": bool(token.lstrip),
                     "normalized": bool(token.normalized), "rstrip": bool(token.rstrip),
                     "single_word": bool(token.single_word), "special": bool(token.special)}
        for index, token in sorted(tokenizer.added_tokens_decoder.items())})
    # What encoding adds, read from behaviour: transformers 5's add_bos_token attribute says
    # False for a Gemma tokenizer whose post-processor adds <bos>.
    plain = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    full = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    added = len(full) > len(plain)
    settings.setdefault("add_bos_token", added and full[0] == tokenizer.bos_token_id)
    settings.setdefault("add_eos_token", added and full[-1] != plain[-1])
    config_file.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n",
                           encoding="utf-8")
