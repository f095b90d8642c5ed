"""``entrena chat`` for ``task: llm-sft``: a conversation with a run's model (PyTorch) or an
exported one (a GGUF bundle through llama.cpp, a ``hf`` bundle through PyTorch), greedy, the
prompt rendered by the model's chat template as in training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ChatAnswer", "ChatSession"]


@dataclass(frozen=True)
class ChatAnswer:
    """One answer of :meth:`ChatSession.answer`.

    Attributes:
        text: The answer, special tokens removed, stripped.
        prompt_tokens: Tokens of the prompt the model read (after any cut).
        completion_tokens: Tokens generated (the end-of-sequence token included).
        finish_reason: ``stop`` (the model ended its answer) or ``length`` (cut at
            ``max_new_tokens``), OpenAI's and MLflow's names.
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str


class ChatSession:
    """Replies to a conversation.

    Args:
        location: The model (:class:`~entrena.exporting.prediction.ModelLocation`).
        max_new_tokens: The most tokens of one reply.
        context_tokens: The longest prompt; the oldest turns are dropped beyond it.
        threads: CPU threads.

    Raises:
        ResourceError: A GGUF bundle without llama-cpp-python installed.
    """

    def __init__(self, location: Any, *, max_new_tokens: int = 256, context_tokens: int = 2048,
                 threads: int | None = None):
        from entrena.tasks.llm_sft.model import load_sft_model
        from entrena.tasks.llm_sft.tokenizer import build_tokenizer, padding_id

        self.max_new_tokens, self.context_tokens = int(max_new_tokens), int(context_tokens)
        self.system = location.meta.get("system_prompt")
        if location.manifest.get("format") == "gguf":
            from entrena.tasks.llm_sft.generators import GgufGenerator

            self.tokenizer = build_tokenizer(str(location.folder))
            self.generator: Any = GgufGenerator(
                location.folder / location.manifest["file"],
                context_tokens=self.context_tokens + self.max_new_tokens, threads=threads)
        else:
            import torch

            from entrena.tasks.llm_sft.generators import TorchGenerator

            if threads:
                torch.set_num_threads(int(threads))
            model, self.tokenizer, _ = load_sft_model(location.folder)
            self.generator = TorchGenerator(model.lm, eos_token_id=self.tokenizer.eos_token_id,
                                            pad_token_id=padding_id(self.tokenizer))
        self.engine = self.generator.engine

    def reply(self, messages: list[dict[str, str]]) -> str:
        """The model's answer to ``messages`` (:meth:`answer`'s text)."""
        return self.answer(messages).text

    def answer(self, messages: list[dict[str, str]],
               max_new_tokens: int | None = None) -> ChatAnswer:
        """The model's greedy answer to ``messages``: user and assistant turns, oldest first.

        A leading ``system`` message replaces the model's system prompt from training (which
        is put first otherwise, when it had one); the oldest exchanges are dropped while the
        prompt is longer than ``context_tokens``.

        Args:
            messages: ``{"role": "system" | "user" | "assistant", "content": str}`` dicts.
            max_new_tokens: The most tokens of this answer (default: the session's).

        Raises:
            DataError: No messages, a role other than those three, a ``system`` message that
                is not the first, or a content that is not a string.
        """
        import numpy as np

        turns = _checked(messages)
        system = [{"role": "system", "content": self.system}] if self.system else []
        if turns[0]["role"] == "system":
            system, turns = turns[:1], turns[1:]
        limit = self.max_new_tokens if max_new_tokens is None else max(1, int(max_new_tokens))
        while True:
            prompt = self.tokenizer.apply_chat_template(system + turns, tokenize=False,
                                                        add_generation_prompt=True)
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            if len(ids) <= self.context_tokens or len(turns) <= 1:
                break
            turns = turns[2:] if len(turns) > 2 else turns[-1:]  # drop the oldest exchange
        ids = ids[-self.context_tokens:]
        answers = self.generator.generate([prompt], [np.asarray(ids, dtype=np.int64)], limit)
        generated = answers.ids[0]
        ended = bool(generated) and generated[-1] == self.tokenizer.eos_token_id
        return ChatAnswer(self.tokenizer.decode(generated, skip_special_tokens=True).strip(),
                          prompt_tokens=len(answers.prompt_ids[0]),
                          completion_tokens=len(generated),
                          finish_reason="stop" if ended or len(generated) < limit
                          else "length")


ROLES = ("system", "user", "assistant")


def _checked(messages: Any) -> list[dict[str, str]]:
    """``messages`` as ``{"role", "content"}`` dicts, or a one-line :class:`DataError`."""
    from entrena.errors import DataError

    if not isinstance(messages, (list, tuple)) or not messages:
        raise DataError("messages: give at least one {role, content} message (the user's "
                        "turn last)")
    out = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else getattr(message, "role",
                                                                             None)
        content = (message.get("content") if isinstance(message, dict)
                   else getattr(message, "content", None))
        if role not in ROLES:
            raise DataError(f"messages[{i}].role {role!r}: give one of {', '.join(ROLES)}")
        if role == "system" and i:
            raise DataError(f"messages[{i}]: a system message goes first; move it to the "
                            "start")
        if not isinstance(content, str):
            raise DataError(f"messages[{i}].content: give the text as a string, not "
                            f"{type(content).__name__}")
        out.append({"role": role, "content": content})
    if out[-1]["role"] == "system":
        raise DataError("messages: only a system message; add the user's turn after it")
    return out
