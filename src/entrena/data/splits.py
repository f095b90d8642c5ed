"""The split types and the seeded, stratified ways to cut rows into them.

:class:`Split` and :class:`LabelledSplits` are what the check-and-split pipeline
(:mod:`entrena.data.splitting`) hands to a task; the functions here are pure index arithmetic
on label (or target-bin) arrays: a validation split held out of training, grouped or not
(:func:`stratified_group_split`), the check that it can hold every class
(:func:`check_splittable`), quantile bins of a numeric target (:func:`target_bins`) and the
seeded subsample (:func:`stratified_subsample`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from entrena.errors import DataError

__all__ = ["Split", "LabelledSplits", "TextColumn", "stratified_split",
           "stratified_group_split", "check_splittable", "group_labels",
           "stratified_subsample", "target_bins", "quantile_edges", "binned_group_split"]


class TextColumn(Sequence[str]):
    """Texts held in an Arrow string array: a read-only list that makes Python strings only
    for the items asked for."""

    def __init__(self, array: pa.Array | pa.ChunkedArray):
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return TextColumn(self.array[index])
        return self.array[int(index)].as_py()

    def __iter__(self) -> Iterator[str]:
        chunks = self.array.chunks if isinstance(self.array, pa.ChunkedArray) else [self.array]
        for chunk in chunks:
            yield from chunk.to_pylist()

    def __add__(self, other: Sequence[str]) -> list[str]:
        return [*self, *other]

    def __radd__(self, other: Sequence[str]) -> list[str]:
        return [*other, *self]

    def __repr__(self) -> str:
        return f"TextColumn({len(self)} texts)"

    def take(self, index: np.ndarray) -> TextColumn:
        return TextColumn(self.array.take(pa.array(np.asarray(index, dtype=np.int64))))


@dataclass
class Split:
    """One split: texts and integer labels, aligned.

    Attributes:
        texts: The input texts (a list, or a :class:`TextColumn`).
        labels: Label indices into the label map, shape (N,).
        row_ids: Row number of each example in its source (1-based, header excluded, counted
            across a pattern's files in order).
    """

    texts: Sequence[str]
    labels: np.ndarray
    row_ids: np.ndarray

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, index: np.ndarray) -> Split:
        """The examples at ``index``, in that order."""
        texts = (self.texts.take(index) if isinstance(self.texts, TextColumn)
                 else [self.texts[i] for i in index])
        return Split(texts, self.labels[index], self.row_ids[index])


@dataclass
class LabelledSplits:
    """Train/validation/test splits sharing one label map.

    Attributes:
        labels: Class names in index order (sorted as strings).
        report: What was read, found, dropped and split (goes to ``data_report.json``).
    """

    train: Split
    validation: Split
    test: Split | None
    labels: list[str]
    report: dict[str, Any] = field(default_factory=dict)

    def roles(self) -> list[tuple[str, Split]]:
        """``(role, split)`` for the splits present."""
        return [(r, s) for r, s in (("train", self.train), ("validation", self.validation),
                                    ("test", self.test)) if s is not None]


def stratified_split(labels: np.ndarray, fraction: float, seed: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into (kept, held out), stratified by label, seeded.

    Classes with a single example stay in the kept part. Uses scikit-learn's
    ``train_test_split``; the caller checks that both parts can hold every class
    (:func:`check_splittable`).

    Returns:
        Two sorted index arrays; together they are a permutation of ``range(N)``.
    """
    from sklearn.model_selection import train_test_split

    index = np.arange(len(labels))
    counts = np.bincount(labels)
    single = np.isin(labels, np.flatnonzero(counts == 1))
    splittable = index[~single]
    kept, held = train_test_split(splittable, test_size=fraction, random_state=seed,
                                  stratify=labels[splittable])
    return np.sort(np.concatenate([kept, index[single]])), np.sort(held)


def stratified_group_split(labels: np.ndarray, groups: np.ndarray, fraction: float, seed: int
                           ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`stratified_split` over groups: the rows of a group land on one side.

    A group is stratified by the label of its first row. With every group a single row this
    is exactly :func:`stratified_split`.

    Args:
        labels: Label index per row, shape (N,).
        groups: Group id per row, shape (N,); ids number groups in order of first appearance.
        fraction: Share of groups to hold out.
        seed: Random seed.
    """
    unique, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # groups in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    _, held_groups = stratified_split(labels[first[order]], fraction, seed)
    held = np.isin(rank[inverse.reshape(-1)], held_groups)
    index = np.arange(len(labels))
    return index[~held], index[held]


def check_splittable(labels: np.ndarray, fraction: float, names: list[str], path: str,
                      removed: str = "", row: str = "row") -> None:
    """Raise unless every class with 2 or more groups can put one on each side.

    Args:
        removed: What the checks removed before, for the message (``114 exact_duplicates``).
        row: What a row is, for the message (``row``, ``image``).
    """
    before = f" once the checks removed {row}s ({removed})" if removed else ""
    keep = f"keep those {row}s (data.checks.<check>: warn), " if removed else ""
    counts = np.bincount(labels, minlength=len(names))
    classes = int(np.sum(counts >= 2))
    n = int(np.sum(counts[counts >= 2]))
    held = math.ceil(fraction * n)
    if not classes:
        raise DataError(f"{path}: no class has 2 training {row}s (or groups){before}, so none "
                        f"can be held out for validation; {keep}add {row}s or give a validation "
                        "file (data.validation)")
    if held < classes or n - held < classes:
        needed = min(0.5, classes / max(n, 1))
        raise DataError(
            f"{path}: data.validation_fraction {fraction:g} of the {n} splittable training "
            f"{row}s (or groups){before} holds out {held} for validation, but each of the "
            f"{classes} classes needs one on each side; raise data.validation_fraction to at "
            f"least {math.ceil(needed * 100) / 100:g}, {keep}add {row}s, or give a validation "
            "file (data.validation)")


def stratified_subsample(index: np.ndarray, strata: np.ndarray, limit: int | None, seed: int
                         ) -> np.ndarray:
    """At most ``limit`` of ``index``, seeded, stratified where every stratum can be kept.

    Args:
        index: Row positions (N,).
        strata: Each position's stratum (N,) int64: its class, or a regression target's
            quantile bin.
        limit: How many to keep (``None``: all).
        seed: Random state.

    Returns:
        The kept positions, sorted.
    """
    if limit is None or len(index) <= limit:
        return index
    from sklearn.model_selection import train_test_split

    counts = np.bincount(strata)
    present = int(np.sum(counts > 0))
    stratify = (strata if limit >= present and len(index) - limit >= present
                and counts[counts > 0].min() >= 2 else None)
    kept, _ = train_test_split(index, train_size=limit, random_state=seed, stratify=stratify)
    return np.sort(kept)


def target_bins(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The quantile bin of each value (N,) int64, given inner bin ``edges`` (K-1,)."""
    return np.searchsorted(edges, values, side="right").astype(np.int64)


def quantile_edges(values: np.ndarray, bins: int) -> np.ndarray:
    """The inner edges (at most ``bins - 1``, distinct) of ``bins`` quantile bins of ``values``
    (N,); none for one bin or no values."""
    if bins <= 1 or not len(values):
        return np.zeros(0)
    return np.unique(np.quantile(values, np.linspace(0, 1, bins + 1)[1:-1]))


def binned_group_split(bins: np.ndarray, groups: np.ndarray, fraction: float, seed: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`stratified_group_split` on target bins, falling back to an
    unstratified grouped split when a bin is too small to stratify."""
    _, first = np.unique(groups, return_index=True)
    counts = np.bincount(bins[first])
    if len(counts[counts > 0]) > 1 and counts[counts > 0].min() >= 2:
        return stratified_group_split(bins, groups, fraction, seed)
    return stratified_group_split(np.zeros_like(bins), groups, fraction, seed)


def group_labels(labels: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The label of each group's first row, groups in order of first appearance."""
    _, first = np.unique(groups, return_index=True)
    return labels[np.sort(first)]
