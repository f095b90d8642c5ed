"""Tables for the tabular task: whole splits as DataFrames, the feature
columns, the style their numbers are written in and their kinds, and each row as a key string
for the hygiene checks.

The hygiene checks of :mod:`entrena.data.checks` compare texts; a table row becomes one text,
its feature values joined in column order (numbers canonical: ``1``, ``1.0`` and ``1.00`` are
the same value), so exact duplicates, label conflicts and train/test leakage are found on
whole rows. A row whose features are all missing is an empty row (skipped and counted like
an empty text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from entrena.data.numbers import (
    CATEGORY,
    DECIMAL_COMMA,
    DETECTION_ORDER,
    NUMBER_LIKE,
    PLAIN,
    STYLES,
    detect_style,
    unreadable,
)
from entrena.data.preprocessing import as_numbers, category_values
from entrena.data.reading import RawSplit, _canonical_label, format_rows
from entrena.data.sources import SourceFile, read_chunks, require_columns
from entrena.errors import DataError, closest_choice

__all__ = ["read_frame", "feature_columns", "column_kinds", "all_missing", "row_texts",
           "raw_table_split", "refuse_non_finite", "suspicious_columns", "check_number_format",
           "number_styles"]

SEPARATOR = "\x1f"
"""Between the values of a row key (the ASCII unit separator: not in ordinary data)."""


def read_frame(role: str, files: Sequence[SourceFile]) -> tuple[pd.DataFrame, list[dict]]:
    """Every row of one split's files, values as read (CSV: text; Parquet: typed).

    Returns:
        ``(frame with a fresh 0-based index, per-file info)``; row ``i`` of the frame is
        row ``i + 1`` of the split (1-based, header excluded, across files in order).

    Raises:
        DataError: A file cannot be parsed, or the files' columns differ.
    """
    frames, info = [], []
    for file in files:
        parts = list(read_chunks(file, None, key=f"data.{role}", role=role))
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        if frames and list(frame.columns) != list(frames[0].columns):
            raise DataError(f"{file.name}: its columns ({', '.join(map(str, frame.columns))}) "
                            f"differ from {files[0].name}'s; every file of data.{role} needs "
                            "the same columns")
        frames.append(frame)
        info.append({"file": file.name, "rows_read": len(frame), "bytes": file.scan.size_bytes,
                     "sha256": file.scan.sha256, "format": file.format,
                     "encoding": file.scan.encoding, "delimiter": file.delimiter})
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame, info


def feature_columns(columns: Sequence[str], *, label_column: str, drop_columns: Sequence[str],
                    group_column: str | None, path: str) -> list[str]:
    """Every column but the label, the group column and ``drop_columns``, in file order.

    Raises:
        DataError: The label column or a dropped column is not in the file (the columns are
            listed), or no feature column is left.
    """
    require_columns(columns, {"data.label_column": label_column}, path=path, role="train")
    for name in drop_columns:
        require_columns(columns, {"data.drop_columns": name}, path=path, role="train")
    if group_column is not None:
        require_columns(columns, {"data.group_column": group_column}, path=path, role="train")
    skip = {label_column, group_column, *drop_columns}
    features = [c for c in columns if c not in skip]
    if not features:
        raise DataError(f"{path}: no feature column is left once data.label_column and "
                        f"data.drop_columns are taken out (columns: {', '.join(columns)}); "
                        "drop fewer columns")
    return features


def all_missing(frame: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    """Columns with no value at all (every row missing or blank)."""
    out = []
    for name in columns:
        values = frame[name]
        blank = values.isna() | values.astype(str).str.strip().eq("")
        if bool(blank.all()):
            out.append(name)
    return out


def check_number_format(forced: dict[str, str], columns: Sequence[str], *, label_column: str,
                        numeric_target: bool, path: str) -> None:
    """Check that every column ``data.number_format`` names is a column of the training file
    that is read as numbers or categories.

    Raises:
        DataError: A column not in the file (its columns listed, the closest named), or the
            label column of a classifier (its values are class names) or a regression target
            set to ``category``.
    """
    for name, style in forced.items():
        if name not in columns:
            close = closest_choice(name, columns)
            raise DataError(f"{path}: data.number_format names column {name!r}, which is not a "
                            f"column of the train data (columns: "
                            f"{', '.join(map(repr, columns))})"
                            + (f"; did you mean {close!r}?" if close else
                               "; fix the name or remove it from data.number_format"))
        if name == label_column and not numeric_target:
            raise DataError(f"{path}: data.number_format names {name!r}, the label column, "
                            "whose values are class names; remove it from data.number_format")
        if name == label_column and style == CATEGORY:
            raise DataError(f"{path}: data.number_format sets the target {name!r} to "
                            "'category', but a regression target is a number; give the style "
                            f"its numbers are written in ({', '.join(map(repr, STYLES))}) or "
                            "remove it from data.number_format")


def number_styles(frame: pd.DataFrame, columns: Sequence[str], forced: dict[str, str], *,
                  path: str) -> dict[str, str]:
    """The style each column's numbers are written in, where it is not the plain one.

    A column named in ``forced`` (``data.number_format``) takes that style (or stays
    categorical: ``category``); any other column that is not all plain numbers takes the
    style :func:`entrena.data.numbers.detect_style` finds, if any.

    Args:
        frame: The training rows, (N, columns).
        columns: The columns to look at (features, and a regression target).
        forced: ``{column: style or "category"}`` (``data.number_format``).
        path: The training file, for messages.

    Returns:
        ``{column: style}`` for the columns read in a style other than ``1234.5``.

    Raises:
        DataError: A forced style under which some present training value does not read:
            names the column, the style, the first rows (1-based) and values, and the fix.
    """
    out = {}
    for name in columns:
        values, style = frame[name], forced.get(name)
        if style == CATEGORY:
            continue
        if style is None:
            style = detect_style(values)
        else:
            bad = unreadable(values, style)
            if len(bad):
                shown = ", ".join(repr(str(v).strip()) for v in values.iloc[bad[:3]])
                raise DataError(
                    f"{path}: data.number_format reads column {name!r} as {style!r}, but "
                    f"{len(bad)} training value(s) do not read in that style (rows "
                    f"{format_rows((bad + 1).tolist())}: {shown}); fix or empty those values, "
                    f"or give the style the column is written in (one of "
                    f"{', '.join(map(repr, STYLES))}, or 'category' to keep it as categories)")
        if style is not None and style != PLAIN:
            out[name] = style
    return out


def column_kinds(frame: pd.DataFrame, columns: Sequence[str],
                 number_styles: dict[str, str] | None = None,
                 categories: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """``(numeric, categorical)``: a column is numeric when every present value reads as a
    finite or infinite number in its style (``number_styles``, else plain), else
    categorical; booleans and the columns of ``categories`` are categorical."""
    numeric, categorical = [], []
    styles = number_styles or {}
    for name in columns:
        values = frame[name]
        present = ~(values.isna() | values.astype(str).str.strip().eq(""))
        if pd.api.types.is_bool_dtype(values) or name in categories:
            categorical.append(name)
            continue
        parsed = as_numbers(values[present], styles.get(name))
        (numeric if present.any() and not np.isnan(parsed).any() else categorical).append(name)
    return numeric, categorical


MOSTLY_NUMERIC = 0.9
"""A categorical column whose present training values are numbers (in one style) this often or
more is flagged: a few stray strings (``n/a?``, ``12,5`` among ``1,234.5``) turned a numeric
column into categories."""

IDENTIFIER_SHARE = 0.95
"""A categorical column with a distinct value in this share of training rows (20 rows or
more) is flagged as a likely identifier."""


def suspicious_columns(frame: pd.DataFrame, categorical: Sequence[str],
                       rows: np.ndarray) -> dict[str, list[str]]:
    """Categorical columns that are probably mistakes, as sentences per finding.

    Args:
        frame: The training rows.
        categorical: The categorical columns.
        rows: Each row's number in the training data (1-based), for messages.

    Returns:
        ``{"mostly_numeric": [...], "identifier_columns": [...]}``: a column numeric in at
        least :data:`MOSTLY_NUMERIC` of its present training values in one style (the others
        named with their row numbers; the style named when it is not the plain one), and a
        column distinct in at least :data:`IDENTIFIER_SHARE` of the training rows.
    """
    found: dict[str, list[str]] = {"mostly_numeric": [], "identifier_columns": []}
    for name in categorical:
        values = frame[name]
        present = ~(values.isna() | values.astype(str).str.strip().eq("")).to_numpy()
        n = int(present.sum())
        if not n:
            continue
        if pd.api.types.is_bool_dtype(values):
            continue  # booleans are categories by design
        text = values.astype(str).str.strip()
        style, numbers = _most_read_style(values, text, present)
        strays = np.flatnonzero(present & ~numbers)
        if len(strays) and numbers.sum() >= MOSTLY_NUMERIC * n:
            shown = ", ".join(f"{text.iloc[i]!r} (row {rows[i]})" for i in strays[:3])
            written = "" if style == PLAIN else f" written like {style!r}"
            hint = "" if style == PLAIN else \
                " (data.number_format names a column's style when it is ambiguous)"
            found["mostly_numeric"].append(
                f"{name!r} is a number{written} in {int(numbers.sum())} of {n} training rows "
                f"but not in {len(strays)}: {shown}{hint}")
            continue
        distinct = values[present].astype(str).str.strip().nunique()
        if n >= 20 and distinct >= IDENTIFIER_SHARE * len(values):
            found["identifier_columns"].append(
                f"{name!r} has {distinct} distinct values in {len(values)} training rows")
    return found


def _most_read_style(values: pd.Series, text: pd.Series,
                     present: np.ndarray) -> tuple[str, np.ndarray]:
    """``(style, reads: bool (N,))``: the style in which most present values read (the plain
    one first on a tie), and which values read in it."""
    best, reads = PLAIN, present & ~np.isnan(as_numbers(values))
    if reads.sum() == present.sum():
        return best, reads
    like = text.str.fullmatch(NUMBER_LIKE).to_numpy(dtype=bool) & present  # else: words
    if like.sum() < MOSTLY_NUMERIC * present.sum() or like.sum() <= reads.sum():
        return best, reads
    for name in (*DETECTION_ORDER, DECIMAL_COMMA):
        found = present & ~np.isnan(as_numbers(values, name))
        if found.sum() > reads.sum():
            best, reads = name, found
    return best, reads


def refuse_non_finite(frame: pd.DataFrame, numeric: Sequence[str], *, path: str,
                      role: str, number_styles: dict[str, str] | None = None) -> None:
    """Refuse infinite numbers (``inf``, ``1e400``) in numeric columns (read in their style,
    ``number_styles``, else plainly): they cannot be imputed, standardised or fed to a
    network.

    Raises:
        DataError: Names the file, the column, the rows (1-based, header excluded) and values.
    """
    styles = number_styles or {}
    for name in numeric:
        values = as_numbers(frame[name], styles.get(name))
        bad = np.flatnonzero(np.isinf(values))
        if len(bad):
            shown = ", ".join(repr(str(v).strip()) for v in frame[name].iloc[bad[:3]])
            raise DataError(f"{path}: numeric column {name!r} holds infinite numbers in {role} "
                            f"rows {format_rows((bad + 1).tolist())} ({shown}); replace them "
                            "with finite numbers or leave those cells empty (a missing number "
                            "takes the training median)")


def row_texts(frame: pd.DataFrame, numeric: Sequence[str], categorical: Sequence[str],
              number_styles: dict[str, str] | None = None) -> tuple[pa.Array, np.ndarray]:
    """Each row's feature values as one key string, and which rows have no value at all
    (numbers read in their style, ``number_styles``, else plainly).

    Returns:
        ``(keys: Arrow large_string (N,), empty: bool (N,))``.
    """
    n = len(frame)
    parts: list[np.ndarray] = []
    present = np.zeros(n, dtype=bool)
    styles = number_styles or {}
    for name in numeric:
        values = as_numbers(frame[name], styles.get(name))
        present |= ~np.isnan(values)
        parts.append(np.array(["" if np.isnan(v) else repr(float(v)) for v in values],
                              dtype=object))
    for name in categorical:
        values = category_values(frame[name])
        missing = values == "(missing)"
        present |= ~missing
        values = values.copy()
        values[missing] = ""
        parts.append(values)
    keys = [SEPARATOR.join(str(p[i]) for p in parts) for i in range(n)]
    return pa.array(keys, type=pa.large_string()), ~present


def raw_table_split(role: str, spec: str, frame: pd.DataFrame, files: list[dict[str, Any]], *,
                    label_column: str, group_column: str | None, numeric: Sequence[str],
                    categorical: Sequence[str], on_bad_rows: str,
                    numeric_label: bool = False,
                    number_styles: dict[str, str] | None = None) -> RawSplit:
    """One split as the hygiene checks see it (rows as key strings).

    ``numeric_label``: the label is a number to predict (no "mixes numbers and strings"
    check: :func:`entrena.data.targets.parse_targets` refuses non-numbers with their rows).
    ``number_styles``: the style of each numeric column not written plainly.

    Raises:
        DataError: The label column is missing (the columns are listed), labels mix numbers
            and strings, or ``on_bad_rows="error"`` and a row is empty or has no label.
    """
    require_columns(frame, {"data.label_column": label_column}, path=spec, role=role)
    missing = [c for c in (*numeric, *categorical) if c not in frame.columns]
    if missing:
        raise DataError(f"{spec}: the {role} data lacks the feature column(s) "
                        f"{', '.join(map(repr, missing))} that training has (columns: "
                        f"{', '.join(map(str, frame.columns))}); add them, or list them in "
                        "data.drop_columns")
    keys, empty = row_texts(frame, numeric, categorical, number_styles)
    labels = frame[label_column]
    no_label = (labels.isna() | labels.astype(str).str.strip().eq("")).to_numpy() & ~empty
    rows = np.arange(1, len(frame) + 1, dtype=np.int64)
    if on_bad_rows == "error" and (empty.any() or no_label.any()):
        parts = []
        if empty.any():
            parts.append(f"rows {format_rows(rows[empty].tolist())} have no feature value")
        if no_label.any():
            parts.append(f"rows {format_rows(rows[no_label].tolist())} have an empty "
                         f"{label_column!r}")
        raise DataError(f"{spec}: {'; '.join(parts)} in the {role} data; fix or remove them, "
                        "or set data.on_bad_rows: skip to drop them")
    keep = ~(empty | no_label)
    codes, uniques = pd.factorize(labels[keep].astype(str), use_na_sentinel=False)
    canonical = [_canonical_label(str(u)) for u in uniques]
    kinds = {is_number for _, is_number in canonical}
    if len(kinds) > 1 and not numeric_label:
        numbers = [n for n, k in canonical if k][:3]
        strings = [n for n, k in canonical if not k][:3]
        raise DataError(f"{spec}: data.label_column {label_column!r} mixes numbers "
                        f"({', '.join(numbers)}) and strings ({', '.join(map(repr, strings))}); "
                        "make every label a class name or every label a number")
    names: list[str] = []
    index: dict[str, int] = {}
    for name, _ in canonical:
        index.setdefault(name, len(names))
        if index[name] == len(names):
            names.append(name)
    mapping = np.array([index[name] for name, _ in canonical], dtype=np.int64)
    groups = None
    if group_column is not None:
        gcodes, _ = pd.factorize(frame[group_column][keep].astype(str), use_na_sentinel=False)
        groups = gcodes.astype(np.int64)
        absent = frame[group_column][keep].isna().to_numpy()
        groups[absent] = -rows[keep][absent]  # a missing group: a group of its own
    return RawSplit(role, spec, keys.filter(pa.array(keep)), names,
                    mapping[codes] if len(codes) else np.zeros(0, np.int64), groups, rows[keep],
                    len(frame), empty_text=rows[empty].tolist(),
                    empty_label=rows[no_label].tolist(), files=files)
