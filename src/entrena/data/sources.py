"""Where rows come from: local files, glob patterns of shards and fsspec URLs, read in chunks.

A data key of the config (``data.train`` …) names one file, a glob pattern (``part-*.csv``,
sorted by name) or a URL (downloaded once into the cache, see :mod:`entrena.data.remote`).
CSV/TSV files have their encoding (:func:`~entrena.data.sniffing.scan_file`) and delimiter
(:func:`~entrena.data.sniffing.detect_delimiter`) detected; quoted fields may hold newlines.
Every CSV value is read as text (``007`` stays ``007``); empty cells and pandas' missing-value
strings (``NA``, ``null`` …) are missing. JSONL is one object per line; Parquet is read a row
group at a time, only the needed columns.
"""

from __future__ import annotations

import glob
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entrena.data.remote import default_cache_dir, fetch_remote, has_magic, is_url
from entrena.data.sniffing import FileScan, detect_delimiter, scan_file
from entrena.errors import DataError

if TYPE_CHECKING:  # imported where a file is parsed: a run from the cache never needs pandas
    import pandas as pd

__all__ = ["SUPPORTED_SUFFIXES", "SourceFile", "resolve_source", "open_source", "read_chunks",
           "read_table", "require_columns", "json_object"]

FORMATS = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".json": "jsonl",
           ".parquet": "parquet", ".pq": "parquet"}
SUPPORTED_SUFFIXES = tuple(FORMATS)
CHUNK_ROWS = 100_000


@dataclass(frozen=True)
class SourceFile:
    """One data file, local (a downloaded copy for a URL) and scanned.

    Attributes:
        path: The local file.
        name: What the user gave for it (the path or the URL), used in messages.
        format: ``"csv"`` (CSV and TSV), ``"jsonl"`` or ``"parquet"``.
        scan: Size, SHA-256 and text encoding.
        delimiter: The CSV/TSV field separator (``None`` for other formats).
    """

    path: Path
    name: str
    format: str
    scan: FileScan
    delimiter: str | None = None


def json_object(line: str, number: int, where: str) -> dict[str, Any] | None:
    """One line of a JSON Lines file as its object (``None`` for a blank line).

    Args:
        line: The line as read (a byte-order mark and surrounding spaces are ignored).
        number: Its line number, from 1, for the error.
        where: ``"<config key>: <file name>"``, for the error.

    Raises:
        DataError: The line is not JSON, or is JSON but not an object.
    """
    line = line.strip().lstrip("\ufeff")
    if not line:
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: line {number} is not JSON: {exc.msg} "
                        f"(column {exc.colno}); write one JSON object per line") from None
    if not isinstance(record, dict):
        raise DataError(f"{where}: line {number} is a JSON {type(record).__name__}, not an "
                        "object; write one {\"column\": value, …} object per line")
    return record


def _format_of(name: str, key: str) -> tuple[str, str]:
    suffix = Path(name.split("?", 1)[0]).suffix.lower()
    if suffix not in FORMATS:
        raise DataError(f"{key}: {name}: unsupported file type {suffix!r}; "
                        f"use one of {', '.join(SUPPORTED_SUFFIXES)}")
    return suffix, FORMATS[suffix]


def resolve_source(spec: str, *, key: str, cache_dir: Path | None = None
                   ) -> list[tuple[str, Path]]:
    """The files a data key names: ``(name, local path)`` pairs, sorted by name.

    Args:
        spec: A local path (already resolved against the config's folder), a glob pattern or
            an fsspec URL.
        key: The config key (``data.train``), for messages.
        cache_dir: The cache root for downloads (URLs only; default
            :func:`~entrena.data.remote.default_cache_dir`).

    Raises:
        DataError: Nothing exists or matches there, or a URL cannot be fetched.
    """
    if is_url(spec):
        return fetch_remote(spec, key=key, cache_dir=cache_dir or default_cache_dir())
    spec = spec.removeprefix("file://")
    if has_magic(spec):
        matches = sorted(p for p in glob.glob(spec, recursive=True) if Path(p).is_file())
        if not matches:
            raise DataError(f"{key}: no file matches {spec}; check the pattern (relative "
                            "patterns resolve against the config file's folder)")
        return [(m, Path(m)) for m in matches]
    path = Path(spec)
    if path.is_dir():
        raise DataError(f"{key}: {spec} is a folder; name a file or a glob pattern of files "
                        f"such as {Path(spec) / '*.csv'}")
    if not path.is_file():
        raise DataError(f"{key}: file not found: {spec}; check the path in the config "
                        "(relative paths resolve against the config file's folder)")
    return [(spec, path)]


