"""From splits already read to clean splits with a number to predict (regression targets).

The counterpart of :func:`entrena.data.tables.check_and_split` for a numeric target; the
rows (texts, table rows as keys) are checked the same way, the target as a number:

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
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from entrena.data import checks as ck
from entrena.data import hygiene as hy
from entrena.data.reading import RawSplit, format_rows
from entrena.data.tables import (
    LabelledSplits,
    Split,
    TextColumn,
    stratified_group_split,
    stratified_subsample,
)
from entrena.errors import DataError

__all__ = ["MAX_BINS", "NUMBER", "OUTLIER_Z", "parse_targets", "robust_z", "target_bins",
           "check_and_split_targets", "target_summary"]

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


def target_bins(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The quantile bin of each value (N,) int64, given inner bin ``edges`` (K-1,)."""
    return np.searchsorted(edges, values, side="right").astype(np.int64)


def _edges(values: np.ndarray, bins: int) -> np.ndarray:
    if bins <= 1 or not len(values):
        return np.zeros(0)
    return np.unique(np.quantile(values, np.linspace(0, 1, bins + 1)[1:-1]))


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
    """The checks of the module docstring on splits already read.

    Args:
        raw: The splits as read (``train`` always; ``validation``, ``test`` when given), their
            ``label_names`` the targets as written.
        specs: Path, pattern or URL of each split, for messages and the report.
        target_transform: ``none`` or ``log`` (``log1p``): refused when a value is ≤ -1.
        target_outliers: ``keep``, ``drop`` or ``clip`` (step 7 of the module docstring).
        normalise: Compare normalised keys for near-duplicates and leakage (text).
        empty_what, check_keys, terms: Words of the messages, as in
            :func:`~entrena.data.tables.check_and_split`.
        classification_task: The task to suggest for a two-valued target (the caller's
            twin classification task; empty: "a classification task").

    Returns:
        The splits (targets in ``labels``, float64) and their report (``target`` per split).

    Raises:
        DataError: No usable rows, a target that is not a number, a constant training target,
            ``log`` with a value ≤ -1, or no rows left after the checks.
    """
    train = specs["train"] or ""
    ck.refuse_unusable(raw, label_column=label_column, group_column=group_column,
                       empty_what=empty_what, check_keys=check_keys)
    values = {role: parse_targets(split, label_column) for role, split in raw.items()}
    if target_transform == "log":
        for role, v in values.items():
            low = v <= -1
            if low.any():
                raise DataError(
                    f"{raw[role].spec}: data.target_transform: log takes log(1 + target), but "
                    f"{int(low.sum())} {role} target(s) are <= -1 (rows "
                    f"{format_rows(raw[role].rows[low].tolist())}: "
                    f"{', '.join(f'{x:g}' for x in v[low][:3])}); use "
                    "data.target_transform: none, or fix those targets")
    train_values = values["train"]
    with np.errstate(over="ignore", invalid="ignore"):
        learned = np.log1p(train_values) if target_transform == "log" else train_values
        spread = float(np.std(learned))
    if not math.isfinite(spread):
        biggest = train_values[np.argmax(np.abs(train_values))]
        raise DataError(f"{train}: data.label_column {label_column!r} holds targets as large as "
                        f"{biggest:g}, too large to standardise (their squares overflow 64-bit "
                        "floats); rescale the column (divide it by a power of ten) or use "
                        "data.target_transform: log")
    if np.ptp(train_values) == 0:
        raise DataError(f"{train}: data.label_column {label_column!r} has the same value "
                        f"({train_values[0]:g}) in all {len(train_values)} training rows; "
                        "there is nothing to predict: choose a column that varies")

    present = list(raw)
    distinct, inverse = np.unique(np.concatenate([values[r] for r in present]),
                                  return_inverse=True)
    k = len(distinct)
    exact = dict(zip(present, hy.text_keys(*(raw[r].texts for r in present)), strict=True))
    normal = (dict(zip(present, hy.text_keys(*(hy.normalise(raw[r].texts) for r in present)),
                       strict=True)) if normalise else exact)
    rows: dict[str, ck.RowSet] = {}
    start = 0
    for role in present:
        codes = inverse[start:start + len(values[role])].astype(np.int64)
        start += len(values[role])
        rows[role] = ck.RowSet(role, raw[role], codes, exact[role], normal[role])
    for r in rows.values():
        ck.describe_copies(r, k)
    t = rows["train"]
    checks_out = ck.train_copies(t, k, policy, replace(terms, label="target"))
    checks_out.append(ck.leakage(rows, policy, against=("validation", "test"), terms=terms))

    validation_split: dict[str, Any] | None = None
    fitted = train_values[t.index]
    if "validation" not in rows:
        groups = t.raw.groups[t.index] if group_column is not None else t.normal[t.index]
        n_groups = len(np.unique(groups))
        held_n = math.ceil(validation_fraction * n_groups)
        if held_n < 1 or n_groups - held_n < 1:
            raise DataError(f"{train}: {n_groups} training row(s) (or groups) cannot be split "
                            f"into training and validation (data.validation_fraction "
                            f"{validation_fraction:g}); add rows or give a validation file "
                            "(data.validation)")
        bins = max(1, min(MAX_BINS, held_n // 2))
        edges = _edges(fitted, bins)
        kept, held = _grouped_split(target_bins(fitted, edges), groups, validation_fraction,
                                    seed)
        v = ck.RowSet("validation", t.raw, t.labels, t.exact, t.normal)
        v.index = t.index[held]
        v.removed = {}
        v.counts = {"exact_duplicates": 0, "normalised_duplicates": 0}
        t.removed["held_out_for_validation"] = len(held)
        t.index = t.index[kept]
        rows["validation"] = v
        validation_split = {"from": "train", "fraction": validation_fraction,
                            "stratified": f"target quantile bins ({len(edges) + 1})",
                            "seed": seed,
                            "grouped_by": group_column or terms.grouped_by or (
                                "normalised text" if normalise else "identical rows")}
        if group_column is not None:
            checks_out[-1] = ck.leakage(rows, policy, against=("validation",),
                                        record=checks_out[-1], terms=terms)

    clipped: dict[str, tuple[float, float]] = {}

    def targets_of(r: ck.RowSet) -> np.ndarray:
        values = distinct[r.labels[r.index]]
        return np.clip(values, *clipped[r.role]) if r.role in clipped else values

    carved = validation_split is not None
    changed = ("train", "validation") if carved else ("train",)
    record, bounds, outliers = _outlier_check(rows, targets_of, label_column, target_transform,
                                              target_outliers, changed, terms)
    checks_out.append(record)
    for role in changed:
        if target_outliers == "drop":
            r = rows[role]
            r.keep(~outliers[role], "target_outliers")
        elif target_outliers == "clip" and bounds is not None:
            clipped[role] = bounds
    checks_out.append(_range_check(rows, targets_of, terms))
    checks_out.append(_class_check(targets_of(rows["train"]), label_column,
                                   classification_task))
    checks_out.append(_skew_check(targets_of(rows["train"]), label_column, target_transform))
    edges = _edges(targets_of(t), MAX_BINS)
    limits = {"train": max_train_samples, "validation": max_eval_samples,
              "test": max_eval_samples}
    for role, r in rows.items():
        chosen = stratified_subsample(r.index, target_bins(targets_of(r), edges),
                                      limits[role], seed)
        r.keep(np.isin(r.index, chosen), "subsampled")
    for role, r in rows.items():
        if len(r.index) == 0:
            raise DataError(f"{specs[role] or train}: no {role} {terms.row}s are left once the "
                            f"data checks have run ({terms.row}s removed: "
                            f"{ck.removed_text(r.removed)}); keep them (data.checks.*) or add "
                            f"{terms.row}s")
    if np.ptp(targets_of(t)) == 0:
        raise DataError(f"{train}: every training target left once the data checks have run "
                        f"is {targets_of(t)[0]:g}; there is nothing to predict: raise "
                        "data.max_train_samples or keep more rows (data.checks.*)")
    splits = {role: Split(TextColumn(r.raw.texts.take(pa.array(r.index, type=pa.int64()))),
                          targets_of(r), r.rows()) for role, r in rows.items()}
    report = _report(rows, targets_of, specs, validation_split, checks_out)
    return LabelledSplits(splits["train"], splits["validation"], splits.get("test"), [],
                          report)


def _grouped_split(bins: np.ndarray, groups: np.ndarray, fraction: float, seed: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~entrena.data.tables.stratified_group_split` on target bins, falling back to an
    unstratified grouped split when a bin is too small to stratify."""
    _, first = np.unique(groups, return_index=True)
    counts = np.bincount(bins[first])
    if len(counts[counts > 0]) > 1 and counts[counts > 0].min() >= 2:
        return stratified_group_split(bins, groups, fraction, seed)
    return stratified_group_split(np.zeros_like(bins), groups, fraction, seed)


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
