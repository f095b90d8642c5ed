"""The baselines of ``task: llm-sft``: the base model zero-shot on the same prompts,
generating as many new tokens as the tuned model, and, when the training responses are a
small set of labels, the majority answer
(:func:`~entrena.tasks.llm_sft.evaluation.majority_answer_baseline`). The verdict compares
the model with the better of them on exact match.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from entrena.tasks.llm_sft.sources import weights_source

if TYPE_CHECKING:
    from entrena.config.loading import LoadedConfig
    from entrena.tasks.llm_sft.config import LlmSftConfig
    from entrena.tasks.llm_sft.data import PreparedSft

__all__ = ["ZERO_SHOT_HALF_WIDTH", "ZERO_SHOT_MIN_PROMPTS", "sft_baselines",
           "zero_shot_baseline"]

log = logging.getLogger("entrena")

ZERO_SHOT_HALF_WIDTH = 0.05
"""The zero-shot baseline stops drawing prompts once its exact match is known to ±this (the
95% Wilson interval's half-width): finer than the gap a fine-tune is worth making, and ~48
prompts instead of the split when the base model never answers in the trained form."""

ZERO_SHOT_MIN_PROMPTS = 32
"""Prompts the zero-shot baseline generates before it may stop."""


def sft_baselines(loaded: LoadedConfig[LlmSftConfig], prepared: PreparedSft,
                  sources: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The base model zero-shot (:func:`zero_shot_baseline`) and, when the training
    responses are labels, the majority answer
    (:func:`~entrena.tasks.llm_sft.evaluation.majority_answer_baseline`, on validation and
    test, every row).

    Args:
        loaded: The run's config.
        prepared: The tokenized splits.
        sources: The task's model sources (``weights`` is the base model's).

    Returns:
        ``{"zero_shot": …, "majority_answer": {"answer", <split>: {"exact_match"},
        "time_s"}}`` (``majority_answer`` only for labels).
    """
    from entrena.tasks.llm_sft.evaluation import majority_answer_baseline

    found = zero_shot_baseline(loaded, prepared, sources)
    started = time.perf_counter()
    majority = majority_answer_baseline(
        prepared.splits.train.responses,
        {role: split.responses for role, split in prepared.splits.roles()
         if role != "train"})
    if majority is not None:
        found["majority_answer"] = {**majority, "time_s": time.perf_counter() - started}
        log.info("the responses are labels: the majority answer %r is a baseline",
                 majority["answer"])
    return found


def zero_shot_baseline(loaded: LoadedConfig[LlmSftConfig], prepared: PreparedSft,
                       sources: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The base model zero-shot: greedy generations from the same prompts, as many new
    tokens as the tuned model generates (``max_new_tokens``), scored as the model is, on
    the split the verdict reads (test, else validation).

    Proportionate: the prompts are drawn in a seeded random order, a batch at a time,
    until the 95% Wilson interval of the exact match is at most
    ±:data:`ZERO_SHOT_HALF_WIDTH` (after at least :data:`ZERO_SHOT_MIN_PROMPTS`) or the
    split is used up: a base model that never answers in the trained form (exact match
    0) is settled after ~48 prompts instead of the whole split.

    Args:
        loaded: The run's config.
        prepared: The tokenized splits.
        sources: The task's model sources (``weights`` is the base model's).

    Returns:
        ``{"zero_shot": {<split>: {"exact_match", "eos_share", "prompts",
        "exact_match_ci95"}, "max_new_tokens", "time_s"}}``.
    """
    import numpy as np
    import torch

    from entrena.tasks.llm_sft.evaluation import (
        generation_scores,
        normalise_answer,
        wilson_interval,
    )
    from entrena.tasks.llm_sft.model import build_language_model, greedy_generate
    from entrena.tasks.llm_sft.tokenizer import padding_id
    from entrena.tasks.significance import with_rows

    started = time.perf_counter()
    cfg = loaded.config
    tokenizer = prepared.tokenizer
    torch.manual_seed(cfg.train.seed)  # a built architecture: the run's initial weights
    base = build_language_model(
        pretrained=weights_source(loaded, sources),
        architecture=cfg.model.architecture.model_dump() if cfg.model.architecture
        else None, tokenizer=tokenizer, dropout=0.0).eval()
    eval_batch = cfg.train.eval_batch_size or 2 * cfg.train.batch_size
    role, split = ("test", prepared.splits.test) if prepared.splits.test is not None \
        else ("validation", prepared.splits.validation)
    order = np.random.default_rng(cfg.train.seed).permutation(len(split))
    eos, pad = int(tokenizer.eos_token_id), padding_id(tokenizer)
    generated: list[np.ndarray] = []
    used: list[int] = []  # the split's row of each generated answer, in generation order
    result: dict[str, Any] = {}
    for begin in range(0, len(order), eval_batch):
        chunk = order[begin:begin + eval_batch]
        chunk = chunk[np.argsort([split.prompt_lengths[i] for i in chunk], kind="stable")]
        prompts = [torch.from_numpy(split.input_ids[i][:split.prompt_lengths[i]])
                   for i in chunk]
        out = greedy_generate(base, prompts, max_new_tokens=prepared.max_new_tokens,
                              eos_token_id=eos, pad_token_id=pad).numpy()
        generated.extend(out[row] for row in range(len(chunk)))
        used.extend(int(i) for i in chunk)  # sorted by length, as generated
        width = max(len(g) for g in generated)
        stacked = np.full((len(generated), width), -1, dtype=np.int64)
        for row, ids in enumerate(generated):
            stacked[row, :len(ids)] = ids
        references = [split.responses[i] for i in used]
        scores, texts = generation_scores(stacked, references, tokenizer, eos)
        n = len(generated)
        low, high = wilson_interval(round(scores["exact_match"] * n), n)
        result = {**scores, "prompts": n, "exact_match_ci95": [low, high]}
        if n >= ZERO_SHOT_MIN_PROMPTS and (high - low) / 2 <= ZERO_SHOT_HALF_WIDTH:
            break
    del base
    if generated:  # the drawn prompts' match flags, for the paired comparison
        matches = [normalise_answer(t) == normalise_answer(r)
                   for t, r in zip(texts, references, strict=True)]
        result = with_rows(result, np.ones(len(matches), dtype=np.int64),
                           np.asarray(matches, dtype=np.int64), index=used)
    if len(generated) < len(split):
        log.info("zero-shot baseline: %d of %d %s prompts (exact match %.3f, 95%% "
                 "interval %.3f-%.3f: settled)", len(generated), len(split), role,
                 result["exact_match"], *result["exact_match_ci95"])
    return {"zero_shot": {role: result, "max_new_tokens": prepared.max_new_tokens,
                          "time_s": time.perf_counter() - started}}
