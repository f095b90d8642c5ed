"""From configured files to clean, labelled splits: read, check columns, drop bad rows,
build the label map, split off validation, subsample."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from entrena.data.sources import read_table, require_columns
from entrena.errors import DataError

__all__ = ["Split", "LabelledSplits", "load_splits", "stratified_split", "clean_rows",
           "empty_values"]


@dataclass
class Split:
    """One split: texts and integer labels, aligned.

    Attributes:
        texts: The input texts.
        labels: Label indices into the label map, shape (N,).
        row_ids: Row number of each example in its source file (1-based, header excluded).
    """

    texts: list[str]
    labels: np.ndarray
    row_ids: np.ndarray

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, index: np.ndarray) -> Split:
        """The examples at ``index``, in that order."""
        return Split([self.texts[i] for i in index], self.labels[index], self.row_ids[index])


@dataclass
class LabelledSplits:
    """Train/validation/test splits sharing one label map.

    Attributes:
        labels: Class names in index order (sorted as strings).
        report: What was read, skipped and split (goes to ``data_report.json``).
    """

    train: Split
    validation: Split
    test: Split | None
    labels: list[str]
    report: dict[str, Any] = field(default_factory=dict)


def empty_values(values: pd.Series) -> pd.Series:
    """Which cells are missing or blank (whitespace only): the bad-row test of training and
    of ``entrena predict``."""
    return values.isna() | (values.astype(str).str.strip() == "")


def clean_rows(frame: pd.DataFrame, text_column: str, label_column: str, *, policy: str,
               path: str, role: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Drop (``skip``) or refuse (``error``) rows whose text or label is empty or missing.

    Returns:
        The kept rows (with a ``_row`` column: 1-based row number in the file) and a report
        ``{"read": n, "kept": n, "skipped_empty_text": [rows], "skipped_empty_label": [rows]}``.

    Raises:
        DataError: ``policy == "error"`` and some rows are bad; the message names them.
    """
    frame = frame.assign(_row=np.arange(1, len(frame) + 1))
    text = frame[text_column]
    label = frame[label_column]
    empty_text = empty_values(text)
    empty_label = empty_values(label)
    bad_text = frame.loc[empty_text, "_row"].tolist()
    bad_label = frame.loc[empty_label & ~empty_text, "_row"].tolist()
    if policy == "error" and (bad_text or bad_label):
        parts = []
        if bad_text:
            parts.append(f"empty {text_column!r} in rows {_rows(bad_text)}")
        if bad_label:
            parts.append(f"empty {label_column!r} in rows {_rows(bad_label)}")
        raise DataError(f"{path}: {'; '.join(parts)} of the {role} data; fix or remove them, "
                        "or set data.on_bad_rows: skip to drop them")
    kept = frame.loc[~(empty_text | empty_label)]
    report = {"read": len(frame), "kept": len(kept),
              "skipped_empty_text": bad_text, "skipped_empty_label": bad_label}
    return kept, report


def _rows(rows: list[int], limit: int = 10) -> str:
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _label_text(values: pd.Series) -> list[str]:
    """Labels as strings; integral floats (``1.0`` from a column with gaps) become ``"1"``."""
    out = []
    for v in values:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        out.append(str(v).strip())
    return out


