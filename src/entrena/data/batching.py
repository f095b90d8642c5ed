"""Batches of similar length with per-batch padding.

``group_by_length`` is the technique (a pure function on lists); ``entrena.data.loaders`` only
decides when it runs (each epoch, seeded by the epoch, so any epoch's plan can be rebuilt on
resume); ``pad_batch`` pads one batch. ``pack_rows`` packs one batch's sequences into fewer
rows (no cross-contamination is the model's business: position ids restart per sequence).
:class:`BatchSource` is what the loop needs of any task's batches (here, below both the engine
and the tasks, so that each can name it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["BatchSource", "group_by_length", "sequential_batches", "random_batches",
           "epoch_batches", "reference_loss", "pad_batch", "padded_width", "pack_rows",
           "padding_fraction", "packed_padding_fraction"]


class BatchSource(Protocol):
    """What the loop needs from data: a batch plan per epoch and a way to build a batch."""

    def plan(self, epoch: int) -> list[list[int]]:
        """Batches of example indices for ``epoch`` (deterministic for a given epoch)."""
        ...

    def collate(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        """Tensors of one batch: ``labels`` (B,) int64 and the model's keyword inputs (text:
        ``input_ids`` (B, T), ``attention_mask`` (B, T); image: ``pixel_values``
        (B, C, H, W); tabular: ``features`` (B, F))."""
        ...

    # Optional: ``target_count(indices) -> int``, the count the task's loss divides a batch's
    # sum by (target tokens of a language model), known before the forward pass; with it,
    # every micro-batch of an optimizer step is divided by the step's total.
    # Optional: ``reference_loss(indices) -> float | None``, the loss a trivial model gets on
    # those examples (a standardised regression target: predicting the training mean, i.e.
    # the targets' mean square); the divergence guard never calls a step diverged below
    # ``divergence_factor`` times it, so one batch with a large, legitimate target is kept.


def group_by_length(lengths: Sequence[int], batch_size: int, seed: int,
                    megabatch_factor: int = 50) -> list[list[int]]:
    """Shuffle, then batch examples of similar length together.

    The examples are shuffled, cut into mega-batches of ``megabatch_factor * batch_size``,
    each mega-batch is sorted by length and cut into batches, and the batch order is shuffled.
    Padding drops to a fraction of random batching while each batch stays a random draw from
    a wide window (the scheme of the Hugging Face ``LengthGroupedSampler`` and fairseq's
    bucketing).

    Args:
        lengths: Token length of each example, shape (N,).
        batch_size: Examples per batch; the last batch of a mega-batch may be smaller.
        seed: Seed of this epoch's shuffle (use ``base_seed + epoch``).
        megabatch_factor: Mega-batch size in batches; 1 gives the least randomness.

    Returns:
        Batches of example indices; every index appears exactly once.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    lengths = np.asarray(lengths)
    span = max(1, megabatch_factor) * batch_size
    batches: list[list[int]] = []
    for start in range(0, len(order), span):
        chunk = order[start:start + span]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i:i + batch_size].tolist() for i in range(0, len(chunk), batch_size))
    permutation = rng.permutation(len(batches))
    return [batches[i] for i in permutation]


def sequential_batches(lengths: Sequence[int], batch_size: int,
                       sort_by_length: bool = True) -> list[list[int]]:
    """Batches for evaluation: sorted by length (least padding), no randomness."""
    order = np.argsort(-np.asarray(lengths), kind="stable") if sort_by_length \
        else np.arange(len(lengths))
    return [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]


def random_batches(n: int, batch_size: int, seed: int) -> list[list[int]]:
    """Plain shuffled batches (what ``group_by_length=False`` uses)."""
    order = np.random.default_rng(seed).permutation(n)
    return [order[i:i + batch_size].tolist() for i in range(0, n, batch_size)]


def epoch_batches(lengths: Sequence[int] | np.ndarray, batch_size: int, *, epoch: int,
                  shuffle: bool, group: bool, seed: int) -> list[list[int]]:
    """The batches of one epoch: sorted by length for evaluation (the same every epoch);
    for training length-grouped (:func:`group_by_length`) or random, seeded ``seed + epoch``.

    Args:
        lengths: Tokens per example, (N,).
        batch_size: Examples per batch.
        epoch: The epoch (ignored without ``shuffle``).
        shuffle: Training order, or the fixed evaluation order.
        group: With ``shuffle``, group similar lengths.
        seed: Base seed.
    """
    if not shuffle:
        return sequential_batches(lengths, batch_size)
    if group:
        return group_by_length(lengths, batch_size, seed + epoch)
    return random_batches(len(lengths), batch_size, seed + epoch)


