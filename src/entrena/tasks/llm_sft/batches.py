"""Batches of chat examples: right-padded, length-grouped, with the target mask.

A batch (B batch, T tokens: its longest example rounded up to ``pad_to_multiple_of``, R the
widest response of the data, EOS included):

- ``input_ids`` (B, T) int64: prompt + response + EOS, right-padded with the pad id;
- ``attention_mask`` (B, T) int64: 1 on real tokens;
- ``target_mask`` (B, T) int64: 1 on the response and its EOS (the tokens learned). It is
  built from each example's prompt length, never from the pad id: with SmolLM2 the pad
  token *is* EOS, and masking by id would hide the EOS the model must learn (TRL #1623);
- ``labels`` (B, 1 + R) int64: the example's index in its split, then its reference
  response ids (EOS included), -1 after (what evaluation compares generations with).

Packed (training batches with ``pack``): the batch's B examples are laid end to end in
P <= B rows of the same T (:func:`~entrena.data.batching.pack_rows`), so
``input_ids``, ``attention_mask`` and ``target_mask`` are (P, T), and ``position_ids``
(P, T) int64 restarts at 0 with every example (and with the padding at a row's end). The
model then attends within each example only (a block-diagonal causal mask, which
transformers builds from restarting position ids when no padding mask is passed); the
examples, their order in the epoch and ``labels`` are those of the unpacked batch, so the
loss per target token and the data position of a resume do not change.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from entrena.data.batching import epoch_batches, pack_rows, pad_batch, padded_width
from entrena.tasks.llm_sft.data import SftSplit

__all__ = ["SftBatches"]


class SftBatches:
    """The :class:`~entrena.engine.loop.BatchSource` of one split.

    Args:
        split: The tokenized split.
        batch_size: Examples per batch.
        pad_id: Id in padding slots.
        reference_width: R, the widest response (tokens, EOS included) of any split.
        shuffle: Training order (seeded ``seed + epoch``) or evaluation order (by length).
        group_by_length: With ``shuffle``, batches of similar length.
        seed: Base seed.
        pack: Pack training batches (see the module docstring); evaluation batches (not
            ``shuffle``) are never packed: their generations are per example.
        pad_to_multiple_of: Rows (packed or not) are as wide as the batch's longest
            example rounded up to this many tokens (``data.pad_to_multiple_of``).
    """

    def __init__(self, split: SftSplit, *, batch_size: int, pad_id: int, reference_width: int,
                 shuffle: bool, group_by_length: bool = True, seed: int = 0,
                 pack: bool = False, pad_to_multiple_of: int = 1):
        self.split = split
        self.batch_size = batch_size
        self.pad_id = pad_id
        self.reference_width = reference_width
        self.shuffle = shuffle
        self.group = group_by_length
        self.seed = seed
        self.pack = pack and shuffle
        self.multiple = pad_to_multiple_of
        self.lengths = split.lengths
        self.target_lengths = split.response_lengths
        self._plans: dict[int, list[list[int]]] = {}

    def __len__(self) -> int:
        return len(self.split)

    def plan(self, epoch: int) -> list[list[int]]:
        """The batches of ``epoch`` (evaluation order is the same every epoch)."""
        key = epoch if self.shuffle else 0
        if key not in self._plans:
            plan = epoch_batches(self.lengths, self.batch_size, epoch=epoch,
                                 shuffle=self.shuffle, group=self.group, seed=self.seed)
            self._plans = {key: plan}
        return self._plans[key]

    def target_count(self, indices: Sequence[int]) -> int:
        """Target tokens of a batch (what its loss is normalised by), without collating."""
        return int(self.target_lengths[list(indices)].sum())

    def collate(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        """The batch's tensors (see the module docstring)."""
        rows = list(indices)
        labels = np.full((len(rows), 1 + self.reference_width), -1, dtype=np.int64)
        for row, i in enumerate(rows):
            start, end = int(self.split.prompt_lengths[i]), len(self.split.input_ids[i])
            labels[row, 0] = i
            labels[row, 1:1 + end - start] = self.split.input_ids[i][start:end]
        if self.pack:
            return {**self._packed(rows), "labels": torch.from_numpy(labels)}
        ids, mask = pad_batch([self.split.input_ids[i] for i in rows], self.pad_id,
                              self.multiple)
        target = np.zeros_like(mask)
        for row, i in enumerate(rows):
            target[row, int(self.split.prompt_lengths[i]):len(self.split.input_ids[i])] = 1
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
                "target_mask": torch.from_numpy(target), "labels": torch.from_numpy(labels)}

    def _packed(self, rows: list[int]) -> dict[str, torch.Tensor]:
        """``input_ids``, ``attention_mask``, ``target_mask``, ``position_ids``, (P, T)."""
        sequences = [self.split.input_ids[i] for i in rows]
        packing = pack_rows([len(s) for s in sequences])
        width = padded_width(max(len(s) for s in sequences), self.multiple)
        shape = (len(packing), width)
        ids = np.full(shape, self.pad_id, dtype=np.int64)
        mask, target = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
        positions = np.zeros(shape, dtype=np.int64)
        for row, members in enumerate(packing):
            at = 0
            for member in members:
                ids_i = sequences[member]
                end = at + len(ids_i)
                ids[row, at:end] = ids_i
                mask[row, at:end] = 1
                target[row, at + int(self.split.prompt_lengths[rows[member]]):end] = 1
                positions[row, at:end] = np.arange(len(ids_i))
                at = end
            positions[row, at:] = np.arange(width - at)  # the padding: one more "example"
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
                "target_mask": torch.from_numpy(target),
                "position_ids": torch.from_numpy(positions)}
