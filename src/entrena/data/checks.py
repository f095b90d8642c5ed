"""The checks of :func:`~entrena.data.tables.load_splits`, one split's rows at a time.

A :class:`RowSet` is one split while the checks run: positions into its
:class:`~entrena.data.reading.RawSplit`, label indices, exact and normalised keys, and how many
rows each reason removed. The functions here count what they find into it, apply the ``drop``
policies of :class:`~entrena.data.hygiene.CheckPolicy` to training, and return the check
records of ``data_report.json``; :func:`build_report` assembles the report.

The checks are the same for every task; what a row is (a text, a table row, an image file)
only changes the words of the messages (:class:`Terms`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from entrena.data import hygiene as hy
from entrena.data.reading import REPORTED_ROWS, RawSplit, format_rows
from entrena.errors import DataError

__all__ = ["Terms", "RowSet", "unseen_labels", "describe_copies", "train_copies", "leakage",
           "class_checks", "split_entry", "build_report", "removed_text", "refuse_unusable",
           "EXAMPLE_ROWS", "ROLES"]

ROLES = ("train", "validation", "test")
EXAMPLE_ROWS = 10


def _row_numbers(raw: RawSplit, rows: Sequence[int]) -> str:
    return f"rows {format_rows(list(rows))}"


@dataclass(frozen=True)
class Terms:
    """The words the check messages use for one task's rows.

    Attributes:
        row: One example (``row``; ``image``): "3 training rows".
        key: What copies share (``text``; ``file``): "an earlier row's text and label".
        compared: How leakage compares (``normalised``; ``same bytes``).
        grouped_by: The report's ``validation_split.grouped_by`` without a group column;
            empty: ``normalised text``, or ``identical rows`` when keys are not normalised.
        where: Names some rows of a split for a message (``rows 3, 5``), given its
            :class:`~entrena.data.reading.RawSplit` and row numbers.
        single_class: The message refusing training data of fewer than 2 classes, a format
            string of ``{names}`` (the classes, quoted); empty: the label column's message.
        label_column: Whether labels come from a column a user chose (``data.label_column``),
            which is refused when it looks like an id or a number to predict; not for labels
            read from folder names.
    """

    row: str = "row"
    key: str = "text"
    compared: str = "normalised"
    grouped_by: str = ""
    where: Callable[[RawSplit, Sequence[int]], str] = _row_numbers
    single_class: str = ""
    label_column: bool = True
    label: str = "label"
    """What a row's answer is called (``label``; ``target`` for a number to predict)."""

    def rows(self, count: int, prefix: str = "") -> str:
        """``"1 training row"``, ``"2 training rows"``."""
        return _n(count, f"{prefix}{self.row}")


TEXT = Terms()


class RowSet:
    """One split's rows while checks run: positions into its :class:`RawSplit`, labels, keys,
    and why rows went."""

    def __init__(self, role: str, raw: RawSplit, labels: np.ndarray, exact: np.ndarray,
                 normal: np.ndarray):
        self.role = role
        self.raw = raw
        self.index = np.arange(len(labels))
        self.labels, self.exact, self.normal = labels, exact, normal
        self.removed: dict[str, int] = {"empty_text": len(raw.empty_text),
                                        "empty_label": len(raw.empty_label)}
        self.counts: dict[str, Any] = {}
        self.examples: dict[str, list[int]] = {}

    def keep(self, mask: np.ndarray, reason: str) -> None:
        """Keep the current rows where ``mask`` holds; count the others under ``reason``."""
        self.removed[reason] = self.removed.get(reason, 0) + int(np.sum(~mask))
        self.index = self.index[mask]

    def rows(self) -> np.ndarray:
        return self.raw.rows[self.index]


