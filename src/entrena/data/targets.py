"""The number-to-predict policy of the check-and-split pipeline (regression targets).

:class:`TargetStrata` is the :class:`~entrena.data.splitting.Strata` of a numeric target; the
rows (texts, table rows as keys) are checked as for classes
(:func:`~entrena.data.splitting.check_and_split_rows`), the target as a number:

1. every target must be a plain number (``12``, ``-3.5``, ``1e3``): ``"1,234.5"``, ``"$12"``,
   ``"n/a"`` or ``inf`` are refused with their rows, never parsed into something else; a
   missing target is a skipped row (``data.on_bad_rows``), counted as ``empty_label``;
2. a constant training target, and ``data.target_transform: log`` with a value ≤ -1, are
   refused;
3. training rows: exact duplicates (same key *and* target; ``data.checks.exact_duplicates``),
   normalised duplicates, and rows whose key repeats with different targets (noise: counted
   and kept, under the check name ``conflicting_labels``);
4. leakage: training rows whose normalised key also occurs in validation or test;
5. the validation split when no validation file is given: stratified on quantile bins of the
   training target (up to :data:`MAX_BINS`), seeded, grouped so that copies of one key (or
   rows of one ``data.group_column`` value) stay on one side;
6. validation and test targets outside the training range are counted and warned about
   (``target_range``), and a training target with 2 distinct values or fewer is named as
   probably a class (``target_classes``), and a positive target skewed past
   :data:`SKEW_LIMIT` without ``data.target_transform`` gets the transform's name
   (``target_skew``);
7. targets far from the training median (:func:`robust_z` beyond :data:`OUTLIER_Z`, on the
   scale the network learns) are named with their rows (``target_outliers``) and, as
   ``data.target_outliers`` says, kept (``keep``, a warning), dropped (``drop``) or clipped
   to the bounds (``clip``) in the training rows and a validation split carved from them;
   a test file, or a validation file, is scored as given;
8. seeded subsamples (``max_train_samples``, ``max_eval_samples``), stratified on the bins.

Split ``labels`` hold the targets as float64 (N,) in the file's units; ``LabelledSplits.labels``
(class names) is empty.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from entrena.data import checks as ck
from entrena.data import hygiene as hy
from entrena.data.reading import RawSplit, format_rows
from entrena.data.splits import LabelledSplits, binned_group_split, quantile_edges, target_bins
from entrena.data.splitting import SplitOptions, check_and_split_rows, split_of
from entrena.errors import DataError

__all__ = ["MAX_BINS", "NUMBER", "OUTLIER_Z", "parse_targets", "robust_z", "TargetStrata",
           "check_and_split_targets", "target_summary", "skew_hint"]

NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
"""A target as written in a file: an optional sign, digits with an optional decimal point and
an optional exponent. No thousands separators, currency signs, units or underscores: a value
such as ``"1,234.5"`` is refused rather than guessed (tables convert a column's thousands
separators first: :mod:`entrena.data.numbers`, ``data.number_format``)."""
MAX_BINS = 10
"""Quantile bins of the training target that stratify the validation split (fewer when the
held-out part is small: about two held-out rows per bin at least)."""


def parse_targets(raw: RawSplit, column: str) -> np.ndarray:
    """The target of each kept row of ``raw`` as float64 (N,).

    Raises:
        DataError: A value is not a plain finite number; names the file, the first rows and
            their values.
    """
    values = np.full(len(raw.label_names), np.nan)
    bad: list[int] = []
    for i, name in enumerate(raw.label_names):
        text = str(name).strip()
        if NUMBER.match(text) and math.isfinite(float(text)):
            values[i] = float(text)
        else:
            bad.append(i)
    if bad:
        mask = np.isin(raw.label_codes, bad)
        rows = raw.rows[mask]
        shown = ", ".join(repr(raw.label_names[c]) for c in
                          dict.fromkeys(raw.label_codes[mask][:50].tolist()))
        shown = ", ".join(shown.split(", ")[:3])
        raise DataError(
            f"{raw.spec}: data.label_column {column!r} must hold numbers to predict, but "
            f"{int(mask.sum())} {raw.role} row(s) hold other values (rows "
            f"{format_rows(rows.tolist())}: {shown}); write plain numbers (1234.5, not "
            "'$12'; in a table, data.number_format: {" f"{column}: '1,234.5'" "} reads a "
            "thousands separator), leave unknown targets empty (skipped rows), or use a "
            "classification task if the column holds classes")
    return values[raw.label_codes] if len(raw.label_codes) else np.zeros(0)


def target_summary(values: np.ndarray) -> dict[str, float | None]:
    """``{"mean", "std", "min", "max", "median"}`` of targets (N,) (``None`` when empty)."""
    if not len(values):
        return {k: None for k in ("mean", "std", "min", "max", "median")}
    return {"mean": float(values.mean()), "std": float(values.std()),
            "min": float(values.min()), "max": float(values.max()),
            "median": float(np.median(values))}


def check_and_split_targets(raw: dict[str, RawSplit], specs: dict[str, str | None], *,
                            label_column: str, validation_fraction: float,
                            max_train_samples: int | None, max_eval_samples: int | None,
                            seed: int, group_column: str | None, policy: hy.CheckPolicy,
                            target_transform: str = "none", target_outliers: str = "keep",
                            normalise: bool = True,
                            empty_what: str = "an empty text",
                            check_keys: str = "data.text_column and data.label_column",
                            terms: ck.Terms = ck.TEXT,
                            classification_task: str = "") -> LabelledSplits:
    """The checks of the module docstring on splits already read:
    :func:`~entrena.data.splitting.check_and_split_rows` with a :class:`TargetStrata`.

    Args:
        raw: The splits as read (``train`` always; ``validation``, ``test`` when given), their
            ``label_names`` the targets as written.
        specs: Path, pattern or URL of each split, for messages and the report.
        target_transform: ``none`` or ``log`` (``log1p``): refused when a value is ≤ -1.
        target_outliers: ``keep``, ``drop`` or ``clip`` (step 7 of the module docstring).
        normalise: Compare normalised keys for near-duplicates and leakage (text).
        empty_what, check_keys, terms: Words of the messages, as in
            :class:`~entrena.data.splitting.SplitOptions`.
        classification_task: The task to suggest for a two-valued target (the caller's
            twin classification task; empty: "a classification task").

    Returns:
        The splits (targets in ``labels``, float64) and their report (``target`` per split).

    Raises:
        DataError: No usable rows, a target that is not a number, a constant training target,
            ``log`` with a value ≤ -1, or no rows left after the checks.
    """
    opts = SplitOptions(label_column=label_column, validation_fraction=validation_fraction,
                        max_train_samples=max_train_samples, max_eval_samples=max_eval_samples,
                        seed=seed, group_column=group_column, policy=policy,
                        normalise=normalise, empty_what=empty_what, check_keys=check_keys,
                        terms=terms)
    strata = TargetStrata(transform=target_transform, outliers=target_outliers,
                          classification_task=classification_task)
    return check_and_split_rows(raw, specs, strata, opts)


@dataclass
class TargetStrata:
    """A number to predict: a :class:`~entrena.data.splitting.Strata` whose codes index the
    distinct targets, stratified on quantile bins of the training targets.

    Attributes:
        transform: ``data.target_transform`` (``none`` or ``log``).
        outliers: ``data.target_outliers`` (``keep``, ``drop`` or ``clip``).
        classification_task: The task to suggest for a two-valued target.
        distinct: The distinct targets of every split (K,), filled by :meth:`codes` (with
            ``train_values``, the training targets as read (N,)).
        clipped: Clip bounds per split under ``clip``, filled by :meth:`checks`.
    """

    transform: str = "none"
    outliers: str = "keep"
    classification_task: str = ""
    keep_keys: str = field(default="data.checks.*", init=False)
    distinct: np.ndarray = field(default_factory=lambda: np.zeros(0), init=False)
    train_values: np.ndarray = field(default_factory=lambda: np.zeros(0), init=False)
    clipped: dict[str, tuple[float, float]] = field(default_factory=dict, init=False)

    def codes(self, raw: dict[str, RawSplit], train: str, opts: SplitOptions
              ) -> tuple[dict[str, np.ndarray], int]:
        values = {role: parse_targets(split, opts.label_column) for role, split in raw.items()}
        self._refuse_unlearnable(values, raw, train, opts.label_column)
        self.train_values = values["train"]
        present = list(raw)
        self.distinct, inverse = np.unique(np.concatenate([values[r] for r in present]),
                                           return_inverse=True)
        codes, start = {}, 0
        for role in present:
            codes[role] = inverse[start:start + len(values[role])].astype(np.int64)
            start += len(values[role])
        return codes, len(self.distinct)

    def _refuse_unlearnable(self, values: dict[str, np.ndarray], raw: dict[str, RawSplit],
                            train: str, label_column: str) -> None:
        """Refuse ``log`` with a target <= -1, targets too large to standardise, and a
        constant training target."""
        if self.transform == "log":
            for role, v in values.items():
                low = v <= -1
                if low.any():
                    raise DataError(
                        f"{raw[role].spec}: data.target_transform: log takes log(1 + target), "
                        f"but {int(low.sum())} {role} target(s) are <= -1 (rows "
                        f"{format_rows(raw[role].rows[low].tolist())}: "
                        f"{', '.join(f'{x:g}' for x in v[low][:3])}); use "
                        "data.target_transform: none, or fix those targets")
        train_values = values["train"]
        with np.errstate(over="ignore", invalid="ignore"):
            learned = np.log1p(train_values) if self.transform == "log" else train_values
            spread = float(np.std(learned))
        if not math.isfinite(spread):
            biggest = train_values[np.argmax(np.abs(train_values))]
            raise DataError(f"{train}: data.label_column {label_column!r} holds targets as "
                            f"large as {biggest:g}, too large to standardise (their squares "
                            "overflow 64-bit floats); rescale the column (divide it by a power "
                            "of ten) or use data.target_transform: log")
        if np.ptp(train_values) == 0:
            raise DataError(f"{train}: data.label_column {label_column!r} has the same value "
                            f"({train_values[0]:g}) in all {len(train_values)} training rows; "
                            "there is nothing to predict: choose a column that varies")

    def targets_of(self, r: ck.RowSet) -> np.ndarray:
        """The kept targets of ``r`` (N,) float64, clipped where :attr:`clipped` says."""
        values = self.distinct[r.labels[r.index]]
        return np.clip(values, *self.clipped[r.role]) if r.role in self.clipped else values

    def check_rows(self, rows: dict[str, ck.RowSet], opts: SplitOptions) -> None:
        return None

    def copy_terms(self, terms: ck.Terms) -> ck.Terms:
        return replace(terms, label="target")

    def split_off(self, t: ck.RowSet, groups: np.ndarray, train: str, opts: SplitOptions
                  ) -> tuple[np.ndarray, np.ndarray, Any]:
        fraction = opts.validation_fraction
        n_groups = len(np.unique(groups))
        held_n = math.ceil(fraction * n_groups)
        if held_n < 1 or n_groups - held_n < 1:
            raise DataError(f"{train}: {n_groups} training row(s) (or groups) cannot be split "
                            f"into training and validation (data.validation_fraction "
                            f"{fraction:g}); add rows or give a validation file "
                            "(data.validation)")
        fitted = self.train_values[t.index]
        edges = quantile_edges(fitted, max(1, min(MAX_BINS, held_n // 2)))
        kept, held = binned_group_split(target_bins(fitted, edges), groups, fraction,
                                        opts.seed)
        return kept, held, f"target quantile bins ({len(edges) + 1})"

    def checks(self, rows: dict[str, ck.RowSet], carved: bool, opts: SplitOptions
               ) -> list[dict[str, Any]]:
        changed = ("train", "validation") if carved else ("train",)
        record, bounds, outliers = _outlier_check(rows, self.targets_of, opts.label_column,
                                                  self.transform, self.outliers, changed,
                                                  opts.terms)
        for role in changed:
            if self.outliers == "drop":
                rows[role].keep(~outliers[role], "target_outliers")
            elif self.outliers == "clip" and bounds is not None:
                self.clipped[role] = bounds
        train = self.targets_of(rows["train"])
        return [record, _range_check(rows, self.targets_of, opts.terms),
                _class_check(train, opts.label_column, self.classification_task),
                _skew_check(train, opts.label_column, self.transform)]

    def subsample_strata(self, rows: dict[str, ck.RowSet]) -> dict[str, np.ndarray]:
        edges = quantile_edges(self.targets_of(rows["train"]), MAX_BINS)
        return {role: target_bins(self.targets_of(r), edges) for role, r in rows.items()}

    def refuse_degenerate(self, t: ck.RowSet, train: str, opts: SplitOptions) -> None:
        if np.ptp(self.targets_of(t)) == 0:
            raise DataError(f"{train}: every training target left once the data checks have "
                            f"run is {self.targets_of(t)[0]:g}; there is nothing to predict: "
                            "raise data.max_train_samples or keep more rows (data.checks.*)")

    def finish(self, rows: dict[str, ck.RowSet], specs: dict[str, str | None],
               validation_split: dict[str, Any] | None, checks: list[dict[str, Any]],
               opts: SplitOptions) -> LabelledSplits:
        splits = {role: split_of(r, self.targets_of(r)) for role, r in rows.items()}
        report = _report(rows, self.targets_of, specs, validation_split, checks)
        return LabelledSplits(splits["train"], splits["validation"], splits.get("test"), [],
                              report)


OUTLIER_Z = 3.5
"""A target whose modified z-score (:func:`robust_z`) exceeds this in absolute value is an
outlier: the cut Iglewicz and Hoaglin recommend (*How to Detect and Handle Outliers*, ASQC
1993, §3.4); a normal sample has about 1 in 2,000 beyond it."""
MAD_TO_SIGMA = 0.6745
"""The median absolute deviation of a normal sample over its standard deviation (the 0.75
quantile of the standard normal); ``0.6745 (x - median) / MAD`` is Iglewicz and Hoaglin's
modified z-score."""
MEAN_AD_TO_SIGMA = 0.7979
"""The mean absolute deviation of a normal sample over its standard deviation (√(2/π)): the
scale used instead when more than half the values equal the median (MAD = 0)."""


def robust_z(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Modified z-scores (N,) of ``values`` against the median and median absolute deviation
    of ``reference`` (M,): ``0.6745 (x - median) / MAD`` (Iglewicz and Hoaglin 1993).

    When MAD is 0 (more than half of ``reference`` equals its median), the mean absolute
    deviation stands in (``0.7979 (x - median) / MeanAD``); when that is 0 too, every
    value off the median is infinitely far (``inf``) and the median itself 0.
    """
    reference = np.asarray(reference, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    center = float(np.median(reference))
    deviation = np.abs(reference - center)
    mad = float(np.median(deviation))
    scale = mad / MAD_TO_SIGMA if mad > 0 else float(np.mean(deviation)) / MEAN_AD_TO_SIGMA
    offset = values - center
    if scale > 0:
        return offset / scale
    return np.where(offset == 0, 0.0, np.copysign(np.inf, offset))


def _shown(x: float) -> str:
    """A target for a message: ``215,245`` from 1,000 up, else 4 significant digits."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _outlier_check(rows: dict[str, ck.RowSet], targets_of: Any, label_column: str,
                   transform: str, mode: str, changed: tuple[str, ...], terms: ck.Terms
                   ) -> tuple[dict[str, Any], tuple[float, float] | None,
                              dict[str, np.ndarray]]:
    """``target_outliers``: each split's targets with ``|robust_z| > OUTLIER_Z`` against the
    training targets, on the learned scale (``log1p`` under ``log``).

    Returns:
        ``(check record, clip bounds (low, high) in the target's units or None, outlier
        mask (rows of each split, in its current order))``; the record's action is ``warn``
        (``keep``), ``drop`` or ``clip``, its count the outliers of the ``changed`` splits.
    """
    def learned(v: np.ndarray) -> np.ndarray:
        return np.log1p(v) if transform == "log" else v

    train = learned(targets_of(rows["train"]))
    masks: dict[str, np.ndarray] = {}
    parts: list[str] = []
    total = 0
    for role in sorted(rows, key=ck.ROLES.index):
        r = rows[role]
        values = targets_of(r)
        mask = np.abs(robust_z(learned(values), train)) > OUTLIER_Z
        masks[role] = mask
        r.counts["target_outliers"] = int(mask.sum())
        if not mask.any():
            continue
        if role in changed:
            total += int(mask.sum())
        order = np.argsort(-np.abs(robust_z(learned(values[mask]), train)))
        where = terms.where(r.raw, r.rows()[mask][order][:5].tolist())
        parts.append(f"{int(mask.sum())} {role} (most extreme first: {where}: "
                     f"{', '.join(_shown(x) for x in values[mask][order][:3])})"
                     + ("" if role in changed else ", scored as given"))
    center = float(np.median(train))
    deviation = np.abs(train - center)
    mad = float(np.median(deviation))
    scale = mad / MAD_TO_SIGMA if mad > 0 else float(np.mean(deviation)) / MEAN_AD_TO_SIGMA
    bounds = None
    if scale > 0:
        low, high = center - OUTLIER_Z * scale, center + OUTLIER_Z * scale
        bounds = ((float(np.expm1(low)), float(np.expm1(high))) if transform == "log"
                  else (low, high))
    shown = f"[{_shown(bounds[0])}, {_shown(bounds[1])}]" if bounds else "the median"
    scale_words = ", on the log scale the network learns" if transform == "log" else ""
    if not parts:
        return (hy.check_record("target_outliers", 0, "warn", "none found"), bounds, masks)
    done = {"keep": "kept in training (data.target_outliers: keep)",
            "drop": "dropped from the training rows (data.target_outliers: drop)",
            "clip": f"clipped to {shown} in the training rows (data.target_outliers: clip)"}
    fix = ("; if they are typing mistakes fix them, or set data.target_outliers: drop (leave "
           f"them out of training) or clip (pull them to {shown})" if mode == "keep" else "")
    skew = ("; a heavy-tailed target is better served by data.target_transform: log"
            if transform == "none" and mode == "keep" else "")
    action = {"keep": "warn", "drop": "drop", "clip": "clip"}[mode]
    return (hy.check_record(
        "target_outliers", total, action,
        f"{sum(int(m.sum()) for m in masks.values())} target(s) of {label_column!r} lie more "
        f"than {OUTLIER_Z:g} robust z-scores (median and MAD of the training targets"
        f"{scale_words}) from the training median: {'; '.join(parts)}; "
        f"{done[mode]}{fix}{skew}", failing=bool(parts)), bounds, masks)


def _range_check(rows: dict[str, ck.RowSet], targets_of: Any, terms: ck.Terms
                 ) -> dict[str, Any]:
    """Validation/test targets outside the training range: a model extrapolates there."""
    train = targets_of(rows["train"])
    low, high = float(train.min()), float(train.max())
    parts, total = [], 0
    for role in ("validation", "test"):
        if role not in rows:
            continue
        r = rows[role]
        v = targets_of(r)
        outside = (v < low) | (v > high)
        r.counts["outside_training_range"] = int(outside.sum())
        if outside.any():
            total += int(outside.sum())
            where = terms.where(r.raw, r.rows()[outside][:5].tolist())
            parts.append(f"{int(outside.sum())} {role} ({where}: "
                         f"{', '.join(f'{x:g}' for x in v[outside][:3])})")
    return hy.check_record(
        "target_range", total, "warn",
        f"{total} validation/test target(s) lie outside the training range "
        f"[{low:g}, {high:g}], where a model extrapolates: {'; '.join(parts)}")


SKEW_LIMIT = 2.0
"""A positive target whose sample skewness (Fisher-Pearson, ``E[(x-μ)³]/σ³``) exceeds this is
heavy-tailed: a few large values dominate the squared error (a normal target has 0, an
exponential one 2)."""


def skew_hint(values: np.ndarray, label_column: str) -> str | None:
    """``"the training target 'price' is heavy-tailed (skewness 5.3; median 9,484, max
    215,245): set data.target_transform: log …"``, or None when the target is not positive or
    not skewed past :data:`SKEW_LIMIT`."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 3 or v.min() <= 0 or v.std() == 0:
        return None
    skew = float(np.mean((v - v.mean()) ** 3) / v.std() ** 3)
    if skew <= SKEW_LIMIT:
        return None
    shown = _shown
    return (f"the training target {label_column!r} is heavy-tailed (skewness {skew:.1f}; "
            f"median {shown(float(np.median(v)))}, max {shown(float(v.max()))}): set "
            "data.target_transform: "
            "log, which trains on log(1 + target) and answers in the target's units")


