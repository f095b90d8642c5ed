"""Several text columns as one text: the joining that training, export and predict share.

``data.text_column`` names one column or a list of them. With one column the text is that
column's value, as it always was. With several, each row's text is its non-empty fields, each
after its column name as a marker, one per line::

    subject: Invoice charged twice
    description: I was billed twice for March.

A field that is missing or blank is left out (with its marker); a row whose fields are all
empty has an empty text (a skipped row, as an empty text column is). The same function joins
the texts of ``entrena predict`` and of ``entrena export``'s parity data, so a model always
sees its texts as it was trained on them. Any text task (classification, regression) reads
through :func:`join_text_columns`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where rows are joined: a run from the cache never needs it
    import pandas as pd

__all__ = ["FIELD_SEPARATOR", "text_columns", "join_text_columns", "describe_text_columns",
           "joined_column_name"]

FIELD_SEPARATOR = "\n"
"""Between the ``name: value`` fields of one text."""


def text_columns(value: str | Sequence[str]) -> list[str]:
    """``data.text_column`` as a list of column names (``"text"`` → ``["text"]``)."""
    return [value] if isinstance(value, str) else list(value)


def joined_column_name(value: str | Sequence[str]) -> str:
    """The column name a table of per-row results gives the text: the text column itself, or
    for several columns ``text`` (``joined_text`` when one of them is called ``text``)."""
    columns = text_columns(value)
    if len(columns) == 1:
        return columns[0]
    return "joined_text" if "text" in columns else "text"


def describe_text_columns(value: str | Sequence[str]) -> str:
    """For messages: ``'review'`` or ``'subject' + 'description'``."""
    return " + ".join(repr(c) for c in text_columns(value))


def _blank(values: pd.Series) -> np.ndarray:
    return (values.isna() | (values.astype(str).str.strip() == "")).to_numpy(dtype=bool)


def join_text_columns(frame: pd.DataFrame, columns: str | Sequence[str], *,
                      missing: Mapping[str, np.ndarray | None] | None = None) -> pd.Series:
    """Each row's text, from one column or several (see the module docstring).

    Args:
        frame: Rows holding every column of ``columns``.
        columns: ``data.text_column``: one column name, or a list of them.
        missing: Per column, rows a reader found missing on top of the NA or blank cells of
            ``frame`` (:class:`~entrena.data.streaming.Chunk.missing`); only read for several
            columns (one column's missing cells are the caller's to check, as before).

    Returns:
        For one column, ``frame[column]`` unchanged. For several, a string Series aligned with
        ``frame``: ``"name: value"`` per non-empty field joined by :data:`FIELD_SEPARATOR`,
        ``""`` where every field is empty.
    """
    names = text_columns(columns)
    if len(names) == 1:
        return frame[names[0]]
    out = np.full(len(frame), "", dtype=object)
    for name in names:
        values = frame[name]
        blank = _blank(values)
        if missing is not None and missing.get(name) is not None:
            blank = blank | np.asarray(missing[name], dtype=bool)
        texts = values.astype(str).to_numpy(dtype=object)
        for i in np.flatnonzero(~blank):
            field = f"{name}: {texts[i]}"
            out[i] = field if not out[i] else out[i] + FIELD_SEPARATOR + field
    import pandas as pd

    return pd.Series(out, index=frame.index, dtype=object)
