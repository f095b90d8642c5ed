"""Table data for ``task: tabular-classification``: read, check, split, preprocess.

The order:

1. read each split whole (CSV/TSV/JSONL/Parquet, a glob of shards or a URL);
2. feature columns: every training column but ``data.label_column``, ``data.group_column``
   and ``data.drop_columns``; a column with no value in the training rows is dropped with a
   warning (counted in the report's ``features.dropped_all_missing``);
3. number styles, from the training rows (:mod:`entrena.data.numbers`): a column that is not
   all plain numbers (features, and the target of a regression) is read in the first style
   under which every present value reads (``5,632``, ``1.234,5``, ``12 500``), or in the
   style ``data.number_format`` names; reported in the ``number_styles`` check and kept in
   the preprocessing (``number_styles``), so every split, ``export`` and ``predict`` read the
   column alike; a regression target so written becomes numbers before the target checks;
4. kinds, from the training rows: numeric when every present value reads as a number (in its
   style), categorical otherwise (and when ``data.number_format`` says ``category``);
5. the hygiene checks of text data on whole rows (:mod:`entrena.data.tabular`): empty rows
   and rows without a label skipped, exact duplicates, conflicting labels, train/test leakage,
   the validation split (stratified, seeded, copies of a row on one side), small classes,
   imbalance;
6. preprocessing fitted on the training split only (:mod:`entrena.data.preprocessing`) and
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
from entrena.data.numbers import CATEGORY, as_written
from entrena.data.preprocessing import (
    as_numbers,
    feature_names,
    fit_preprocessing,
    invalid_numbers,
    transform,
    unseen_categories,
)
from entrena.data.reading import format_rows
from entrena.data.splits import LabelledSplits
from entrena.data.tables import check_and_split, open_config_sources
from entrena.data.tabular import (
    all_missing,
    check_number_format,
    column_kinds,
    feature_columns,
    number_styles,
    raw_table_split,
    read_frame,
    refuse_non_finite,
    suspicious_columns,
)
from entrena.data.targets import check_and_split_targets
from entrena.errors import DataError
from entrena.tasks.regression_config import target_keys
from entrena.tasks.tabular.config import TabularTaskConfig

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


def prepare_table(loaded: LoadedConfig[TabularTaskConfig], *,
                  numeric_target: bool = False) -> PreparedTable:
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
            mix numbers and strings, fewer than 2 classes, bad rows under ``error``, a
            validation split that cannot be made, or ``data.number_format`` names a column
            that is not in the training file or a style some training value does not read in.
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
    forced = dict(data.number_format)
    check_number_format(forced, list(frames["train"].columns), label_column=data.label_column,
                        numeric_target=numeric_target, path=train_spec)
    empty_columns = all_missing(frames["train"], columns) if len(frames["train"]) else []
    columns = [c for c in columns if c not in empty_columns]
    read = [*columns, *([data.label_column] if numeric_target else [])]
    styles = number_styles(frames["train"], read, forced, path=train_spec)
    for name in empty_columns:  # after the errors above: a refused table warns of nothing
        log.warning("column %r of %s has no value in any training row: dropped", name,
                    train_spec)
    numeric, categorical = column_kinds(
        frames["train"], columns, styles,
        categories=[c for c, style in forced.items() if style == CATEGORY]) \
        if columns else ([], [])
    as_written_train = frames["train"]  # for the report's examples
    if numeric_target and data.label_column in styles:  # the target checks read plain numbers
        frames = {role: _target_as_numbers(frame, data.label_column,
                                           styles[data.label_column])
                  for role, frame in frames.items()}
    for role, frame in frames.items():
        refuse_non_finite(frame, [c for c in numeric if c in frame.columns],
                          path=specs[role] or "", role=role, number_styles=styles)
    raw = {role: raw_table_split(role, specs[role] or "", frame, infos[role],
                                 label_column=data.label_column,
                                 group_column=data.group_column if role == "train" else None,
                                 numeric=numeric, categorical=categorical,
                                 on_bad_rows=data.on_bad_rows, numeric_label=numeric_target,
                                 number_styles=styles)
           for role, frame in frames.items()}
    common: dict[str, Any] = dict(
        label_column=data.label_column, validation_fraction=data.validation_fraction,
        max_train_samples=data.max_train_samples, max_eval_samples=data.max_eval_samples,
        seed=cfg.train.seed, group_column=data.group_column,
        policy=CheckPolicy(**data.checks.model_dump()), normalise=False,
        empty_what="no feature value", check_keys="data.label_column and data.drop_columns")
    if numeric_target:
        target = target_keys(data)
        splits = check_and_split_targets(raw, specs, target_transform=target.target_transform,
                                         target_outliers=target.target_outliers,
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
        params = fit_preprocessing(chosen["train"], numeric, categorical,  # training rows only
                                   styles)
    _refuse_overflow(params, chosen["train"], train_spec)
    features = {role: transform(frame, params) for role, frame in chosen.items()}
    report = splits.report
    _add_features(report, params, chosen, numeric, categorical, empty_columns,
                  [c for c in data.drop_columns or []])
    _add_number_styles(report, styles, as_written_train)
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


def _target_as_numbers(frame: pd.DataFrame, column: str, style: str) -> pd.DataFrame:
    """``frame`` with the regression target ``column`` read in ``style``: each value that
    reads becomes its plain number (``1,234.5`` → ``1234.5``); the others stay as written,
    for :func:`entrena.data.targets.parse_targets` to refuse with their rows."""
    if column not in frame.columns:
        return frame  # a file without the label column: refused by raw_table_split
    values = frame[column]
    numbers = as_numbers(values, style)
    written = np.where(np.isnan(numbers), values.to_numpy(dtype=object),
                       np.array([repr(float(v)) for v in numbers], dtype=object))
    return frame.assign(**{column: pd.Series(written, index=frame.index, dtype=object)})


def _add_number_styles(report: dict[str, Any], styles: dict[str, str],
                       train: pd.DataFrame) -> None:
    """The ``number_styles`` record: each column read in a style other than plain numbers,
    with one training value and the number it became."""
    parts = []
    for column, style in styles.items():
        example = as_written(train[column], style)
        shown = f" ({example[0]!r} read as {_plain(example[1])})" if example else ""
        parts.append(f"{column!r} in style {style!r}{shown}")
    report["checks"].append(check_record(
        "number_styles", len(styles), "read",
        f"{len(styles)} column(s) hold numbers not written plainly and are read as numbers: "
        f"{'; '.join(parts)}; to read a column otherwise, set data.number_format: "
        "{column: style} (a style such as '1234,5' for a decimal comma, or 'category')"))


def _plain(number: float) -> str:
    """A number as plain text: ``5632``, ``12.5``."""
    return str(int(number)) if number.is_integer() and abs(number) < 1e15 else repr(number)


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
            numbers = as_numbers(frame[column["name"]],
                                 params["number_styles"].get(column["name"]))
            largest = float(np.nanmax(np.abs(numbers)))
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