def open_source(spec: str, *, key: str, cache_dir: Path | None = None, encoding: str = "auto",
                delimiter: str = "auto") -> list[SourceFile]:
    """Resolve, hash and sniff every file of a data key.

    Args:
        spec: Path, glob pattern or URL.
        key: The config key, for messages.
        cache_dir: Cache root for downloads.
        encoding: ``"auto"`` or a codec name.
        delimiter: ``"auto"``, ``"tab"`` or the CSV field separator.

    Raises:
        DataError: A file is missing, empty, of an unsupported type, or undecodable.
    """
    files = []
    for name, path in resolve_source(spec, key=key, cache_dir=cache_dir):
        suffix, kind = _format_of(name, key)
        scan = scan_file(path, name=name, key=key, text=kind != "parquet", encoding=encoding)
        sep = None
        if kind == "csv":
            default = "\t" if suffix == ".tsv" else ","
            sep = (detect_delimiter(path, scan.encoding or "utf-8", default=default)
                   if delimiter == "auto" else "\t" if delimiter == "tab" else delimiter)
        files.append(SourceFile(path, name, kind, scan, sep))
    return files


def require_columns(columns: Sequence[str] | pd.DataFrame, wanted: dict[str, str], *, path: str,
                    role: str) -> None:
    """Check that each configured column exists.

    Args:
        columns: The file's column names (or a DataFrame read from it).
        wanted: ``{config key: column name}``, e.g. ``{"data.text_column": "review"}``.
        path: The file, for the message.
        role: The split, for the message.

    Raises:
        DataError: A column is missing; the message lists the columns that exist.
    """
    import pandas as pd

    names = list(columns.columns if isinstance(columns, pd.DataFrame) else columns)
    for key, column in wanted.items():
        if column not in names:
            present = ", ".join(repr(c) for c in names) or "none"
            raise DataError(f"{path}: {key} = {column!r} is not a column of the {role} data; "
                            f"columns are: {present}; set {key} to one of them")


def read_chunks(file: SourceFile, wanted: dict[str, str] | None, *, key: str, role: str,
                chunk_rows: int = CHUNK_ROWS,
                list_columns: dict[str, str] | None = None) -> Iterator[pd.DataFrame]:
    """Yield the rows of ``file`` in chunks of at most ``chunk_rows``.

    Args:
        file: An opened source.
        wanted: ``{config key: column}`` to keep (checked against the header; the chunks hold
            these columns in this order), or ``None`` for every column.
        key: The config key, for messages.
        role: The split, for messages.
        chunk_rows: Rows per chunk.
        list_columns: ``{column: separator}``: a JSON list of plain values in such a column
            (JSONL) is read as its values joined by the separator (multi-label tags); a list
            elsewhere is refused.

    Raises:
        DataError: A column is missing, a row is ragged, or the file cannot be parsed.
    """
    if file.format == "jsonl":
        yield from _jsonl_chunks(file, wanted, key, role, chunk_rows, list_columns or {})
        return
    reader = {"csv": _csv_chunks, "parquet": _parquet_chunks}[file.format]
    yield from reader(file, wanted, key, role, chunk_rows)


def _strip_columns(frame: pd.DataFrame) -> pd.DataFrame:
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame


def _select(frame: pd.DataFrame, wanted: dict[str, str] | None) -> pd.DataFrame:
    if wanted is None:
        return frame.reset_index(drop=True)
    return frame[list(dict.fromkeys(wanted.values()))].reset_index(drop=True)


