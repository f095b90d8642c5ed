"""Metrics of ``task: llm-sft``: loss and perplexity on response tokens, exact match of
greedy generations and the share of generations that end with EOS.

- ``loss``: mean negative log-likelihood per target token (nats), over the response tokens
  and their EOS only; ``perplexity`` = exp(loss).
- ``exact_match``: share of examples whose generation, decoded without special tokens,
  equals the reference after :func:`normalise_answer` (lower case, whitespace collapsed,
  trimmed).
- ``eos_share``: share of generations that emitted EOS within ``max_new_tokens`` (a model
  that does not stop is not usable however good its first words).
- ``answers``: how the generations spread (:func:`answer_summary`): the commonest answer, its
  share, and the share of references that are that answer; the ``one_answer`` finding
  (:func:`entrena.recipes.verdicts.one_answer_finding`) reads it.

When the training responses are a small set of labels (:func:`label_answers`), the majority
answer is a baseline beside the zero-shot base model (:func:`majority_answer_baseline`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from entrena.tasks.significance import with_rows

__all__ = ["normalise_answer", "generation_scores", "evaluate_sft", "match_rows",
           "wilson_interval", "label_answers", "answer_summary", "majority_answer_baseline",
           "SFT_HIGHER_IS_BETTER"]

SFT_HIGHER_IS_BETTER = {"loss": False, "perplexity": False, "exact_match": True,
                        "eos_share": True}
"""Direction of each metric :func:`evaluate_sft` returns."""

SAMPLES_SHOWN = 20
"""Examples of the test split listed with their prompt, reference and generation."""

LABEL_MAX_ANSWERS = 20
"""Responses are labels when their commonest this-many normalised answers…"""

LABEL_MIN_COVERAGE = 0.95
"""…cover at least this share of the training rows…"""

LABEL_MIN_REPEATS = 2
"""…and the rows are at least this many times the answers kept (each label seen about twice
or more: a dozen distinct sentences are not labels)."""


def normalise_answer(text: str) -> str:
    """Lower case, whitespace runs as one space, trimmed (``" Great\\n"`` → ``"great"``)."""
    return re.sub(r"\s+", " ", text).strip().lower()


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (Wilson, 1927, JASA 22:209): unlike the
    normal approximation it stays inside [0, 1] and is not empty at 0 or n successes.

    Args:
        successes: Trials that succeeded (0 ≤ successes ≤ n).
        n: Trials (≥ 1).
        z: The normal quantile (1.96: a 95% interval).

    Returns:
        ``(low, high)``, fractions.

    Raises:
        ValueError: ``n`` < 1 or ``successes`` outside [0, n].
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: {successes} successes of {n} trials")
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def label_answers(responses: Sequence[str]) -> list[str] | None:
    """The label set of a task's responses, or ``None`` when they are free text.

    Responses are labels when at most :data:`LABEL_MAX_ANSWERS` distinct normalised answers
    (:func:`normalise_answer`) cover at least :data:`LABEL_MIN_COVERAGE` of the rows, and the
    rows number at least :data:`LABEL_MIN_REPEATS` times those answers. Why these bounds:
    20 holds the label sets people fine-tune an LLM to answer with (sentiment, yes/no,
    spam/ham, intents, topic taxonomies of a dozen or so), while past 20 the commonest answer
    is rarely a yardstick worth reporting; 95% lets a few stray spellings, typos or "n/a"
    rows through without calling a set of labels free text (a 5% tail moves the majority
    answer's score by at most 0.05); the repeats rule keeps a handful of distinct
    sentences, which trivially have fewer than 20 answers, from counting as labels.

    Args:
        responses: The training responses (text).

    Returns:
        The commonest answers, commonest first (ties: first seen first), or ``None``.
    """
    counts = Counter(normalise_answer(r) for r in responses)
    if not counts:
        return None
    top = counts.most_common(LABEL_MAX_ANSWERS)
    covered = sum(n for _, n in top) / len(responses)
    if covered < LABEL_MIN_COVERAGE or len(responses) < LABEL_MIN_REPEATS * len(top):
        return None
    return [answer for answer, _ in top]


def answer_summary(texts: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """How a split's generations spread over answers.

    Returns:
        ``{"rows", "distinct", "commonest", "commonest_share", "reference_share"}``: the
        generations scored, their distinct normalised answers, the commonest one, the share
        of generations that give it, and the share of references that are it (the one
        answer a collapsed model gives, against how often it is right).
    """
    answers = Counter(normalise_answer(t) for t in texts)
    if not answers:
        return {"rows": 0, "distinct": 0, "commonest": None, "commonest_share": None,
                "reference_share": None}
    commonest, count = answers.most_common(1)[0]
    truth = sum(normalise_answer(r) == commonest for r in references)
    return {"rows": len(texts), "distinct": len(answers), "commonest": commonest,
            "commonest_share": count / len(texts), "reference_share": truth / len(texts)}


def majority_answer_baseline(train_responses: Sequence[str],
                             evaluation: dict[str, Sequence[str]]) -> dict[str, Any] | None:
    """Always give the commonest training answer, scored as the model is, when the training
    responses are labels (:func:`label_answers`); ``None`` for free text.

    Args:
        train_responses: The training responses.
        evaluation: ``{split: reference responses}`` (validation, test).

    Returns:
        ``{"answer", <split>: {"exact_match"} with the rows for the paired comparison
        (:func:`~entrena.tasks.significance.with_rows`: ones and match flags, every row of
        the split in order)}``.
    """
    labels = label_answers(train_responses)
    if labels is None:
        return None
    answer = labels[0]
    result: dict[str, Any] = {"answer": answer}
    for split, references in evaluation.items():
        flags = np.array([normalise_answer(r) == answer for r in references], dtype=np.int64)
        if len(flags):
            result[split] = with_rows({"exact_match": float(flags.mean())},
                                      np.ones(len(flags), dtype=np.int64), flags)
    return result


def _decode(tokenizer: Any, ids: np.ndarray) -> str:
    return tokenizer.decode([int(i) for i in ids if i >= 0], skip_special_tokens=True)


def generation_scores(generated: np.ndarray, references: list[str], tokenizer: Any,
                      eos_token_id: int) -> tuple[dict[str, float], list[str]]:
    """Exact match and EOS share of generations against reference texts.

    Args:
        generated: Generated ids (N, G), -1 after each generation's end.
        references: N reference responses (text, no EOS).
        tokenizer: Decodes the ids.
        eos_token_id: The EOS id.

    Returns:
        ``({"exact_match", "eos_share"}, the N decoded generations)``.
    """
    texts = [_decode(tokenizer, row) for row in generated]
    if not texts:
        return {"exact_match": float("nan"), "eos_share": float("nan")}, texts
    match = [normalise_answer(t) == normalise_answer(r)
             for t, r in zip(texts, references, strict=True)]
    eos = [bool((row == eos_token_id).any()) for row in generated]
    return {"exact_match": float(np.mean(match)), "eos_share": float(np.mean(eos))}, texts


def match_rows(outputs: np.ndarray, targets: np.ndarray, tokenizer: Any,
               eos_token_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ones, match flags)`` (N,) int64 in example order (``targets[:, 0]``): each
    generation's exact match, as :func:`evaluate_sft` scores it — the rows the paired
    comparison with the zero-shot baseline resamples.

    Args:
        outputs: (N, 2 + G) as :func:`evaluate_sft` takes them.
        targets: (N, 1 + R): example index, then the reference ids.
        tokenizer: Decodes the ids.
        eos_token_id: The EOS id.
    """
    references = [_decode(tokenizer, row) for row in targets[:, 1:].astype(np.int64)]
    _, texts = generation_scores(outputs[:, 2:].astype(np.int64), references, tokenizer,
                                 eos_token_id)
    flags = np.zeros(len(texts), dtype=np.int64)
    for position, (text, reference) in zip(targets[:, 0].astype(np.int64),
                                            zip(texts, references, strict=True), strict=True):
        flags[position] = normalise_answer(text) == normalise_answer(reference)
    return np.ones(len(texts), dtype=np.int64), flags


def evaluate_sft(outputs: np.ndarray, targets: np.ndarray, tokenizer: Any, eos_token_id: int,
                 prompts: list[str] | None = None) -> dict[str, Any]:
    """A split's metrics from the model's eval outputs.

    Args:
        outputs: (N, 2 + G): summed NLL and target count per example, then the generation.
        targets: (N, 1 + R): example index, then the reference ids (EOS included), -1 after.
        tokenizer: Decodes ids.
        eos_token_id: The EOS id.
        prompts: The split's prompts, for a table of samples (test split).

    Returns:
        ``loss``, ``perplexity``, ``exact_match``, ``eos_share``, ``answers``
        (:func:`answer_summary`) (and ``samples``).
    """
    total, count = float(outputs[:, 0].sum()), float(outputs[:, 1].sum())
    loss = total / max(count, 1.0)
    references = [_decode(tokenizer, row) for row in targets[:, 1:].astype(np.int64)]
    scores, texts = generation_scores(outputs[:, 2:].astype(np.int64), references, tokenizer,
                                      eos_token_id)
    result: dict[str, Any] = {"loss": loss,
                              "perplexity": math.exp(loss) if loss < 700 else float("inf"),
                              **scores, "answers": answer_summary(texts, references)}
    if prompts is not None:
        index = targets[:, 0].astype(np.int64)
        result["samples"] = [{"prompt": prompts[int(i)], "reference": ref, "generated": gen}
                             for i, ref, gen in list(zip(index, references, texts,
                                                         strict=True))[:SAMPLES_SHOWN]]
    return result