def stratified_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into (kept, held out), stratified by label, seeded.

    Classes with a single example stay in the kept part. Uses scikit-learn's
    ``train_test_split``.

    Args:
        labels: Label index per example, shape (N,).
        fraction: Share to hold out, in (0, 1).
        seed: Random seed.

    Returns:
        Two index arrays; together they are a permutation of ``range(N)``.
    """
    from sklearn.model_selection import train_test_split

    index = np.arange(len(labels))
    counts = np.bincount(labels)
    single = np.isin(labels, np.flatnonzero(counts == 1))
    splittable = index[~single]
    kept, held = train_test_split(splittable, test_size=fraction, random_state=seed,
                                  stratify=labels[splittable])
    return np.sort(np.concatenate([kept, index[single]])), np.sort(held)


def _subsample(split: Split, limit: int | None, seed: int) -> Split:
    """At most ``limit`` examples, stratified by label where every class can be kept."""
    if limit is None or len(split) <= limit:
        return split
    from sklearn.model_selection import train_test_split

    index = np.arange(len(split))
    counts = np.bincount(split.labels)
    stratify = split.labels if limit >= len(counts) and counts[counts > 0].min() >= 2 else None
    kept, _ = train_test_split(index, train_size=limit, random_state=seed, stratify=stratify)
    return split.subset(np.sort(kept))


def load_splits(*, train: str, validation: str | None, test: str | None, text_column: str,
                label_column: str, validation_fraction: float, max_train_samples: int | None,
                max_eval_samples: int | None, on_bad_rows: str, seed: int) -> LabelledSplits:
    """Read the configured files into labelled splits.

    The label map is built from the training data only; a validation or test label that
    training never saw is an error.

    Raises:
        DataError: A file is missing or unreadable, a column is missing, bad rows under the
            ``error`` policy, too few examples, or a label unseen in training.
    """
    columns = {"data.text_column": text_column, "data.label_column": label_column}
    frames: dict[str, tuple[pd.DataFrame, str]] = {}
    report: dict[str, Any] = {"splits": {}}
    for role, path in (("train", train), ("validation", validation), ("test", test)):
        if path is None:
            continue
        frame = read_table(path, role=role)
        require_columns(frame, columns, path=path, role=role)
        frame, split_report = clean_rows(frame, text_column, label_column,
                                         policy=on_bad_rows, path=path, role=role)
        report["splits"][role] = {"file": path, **split_report}
        frames[role] = (frame, path)

    train_frame, train_path = frames["train"]
    train_labels = _label_text(train_frame[label_column])
    labels = sorted(set(train_labels))
    if len(labels) < 2:
        raise DataError(f"{train_path}: {label_column!r} has {len(labels)} distinct value(s) "
                        f"({', '.join(labels) or 'none'}); a classifier needs at least 2 classes")
    index_of = {name: i for i, name in enumerate(labels)}

    def to_split(frame: pd.DataFrame, path: str, role: str) -> Split:
        names = _label_text(frame[label_column])
        unseen = sorted(set(names) - set(index_of))
        if unseen:
            rows = [int(r) for r, n in zip(frame["_row"], names, strict=True) if n in unseen]
            raise DataError(f"{path}: label(s) {', '.join(map(repr, unseen))} in {role} rows "
                            f"{_rows(rows)} never occur in the training data (labels: "
                            f"{', '.join(labels)}); fix the labels or add training examples")
        return Split([str(t) for t in frame[text_column]],
                     np.array([index_of[n] for n in names], dtype=np.int64),
                     frame["_row"].to_numpy(dtype=np.int64))

    train_split = to_split(train_frame, train_path, "train")
    if "validation" in frames:
        validation_split = to_split(*frames["validation"], "validation")
    else:
        if len(train_split) < 4:
            raise DataError(f"{train_path}: only {len(train_split)} usable training rows; "
                            "need at least 4 to split off validation")
        kept, held = stratified_split(train_split.labels, validation_fraction, seed)
        validation_split = train_split.subset(held)
        train_split = train_split.subset(kept)
        report["validation_split"] = {"from": "train", "fraction": validation_fraction,
                                      "stratified": True, "seed": seed}
    test_split = to_split(*frames["test"], "test") if "test" in frames else None

    train_split = _subsample(train_split, max_train_samples, seed)
    validation_split = _subsample(validation_split, max_eval_samples, seed)
    if test_split is not None:
        test_split = _subsample(test_split, max_eval_samples, seed)

    report["labels"] = labels
    report["rows"] = {"train": len(train_split), "validation": len(validation_split),
                      "test": len(test_split) if test_split is not None else 0}
    report["label_counts"] = {
        role: {labels[i]: int(c) for i, c in enumerate(np.bincount(s.labels, minlength=len(labels)))}
        for role, s in (("train", train_split), ("validation", validation_split),
                        ("test", test_split)) if s is not None
    }
    return LabelledSplits(train_split, validation_split, test_split, labels, report)