def padding_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Share of token slots that are padding when each batch is padded to its longest member."""
    lengths = np.asarray(lengths)
    real = sum(int(lengths[b].sum()) for b in batches)
    slots = sum(int(lengths[b].max()) * len(b) for b in batches if len(b))
    return 1.0 - real / slots if slots else 0.0


def pad_batch(sequences: Sequence[np.ndarray], pad_id: int, multiple: int = 1,
              limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token id sequences to the longest one, rounded up to ``multiple``.

    Args:
        sequences: B arrays of token ids of varying length.
        pad_id: Id written into the padding slots.
        multiple: The width is a multiple of this (1: the longest length itself).
        limit: The rounded width is at most this many tokens (never below the longest
            sequence): a model's position limit or the truncation length.

    Returns:
        ``(input_ids, attention_mask)``, both int64 of shape (B, T), T the longest length
        rounded up to ``multiple`` (capped at ``limit``); the mask is 1 on real tokens and 0
        on padding.
    """
    longest = padded_width(max(len(s) for s in sequences), multiple, limit)
    ids = np.full((len(sequences), longest), pad_id, dtype=np.int64)
    mask = np.zeros((len(sequences), longest), dtype=np.int64)
    for row, seq in enumerate(sequences):
        ids[row, :len(seq)] = seq
        mask[row, :len(seq)] = 1
    return ids, mask


def padded_width(length: Any, multiple: int, limit: int | None = None) -> Any:
    """``length`` rounded up to a multiple of ``multiple`` (≥ 1): an int, or elementwise
    for an integer array of lengths; with ``limit``, at most ``max(limit, length)``."""
    width = -(-length // int(multiple)) * int(multiple)
    if limit is None:
        return width
    if isinstance(width, np.ndarray):
        return np.maximum(np.minimum(width, limit), length)
    return max(min(width, limit), length)


def pack_rows(lengths: Sequence[int], capacity: int | None = None) -> list[list[int]]:
    """Sequences packed into rows of at most ``capacity`` tokens, first-fit decreasing.

    First-fit decreasing uses at most 11/9 of the optimal number of rows plus one (Johnson,
    1973); with ``capacity`` the longest sequence (the default), a batch packed this way never
    has wider rows than the same batch padded, so only padding slots are saved.

    Args:
        lengths: Tokens per sequence of one batch, (B,).
        capacity: Tokens per row; default the longest sequence.

    Returns:
        The rows: positions into ``lengths``, each row in decreasing length (ties by position).

    Raises:
        ValueError: A sequence is longer than ``capacity``.
    """
    if not len(lengths):
        return []
    capacity = int(max(lengths)) if capacity is None else int(capacity)
    if max(lengths) > capacity:
        raise ValueError(f"a sequence of {max(lengths)} tokens does not fit rows of {capacity}")
    rows: list[list[int]] = []
    free: list[int] = []
    for position in sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i)):
        size = int(lengths[position])
        for row, room in enumerate(free):
            if size <= room:
                rows[row].append(position)
                free[row] -= size
                break
        else:
            rows.append([position])
            free.append(capacity - size)
    return rows


def packed_padding_fraction(lengths: Sequence[int],
                            batches: Sequence[Sequence[int]]) -> float:
    """Share of token slots that are padding when each batch is packed by :func:`pack_rows`
    into rows as wide as its longest member (compare :func:`padding_fraction`)."""
    lengths = np.asarray(lengths)
    real = slots = 0
    for batch in batches:
        if len(batch):
            sizes = lengths[list(batch)]
            real += int(sizes.sum())
            slots += int(sizes.max()) * len(pack_rows(sizes))
    return 1.0 - real / slots if slots else 0.0


def reference_loss(labels: np.ndarray, indices: Sequence[int]) -> float | None:
    """The squared error of predicting the training mean on ``indices``, for a regression
    target, else ``None``.

    A regression task's ``labels`` (N,) float32 are its standardised targets
    (:mod:`entrena.tasks.regression`), so predicting the training mean is predicting 0 and
    loses their mean square under the task's mean squared error. The loop's divergence guard
    (:func:`~entrena.engine.guard.divergence_threshold`) takes it as a floor, so a batch with
    a large, legitimate target is not called diverged. Class indices (int64) and multi-hot
    tags (N, K) give ``None``.
    """
    if labels.ndim != 1 or labels.dtype.kind != "f" or not len(indices):
        return None
    chosen = labels[np.asarray(indices, dtype=np.int64)].astype(np.float64)
    return float(np.mean(chosen * chosen))
