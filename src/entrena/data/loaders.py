"""Batch sources for the loop: encoded texts + labels → padded tensors, per-batch padding."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from entrena.data.batching import epoch_batches, pad_batch, reference_loss
from entrena.data.encoding import EncodedTexts

__all__ = ["TextBatches"]


class TextBatches:
    """Batches of one split, padded to their longest member (rounded up to a multiple).

    Args:
        encoded: Token ids of the split (untruncated up to the model limit).
        labels: Label index per example, shape (N,) (int64); multi-hot tags (N, K)
            (float32, multi-label data); or a regression target (N,) (float32).
        max_length: Truncation length (tokens).
        batch_size: Examples per batch.
        pad_id: Padding token id.
        shuffle: Training order (new each epoch, seeded ``seed + epoch``) or a fixed
            evaluation order sorted by length.
        group_by_length: With ``shuffle``, group similar lengths (see
            :func:`~entrena.data.batching.group_by_length`).
        seed: Base seed.
        pad_to_multiple_of: Each batch is as wide as its longest text rounded up to this
            many tokens, at most ``max_length`` (``data.pad_to_multiple_of``).
    """

    def __init__(self, encoded: EncodedTexts, labels: np.ndarray, *, max_length: int,
                 batch_size: int, pad_id: int, shuffle: bool, group_by_length: bool = True,
                 seed: int = 0, pad_to_multiple_of: int = 1):
        self.encoded = encoded
        labels = np.asarray(labels)
        self.labels = labels.astype(np.float32 if labels.ndim == 2 or labels.dtype.kind == "f"
                                    else np.int64)
        self.max_length = max_length
        self.batch_size = batch_size
        self.pad_id = pad_id
        self.shuffle = shuffle
        self.group = group_by_length
        self.seed = seed
        self.multiple = pad_to_multiple_of
        self.lengths = encoded.lengths(max_length)
        self._plans: dict[int, list[list[int]]] = {}

    def __len__(self) -> int:
        return len(self.labels)

    def plan(self, epoch: int) -> list[list[int]]:
        """The batches of ``epoch`` (cached; evaluation order is the same every epoch)."""
        key = epoch if self.shuffle else 0
        if key not in self._plans:
            plan = epoch_batches(self.lengths, self.batch_size, epoch=epoch,
                                 shuffle=self.shuffle, group=self.group, seed=self.seed)
            self._plans = {key: plan}  # keep one epoch's plan; others are rebuilt on demand
        return self._plans[key]

    def reference_loss(self, indices: Sequence[int]) -> float | None:
        """The divergence guard's floor for these examples
        (:func:`~entrena.data.batching.reference_loss`)."""
        return reference_loss(self.labels, indices)

    def collate(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        """``input_ids`` (B, T) int64, ``attention_mask`` (B, T) int64, ``labels`` (B,) int64
        (or (B, K) float32 multi-hot tags)."""
        ids, mask = pad_batch([self.encoded.get(i, self.max_length) for i in indices],
                              self.pad_id, self.multiple, self.max_length)
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
                "labels": torch.from_numpy(self.labels[list(indices)])}