def _some(items: list[str], limit: int = 10) -> str:
    """The first ``limit`` items, then how many more (a message stays one readable line)."""
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def unseen_labels(r: RowSet, names: list[str], column: str, policy: str,
                  terms: Terms = TEXT) -> None:
    unseen = r.labels < 0
    if not unseen.any():
        return
    found = sorted({r.raw.label_names[c] for c in r.raw.label_codes[unseen]})
    bad_rows = r.raw.rows[unseen]
    if policy == "error":
        raise DataError(f"{r.raw.spec}: label(s) {_some(list(map(repr, found)))} in "
                        f"{r.raw.role} {terms.where(r.raw, bad_rows.tolist())} never occur in the "
                        f"training data (labels: {_some(names)}); fix the labels, add training "
                        "examples, or set data.on_unseen_labels: drop")
    r.counts["unseen_label_rows"] = int(unseen.sum())
    r.counts["unseen_labels"] = found
    r.examples["unseen_labels"] = bad_rows[:EXAMPLE_ROWS].tolist()
    r.keep(~unseen[r.index], "unseen_labels")


def describe_copies(r: RowSet, k: int) -> None:
    """Count exact and normalised copies and label conflicts among ``r``'s current rows."""
    exact, normal, labels = r.exact[r.index], r.normal[r.index], r.labels[r.index]
    exact_repeat, normal_repeat = hy.repeats(exact), hy.repeats(normal)
    conflict = hy.conflicting(normal, labels, k)
    rows = r.rows()
    r.counts.update({
        "exact_duplicates": int(exact_repeat.sum()),
        "normalised_duplicates": int(normal_repeat.sum()),
        "conflicting_label_rows": int(conflict.sum()),
        "conflicting_label_texts": int(len(np.unique(normal[conflict]))),
    })
    r.examples["exact_duplicates"] = hy.first_rows(rows, exact_repeat, EXAMPLE_ROWS)
    r.examples["normalised_duplicates"] = hy.first_rows(rows, normal_repeat & ~exact_repeat,
                                                        EXAMPLE_ROWS)
    r.examples["conflicting_labels"] = hy.first_rows(rows, conflict, EXAMPLE_ROWS)


def train_copies(t: RowSet, k: int, policy: hy.CheckPolicy, terms: Terms = TEXT
                 ) -> list[dict[str, Any]]:
    """The duplicate and conflict checks on training rows, applying ``drop`` policies."""
    exact, normal, labels = t.exact[t.index], t.normal[t.index], t.labels[t.index]
    conflict = hy.conflicting(normal, labels, k)
    exact_pair = hy.repeats(hy.pair_keys(exact, labels, k))
    near = hy.repeats(hy.pair_keys(normal, labels, k)) & ~hy.repeats(exact)
    # the rows these two checks name are theirs (text and label), not describe_copies'
    # (text alone): a row whose text repeats under another label is a conflict, not a copy
    rows = t.rows()
    exact_rows = hy.first_rows(rows, exact_pair, EXAMPLE_ROWS)
    near_rows = hy.first_rows(rows, near, EXAMPLE_ROWS)
    c = t.counts
    # Second quantities, second names: the split keys exact_duplicates and
    # normalised_duplicates count text repeats under any label (describe_copies); these
    # checks count repeats of text and label, reported under their own names.
    c["exact_duplicates_same_label"] = int(exact_pair.sum())
    c["normalised_duplicates_same_label"] = int(near.sum())
    records = [
        hy.check_record("conflicting_labels", int(conflict.sum()), policy.conflicting_labels,
                        f"{terms.rows(c['conflicting_label_rows'], 'training ')} "
                        f"{_verb(c['conflicting_label_rows'], 'hold')} "
                        f"{_n(c['conflicting_label_texts'], terms.key)} with different "
                        f"{terms.label}s "
                        f"({terms.where(t.raw, t.examples['conflicting_labels'])})"),
        hy.check_record("exact_duplicates", int(exact_pair.sum()), policy.exact_duplicates,
                        f"{terms.rows(int(exact_pair.sum()), 'training ')} "
                        f"{_verb(int(exact_pair.sum()), 'repeat')} an earlier "
                        f"{terms.row}'s {terms.key} and {terms.label} "
                        f"({terms.where(t.raw, exact_rows)}; exact_duplicates_same_label)"),
        hy.check_record("normalised_duplicates", int(near.sum()),
                        policy.normalised_duplicates,
                        f"{terms.rows(int(near.sum()), 'more training ')} "
                        f"{_verb(int(near.sum()), 'repeat')} an earlier {terms.row} once case, "
                        f"punctuation and spacing are ignored, with the same {terms.label} "
                        f"({terms.where(t.raw, near_rows)}; normalised_duplicates_same_label)"),
    ]
    current = np.ones(len(t.index), dtype=bool)
    for record, mask in zip(records, (conflict, exact_pair, near), strict=True):
        t.removed[record["check"]] = 0
        if record["action"] == "drop":
            t.removed[record["check"]] = int(np.sum(mask & current))
            current &= ~mask
    t.index = t.index[current]
    return records


