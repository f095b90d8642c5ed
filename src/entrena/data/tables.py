"""From configured data to clean, labelled splits: read, check, drop, split, subsample, report.

The order (each step is counted in the split's ``rows_removed``):

1. read each split's files, skipping rows with an empty text or label (:mod:`.reading`);
2. build the label map from training (sorted as strings); validation/test rows with a label
   training never saw are refused or dropped (``data.on_unseen_labels``);
3. training rows: conflicting labels, exact duplicates, normalised duplicates (``drop``
   policies of ``data.checks``);
4. split validation off training when no validation file is given: stratified by label,
   seeded, and grouped, so that copies of one normalised text (or rows of one
   ``data.group_column`` value) stay on one side;
5. leakage: training rows whose normalised text also occurs in validation or test;
6. seeded subsamples (``max_train_samples``, ``max_eval_samples``).

Validation and test rows are never dropped for hygiene, so that their scores stay comparable
with other runs on the same files; what they hold is counted in the report.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from entrena.data import checks as ck
from entrena.data import hygiene as hy
from entrena.data.labels import (
    LabelCleanup,
    refuse_empty_tag_sets,
    spelling_twins,
    split_tags,
    tag_matrix,
)
from entrena.data.reading import RawSplit, empty_values, read_split
from entrena.data.sources import SourceFile, open_source
from entrena.data.text_fields import describe_text_columns
from entrena.errors import DataError

__all__ = ["Split", "LabelledSplits", "TextColumn", "load_splits", "check_and_split",
           "open_sources",
           "stratified_split", "stratified_group_split", "stratified_subsample", "empty_values"]

log = logging.getLogger("entrena")

JOINED_LABEL_MARK = "|"
"""A text label holding this looks like several tags joined (``billing|technical``): the
``joined_labels`` check names ``data.multi_label``."""

ROLES = ck.ROLES
MAX_LABEL_SHARE = 0.5
MAX_LABELS_MIN = 20
"""A training label column with more than 20 distinct values, more than half as many as rows,
is refused: a regression target or an id, not classes."""


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


def open_sources(*, train: str, validation: str | None, test: str | None,
                 encoding: str = "auto", delimiter: str = "auto",
                 cache_dir: Path | None = None) -> dict[str, list[SourceFile]]:
    """Resolve, download, hash and sniff the files of each split (see
    :func:`~entrena.data.sources.open_source`).

    Raises:
        DataError: ``train`` is empty, or a file cannot be opened.
    """
    if not train or not str(train).strip():
        raise DataError("data.train is empty; set it to the training data (a CSV, TSV, JSONL "
                        "or Parquet file, a glob pattern or a URL)")
    specs = {"train": train, "validation": validation, "test": test}
    opened = {role: open_source(spec, key=f"data.{role}", cache_dir=cache_dir,
                                encoding=encoding, delimiter=delimiter)
              for role, spec in specs.items() if spec is not None}
    _refuse_training_copies(opened, specs)
    return opened


def _refuse_training_copies(opened: dict[str, list[SourceFile]],
                            specs: dict[str, str | None]) -> None:
    """Refuse a validation or test split whose files are the training files (the same path,
    or the same bytes): the leakage check would drop every training row and name a count,
    not the mistake.

    Raises:
        DataError: Names the key, the file and what to do instead.
    """
    train = {f.scan.sha256 for f in opened["train"]}
    for role in ("validation", "test"):
        files = opened.get(role)
        if not files or not {f.scan.sha256 for f in files} <= train:
            continue
        same = "the same file as" if all(
            f.path.resolve() in {t.path.resolve() for t in opened["train"]} for f in files) \
            else "a byte-for-byte copy of"
        instead = ("or leave it out (validation is then split off the training data)"
                   if role == "validation" else "or leave it out (no test scores)")
        raise DataError(f"data.{role}: {specs[role]} is {same} data.train ({specs['train']}): "
                        f"every {role} row is a training row, so its scores would mean "
                        f"nothing; point data.{role} at held-out data, {instead}")


def split_specs(loaded: Any) -> dict[str, str | None]:
    """``data.train``, ``data.validation`` and ``data.test`` of a loaded config, resolved
    against the config's folder (``None`` for an absent split)."""
    data = loaded.config.data
    return {role: loaded.resolve_path(getattr(data, role)) if getattr(data, role) else None
            for role in ("train", "validation", "test")}


