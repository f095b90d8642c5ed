"""Table data for ``task: tabular-classification``: read, check, split, preprocess.

The order:

1. read each split whole (CSV/TSV/JSONL/Parquet, a glob of shards or a URL);
2. feature columns: every training column but ``data.label_column``, ``data.group_column``
   and ``data.drop_columns``; a column with no value in the training rows is dropped with a
   warning (counted in the report's ``features.dropped_all_missing``);
3. kinds, from the training rows: numeric when every present value parses as a number,
   categorical otherwise;
4. the hygiene checks of text data on whole rows (:mod:`entrena.data.tabular`): empty rows
   and rows without a label skipped, exact duplicates, conflicting labels, train/test leakage,
   the validation split (stratified, seeded, copies of a row on one side), small classes,
   imbalance;
5. preprocessing fitted on the training split only (:mod:`entrena.data.preprocessing`) and
   applied to every split; validation and test values training never saw are counted per
   column (``splits.<role>.unseen_categories``).

Nothing is cached: reading and preprocessing a table of this size takes well under a second,
and the fitted preprocessing must be the run's own.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from entrena.config import LoadedConfig
from entrena.data.hygiene import CheckPolicy, check_record
from entrena.data.labels import LabelCleanup
from entrena.data.preprocessing import (
    feature_names,
    fit_preprocessing,
    invalid_numbers,
    transform,
    unseen_categories,
)
from entrena.data.reading import format_rows
from entrena.data.tables import LabelledSplits, check_and_split, open_config_sources
from entrena.data.tabular import (
    all_missing,
    column_kinds,
    feature_columns,
    raw_table_split,
    read_frame,
    refuse_non_finite,
    suspicious_columns,
)
from entrena.data.targets import check_and_split_targets
from entrena.errors import DataError

__all__ = ["PreparedTable", "prepare_table"]

log = logging.getLogger("entrena")


@dataclass
class PreparedTable:
    """Checked, split and preprocessed table data, ready to fit.

    Attributes:
        splits: The splits (row keys as ``texts``, labels, row numbers) and the label map.
        features: Preprocessed features per split (``train``, ``validation``, ``test``),
            (N, F) float32.
        frames: The raw feature values per split, (N, columns) (for the boosted trees).
        preprocessing: The fitted parameters (``preprocessing.json``).
        numeric: Numeric feature columns.
        categorical: Categorical feature columns.
        report: The data report (``data_report.json``).
        from_cache: Always ``False`` (tables are not cached).
    """

    splits: LabelledSplits
    features: dict[str, np.ndarray]
    frames: dict[str, pd.DataFrame]
    preprocessing: dict[str, Any]
    numeric: list[str]
    categorical: list[str]
    report: dict[str, Any]
    from_cache: bool = False

    @property
    def failed_checks(self) -> list[dict[str, Any]]:
        return [c for c in self.report.get("checks", []) if c["status"] == "failed"]


def prepare_table(loaded: LoadedConfig, *, numeric_target: bool = False) -> PreparedTable:
    """Read, check, split and preprocess the config's table (see the module docstring).

    Args:
        loaded: The config.
        numeric_target: The label column is a number to predict (regression): its values
            are parsed and checked as numbers (:mod:`entrena.data.targets`) and the splits'
            ``labels`` hold them (float64), ``data.target_transform`` applying.

    Returns:
        The prepared table. Failed checks are in ``report["checks"]``.

    Raises:
        DataError: A file is missing or unreadable, the label column (or a dropped column) is
            missing (the columns are listed), a split lacks a training feature column, labels
            mix numbers and strings, fewer than 2 classes, bad rows under ``error``, or a
            validation split that cannot be made.
    """
    started = time.perf_counter()
    cfg = loaded.config
    data = cfg.data
    specs, files, cache_root = open_config_sources(loaded)
    frames, infos = {}, {}
    for role in files:
        frames[role], infos[role] = read_frame(role, files[role])
    train_spec = specs["train"] or ""
    columns = feature_columns(list(frames["train"].columns), label_column=data.label_column,
                              drop_columns=data.drop_columns or [],
                              group_column=data.group_column, path=train_spec)
    empty_columns = all_missing(frames["train"], columns) if len(frames["train"]) else []
    for name in empty_columns:
        log.warning("column %r of %s has no value in any training row: dropped", name,
                    train_spec)
    columns = [c for c in columns if c not in empty_columns]
    numeric, categorical = column_kinds(frames["train"], columns) if columns else ([], [])
    for role, frame in frames.items():
        refuse_non_finite(frame, [c for c in numeric if c in frame.columns],
                          path=specs[role] or "", role=role)
    raw = {role: raw_table_split(role, specs[role] or "", frame, infos[role],
                                 label_column=data.label_column,
                                 group_column=data.group_column if role == "train" else None,
                                 numeric=numeric, categorical=categorical,
                                 on_bad_rows=data.on_bad_rows, numeric_label=numeric_target)
           for role, frame in frames.items()}
    common = dict(label_column=data.label_column, validation_fraction=data.validation_fraction,
                  max_train_samples=data.max_train_samples,
                  max_eval_samples=data.max_eval_samples, seed=cfg.train.seed,
                  group_column=data.group_column,
                  policy=CheckPolicy(**data.checks.model_dump()), normalise=False,
                  empty_what="no feature value",
                  check_keys="data.label_column and data.drop_columns")
    if numeric_target:
        splits = check_and_split_targets(raw, specs, target_transform=data.target_transform,
                                         classification_task="tabular-classification",
                                         **common)
    else:
        splits = check_and_split(raw, specs, on_unseen_labels=data.on_unseen_labels,
                                 regression_task="tabular-regression",
                                 label_cleanup=LabelCleanup.from_config(data), **common)
    checked_s = time.perf_counter() - started

    def rows_of(role: str) -> pd.DataFrame:
        split = getattr(splits, role)
        source = "train" if role == "validation" and "validation" not in frames else role
        return frames[source].iloc[split.row_ids - 1][columns].reset_index(drop=True)

    chosen = {role: rows_of(role) for role, _ in splits.roles()}
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        params = fit_preprocessing(chosen["train"], numeric, categorical)  # training rows only
    _refuse_overflow(params, chosen["train"], train_spec)
    features = {role: transform(frame, params) for role, frame in chosen.items()}
    report = splits.report
    _add_features(report, params, chosen, numeric, categorical, empty_columns,
                  [c for c in data.drop_columns or []])
    _add_column_checks(report, suspicious_columns(chosen["train"], categorical,
                                                  splits.train.row_ids))
    _add_invalid_numbers(report, params, chosen, splits)
    report["timings_s"] = {"read_and_check": round(checked_s, 3),
                           "preprocess": round(time.perf_counter() - started - checked_s, 3)}
    report["from_cache"] = False
    report["prepare_time_s"] = round(time.perf_counter() - started, 3)
    log.info("table read, checked and preprocessed in %.2fs: %d numeric and %d categorical "
             "columns, %d features", report["prepare_time_s"], len(numeric), len(categorical),
             params["width"])
    return PreparedTable(splits, features, chosen, params, numeric, categorical, report)


def _add_invalid_numbers(report: dict[str, Any], params: dict[str, Any],
                         frames: dict[str, pd.DataFrame], splits: LabelledSplits) -> None:
    """Validation/test values of numeric columns that are not numbers (``abc``): they take
    the training median like a missing value; counted per split and column
    (``splits.<role>.invalid_numbers``) and warned about with their rows."""
    total, parts = 0, []
    for role, frame in frames.items():
        if role == "train":
            continue
        found = invalid_numbers(frame, params)
        rows = getattr(splits, role).row_ids
        report["splits"][role]["invalid_numbers"] = {c: len(p) for c, p in found.items()}
        for column, positions in found.items():
            total += len(positions)
            shown = ", ".join(repr(str(v).strip()) for v in frame[column].iloc[positions[:3]])
            parts.append(f"{role} {column!r} rows {format_rows(rows[positions].tolist())} "
                         f"({shown})")
    report["checks"].append(check_record(
        "invalid_numbers", total, "warn",
        f"{total} validation/test value(s) of numeric columns are not numbers and take the "
        f"training median: {'; '.join(parts)}; fix them or leave those cells empty"))


def _add_column_checks(report: dict[str, Any], found: dict[str, list[str]]) -> None:
    """The ``mostly_numeric`` and ``identifier_columns`` warnings (columns used as categories
    that are probably mistakes), each with its fix."""
    fixes = {"mostly_numeric": "used as categories; fix or empty those values to use the "
                               "column as numbers",
             "identifier_columns": "likely identifiers, which one-hot encoding cannot "
                                   "generalise from; list them in data.drop_columns"}
    for name, items in found.items():
        message = f"{len(items)} column(s): {'; '.join(items)}; {fixes[name]}"
        report["checks"].append(check_record(name, len(items), "warn", message))


def _refuse_overflow(params: dict[str, Any], frame: pd.DataFrame, path: str) -> None:
    """Refuse a numeric column whose mean or spread overflows float64 (values near 1e308).

    Raises:
        DataError: Names the file, the column and its largest magnitude.
    """
    for column in params["numeric"]:
        if not (np.isfinite(column["mean"]) and np.isfinite(column["scale"])):
            largest = float(np.nanmax(np.abs(pd.to_numeric(frame[column["name"]],
                                                           errors="coerce"))))
            raise DataError(f"{path}: numeric column {column['name']!r} holds numbers too large "
                            f"to standardise (up to {largest:.3g}); rescale that column (e.g. "
                            "divide by 1e6) or list it in data.drop_columns")


def _add_features(report: dict[str, Any], params: dict[str, Any],
                  frames: dict[str, pd.DataFrame], numeric: list[str], categorical: list[str],
                  empty_columns: list[str], dropped: list[str]) -> None:
    """The ``features`` section, unseen categories per split and the two table checks."""
    report["task"] = "tabular-classification"
    report["features"] = {"numeric": numeric, "categorical": categorical,
                          "dropped_all_missing": empty_columns, "dropped_by_config": dropped,
                          "width": params["width"], "names": feature_names(params)}
    total_unseen = 0
    for role, frame in frames.items():
        unseen = unseen_categories(frame, params) if role != "train" else {}
        report["splits"][role]["unseen_categories"] = unseen
        total_unseen += sum(unseen.values())
    report["checks"].append(check_record(
        "all_missing_columns", len(empty_columns), "drop",
        f"{len(empty_columns)} column(s) without any value in training dropped: "
        f"{', '.join(empty_columns)}"))
    shown = "; ".join(f"{role}: " + ", ".join(f"{c} {n}" for c, n in s["unseen_categories"]
                                              .items())
                      for role, s in report["splits"].items() if s.get("unseen_categories"))
    report["checks"].append(check_record(
        "unseen_categories", total_unseen, "warn",
        f"{total_unseen} validation/test value(s) of categorical columns never occur in "
        f"training and are encoded as unknown ({shown})"))
