"""One check-and-split pipeline for every task, parameterised by what stratifies the rows.

On splits already read (:mod:`.reading`, or a task's own reader), in this order:

1. refuse splits with no usable rows (:func:`~.checks.refuse_unusable`);
2. the strata policy reads the labels into integer codes and refuses what it cannot learn
   (:meth:`Strata.codes`: class names, or targets that are numbers);
3. row sets with exact and normalised keys; the policy's own row checks (unseen labels);
4. training copies (exact, normalised, conflicting) and leakage into validation and test;
5. when no validation file is given, validation is split off training: seeded, stratified by
   the policy (:meth:`Strata.split_off`) and grouped, so that copies of one key (or rows of one
   ``data.group_column`` value) stay on one side; leakage again against it when grouped;
6. the policy's checks of the split rows (:meth:`Strata.checks`: classes, or the target's
   outliers, range, classes and skew);
7. seeded subsamples (``max_train_samples``, ``max_eval_samples``), stratified by
   :meth:`Strata.subsample_strata`; then every split must keep rows and training must still
   be learnable (:meth:`Strata.refuse_degenerate`);
8. the policy builds the splits and the report (:meth:`Strata.finish`).

The two policies are :class:`~entrena.data.classes.ClassStrata` (class labels) and
:class:`~entrena.data.targets.TargetStrata` (a number to predict, stratified on quantile bins).
Validation and test rows are never dropped for hygiene; what they hold is counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from entrena.data import checks as ck
from entrena.data import hygiene as hy
from entrena.data.reading import RawSplit
from entrena.data.splits import LabelledSplits, Split, TextColumn, stratified_subsample
from entrena.errors import DataError

__all__ = ["SplitOptions", "Strata", "check_and_split_rows", "split_of"]


@dataclass(frozen=True)
class SplitOptions:
    """What every policy shares: the ``data`` keys of the checks and the split.

    Attributes:
        label_column: ``data.label_column``, for messages.
        validation_fraction: Share of training (groups) split off when no validation file.
        max_train_samples: Seeded subsample of training (``None``: all).
        max_eval_samples: Seeded subsample of validation and test (``None``: all).
        seed: Random state of the split and the subsamples.
        group_column: ``data.group_column``: rows of one value stay on one side.
        policy: What the hygiene checks drop.
        normalise: Compare normalised keys for near-duplicates and leakage (text); when
            ``False`` keys are compared exactly (table rows, image files).
        empty_what: What a skipped row lacked, for the "no usable rows" message.
        check_keys: The config keys that message suggests checking.
        terms: The words messages use for a row (:class:`~.checks.Terms`).
    """

    label_column: str
    validation_fraction: float
    max_train_samples: int | None
    max_eval_samples: int | None
    seed: int
    group_column: str | None
    policy: hy.CheckPolicy
    normalise: bool = True
    empty_what: str = "an empty text"
    check_keys: str = "data.text_column and data.label_column"
    terms: ck.Terms = ck.TEXT


class Strata(Protocol):
    """What a kind of label makes of the pipeline: its codes, checks, strata and report.

    ``train`` is the training spec (for messages); a policy keeps what it learns in
    :meth:`codes` (the label map, the targets) for the later steps of one pipeline run.
    """

    keep_keys: str
    """The config keys that keep removed rows, for the "no rows left" message."""

    def codes(self, raw: dict[str, RawSplit], train: str, opts: SplitOptions
              ) -> tuple[dict[str, np.ndarray], int]:
        """Each split's label code per row (N,) int64 (-1: unknown), and how many codes."""

    def check_rows(self, rows: dict[str, ck.RowSet], opts: SplitOptions) -> None:
        """Checks of the row sets before the copies are counted (may drop or raise)."""

    def copy_terms(self, terms: ck.Terms) -> ck.Terms:
        """The words of the training-copy checks."""

    def split_off(self, t: ck.RowSet, groups: np.ndarray, train: str, opts: SplitOptions
                  ) -> tuple[np.ndarray, np.ndarray, Any]:
        """``(kept, held)`` positions into ``t.index`` and the report's ``stratified``."""

    def checks(self, rows: dict[str, ck.RowSet], carved: bool, opts: SplitOptions
               ) -> list[dict[str, Any]]:
        """Check records of the split rows (``carved``: validation came from training)."""

    def subsample_strata(self, rows: dict[str, ck.RowSet]) -> dict[str, np.ndarray]:
        """Each split's stratum per kept row, for the subsample."""

    def refuse_degenerate(self, t: ck.RowSet, train: str, opts: SplitOptions) -> None:
        """Raise when what is left of training cannot be learned."""

    def finish(self, rows: dict[str, ck.RowSet], specs: dict[str, str | None],
               validation_split: dict[str, Any] | None, checks: list[dict[str, Any]],
               opts: SplitOptions) -> LabelledSplits:
        """The splits and their report."""


