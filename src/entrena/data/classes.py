"""The class-label policy of the check-and-split pipeline (:mod:`entrena.data.splitting`).

1. labels are renamed and merged (``data.label_map``, ``data.normalise_labels``:
   :class:`~entrena.data.labels.LabelCleanup`); the label map is built from training (sorted as
   strings; with ``data.multi_label`` a map of tag sets);
2. fewer than 2 classes, or a training column that is nearly a class per row (a regression
   target or an id), are refused;
3. validation/test rows with a label training never saw are refused or dropped
   (``data.on_unseen_labels``);
4. validation split off training is stratified by label (per group) and must hold every
   class on each side (:func:`~entrena.data.splits.check_splittable`);
5. class checks (small classes, per tag for multi-label), label spelling, and after the
   subsample the imbalance of training.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from entrena.data import checks as ck
from entrena.data import hygiene as hy
from entrena.data.labels import (
    LabelCleanup,
    refuse_empty_tag_sets,
    spelling_twins,
    split_tags,
    tag_matrix,
)
from entrena.data.reading import RawSplit
from entrena.data.splits import (
    LabelledSplits,
    check_splittable,
    group_labels,
    stratified_group_split,
)
from entrena.data.splitting import SplitOptions, split_of
from entrena.errors import DataError

__all__ = ["ClassStrata", "MAX_LABEL_SHARE", "MAX_LABELS_MIN"]

log = logging.getLogger("entrena")

MAX_LABEL_SHARE = 0.5
MAX_LABELS_MIN = 20
"""A training label column with more than 20 distinct values, more than half as many as rows,
is refused: a regression target or an id, not classes."""


@dataclass
class ClassStrata:
    """Class labels: a :class:`~entrena.data.splitting.Strata` whose codes index the label map.

    Attributes:
        on_unseen_labels: ``error`` or ``drop`` validation/test labels training never saw.
        label_cleanup: Renames and merges labels before the label map is built; the report's
            ``label_cleanup``.
        separator: ``data.multi_label.separator``: a label is a set of tags. The label map is
            then of sets (sorted tags joined by the separator; splitting is stratified by
            set), validation and test sets unseen in training are kept when every tag is
            known, the class checks are made per tag, and the report gains ``multi_label``
            (``separator``, ``tags``, ``tag_counts`` per split).
        regression_task: The task that predicts such rows' numbers (named when the label
            column looks like a number to predict rather than classes).
        names: The label map (tags: the tags of a multi-label map), filled by :meth:`codes`.
    """

    on_unseen_labels: str = "error"
    label_cleanup: LabelCleanup | None = None
    separator: str | None = None
    regression_task: str = ""
    keep_keys: str = field(default="data.checks.*, data.on_unseen_labels", init=False)
    names: list[str] = field(default_factory=list, init=False)
    tags: list[str] = field(default_factory=list, init=False)
    cleanup_report: dict[str, Any] | None = field(default=None, init=False)

    def codes(self, raw: dict[str, RawSplit], train: str, opts: SplitOptions
              ) -> tuple[dict[str, np.ndarray], int]:
        self.cleanup_report = self._clean(raw, train, opts.label_column)
        classes = self._label_map(raw)
        self._refuse_classes(classes, len(raw["train"].texts), train, opts)
        index_of = {name: i for i, name in enumerate(self.names)}
        codes = {}
        for role, split in raw.items():
            known = np.array([index_of.get(n, -1) for n in split.label_names], dtype=np.int64)
            codes[role] = known[split.label_codes]
        return codes, len(self.names)

    def _clean(self, raw: dict[str, RawSplit], train: str, label_column: str
               ) -> dict[str, Any] | None:
        """Apply the label cleanup (and split tag sets); the report's ``label_cleanup``."""
        sep = self.separator
        active = self.label_cleanup is not None and self.label_cleanup.active
        report = ((self.label_cleanup or LabelCleanup()).apply(raw, sep)
                  if active or sep is not None else None)
        if not active:
            report = None
        if sep is not None:
            refuse_empty_tag_sets(raw, label_column, sep)
        if report and report["unused_map_keys"]:
            log.warning("data.label_map: %s occur(s) in no split, so nothing was renamed from "
                        "them; check their spelling against the labels of %s",
                        ", ".join(map(repr, report["unused_map_keys"])), train)
        return report

    def _label_map(self, raw: dict[str, RawSplit]) -> list[str]:
        """Set :attr:`names` (and :attr:`tags`); return the classes the checks count."""
        sep = self.separator
        names = sorted({raw["train"].label_names[c]
                        for c in np.unique(raw["train"].label_codes)})
        tags = sorted({t for n in names for t in split_tags(n, sep)}) if sep is not None else []
        if sep is not None:  # sets of known tags are known, whether training has the set or not
            names = sorted({*names, *(n for r in raw.values() for n in r.label_names
                                      if set(split_tags(n, sep)) <= set(tags))})
        self.names, self.tags = names, tags
        return tags if sep is not None else names

    def _refuse_classes(self, classes: list[str], rows_read: int, train: str,
                        opts: SplitOptions) -> None:
        """Refuse fewer than 2 classes (tags), or nearly a class per training row."""
        names, tags, sep = self.names, self.tags, self.separator
        label_column, terms = opts.label_column, opts.terms
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
        if (terms.label_column and len(classes) > MAX_LABELS_MIN
                and len(classes) > MAX_LABEL_SHARE * rows_read):
            numbers = all(_is_number(n) for n in names)
            task = self.regression_task
            raise DataError(
                f"{train}: data.label_column {label_column!r} has {len(names)} distinct "
                f"values in {rows_read} training rows ({', '.join(names[:5])}, …): "
                + ("numbers to predict (a regression target), not classes; "
                   if numbers else "nearly every row a class of its own; ")
                + (f"to predict the numbers use task: {task}, or " if numbers and task else "")
                + "set data.label_column to the column of class labels"
                + (", or bin the numbers into classes" if numbers and not task else ""))

    def check_rows(self, rows: dict[str, ck.RowSet], opts: SplitOptions) -> None:
        for role in ("validation", "test"):
            if role in rows:
                ck.unseen_labels(rows[role], self.names, opts.label_column,
                                 self.on_unseen_labels, opts.terms)

    def copy_terms(self, terms: ck.Terms) -> ck.Terms:
        return terms

    def split_off(self, t: ck.RowSet, groups: np.ndarray, train: str, opts: SplitOptions
                  ) -> tuple[np.ndarray, np.ndarray, Any]:
        labels_now = t.labels[t.index]
        check_splittable(group_labels(labels_now, groups), opts.validation_fraction,
                         self.names, train,
                         ck.removed_text(t.removed) if any(t.removed.values()) else "",
                         opts.terms.row)
        kept, held = stratified_group_split(labels_now, groups, opts.validation_fraction,
                                            opts.seed)
        return kept, held, True

    def checks(self, rows: dict[str, ck.RowSet], carved: bool, opts: SplitOptions
               ) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        if self.separator is None:  # per class; multi-label data is described per tag
            records += ck.class_checks(rows, self.names, opts.policy,
                                       opts.validation_fraction if carved else None, opts.terms)
        classes = self.tags if self.separator is not None else self.names
        twins = [" / ".join(map(repr, group)) for group in spelling_twins(classes)]
        more = f" and {len(twins) - 5} more" if len(twins) > 5 else ""
        records.append(hy.check_record(
            "label_spelling", len(twins), "warn",
            f"{len(twins)} group(s) of labels differ only in case or spacing, so they are "
            f"separate classes: {'; '.join(twins[:5])}{more}; set data.normalise_labels: "
            "case_and_space to merge them (or data.label_map: {from: to} to choose each "
            "spelling)"))
        return records

    def subsample_strata(self, rows: dict[str, ck.RowSet]) -> dict[str, np.ndarray]:
        return {role: r.labels[r.index] for role, r in rows.items()}

    def refuse_degenerate(self, t: ck.RowSet, train: str, opts: SplitOptions) -> None:
        left = np.unique(t.labels[t.index])
        if len(left) < 2:
            row = opts.terms.row
            limit = (f"raise data.max_train_samples ({opts.max_train_samples}), "
                     if opts.max_train_samples else "")
            raise DataError(f"{train}: only the class {self.names[int(left[0])]!r} is left in "
                            f"training once the data checks have run ({row}s removed: "
                            f"{ck.removed_text(t.removed)}); a classifier needs at least 2 "
                            f"classes: {limit}keep more {row}s (data.checks.*) or add {row}s "
                            "of other classes")

    def finish(self, rows: dict[str, ck.RowSet], specs: dict[str, str | None],
               validation_split: dict[str, Any] | None, checks: list[dict[str, Any]],
               opts: SplitOptions) -> LabelledSplits:
        t, names, sep = rows["train"], self.names, self.separator
        matrix = tag_matrix(names, self.tags, sep) if sep is not None else None
        ratio = hy.imbalance_ratio(
            matrix[t.labels[t.index]].sum(axis=0).astype(np.int64) if matrix is not None
            else np.bincount(t.labels[t.index], minlength=len(names)))
        policy = opts.policy
        checks.append(hy.check_record(
            "imbalance", round(ratio or 0.0, 4), policy.imbalance,
            f"the most frequent training class has {ratio or 0:.2f}x the {opts.terms.row}s of "
            f"the least frequent (limit {policy.max_imbalance_ratio:g})",
            failing=ratio is not None and ratio > policy.max_imbalance_ratio))
        splits = {role: split_of(r, r.labels[r.index]) for role, r in rows.items()}
        report = ck.build_report(rows, names, specs, validation_split, ratio, checks)
        if self.cleanup_report is not None:
            report["label_cleanup"] = self.cleanup_report
        if matrix is not None:
            report["multi_label"] = {
                "separator": sep, "tags": self.tags,
                "tag_counts": {role: dict(zip(self.tags, matrix[r.labels[r.index]].sum(axis=0)
                                              .astype(int).tolist(), strict=True))
                               for role, r in rows.items()}}
        return LabelledSplits(splits["train"], splits["validation"], splits.get("test"),
                              names, report)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
