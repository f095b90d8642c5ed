"""Reading tabular data files (CSV, TSV, JSONL, Parquet) into pandas DataFrames."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from entrena.errors import DataError

__all__ = ["SUPPORTED_SUFFIXES", "read_table", "require_columns"]

SUPPORTED_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet", ".pq")


def read_table(path: str, *, role: str = "data") -> pd.DataFrame:
    """Read one data file; the format follows the file suffix.

    CSV/TSV are read as UTF-8 with or without a byte-order mark; every column is read as
    text-or-number as pandas infers it, and empty cells become missing values.

    Args:
        path: Local path to a ``.csv``, ``.tsv``, ``.jsonl``/``.json`` (one object per line)
            or ``.parquet`` file.
        role: Which split the file is for (``"train"``, ``"test"`` …), used in messages.

    Returns:
        The rows, with the file's column names.

    Raises:
        DataError: The file does not exist, has an unsupported suffix, or cannot be parsed.
    """
    file = Path(path)
    if not file.is_file():
        raise DataError(f"data.{role}: file not found: {path}; check the path in the config "
                        "(relative paths resolve against the config file's folder)")
    suffix = file.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            frame = pd.read_csv(file, sep="\t" if suffix == ".tsv" else ",",
                                encoding="utf-8-sig", keep_default_na=True)
        elif suffix in (".jsonl", ".json"):
            frame = pd.read_json(file, lines=True, encoding="utf-8-sig")
        elif suffix in (".parquet", ".pq"):
            frame = pd.read_parquet(file)
        else:
            raise DataError(f"data.{role}: {path}: unsupported file type {suffix!r}; "
                            f"use one of {', '.join(SUPPORTED_SUFFIXES)}")
    except DataError:
        raise
    except UnicodeDecodeError as exc:
        raise DataError(f"data.{role}: {path}: not UTF-8 text at byte {exc.start}; "
                        "re-save the file as UTF-8") from None
    except (ValueError, pd.errors.ParserError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"data.{role}: {path}: cannot parse as {suffix[1:]}: {first}") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame


def require_columns(frame: pd.DataFrame, columns: dict[str, str], *, path: str, role: str) -> None:
    """Check that each configured column exists.

    Args:
        frame: The rows read from ``path``.
        columns: ``{config key: column name}``, e.g. ``{"data.text_column": "review"}``.
        path: The file, for the message.
        role: The split, for the message.

    Raises:
        DataError: A column is missing; the message lists the columns that exist.
    """
    for key, column in columns.items():
        if column not in frame.columns:
            present = ", ".join(repr(c) for c in frame.columns)
            raise DataError(f"{path}: {key} = {column!r} is not a column of the {role} data; "
                            f"columns are: {present}; set {key} to one of them")