def check_and_split_rows(raw: dict[str, RawSplit], specs: dict[str, str | None],
                         strata: Strata, opts: SplitOptions) -> LabelledSplits:
    """The steps of the module docstring on splits already read.

    Args:
        raw: The splits as read (``train`` always; ``validation``, ``test`` when given).
            ``texts`` holds each row's key: its text, a table row as a key string, an image
            file's SHA-256.
        specs: Path, pattern or URL of each split, for messages and the report.
        strata: The label policy (class labels or a number to predict).
        opts: The shared options.

    Returns:
        The splits and their report (:meth:`Strata.finish`). Checks that fail (``error``)
        are recorded, not raised: the caller writes the report first.

    Raises:
        DataError: No usable rows, labels the policy refuses, a validation split that
            cannot be made, or no rows left once the checks have run.
    """
    train = specs["train"] or ""
    ck.refuse_unusable(raw, label_column=opts.label_column, group_column=opts.group_column,
                       empty_what=opts.empty_what, check_keys=opts.check_keys)
    codes, k = strata.codes(raw, train, opts)
    rows = _row_sets(raw, codes, opts.normalise)
    strata.check_rows(rows, opts)
    for r in rows.values():
        ck.describe_copies(r, k)
    checks = ck.train_copies(rows["train"], k, opts.policy, strata.copy_terms(opts.terms))
    checks.append(ck.leakage(rows, opts.policy, against=("validation", "test"),
                             terms=opts.terms))
    validation_split: dict[str, Any] | None = None
    if "validation" not in rows:
        validation_split = _split_off_validation(rows, strata, train, opts)
        if opts.group_column is not None:
            checks[-1] = ck.leakage(rows, opts.policy, against=("validation",),
                                    record=checks[-1], terms=opts.terms)
    checks += strata.checks(rows, validation_split is not None, opts)
    _subsample(rows, strata.subsample_strata(rows), opts)
    _refuse_empty(rows, specs, strata.keep_keys, opts.terms)
    strata.refuse_degenerate(rows["train"], train, opts)
    return strata.finish(rows, specs, validation_split, checks, opts)


def split_of(r: ck.RowSet, labels: np.ndarray) -> Split:
    """The kept rows of ``r`` as a :class:`~.splits.Split` (texts as a
    :class:`~.splits.TextColumn`) with ``labels`` (N,)."""
    return Split(TextColumn(r.raw.texts.take(pa.array(r.index, type=pa.int64()))), labels,
                 r.rows())


def _row_sets(raw: dict[str, RawSplit], codes: dict[str, np.ndarray], normalise: bool
              ) -> dict[str, ck.RowSet]:
    present = list(raw)
    exact = dict(zip(present, hy.text_keys(*(raw[r].texts for r in present)), strict=True))
    normal = (dict(zip(present, hy.text_keys(*(hy.normalise(raw[r].texts) for r in present)),
                       strict=True)) if normalise else exact)
    return {role: ck.RowSet(role, raw[role], codes[role], exact[role], normal[role])
            for role in present}


def _split_off_validation(rows: dict[str, ck.RowSet], strata: Strata, train: str,
                          opts: SplitOptions) -> dict[str, Any]:
    """Move the rows :meth:`Strata.split_off` holds out of training into ``rows["validation"]``;
    return the report's ``validation_split``."""
    t = rows["train"]
    groups = t.raw.groups[t.index] if opts.group_column is not None else t.normal[t.index]
    kept, held, stratified = strata.split_off(t, groups, train, opts)
    v = ck.RowSet("validation", t.raw, t.labels, t.exact, t.normal)
    v.index = t.index[held]
    v.removed = {}
    v.counts = {"exact_duplicates": 0, "normalised_duplicates": 0}
    t.removed["held_out_for_validation"] = len(held)
    t.index = t.index[kept]
    rows["validation"] = v
    return {"from": "train", "fraction": opts.validation_fraction, "stratified": stratified,
            "seed": opts.seed,
            "grouped_by": opts.group_column or opts.terms.grouped_by or (
                "normalised text" if opts.normalise else "identical rows")}


def _subsample(rows: dict[str, ck.RowSet], strata: dict[str, np.ndarray],
               opts: SplitOptions) -> None:
    limits = {"train": opts.max_train_samples, "validation": opts.max_eval_samples,
              "test": opts.max_eval_samples}
    for role, r in rows.items():
        kept = stratified_subsample(r.index, strata[role], limits[role], opts.seed)
        r.keep(np.isin(r.index, kept), "subsampled")


def _refuse_empty(rows: dict[str, ck.RowSet], specs: dict[str, str | None], keep_keys: str,
                  terms: ck.Terms) -> None:
    for role, r in rows.items():
        if len(r.index) == 0:
            raise DataError(f"{specs[role] or specs['train'] or ''}: no {role} {terms.row}s "
                            f"are left once the data checks have run ({terms.row}s removed: "
                            f"{ck.removed_text(r.removed)}); keep them ({keep_keys}) or add "
                            f"{terms.row}s")