def leakage(rows: dict[str, RowSet], policy: hy.CheckPolicy, *, against: tuple[str, ...],
            record: dict[str, Any] | None = None, terms: Terms = TEXT) -> dict[str, Any]:
    """Training rows whose normalised key also occurs in the ``against`` splits.

    Runs before validation is split off (against the validation and test files), and again
    after it when rows are grouped by ``data.group_column`` rather than by text (``record``:
    the first run's, updated).
    """
    t = rows["train"]
    train_keys = t.normal[t.index]
    others = [rows[r] for r in against if r in rows]
    for other in others:
        leaked = np.isin(other.normal[other.index], train_keys)
        other.counts["leaked_rows"] = other.counts.get("leaked_rows", 0) + int(leaked.sum())
        other.examples["leaked_rows"] = hy.first_rows(other.rows(), leaked, EXAMPLE_ROWS)
    other_keys = (np.concatenate([o.normal[o.index] for o in others]) if others
                  else np.zeros(0, dtype=np.int64))
    leaked = np.isin(train_keys, other_keys)
    total = t.counts.get("leaked_rows", 0) + int(leaked.sum())
    t.counts["leaked_rows"] = total
    t.examples["leaked_rows"] = (t.examples.get("leaked_rows", [])
                                 + hy.first_rows(t.rows(), leaked, EXAMPLE_ROWS))[:EXAMPLE_ROWS]
    t.keep(~leaked if policy.leakage == "drop" else np.ones(len(leaked), dtype=bool), "leakage")
    seen_in = ", ".join(f"{rows[r].counts.get('leaked_rows', 0)} {r}" for r in rows
                        if r != "train")
    return hy.check_record(
        "leakage", total, policy.leakage,
        f"{terms.rows(total, 'training ')} also {_verb(total, 'occur')} ({terms.compared}) in "
        f"validation or test ({terms.where(t.raw, t.examples['leaked_rows'])}); "
        f"{terms.row}s with a copy in training: {seen_in}")


def refuse_unusable(raw: dict[str, RawSplit], *, label_column: str, group_column: str | None,
                    empty_what: str, check_keys: str) -> None:
    """Refuse a group column that is the label column, and a split with no usable row.

    Raises:
        DataError: Names the split's file, what its rows lacked and the keys to check.
    """
    if group_column is not None and group_column == label_column:
        raise DataError(f"data.group_column = {group_column!r} is the label column; a group "
                        "keeps related rows (one user's, one product's) on one side of the "
                        "validation split: name such a column, or leave data.group_column out")
    for role, split in raw.items():
        if len(split.texts) == 0:
            raise DataError(
                f"{split.spec}: no usable {role} rows ({split.rows_read} read, "
                f"{len(split.empty_text)} with {empty_what}, "
                f"{len(split.empty_label)} with an empty {label_column!r}); check "
                f"{check_keys}, or the file")


def removed_text(removed: dict[str, int]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in removed.items() if n) or "none"


