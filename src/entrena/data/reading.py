"""Reading one split's files into compact columns, a chunk at a time.

A split never becomes one big DataFrame: each chunk's texts go into an Arrow string array,
its labels and groups into small integer codes, and the chunk is dropped. Rows whose text or
label is empty or missing are skipped and counted (``data.on_bad_rows: skip``) or refused with
their row numbers (``error``). Labels are read as class names; a file whose labels mix numbers
and strings is refused (say ``1``, ``2`` and ``good``: almost always a broken column).
Numeric labels are written canonically (``1.0`` and ``1`` are one class, ``"1"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from entrena.data.sources import SourceFile, read_chunks
from entrena.data.text_fields import describe_text_columns, join_text_columns, text_columns
from entrena.errors import DataError

if TYPE_CHECKING:  # pandas is imported where files are read: a cached run never needs it
    import pandas as pd

__all__ = ["RawSplit", "read_split", "empty_values", "format_rows"]

REPORTED_ROWS = 100
"""Row numbers listed in the report per kind of skipped row (all are counted)."""


def empty_values(values: pd.Series) -> pd.Series:
    """Which cells are missing or blank (whitespace only): the bad-row test of training and
    of ``entrena predict``."""
    return values.isna() | (values.astype(str).str.strip() == "")


def format_rows(rows: Sequence[int], limit: int = 10) -> str:
    """``"3, 5, 9 and 12 more"``."""
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


@dataclass
class RawSplit:
    """One split as read, bad rows removed.

    Attributes:
        role: ``train``, ``validation`` or ``test``.
        spec: The path, pattern or URL it was read from.
        texts: Texts of the kept rows (Arrow ``large_string``, no nulls).
        label_names: Distinct labels of this split, as class names.
        label_codes: Index into ``label_names`` per kept row, shape (N,) int64.
        groups: Group id per kept row (``data.group_column``), shape (N,) int64, or ``None``.
        rows: Row number per kept row, shape (N,) int64: 1-based, header excluded, counted
            across the split's files in order.
        rows_read: Data rows read from the files.
        empty_text: Row numbers skipped for an empty text (all of them).
        empty_label: Row numbers skipped for an empty label (text present).
        files: ``{"file": name, "rows_read": n, "encoding", "delimiter", "bytes"}`` per file.
    """

    role: str
    spec: str
    texts: pa.Array
    label_names: list[str]
    label_codes: np.ndarray
    groups: np.ndarray | None
    rows: np.ndarray
    rows_read: int
    empty_text: list[int] = field(default_factory=list)
    empty_label: list[int] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)


class _Codes:
    """Strings → dense integer codes, growing as new values appear."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []

    def encode(self, uniques: Sequence[str]) -> np.ndarray:
        out = np.empty(len(uniques), dtype=np.int64)
        for i, name in enumerate(uniques):
            code = self.index.get(name)
            if code is None:
                code = self.index[name] = len(self.names)
                self.names.append(name)
            out[i] = code
        return out


def _canonical_label(value: str) -> tuple[str, bool]:
    """``(class name, is a number)``: ``" 1.0 "`` → ``("1", True)``, ``"good"`` → ``("good",
    False)``."""
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        return text, False
    if not math.isfinite(number):
        return text, False
    if number.is_integer() and abs(number) < 2**53:
        return str(int(number)), True
    return repr(number), True


class _LabelKinds:
    """Numbers and strings seen in one file's label column, to refuse a mix."""

    def __init__(self) -> None:
        self.count = {True: 0, False: 0}
        self.first_row: dict[bool, int] = {}
        self.examples: dict[bool, list[str]] = {True: [], False: []}

    def add(self, names: list[str], numeric: list[bool], codes: np.ndarray,
            rows: np.ndarray) -> None:
        counts = np.bincount(codes, minlength=len(names))
        for i, (name, kind) in enumerate(zip(names, numeric, strict=True)):
            self.count[kind] += int(counts[i])
            if len(self.examples[kind]) < 3 and name not in self.examples[kind]:
                self.examples[kind].append(name)
            if kind not in self.first_row and counts[i]:
                self.first_row[kind] = int(rows[np.argmax(codes == i)])

    def check(self, file: SourceFile, column: str) -> None:
        if not (self.count[True] and self.count[False]):
            return
        numbers = ", ".join(self.examples[True])
        strings = ", ".join(repr(s) for s in self.examples[False])
        raise DataError(
            f"{file.name}: data.label_column {column!r} mixes numbers and strings: "
            f"{self.count[True]} rows hold numbers ({numbers}; first at row "
            f"{self.first_row[True]}) and {self.count[False]} rows hold strings ({strings}; "
            f"first at row {self.first_row[False]}); make every label a class name or every "
            "label a number")


