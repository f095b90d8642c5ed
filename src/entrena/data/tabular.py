"""Tables for the tabular task: whole splits as DataFrames, the feature
columns and their kinds, and each row as a key string for the hygiene checks.

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

from entrena.data.preprocessing import as_numbers, category_values
from entrena.data.reading import RawSplit, _canonical_label, format_rows
from entrena.data.sources import SourceFile, read_chunks, require_columns
from entrena.errors import DataError

__all__ = ["read_frame", "feature_columns", "column_kinds", "all_missing", "row_texts",
           "raw_table_split", "refuse_non_finite", "suspicious_columns"]

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


def column_kinds(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(numeric, categorical)``: a column is numeric when every present value parses as a
    finite or infinite number (booleans are categories), else categorical."""
    numeric, categorical = [], []
    for name in columns:
        values = frame[name]
        present = ~(values.isna() | values.astype(str).str.strip().eq(""))
        if pd.api.types.is_bool_dtype(values):
            categorical.append(name)
            continue
        parsed = as_numbers(values[present])
        (numeric if present.any() and not np.isnan(parsed).any() else categorical).append(name)
    return numeric, categorical


MOSTLY_NUMERIC = 0.9
"""A categorical column whose present training values are numbers this often or more is
flagged: a few stray strings (``n/a?``, ``12,5``) turned a numeric column into categories."""
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
        least :data:`MOSTLY_NUMERIC` of its present training values (the others named with
        their row numbers), and a column distinct in at least :data:`IDENTIFIER_SHARE` of the
        training rows.
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
        numbers = ~np.isnan(as_numbers(values)) & present
        text = values.astype(str).str.strip()
        commas = text.str.fullmatch(r"[-+]?\d*,\d+").to_numpy() & present & ~numbers
        strays = np.flatnonzero(present & ~numbers)
        if commas.any() and commas.sum() == len(strays):
            first = int(np.flatnonzero(commas)[0])
            found["mostly_numeric"].append(
                f"{name!r} holds numbers written with a decimal comma in {int(commas.sum())} of "
                f"{n} training rows ({text.iloc[first]!r}, row {rows[first]}); write them with a "
                "point (12.5)")
            continue
        if len(strays) and numbers.sum() >= MOSTLY_NUMERIC * n:
            shown = ", ".join(f"{text.iloc[i]!r} (row {rows[i]})" for i in strays[:3])
            found["mostly_numeric"].append(
                f"{name!r} is a number in {int(numbers.sum())} of {n} training rows but not in "
                f"{len(strays)}: {shown}")
            continue
        distinct = values[present].astype(str).str.strip().nunique()
        if n >= 20 and distinct >= IDENTIFIER_SHARE * len(values):
            found["identifier_columns"].append(
                f"{name!r} has {distinct} distinct values in {len(values)} training rows")
    return found


def refuse_non_finite(frame: pd.DataFrame, numeric: Sequence[str], *, path: str,
                      role: str) -> None:
    """Refuse infinite numbers (``inf``, ``1e400``) in numeric columns: they cannot be
    imputed, standardised or fed to a network.

    Raises:
        DataError: Names the file, the column, the rows (1-based, header excluded) and values.
    """
    for name in numeric:
        values = as_numbers(frame[name])
        bad = np.flatnonzero(np.isinf(values))
        if len(bad):
            shown = ", ".join(repr(str(v).strip()) for v in frame[name].iloc[bad[:3]])
            raise DataError(f"{path}: numeric column {name!r} holds infinite numbers in {role} "
                            f"rows {format_rows((bad + 1).tolist())} ({shown}); replace them "
                            "with finite numbers or leave those cells empty (a missing number "
                            "takes the training median)")


def row_texts(frame: pd.DataFrame, numeric: Sequence[str],
              categorical: Sequence[str]) -> tuple[pa.Array, np.ndarray]:
    """Each row's feature values as one key string, and which rows have no value at all.

    Returns:
        ``(keys: Arrow large_string (N,), empty: bool (N,))``.
    """
    n = len(frame)
    parts: list[np.ndarray] = []
    present = np.zeros(n, dtype=bool)
    for name in numeric:
        values = as_numbers(frame[name])
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
                    numeric_label: bool = False) -> RawSplit:
    """One split as the hygiene checks see it (rows as key strings).

    ``numeric_label``: the label is a number to predict (no "mixes numbers and strings"
    check: :func:`entrena.data.targets.parse_targets` refuses non-numbers with their rows).

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
    keys, empty = row_texts(frame, numeric, categorical)
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