def _n(count: int, noun: str) -> str:
    """``"1 training row"``, ``"2 training rows"``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _verb(count: int, verb: str) -> str:
    """``"repeats"`` for one, ``"repeat"`` for several."""
    return verb + ("s" if count == 1 else "")


def class_checks(rows: dict[str, RowSet], names: list[str], policy: hy.CheckPolicy,
                 fraction: float | None, terms: Terms = TEXT) -> list[dict[str, Any]]:
    t = rows["train"]
    counts = np.bincount(np.concatenate([t.labels[t.index], rows["validation"].labels[
        rows["validation"].index]]) if fraction else t.labels[t.index], minlength=len(names))
    small = {names[i]: int(counts[i]) for i in hy.small_classes(counts, fraction)}
    absent: list[str] = []
    if fraction is None:
        v = rows["validation"]
        in_validation = np.bincount(v.labels[v.index], minlength=len(names))
        absent = [names[i] for i in np.flatnonzero((in_validation == 0) & (counts > 0))]
    t.counts["small_classes"] = small
    rows["validation"].counts["classes_absent"] = absent
    parts = []
    if small:
        parts.append(f"too few training {terms.row}s to split: " + ", ".join(
            f"{n} ({c})" for n, c in small.items()))
    if absent:
        parts.append("absent from validation: " + ", ".join(absent))
    return [hy.check_record("small_classes", len(small) + len(absent), policy.small_classes,
                            "; ".join(parts) or "every class can be split")]


def split_entry(r: RowSet, spec: str | None, from_train: bool) -> dict[str, Any]:
    """One split's counts for ``data_report.json`` (``splits.<role>``): rows read and kept,
    what each check found, what was removed and why, example rows; its files when it was read
    from them (``from_train``: a validation split taken from training)."""
    kept = len(r.index)
    removed = {k: int(v) for k, v in r.removed.items()}
    entry: dict[str, Any] = {
        "file": None if from_train else spec,
        "source": "split from train" if from_train else "file",
        "rows_read": kept + sum(removed.values()),
        "rows_kept": kept,
        "exact_duplicates": int(r.counts.get("exact_duplicates", 0)),
        "normalised_duplicates": int(r.counts.get("normalised_duplicates", 0)),
        "conflicting_label_rows": int(r.counts.get("conflicting_label_rows", 0)),
        "leaked_rows": int(r.counts.get("leaked_rows", 0)),
        "empty_text": 0 if from_train else len(r.raw.empty_text),
        "empty_label": 0 if from_train else len(r.raw.empty_label),
        "unseen_label_rows": int(r.counts.get("unseen_label_rows", 0)),
        "rows_removed": removed,
        "examples": {k: v for k, v in r.examples.items() if v},
    }
    if not from_train:
        entry["files"] = r.raw.files
        entry["skipped_rows"] = {"empty_text": r.raw.empty_text[:REPORTED_ROWS],
                                 "empty_label": r.raw.empty_label[:REPORTED_ROWS]}
    return entry


def build_report(rows: dict[str, RowSet], names: list[str], specs: dict[str, str | None],
            validation_split: dict[str, Any] | None, ratio: float | None,
            checks: list[dict[str, Any]]) -> dict[str, Any]:
    splits: dict[str, Any] = {}
    for role, r in rows.items():
        entry = split_entry(r, specs[role],
                            role == "validation" and validation_split is not None)
        entry["label_counts"] = _label_counts(r.labels[r.index], names)
        for extra in ("exact_duplicates_same_label", "normalised_duplicates_same_label",
                      "small_classes", "classes_absent", "unseen_labels"):
            if extra in r.counts:
                entry[extra] = r.counts[extra]
        splits[role] = entry
    report: dict[str, Any] = {
        "labels": names,
        "rows": {role: splits[role]["rows_kept"] if role in splits else 0 for role in ROLES},
        "label_counts": {role: s["label_counts"] for role, s in splits.items()},
        "imbalance_ratio": ratio,
        "splits": splits,
        "checks": checks,
    }
    if validation_split is not None:
        report["validation_split"] = validation_split
    return report


def _label_counts(labels: np.ndarray, names: list[str]) -> dict[str, int]:
    return {names[i]: int(c) for i, c in enumerate(np.bincount(labels, minlength=len(names)))}