def _skew_check(train: np.ndarray, label_column: str, transform: str) -> dict[str, Any]:
    """``target_skew`` (warn): a positive, heavy-tailed target trained without a transform."""
    hint = skew_hint(train, label_column) if transform == "none" else None
    return hy.check_record("target_skew", 1 if hint else 0, "warn",
                           hint or "the training target is not heavy-tailed, or is "
                           "transformed", failing=hint is not None)


CLASS_LIKE_VALUES = 2
"""A numeric target with at most this many distinct training values is probably a class."""


def _class_check(train: np.ndarray, label_column: str,
                 classification_task: str) -> dict[str, Any]:
    """A training target with :data:`CLASS_LIKE_VALUES` distinct values or fewer (0/1, 1/2):
    a class written as a number, better trained as classification (``classification_task``,
    the task of the same inputs, named by the caller: this layer names no task)."""
    distinct = np.unique(train)
    few = len(distinct) <= CLASS_LIKE_VALUES
    shown = ", ".join(f"{v:g}" for v in distinct[:CLASS_LIKE_VALUES])
    return hy.check_record(
        "target_classes", len(distinct) if few else 0, "warn",
        f"the training target {label_column!r} takes only {len(distinct)} values ({shown}): "
        "it is probably a class; train it as one ("
        + (f"task: {classification_task}" if classification_task else "a classification task")
        + ", data.label_column unchanged) for class probabilities and accuracy instead of a "
        "regression's RMSE", failing=few)


def _report(rows: dict[str, ck.RowSet], targets_of: Any, specs: dict[str, str | None],
            validation_split: dict[str, Any] | None,
            checks: list[dict[str, Any]]) -> dict[str, Any]:
    splits: dict[str, Any] = {}
    for role, r in rows.items():
        entry = ck.split_entry(r, specs[role],
                               role == "validation" and validation_split is not None)
        entry["outside_training_range"] = int(r.counts.get("outside_training_range", 0))
        entry["target_outliers"] = int(r.counts.get("target_outliers", 0))
        entry["target"] = target_summary(targets_of(r))
        entry["label_counts"] = {}
        splits[role] = entry
    report: dict[str, Any] = {
        "labels": [],
        "target": {role: s["target"] for role, s in splits.items()},
        "rows": {role: splits[role]["rows_kept"] if role in splits else 0
                 for role in ck.ROLES},
        "label_counts": {},
        "imbalance_ratio": None,
        "splits": splits,
        "checks": checks,
    }
    if validation_split is not None:
        report["validation_split"] = validation_split
    return report