_RAGGED = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def _csv_chunks(file: SourceFile, wanted: dict[str, str] | None, key: str, role: str,
                chunk_rows: int) -> Iterator[pd.DataFrame]:
    import pandas as pd

    options = dict(sep=file.delimiter, encoding=file.scan.encoding, dtype=str,
                   keep_default_na=True, engine="c")
    try:
        _refuse_repeated_columns(file, key)
        try:
            reader = pd.read_csv(file.path, chunksize=chunk_rows, **options)
        except pd.errors.EmptyDataError:
            raise DataError(f"{key}: {file.name} has no header line; the first line must name "
                            "the columns (text,label)") from None
        with reader:
            first = True
            for frame in reader:
                frame = _strip_columns(frame)
                if first and wanted is not None:
                    require_columns(frame, wanted, path=file.name, role=role)
                first = False
                yield _select(frame, wanted)
            if first:  # a header and no rows: check the columns, yield no rows
                header = _strip_columns(pd.read_csv(file.path, nrows=0, **options))
                if wanted is not None:
                    require_columns(header, wanted, path=file.name, role=role)
                yield _select(header, wanted)
    except pd.errors.ParserError as exc:
        match = _RAGGED.search(str(exc))
        if match:
            expected, record, saw = (int(g) for g in match.groups())
            raise DataError(f"{key}: {file.name}: row {record - 1} has {saw} fields but the "
                            f"header has {expected}; quote values that contain the delimiter "
                            f"({file.delimiter!r}) or fix that row") from None
        raise DataError(f"{key}: {file.name}: cannot parse as CSV: {_first_line(exc)}") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{key}: {file.name}: cannot decode as {file.scan.encoding} "
                        f"({exc.reason}); set data.encoding: auto, or the file's encoding"
                        ) from None


def _refuse_repeated_columns(file: SourceFile, key: str) -> None:
    """Refuse a CSV header naming a column twice (pandas would silently rename the copy
    ``name.1``: a text column read from the first copy, a table feature no other file has).

    Raises:
        DataError: Names the file, the column and its positions (1-based).
    """
    import pandas as pd

    try:
        head = pd.read_csv(file.path, sep=file.delimiter, encoding=file.scan.encoding,
                           header=None, nrows=1, dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError):
        return  # reading the file says what is wrong with it
    names = [str(c).strip() for c in head.iloc[0]] if len(head) else []
    for name in dict.fromkeys(names):
        positions = [i + 1 for i, n in enumerate(names) if n == name]
        if len(positions) > 1:
            raise DataError(f"{key}: {file.name}: the header names column {name!r} "
                            f"{len(positions)} times (columns "
                            f"{', '.join(map(str, positions))}); rename or remove the copies")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _jsonl_chunks(file: SourceFile, wanted: dict[str, str] | None, key: str, role: str,
                  chunk_rows: int, list_columns: dict[str, str] | None = None
                  ) -> Iterator[pd.DataFrame]:
    records: list[dict] = []
    seen: dict[str, None] = {}
    checked = False
    with file.path.open("rb") as raw:
        text = io.TextIOWrapper(raw, encoding=file.scan.encoding, newline="")
        try:
            for number, line in enumerate(text, start=1):
                record = json_object(line, number, f"{key}: {file.name}")
                if record is None:
                    continue
                for column, separator in (list_columns or {}).items():
                    value = record.get(column)
                    if isinstance(value, list) and all(
                            not isinstance(v, list | dict) for v in value):
                        record[column] = separator.join(str(v) for v in value if v is not None)
                _refuse_nested(record, wanted, f"{key}: {file.name}: line {number}")
                records.append(record)
                if len(records) == chunk_rows:
                    if not checked:
                        seen.update(dict.fromkeys(k for r in records for k in r))
                        _check_keys(seen, wanted, file, role)
                        checked = True
                    yield _records_frame(records, wanted)
                    records = []
        except UnicodeDecodeError as exc:
            raise DataError(f"{key}: {file.name}: cannot decode as {file.scan.encoding} "
                            f"({exc.reason}); set data.encoding: auto, or the file's encoding"
                            ) from None
    if not checked:
        seen.update(dict.fromkeys(k for r in records for k in r))
        if records:
            _check_keys(seen, wanted, file, role)
    if records:
        yield _records_frame(records, wanted)


