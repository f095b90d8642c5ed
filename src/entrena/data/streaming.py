"""Reading and writing tables in chunks, so that memory stays bounded on large files.

``iter_table`` yields a file's rows a chunk at a time (pandas ``chunksize`` for CSV/TSV, one
line per row for JSONL, pyarrow record batches for Parquet); ``TableWriter`` appends chunks to
a temporary file beside the target and renames it into place when every chunk is written, so
a reader never finds half an output.

Every value of a CSV/TSV file is kept as the text it was (no type guessing per chunk, which
could turn ``007`` into ``7`` in one chunk and not the next, and ``NA`` stays ``NA`` in the
output); for the columns named in ``na_columns`` a chunk also says which cells pandas'
missing-value rules (an empty cell, ``NA``, ``null`` …) would read as missing, so that a text
column counts empty cells exactly as training's ``read_table`` does.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from entrena.core.files import check_the_path, plain_mode
from entrena.data.sources import CSV_FIX, PARQUET_FIX, SUPPORTED_SUFFIXES
from entrena.errors import DataError

__all__ = ["Chunk", "TextFormat", "iter_table", "table_columns", "text_format", "TableWriter"]

try:  # the strings pandas reads as missing (``NA``, ``null``, ``N/A`` …)
    from pandas._libs.parsers import STR_NA_VALUES as _NA_STRINGS
except ImportError:  # pragma: no cover - moved in some pandas version
    _NA_STRINGS = {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan",
                   "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan",
                   "null"}


@dataclass
class Chunk:
    """Consecutive rows of a file.

    Attributes:
        frame: The rows, with the file's columns.
        first_row: 1-based number of the chunk's first row in the file (header excluded).
        fraction_done: Share of the file read so far, in [0, 1] (bytes for CSV/TSV/JSONL,
            rows for Parquet; approximate while reading).
        missing: For each of ``iter_table``'s ``na_columns``, which rows hold a missing value
            (boolean, one per row).
    """

    frame: pd.DataFrame
    first_row: int
    fraction_done: float
    missing: dict[str, np.ndarray] = field(default_factory=dict)


def _suffix(path: Path, role: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise DataError(f"{role}: {path}: unsupported file type {suffix!r}; "
                        f"use one of {', '.join(SUPPORTED_SUFFIXES)}")
    return suffix


def _check_readable(path: Path, role: str) -> str:
    if path.is_dir():
        raise DataError(f"{role}: {path} is a folder; give a data file "
                        f"({', '.join(SUPPORTED_SUFFIXES)})")
    if not path.is_file():
        raise DataError(f"{role}: file not found: {path}; {check_the_path(path)}")
    return _suffix(path, role)


@dataclass(frozen=True)
class TextFormat:
    """How a CSV/TSV file is written: its field separator and text encoding (a Python codec;
    ``utf-8-sig``, ``utf-16`` and ``utf-32`` start the file with a byte-order mark)."""

    delimiter: str = ","
    encoding: str = "utf-8"


def text_format(path: str | Path, *, role: str = "input") -> TextFormat | None:
    """The delimiter and encoding of a CSV/TSV file, detected as :func:`iter_table` reads it
    (``None`` for JSONL and Parquet, which have one form)."""
    from entrena.data.sniffing import detect_delimiter, scan_file

    path = Path(path)
    suffix = _check_readable(path, role)
    if suffix not in (".csv", ".tsv") or path.stat().st_size == 0:
        return None
    try:
        encoding = scan_file(path, name=str(path), key=role, text=True).encoding or "utf-8"
    except DataError:
        return None  # iter_table says what is wrong with the file
    default = "\t" if suffix == ".tsv" else ","
    return TextFormat(detect_delimiter(path, encoding, default=default), encoding)


def _without_bom(encoding: str) -> str:
    """The codec that continues a file ``encoding`` started (no second byte-order mark)."""
    import codecs
    import sys

    name = codecs.lookup(encoding).name
    if name == "utf-8-sig":
        return "utf-8"
    if name in ("utf-16", "utf-32"):
        return f"{name}-{'le' if sys.byteorder == 'little' else 'be'}"
    return encoding


def table_columns(path: str | Path, *, role: str = "input") -> list[str]:
    """The column names of a data file, reading only its start.

    Raises:
        DataError: The file is missing, of an unsupported type, or unreadable.
    """
    for chunk in iter_table(path, chunk_rows=1, role=role):
        return list(chunk.frame.columns)
    return []  # an empty file (a header-only CSV yields no chunk either)


def iter_table(path: str | Path, *, chunk_rows: int = 1000, na_columns: Sequence[str] = (),
               role: str = "input") -> Iterator[Chunk]:
    """Yield a data file's rows in chunks of at most ``chunk_rows``.

    Args:
        path: A ``.csv``, ``.tsv``, ``.jsonl``/``.json`` (one object per line) or
            ``.parquet``/``.pq`` file.
        chunk_rows: Rows per chunk.
        na_columns: Columns whose missing values each chunk reports in ``Chunk.missing``
            (for CSV/TSV: empty cells and the strings ``pandas.read_csv`` reads as missing,
            ``NA``, ``null`` …); the values themselves stay the exact text of the file.
        role: What the file is for (``"input"`` …), used in messages.

    Raises:
        DataError: The file is missing, of an unsupported type, not UTF-8, or cannot be parsed.
    """
    path = Path(path)
    suffix = _check_readable(path, role)
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    try:
        if suffix in (".csv", ".tsv"):
            yield from _iter_csv(path, "\t" if suffix == ".tsv" else ",", chunk_rows, na_columns,
                                 role)
        elif suffix in (".jsonl", ".json"):
            yield from _with_missing(_iter_jsonl(path, chunk_rows, role), na_columns)
        else:
            yield from _with_missing(_iter_parquet(path, chunk_rows), na_columns)
    except DataError:
        raise
    except UnicodeDecodeError as exc:
        raise DataError(f"{role}: {path}: not UTF-8 text at byte {exc.start}; "
                        "re-save the file as UTF-8") from None
    except (ValueError, pd.errors.ParserError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fix = PARQUET_FIX if suffix in (".parquet", ".pq") else CSV_FIX
        raise DataError(f"{role}: {path}: cannot parse as {suffix[1:]}: "
                        f"{first.rstrip('.')}; {fix}") from None


def _iter_csv(path: Path, sep: str, chunk_rows: int, na_columns: Sequence[str],
              role: str = "input") -> Iterator[Chunk]:
    from entrena.data.sniffing import detect_delimiter, scan_file

    size = max(1, path.stat().st_size)
    if path.stat().st_size == 0:
        return  # an empty file: no columns, no rows
    # the encoding and delimiter as training detects them (UTF-8 with or without BOM, UTF-16,
    # Windows-1252/Latin-1; , ; | or tab), so a file training read is read here too
    try:
        encoding = scan_file(path, name=str(path), key=role, text=True).encoding or "utf-8"
    except DataError as exc:  # predict has no data.encoding to set
        raise DataError(str(exc).replace(", or set data.encoding to the file's encoding", "")
                        .replace(", or set data.encoding", "")) from None
    sep = detect_delimiter(path, encoding, default=sep)
    _refuse_repeated_columns(path, sep, encoding, role)
    with path.open("rb") as handle:
        try:
            reader = pd.read_csv(handle, sep=sep, dtype=str, na_filter=False,
                                 encoding="utf-8-sig" if encoding == "utf-8" else encoding,
                                 chunksize=chunk_rows)
        except pd.errors.EmptyDataError:
            return
        first = 1
        with reader:
            for frame in reader:
                frame.columns = [str(c).strip() for c in frame.columns]
                frame = frame.reset_index(drop=True)
                missing = {column: frame[column].isin(_NA_STRINGS).to_numpy()
                           for column in na_columns if column in frame.columns}
                yield Chunk(frame, first, min(1.0, handle.tell() / size), missing)
                first += len(frame)


def _refuse_repeated_columns(path: Path, sep: str, encoding: str, role: str) -> None:
    """A header naming a column twice (pandas would rename the copy ``name.1`` and the first
    one would be used without a word).

    Raises:
        DataError: Names the column and its positions (1-based).
    """
    try:
        head = pd.read_csv(path, sep=sep, encoding=encoding, header=None, nrows=1, dtype=str,
                           keep_default_na=False)
    except (ValueError, UnicodeDecodeError):
        return  # the reader says what is wrong with the file
    names = [str(c).strip() for c in head.iloc[0]] if len(head) else []
    for name in dict.fromkeys(names):
        positions = [i + 1 for i, n in enumerate(names) if n == name]
        if len(positions) > 1:
            raise DataError(f"{role}: {path}: the header names column {name!r} "
                            f"{len(positions)} times (columns "
                            f"{', '.join(map(str, positions))}); rename or remove the copies")


def _with_missing(chunks: Iterator[Chunk], na_columns: Sequence[str]) -> Iterator[Chunk]:
    for chunk in chunks:
        chunk.missing = {column: chunk.frame[column].isna().to_numpy()
                         for column in na_columns if column in chunk.frame.columns}
        yield chunk


def _iter_jsonl(path: Path, chunk_rows: int, role: str) -> Iterator[Chunk]:
    size = max(1, path.stat().st_size)
    with path.open("rb") as handle:
        records: list[dict[str, Any]] = []
        first = 1
        line_number = 0
        for line in handle:
            line_number += 1
            try:
                text = line.decode("utf-8-sig" if line_number == 1 else "utf-8").strip()
            except UnicodeDecodeError as exc:
                raise DataError(f"{role}: {path}: line {line_number} is not UTF-8 (byte "
                                f"0x{line[exc.start]:02x} at column {exc.start + 1}); JSON lines "
                                "are UTF-8: re-save the file as UTF-8") from None
            if not text:
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DataError(f"{role}: {path}: line {line_number} is not JSON: {exc.msg}; "
                                "write one JSON object per line") from None
            if not isinstance(record, dict):
                raise DataError(f"{role}: {path}: line {line_number} is a JSON "
                                f"{type(record).__name__}, not an object; write one "
                                "{\"column\": value, …} object per line")
            records.append(record)
            if len(records) == chunk_rows:
                yield Chunk(pd.DataFrame.from_records(records), first, handle.tell() / size)
                first += len(records)
                records = []
        if records:
            yield Chunk(pd.DataFrame.from_records(records), first, 1.0)


def _iter_parquet(path: Path, chunk_rows: int) -> Iterator[Chunk]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    total = max(1, parquet.metadata.num_rows)
    first = 1
    for batch in parquet.iter_batches(batch_size=chunk_rows):
        frame = batch.to_pandas()
        frame.columns = [str(c).strip() for c in frame.columns]
        yield Chunk(frame, first, min(1.0, (first - 1 + len(frame)) / total))
        first += len(frame)


class TableWriter:
    """Append chunks of rows to a CSV, TSV, JSONL or Parquet file (format from the suffix).

    Rows go to a temporary file in the target's folder, renamed over the target by
    :meth:`close`; :meth:`abort` (or leaving a ``with`` block through an exception) deletes it
    and leaves any existing target untouched.

    Args:
        path: The output file; its folder is created if missing.
        role: What the file is for, used in messages.
        text: For a ``.csv`` output: the delimiter and encoding to write (default: ``,`` and
            UTF-8); a ``.tsv`` is tab-separated in ``text``'s encoding.

    Raises:
        DataError: The suffix is not a supported table format.
    """

    def __init__(self, path: str | Path, *, role: str = "output",
                 text: TextFormat | None = None):
        self.path = Path(path)
        self.role = role
        self.suffix = _suffix(self.path, role)
        text = text or TextFormat()
        self.delimiter = "\t" if self.suffix == ".tsv" else text.delimiter
        self.encoding = text.encoding
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.",
                                   suffix=".tmp")
        os.close(fd)
        plain_mode(tmp)
        self._tmp = Path(tmp)
        self._rows = 0
        self._started = False
        self._parquet: Any = None
        self._schema: Any = None

    def write(self, frame: pd.DataFrame) -> None:
        """Append ``frame``'s rows (the first chunk fixes the columns)."""
        if self.suffix in (".csv", ".tsv"):
            encoding = _without_bom(self.encoding) if self._started else self.encoding
            try:
                frame.to_csv(self._tmp, sep=self.delimiter, index=False,
                             header=not self._started, mode="a" if self._started else "w",
                             encoding=encoding)
            except UnicodeEncodeError as exc:
                value = exc.object[exc.start:exc.end]
                raise DataError(f"{self.role}: {self.path}: {value!r} cannot be written in "
                                f"{self.encoding} (the input's encoding); write a .jsonl or "
                                ".parquet output, or re-save the input as UTF-8") from None
        elif self.suffix in (".jsonl", ".json"):
            with self._tmp.open("a", encoding="utf-8") as handle:
                if len(frame):
                    handle.write(frame.to_json(orient="records", lines=True, force_ascii=False))
                    handle.write("\n")
        else:
            self._write_parquet(frame)
        self._started = True
        self._rows += len(frame)

    def _write_parquet(self, frame: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pa.Table.from_pandas(frame, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            detail = exc.args[-1] if exc.args else exc  # "Conversion failed for column age …"
            raise DataError(f"{self.role}: {self.path}: a column mixes value types that Parquet "
                            f"cannot hold in one column ({detail}); write CSV or JSONL "
                            "instead, which keep each value as it is") from None
        if self._parquet is None:
            self._schema = table.schema
            self._parquet = pq.ParquetWriter(self._tmp, self._schema)
        elif table.schema != self._schema:
            try:
                table = table.cast(self._schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise DataError(f"{self.role}: {self.path}: a later chunk's column types differ "
                                f"from the first chunk's ({exc}); write CSV or JSONL instead, "
                                "which keep each value as it is") from None
        self._parquet.write_table(table)

    def close(self) -> None:
        """Finish the file and move it into place."""
        if self._parquet is not None:
            self._parquet.close()
        elif self._rows == 0 and self.suffix in (".parquet", ".pq"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({}), self._tmp)
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Delete the temporary file; the target is left as it was."""
        if self._parquet is not None:
            try:
                self._parquet.close()
            except Exception:  # noqa: BLE001 - cleaning up after another error
                pass
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