def open_config_sources(loaded: Any) -> tuple[dict[str, str | None],
                                              dict[str, list[SourceFile]], Path]:
    """The resolved split paths, their opened files (:func:`open_sources` with the config's
    encoding and delimiter) and the prepared-data cache folder of a loaded config.

    Raises:
        DataError: ``data.train`` is empty, or a file cannot be opened.
    """
    from entrena.data.cache import default_cache_dir

    data = loaded.config.data
    cache_root = default_cache_dir(loaded.resolve_path(data.cache_dir) if data.cache_dir
                                   else None)
    specs = split_specs(loaded)
    files = open_sources(**specs, encoding=data.encoding, delimiter=data.delimiter,
                         cache_dir=cache_root)
    return specs, files, cache_root


def stratified_split(labels: np.ndarray, fraction: float, seed: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into (kept, held out), stratified by label, seeded.

    Classes with a single example stay in the kept part. Uses scikit-learn's
    ``train_test_split``; the caller checks that both parts can hold every class
    (:func:`_check_splittable`).

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


def _check_splittable(labels: np.ndarray, fraction: float, names: list[str], path: str,
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


def load_splits(*, train: str, validation: str | None, test: str | None,
                text_column: str | Sequence[str], label_column: str,
                validation_fraction: float, max_train_samples: int | None,
                max_eval_samples: int | None, on_bad_rows: str, seed: int,
                group_column: str | None = None, on_unseen_labels: str = "error",
                checks: hy.CheckPolicy | None = None, encoding: str = "auto",
                delimiter: str = "auto", cache_dir: Path | None = None,
                sources: dict[str, list[SourceFile]] | None = None,
                label_cleanup: LabelCleanup | None = None,
                multi_label_separator: str | None = None,
                target_transform: str | None = None,
                target_outliers: str = "keep",
                regression_task: str = "",
                classification_task: str = "") -> LabelledSplits:
    """Read the configured data into checked, labelled splits.

    Args:
        train, validation, test: Path, glob pattern or URL of each split (``None``: absent).
        text_column: One column, or several joined into one text per row
            (:func:`~entrena.data.text_fields.join_text_columns`).
        label_cleanup: ``data.label_map`` / ``data.normalise_labels``
            (:class:`~entrena.data.labels.LabelCleanup`).
        multi_label_separator: ``data.multi_label.separator`` (see :func:`check_and_split`).
        checks: What the hygiene checks drop (default :class:`~.hygiene.CheckPolicy()`).
        sources: The splits' files, already opened by :func:`open_sources`.
        target_transform: Not ``None``: the label is a number to predict, checked by
            :func:`entrena.data.targets.check_and_split_targets` with this transform
            (``none`` or ``log``); the splits' ``labels`` are float64 targets.
        target_outliers: ``data.target_outliers`` of a number to predict (``keep``,
            ``drop``, ``clip``).
        regression_task: Named when the label column looks like numbers to predict.
        classification_task: Named when a numeric target has two values (a class).

    Returns:
        The splits; ``report`` holds per-split counts (``rows_read``, ``rows_kept``,
        ``exact_duplicates``, ``leaked_rows`` …) and the ``checks`` records. Checks that fail
        (``error``) are recorded, not raised: the caller writes the report first.

    Raises:
        DataError: A file is missing or unreadable, a column is missing, labels mix numbers
            and strings, bad rows under ``on_bad_rows="error"``, fewer than 2 classes, no
            usable rows, a validation split that cannot hold every class, or a label unseen
            in training under ``on_unseen_labels="error"``.
    """
    policy = checks or hy.CheckPolicy()
    specs = {"train": train, "validation": validation, "test": test}
    if sources is None:
        sources = open_sources(train=train, validation=validation, test=test,
                               encoding=encoding, delimiter=delimiter, cache_dir=cache_dir)
    raw = {role: read_split(role, specs[role], sources[role], text_column=text_column,
                            label_column=label_column,
                            group_column=group_column if role == "train" else None,
                            on_bad_rows=on_bad_rows, label_separator=multi_label_separator,
                            numeric_label=target_transform is not None)
           for role in ROLES if specs[role] is not None}
    if target_transform is not None:
        from entrena.data.targets import check_and_split_targets

        return check_and_split_targets(
            raw, specs, label_column=label_column, validation_fraction=validation_fraction,
            max_train_samples=max_train_samples, max_eval_samples=max_eval_samples, seed=seed,
            group_column=group_column, policy=policy, target_transform=target_transform,
            target_outliers=target_outliers,
            empty_what=f"an empty {describe_text_columns(text_column)}",
            classification_task=classification_task)
    splits = check_and_split(
        raw, specs, label_column=label_column, validation_fraction=validation_fraction,
        max_train_samples=max_train_samples, max_eval_samples=max_eval_samples, seed=seed,
        group_column=group_column, on_unseen_labels=on_unseen_labels, policy=policy,
        empty_what=f"an empty {describe_text_columns(text_column)}",
        label_cleanup=label_cleanup, multi_label_separator=multi_label_separator,
        regression_task=regression_task)
    if multi_label_separator is None:
        joined = [n for n in splits.labels if JOINED_LABEL_MARK in n]
        shown = ", ".join(map(repr, joined[:3])) + (" …" if len(joined) > 3 else "")
        splits.report["checks"].append(hy.check_record(
            "joined_labels", len(joined), "warn",
            f"{len(joined)} label(s) look like several tags joined by "
            f"{JOINED_LABEL_MARK!r} ({shown}), so each combination is a class of its own; "
            f"set data.multi_label: {{separator: {JOINED_LABEL_MARK!r}}} to train one output "
            "per tag"))
    return splits


def check_and_split(raw: dict[str, RawSplit], specs: dict[str, str | None], *,
                    label_column: str, validation_fraction: float,
                    max_train_samples: int | None, max_eval_samples: int | None, seed: int,
                    group_column: str | None, on_unseen_labels: str, policy: hy.CheckPolicy,
                    normalise: bool = True, empty_what: str = "an empty text",
                    check_keys: str = "data.text_column and data.label_column",
                    terms: ck.Terms = ck.TEXT,
                    label_cleanup: LabelCleanup | None = None,
                    multi_label_separator: str | None = None,
                    regression_task: str = "") -> LabelledSplits:
    """Steps 2 to 6 of the module docstring on splits already read: the data checks of
    every task (texts, table rows, image files).

    Args:
        raw: The splits as read (``train`` always; ``validation``, ``test`` when given).
            ``texts`` holds each row's key: its text, a table row as a key string, an image
            file's SHA-256.
        specs: Path, pattern or URL of each split, for messages and the report.
        normalise: Compare normalised texts for near-duplicates and leakage (text); when
            ``False`` the texts are compared exactly (table rows, image files).
        empty_what: What a skipped row lacked, for the "no usable rows" message.
        check_keys: The config keys that message suggests checking.
        terms: The words messages use for a row (:class:`~.checks.Terms`).
        label_cleanup: Renames and merges labels before the label map is built
            (:class:`~entrena.data.labels.LabelCleanup`); the report's ``label_cleanup``.
        multi_label_separator: ``data.multi_label.separator``: a label is a set of tags. The
            label map is then of sets (sorted tags joined by the separator; splitting is
            stratified by set), validation and test sets unseen in training are kept when
            every tag is known, the class checks are made per tag, and the report gains
            ``multi_label`` (``separator``, ``tags``, ``tag_counts`` per split).
        regression_task: The task that predicts such rows' numbers (named when the label
            column looks like a number to predict rather than classes).

    Raises:
        DataError: As :func:`load_splits`, after reading.
    """
    train = specs["train"] or ""
    ck.refuse_unusable(raw, label_column=label_column, group_column=group_column,
                       empty_what=empty_what, check_keys=check_keys)
    sep = multi_label_separator
    active = label_cleanup is not None and label_cleanup.active
    cleanup_report = ((label_cleanup or LabelCleanup()).apply(raw, sep)
                      if active or sep is not None else None)
    if not active:
        cleanup_report = None
    if sep is not None:
        refuse_empty_tag_sets(raw, label_column, sep)
    if cleanup_report and cleanup_report["unused_map_keys"]:
        log.warning("data.label_map: %s occur(s) in no split, so nothing was renamed from "
                    "them; check their spelling against the labels of %s",
                    ", ".join(map(repr, cleanup_report["unused_map_keys"])), train)
    names = sorted({raw["train"].label_names[c] for c in np.unique(raw["train"].label_codes)})
    tags = sorted({t for n in names for t in split_tags(n, sep)}) if sep is not None else []
    if sep is not None:  # sets of known tags are known, whether training has the set or not
        names = sorted({*names, *(n for r in raw.values() for n in r.label_names
                                  if set(split_tags(n, sep)) <= set(tags))})
    classes = tags if sep is not None else names
    if len(classes) < 2 and sep is not None:
        raise DataError(f"{train}: {label_column!r} holds {len(tags)} tag(s) "
                        f"({', '.join(tags) or 'none'}) split by {sep!r} "
                        "(data.multi_label.separator); multi-label needs at least 2 tags")
    if len(names) < 2:
        raise DataError(f"{train}: " + (
            terms.single_class.format(names=", ".join(map(repr, names)) or "none")
            if terms.single_class else
            f"{label_column!r} has {len(names)} distinct value(s) "
            f"({', '.join(names) or 'none'}); a classifier needs at least 2 classes"))
    rows_read = len(raw["train"].texts)
    if (terms.label_column and len(classes) > MAX_LABELS_MIN
            and len(classes) > MAX_LABEL_SHARE * rows_read):
        numbers = all(_is_number(n) for n in names)
        raise DataError(f"{train}: data.label_column {label_column!r} has {len(names)} distinct "
                        f"values in {rows_read} training rows ({', '.join(names[:5])}, …): "
                        + ("numbers to predict (a regression target), not classes; "
                           if numbers else "nearly every row a class of its own; ")
                        + (f"to predict the numbers use task: {regression_task}, or "
                           if numbers and regression_task else "")
                        + "set data.label_column to the column of class labels"
                        + (", or bin the numbers into classes"
                           if numbers and not regression_task else ""))
    index_of = {name: i for i, name in enumerate(names)}
    present = list(raw)
    exact = dict(zip(present, hy.text_keys(*(raw[r].texts for r in present)), strict=True))
    normal = (dict(zip(present, hy.text_keys(*(hy.normalise(raw[r].texts) for r in present)),
                       strict=True)) if normalise else exact)
    rows: dict[str, ck.RowSet] = {}
    for role in present:
        codes = np.array([index_of.get(n, -1) for n in raw[role].label_names], dtype=np.int64)
        rows[role] = ck.RowSet(role, raw[role], codes[raw[role].label_codes], exact[role],
                           normal[role])
    for role in ("validation", "test"):
        if role in rows:
            ck.unseen_labels(rows[role], names, label_column, on_unseen_labels, terms)

    k = len(names)
    checks_out: list[dict[str, Any]] = []
    for r in rows.values():
        ck.describe_copies(r, k)
    t = rows["train"]
    checks_out += ck.train_copies(t, k, policy, terms)

    checks_out.append(ck.leakage(rows, policy, against=("validation", "test"), terms=terms))
    validation_split: dict[str, Any] | None = None
    if "validation" not in rows:
        labels_now = t.labels[t.index]
        groups = (t.raw.groups[t.index] if group_column is not None else t.normal[t.index])
        _check_splittable(_group_labels(labels_now, groups), validation_fraction, names, train,
                          ck.removed_text(t.removed) if any(t.removed.values()) else "",
                          terms.row)
        kept, held = stratified_group_split(labels_now, groups, validation_fraction, seed)
        v = ck.RowSet("validation", t.raw, t.labels, t.exact, t.normal)
        v.index = t.index[held]
        v.removed = {}
        v.counts = {"exact_duplicates": 0, "normalised_duplicates": 0}
        t.removed["held_out_for_validation"] = len(held)
        t.index = t.index[kept]
        rows["validation"] = v
        validation_split = {"from": "train", "fraction": validation_fraction,
                            "stratified": True, "seed": seed,
                            "grouped_by": group_column or terms.grouped_by or (
                                "normalised text" if normalise else "identical rows")}
    if group_column is not None and validation_split is not None:
        checks_out[-1] = ck.leakage(rows, policy, against=("validation",), record=checks_out[-1],
                                    terms=terms)
    if sep is None:  # per class; multi-label data is described per tag below
        checks_out += ck.class_checks(rows, names, policy,
                                      validation_fraction if validation_split else None, terms)
    twins = [" / ".join(map(repr, group)) for group in spelling_twins(classes)]
    more = f" and {len(twins) - 5} more" if len(twins) > 5 else ""
    checks_out.append(hy.check_record(
        "label_spelling", len(twins), "warn",
        f"{len(twins)} group(s) of labels differ only in case or spacing, so they are separate "
        f"classes: {'; '.join(twins[:5])}{more}; set data.normalise_labels: case_and_space to "
        "merge them (or data.label_map: {from: to} to choose each spelling)"))

    limits = {"train": max_train_samples, "validation": max_eval_samples,
              "test": max_eval_samples}
    for role, r in rows.items():
        kept = stratified_subsample(r.index, r.labels[r.index], limits[role], seed)
        r.keep(np.isin(r.index, kept), "subsampled")
    for role, r in rows.items():
        if len(r.index) == 0:
            raise DataError(f"{specs[role] or train}: no {role} {terms.row}s are left once the "
                            f"data checks have run ({terms.row}s removed: "
                            f"{ck.removed_text(r.removed)}); keep them (data.checks.*, "
                            f"data.on_unseen_labels) or add {terms.row}s")
    left = np.unique(t.labels[t.index])
    if len(left) < 2:
        limit = (f"raise data.max_train_samples ({max_train_samples}), "
                 if max_train_samples else "")
        raise DataError(f"{train}: only the class {names[int(left[0])]!r} is left in training "
                        f"once the data checks have run ({terms.row}s removed: "
                        f"{ck.removed_text(t.removed)}); a classifier needs at least 2 classes: "
                        f"{limit}keep more {terms.row}s (data.checks.*) or add {terms.row}s of "
                        "other classes")
    if sep is not None:
        matrix = tag_matrix(names, tags, sep)
        ratio = hy.imbalance_ratio(matrix[t.labels[t.index]].sum(axis=0).astype(np.int64))
    else:
        ratio = hy.imbalance_ratio(np.bincount(t.labels[t.index], minlength=k))
    checks_out.append(hy.check_record(
        "imbalance", round(ratio or 0.0, 4), policy.imbalance,
        f"the most frequent training class has {ratio or 0:.2f}x the {terms.row}s of the least "
        f"frequent (limit {policy.max_imbalance_ratio:g})",
        failing=ratio is not None and ratio > policy.max_imbalance_ratio))

    splits = {role: Split(_texts(r), r.labels[r.index], r.rows()) for role, r in rows.items()}
    report = ck.build_report(rows, names, specs, validation_split, ratio, checks_out)
    if cleanup_report is not None:
        report["label_cleanup"] = cleanup_report
    if sep is not None:
        report["multi_label"] = {
            "separator": sep, "tags": tags,
            "tag_counts": {role: dict(zip(tags, matrix[r.labels[r.index]].sum(axis=0)
                                          .astype(int).tolist(), strict=True))
                           for role, r in rows.items()}}
    return LabelledSplits(splits["train"], splits["validation"], splits.get("test"), names,
                          report)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _texts(r: ck.RowSet) -> TextColumn:
    """The kept texts of ``r`` as a :class:`TextColumn`."""
    return TextColumn(r.raw.texts.take(pa.array(r.index, type=pa.int64())))


def _group_labels(labels: np.ndarray, groups: np.ndarray) -> np.ndarray:
    _, first = np.unique(groups, return_index=True)
    return labels[np.sort(first)]
