"""Greedy answers of an ``llm-sft`` model from PyTorch (batches of prompts of similar
length) or from a GGUF file in llama.cpp (one prompt at a time, as Ollama serves a chat):
what the export's parity check, ``predict`` from a bundle and ``chat`` share.

Both generators take the prompt as training rendered it (the chat template's text, cut to
``model.max_length`` as in training) and return the generated ids, EOS included when
reached. The PyTorch generator reads the training token ids; the GGUF generator tokenizes
the text with llama.cpp, as Ollama and llama.cpp do when they serve the file, so a
tokenizer mismatch shows as a disagreement.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Answers", "TorchGenerator", "GgufGenerator"]


@dataclass
class Answers:
    """Generations of a list of prompts.

    Attributes:
        ids: Per prompt the generated ids (EOS included when reached).
        prompt_ids: Per prompt the ids the engine read.
        seconds: Wall time of all generations (prompt processing included).
    """

    ids: list[list[int]] = field(default_factory=list)
    prompt_ids: list[list[int]] = field(default_factory=list)
    seconds: float = 0.0

    def throughput(self) -> dict[str, float]:
        """``tokens_per_s`` (prompt + generated tokens processed per second of wall time),
        ``generated_tokens_per_s`` and ``seconds``."""
        generated = sum(len(a) for a in self.ids)
        read = sum(len(p) for p in self.prompt_ids)
        seconds = self.seconds if self.seconds > 0 else float("inf")
        return {"tokens_per_s": (generated + read) / seconds,
                "generated_tokens_per_s": generated / seconds, "seconds": self.seconds}


BATCH_SIZE = 16
"""Prompts per PyTorch generation call (:class:`TorchGenerator`): on the 2-core Intel Xeon
with AMX, 100 of the LLM demo's test prompts took 46 s one at a time in fp32 and 19 s in
batches of 16, with the same answers from the q8_0 export's point of view (agreement 0.99
both; docs/benchmarks.md, "Session 15: make llm-demo in 7 min 23 s")."""


class TorchGenerator:
    """Greedy generation with a PyTorch causal LM (a PEFT model or a merged one).

    Prompts are sorted by length and generated ``batch_size`` at a time, left-padded
    (:func:`~entrena.tasks.llm_sft.model.greedy_generate`; the padding is masked, so each
    answer is the one its prompt gets alone, up to float rounding); answers come back in the
    prompts' order.

    Args:
        lm: The language model.
        eos_token_id: Ends a generation.
        pad_token_id: Filler id of the left padding.
        batch_size: Prompts per call (1: one at a time).
    """

    engine = "pytorch"

    def __init__(self, lm: Any, *, eos_token_id: int, pad_token_id: int,
                 batch_size: int = BATCH_SIZE):
        self.lm, self.eos, self.pad = lm, int(eos_token_id), int(pad_token_id)
        self.batch_size = max(1, int(batch_size))

    def generate(self, prompts: list[str], prompt_ids: list[np.ndarray],
                 max_new_tokens: int) -> Answers:
        """Greedy answers; ``prompt_ids`` (each (P,) int64) are what the model reads."""
        import torch

        from entrena.tasks.llm_sft.model import greedy_generate

        ids = [np.asarray(p, dtype=np.int64) for p in prompt_ids]
        generated: list[list[int]] = [[] for _ in ids]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        started = time.perf_counter()
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            out = greedy_generate(self.lm, [torch.from_numpy(ids[i]) for i in chunk],
                                  max_new_tokens=max_new_tokens, eos_token_id=self.eos,
                                  pad_token_id=self.pad)
            for row, i in enumerate(chunk):
                generated[i] = [int(t) for t in out[row].tolist() if t >= 0]
        answers = Answers(ids=generated, prompt_ids=[[int(t) for t in p] for p in ids])
        answers.seconds = time.perf_counter() - started
        return answers


class GgufGenerator:
    """Greedy generation with a GGUF file in llama.cpp (llama-cpp-python).

    Args:
        path: The GGUF file.
        context_tokens: Context window in tokens (prompt + answer).
        threads: CPU threads.

    Raises:
        ResourceError: The runtime is missing or cannot load the file.
    """

    engine = "gguf"

    def __init__(self, path: Path, *, context_tokens: int = 2048, threads: int | None = None):
        from entrena.exporting.llama_runtime import GgufRunner

        self.runner = GgufRunner(path, context_tokens=context_tokens, threads=threads)

    def generate(self, prompts: list[str], prompt_ids: list[np.ndarray] | None,
                 max_new_tokens: int) -> Answers:
        """Greedy answers; the prompt texts are tokenized by llama.cpp (``prompt_ids``
        unused)."""
        answers = Answers()
        started = time.perf_counter()
        for text in prompts:
            ids = self.runner.tokenize(text)
            answers.prompt_ids.append(ids)
            answers.ids.append(self.runner.generate(ids, max_new_tokens=max_new_tokens))
        answers.seconds = time.perf_counter() - started
        return answers