def _arrow_text(values: pd.Series) -> pa.Array:
    """The values as an Arrow ``large_string`` array (no copy through Python when pandas
    already holds them in Arrow)."""
    try:
        array = pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        array = None
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array is None or not (pa.types.is_string(array.type)
                             or pa.types.is_large_string(array.type)):
        array = pa.array(values.astype(str).to_numpy(dtype=object), type=pa.large_string())
    return array.cast(pa.large_string())


def read_split(role: str, spec: str, files: list[SourceFile], *,
               text_column: str | Sequence[str], label_column: str, group_column: str | None,
               on_bad_rows: str, chunk_rows: int = 100_000,
               label_separator: str | None = None, numeric_label: bool = False) -> RawSplit:
    """Read every file of one split.

    Args:
        text_column: One column, or several joined into one text per row
            (:func:`~entrena.data.text_fields.join_text_columns`).
        label_separator: ``data.multi_label.separator``: a JSON list of labels (JSONL) is
            read as the labels joined by it.
        numeric_label: The label is a number to predict; values that are not numbers are
            kept as written, for :func:`entrena.data.targets.parse_targets` to refuse with
            their rows (no "mixes numbers and strings" check).

    Raises:
        DataError: A column is missing, a file cannot be parsed, its labels mix numbers and
            strings, or (``on_bad_rows="error"``) a row has an empty text or label.
    """
    import pandas as pd

    key = f"data.{role}"
    text_names = text_columns(text_column)
    wanted = {("data.text_column" if len(text_names) == 1 else f"data.text_column[{i}]"): name
              for i, name in enumerate(text_names)}
    wanted["data.label_column"] = label_column
    if group_column is not None:
        wanted["data.group_column"] = group_column
    labels, groups = _Codes(), _Codes()
    texts: list[pa.Array] = []
    label_codes: list[np.ndarray] = []
    group_ids: list[np.ndarray] = []
    kept_rows: list[np.ndarray] = []
    split = RawSplit(role, spec, pa.array([], pa.large_string()), [], np.zeros(0, np.int64),
                     None, np.zeros(0, np.int64), 0)
    offset = 0
    for file in files:
        kinds = _LabelKinds()
        file_rows = 0
        bad_text: list[int] = []
        bad_label: list[int] = []
        lists = {label_column: label_separator} if label_separator is not None else None
        for chunk in read_chunks(file, wanted, key=key, role=role, chunk_rows=chunk_rows,
                                 list_columns=lists):
            n = len(chunk)
            rows = np.arange(file_rows + 1, file_rows + n + 1, dtype=np.int64)
            file_rows += n
            text, label = join_text_columns(chunk, text_names), chunk[label_column]
            no_text = empty_values(text).to_numpy(dtype=bool)
            no_label = empty_values(label).to_numpy(dtype=bool) & ~no_text
            bad_text.extend(rows[no_text].tolist())
            bad_label.extend(rows[no_label].tolist())
            keep = ~(no_text | no_label)
            if not keep.any():
                continue
            rows = rows[keep]
            codes, uniques = pd.factorize(label[keep].astype(str), use_na_sentinel=False)
            canonical = [_canonical_label(str(u)) for u in uniques]
            names = [c[0] for c in canonical]
            kinds.add(names, [c[1] for c in canonical], codes, rows)
            label_codes.append(labels.encode(names)[codes])
            texts.append(_arrow_text(text[keep]))
            if group_column is not None:
                values = chunk[group_column][keep]
                gcodes, guniques = pd.factorize(values.astype(str), use_na_sentinel=False)
                ids = groups.encode([str(u) for u in guniques])[gcodes]
                missing = values.isna().to_numpy()
                ids[missing] = -(offset + rows[missing])  # a missing group: a group of its own
                group_ids.append(ids)
            kept_rows.append(rows + offset)
        if not numeric_label:
            kinds.check(file, label_column)
        if on_bad_rows == "error" and (bad_text or bad_label):
            parts = []
            if bad_text:
                parts.append(f"empty {describe_text_columns(text_names)} in rows "
                             f"{format_rows(bad_text)}")
            if bad_label:
                parts.append(f"empty {label_column!r} in rows {format_rows(bad_label)}")
            raise DataError(f"{file.name}: {'; '.join(parts)} of the {role} data; fix or "
                            "remove them, or set data.on_bad_rows: skip to drop them")
        split.empty_text.extend(r + offset for r in bad_text)
        split.empty_label.extend(r + offset for r in bad_label)
        split.files.append({"file": file.name, "rows_read": file_rows, "bytes":
                            file.scan.size_bytes, "sha256": file.scan.sha256,
                            "format": file.format, "encoding": file.scan.encoding,
                            "delimiter": file.delimiter})
        offset += file_rows
    split.rows_read = offset
    if texts:
        split.texts = pa.concat_arrays(texts)
        split.label_codes = np.concatenate(label_codes)
        split.rows = np.concatenate(kept_rows)
        if group_column is not None:
            split.groups = np.concatenate(group_ids)
    elif group_column is not None:
        split.groups = np.zeros(0, np.int64)
    split.label_names = labels.names
    return split