def _refuse_nested(record: dict[str, Any], wanted: dict[str, str] | None, where: str) -> None:
    """Refuse a JSON list or object where a column holds one value (a label, a text, a
    feature): pandas would keep it as a Python object and its ``str()`` (``"['great']"``)
    would become a class or a text.

    Args:
        record: One parsed JSON line.
        wanted: ``{config key: column}`` read from the file; ``None``: every column is.
        where: ``"data.train: train.jsonl: line 3"``, the start of the message.

    Raises:
        DataError: Names the line, the column, its config key and the value.
    """
    keys = {column: key for key, column in wanted.items()} if wanted is not None else None
    for column, value in record.items():
        if not isinstance(value, list | dict) or (keys is not None and column not in keys):
            continue
        kind = "list" if isinstance(value, list) else "object"
        shown = json.dumps(value, ensure_ascii=False)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        named = f" ({keys[column]})" if keys is not None else ""
        labels = (" (a text classifier takes a list of labels per row with "
                  "data.multi_label: {separator: \"|\"})"
                  if keys is not None and keys[column] == "data.label_column" else "")
        raise DataError(f"{where}: {column!r}{named} is a JSON {kind}, {shown}, not a string "
                        f"or number; write one plain value per field{labels}")


def _check_keys(seen: dict[str, None], wanted: dict[str, str] | None, file: SourceFile,
                role: str) -> None:
    if wanted is not None:
        require_columns(list(seen), wanted, path=file.name, role=role)


def _records_frame(records: list[dict], wanted: dict[str, str] | None) -> pd.DataFrame:
    import pandas as pd

    if wanted is None:
        return _strip_columns(pd.DataFrame.from_records(records))
    columns = list(dict.fromkeys(wanted.values()))
    return pd.DataFrame({c: pd.Series([r.get(c) for r in records], dtype=object)
                         for c in columns})


def _parquet_chunks(file: SourceFile, wanted: dict[str, str] | None, key: str, role: str,
                    chunk_rows: int) -> Iterator[pd.DataFrame]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(file.path)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable_parquet(file, key, exc) from None
    names = [str(n).strip() for n in parquet.schema_arrow.names]
    columns = None
    if wanted is not None:
        require_columns(names, wanted, path=file.name, role=role)
        original = dict(zip(names, parquet.schema_arrow.names, strict=True))
        columns = [original[c] for c in dict.fromkeys(wanted.values())]
    for field in parquet.schema_arrow:
        if (columns is None or field.name in columns) and pa.types.is_nested(field.type):
            named = next((f" ({k})" for k, c in (wanted or {}).items()
                          if c == str(field.name).strip()), "")
            raise DataError(f"{key}: {file.name}: column {str(field.name).strip()!r}{named} is a "
                            f"Parquet {field.type} column, not strings or numbers; write one "
                            f"plain value per row (a list of labels per row is not supported)")
    try:
        for batch in parquet.iter_batches(batch_size=chunk_rows, columns=columns):
            yield _strip_columns(batch.to_pandas())
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable_parquet(file, key, exc) from None


PARQUET_FIX = ("the file is damaged or not Parquet: write it again (pandas "
               "DataFrame.to_parquet), or give it the suffix of its real format (.csv, .tsv, "
               ".jsonl)")
"""How to fix a file named ``.parquet`` that pyarrow cannot read (every reader's message)."""
CSV_FIX = ("fix the row it names (quote a field that holds the delimiter) or save the file "
           "again from the program that made it")
"""How to fix a CSV/TSV file that pandas cannot split into rows (the predict and chat readers)."""


def _unreadable_parquet(file: SourceFile, key: str, exc: BaseException) -> DataError:
    reason = _first_line(exc).rstrip(".")
    return DataError(f"{key}: {file.name}: cannot read as Parquet: {reason}; {PARQUET_FIX}")


def read_table(path: str, *, role: str = "data", cache_dir: Path | None = None
               ) -> pd.DataFrame:
    """Read every row and column of a data file (or of every shard of a pattern) at once.

    For small files (a parity check, a file to predict on); training reads in chunks.

    Args:
        path: A path, glob pattern or URL.
        role: What the file is for (``"train"``, ``"parity"`` …), used in messages.
        cache_dir: Cache root for URLs.

    Raises:
        DataError: The file is missing, of an unsupported type, undecodable or unparsable.
    """
    import pandas as pd

    key = f"data.{role}"
    frames = [chunk for file in open_source(path, key=key, cache_dir=cache_dir)
              for chunk in read_chunks(file, None, key=key, role=role)]
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
