"""Numbers as people write them in tables: named number styles, parsing and detection.

A style is named by how it writes one thousand two hundred thirty-four and a half:

========== =========================== ==================================================
style      thousands separator         decimal mark
========== =========================== ==================================================
``1234.5`` none                        point (the plain default: ``pd.to_numeric``)
``1,234.5`` comma                      point
``1.234,5`` point                      comma
``1 234.5`` space (also U+00A0, U+202F) point
``1 234,5`` space (also U+00A0, U+202F) comma
``1'234.5`` apostrophe (also U+2019)    point
``1234,5`` none                        comma
========== =========================== ==================================================

A value reads in a style when it is an optional sign, then digits, grouped or not, then an
optional decimal part and exponent. A grouped value has a first group of 1–3 digits and then
groups of exactly 3 (``1,234,567``); ``12,5`` is therefore not a ``1,234.5`` value, and
``1.2.3`` reads in no style. Leading and trailing spaces do not count.

:func:`detect_style` picks, for a column whose values are not all plain numbers, the first
style of :data:`DETECTION_ORDER` under which every present value reads. This is ambiguous
for a column whose values are all like ``5,632``: it reads as thousands (5632) under
``1,234.5``, which is tried first, though a decimal comma (5.632) would read too. A single
value that cannot be a thousands group (``12,5``) settles it. The tabular tasks report the
choice per column and take an override (``data.number_format``).

Pure NumPy/pandas: no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from entrena.errors import closest_choice

__all__ = ["PLAIN", "DECIMAL_COMMA", "CATEGORY", "NumberStyle", "STYLES", "DETECTION_ORDER",
           "NUMBER_LIKE", "parse_numbers", "detect_style", "unreadable", "present_values",
           "check_style", "as_written"]

PLAIN = "1234.5"
"""The default style: what ``pd.to_numeric`` reads (``12``, ``-3.5``, ``1e3``, ``inf``)."""
DECIMAL_COMMA = "1234,5"
"""A decimal comma and no thousands separator (``3,14``)."""
CATEGORY = "category"
"""Not a style: ``data.number_format`` keeps such a column as categories."""
SPACES = " \u00a0\u202f"
"""The thousands separators of the space styles: a space, a no-break space and a narrow
no-break space (French typography)."""


@dataclass(frozen=True)
class NumberStyle:
    """How one style writes numbers.

    Attributes:
        name: The style, written as an example (``1,234.5``).
        thousands: The characters accepted as the thousands separator (empty: none).
        decimal: The decimal mark (``.`` or ``,``).
    """

    name: str
    thousands: str
    decimal: str

    def pattern(self) -> re.Pattern[str]:
        """The regular expression a whole (stripped) value must match."""
        mark = re.escape(self.decimal)
        if self.thousands:
            sep = "[" + re.escape(self.thousands) + "]"
            integer = rf"(?:\d{{1,3}}(?:{sep}\d{{3}})+|\d+)"
        else:
            integer = r"\d+"
        return re.compile(rf"[+-]?(?:{integer}(?:{mark}\d*)?|{mark}\d+)(?:[eE][+-]?\d+)?")


STYLES: dict[str, NumberStyle] = {style.name: style for style in (
    NumberStyle(PLAIN, "", "."),
    NumberStyle("1,234.5", ",", "."),
    NumberStyle("1.234,5", ".", ","),
    NumberStyle("1 234.5", SPACES, "."),
    NumberStyle("1 234,5", SPACES, ","),
    NumberStyle("1'234.5", "'\u2019", "."),
    NumberStyle(DECIMAL_COMMA, "", ","),
)}
"""Every style by name."""
DETECTION_ORDER = ("1,234.5", "1.234,5", "1 234.5", "1 234,5", "1'234.5")
"""The styles :func:`detect_style` tries, in order (``1234,5`` is reported for a
``1.234,5`` or ``1 234,5`` column without any thousands separator)."""
_PATTERNS = {name: style.pattern() for name, style in STYLES.items()}
NUMBER_LIKE = re.compile(r"[+-]?[\d.,'\u2019 \u00a0\u202f]*\d[\d.,'\u2019 \u00a0\u202f]*"
                         r"(?:[eE][+-]?\d+)?")
"""Text made only of the characters numbers are written with in some style (a cheap test
before the styles are tried)."""


def check_style(style: str) -> NumberStyle:
    """The :class:`NumberStyle` named ``style``.

    Raises:
        ValueError: An unknown name; the styles are listed with the closest one.
    """
    found = STYLES.get(style)
    if found is None:
        close = closest_choice(style, STYLES)
        raise ValueError(f"unknown number style {style!r}; the styles are "
                         f"{', '.join(map(repr, STYLES))}"
                         + (f" (did you mean {close!r}?)" if close else ""))
    return found


def present_values(values: pd.Series) -> np.ndarray:
    """Which values are present: bool (N,), False where missing (NaN, None) or blank."""
    text = values.astype(str).str.strip()
    return ~(values.isna() | text.eq("")).to_numpy()


def parse_numbers(values: pd.Series, style: str | None) -> np.ndarray:
    """A column's values as numbers, read in one style.

    Args:
        values: The column, (N,): text as read from a file, or numbers (a numeric or boolean
            dtype passes through as float; in an object column, numbers pass through and
            text is read in the style).
        style: A name of :data:`STYLES`; ``None`` or ``1234.5``: ``pd.to_numeric``
            (``errors="coerce"``), the plain default.

    Returns:
        float64 (N,): NaN where a value is missing or does not read in the style.

    Raises:
        ValueError: ``style`` is not a known style.
    """
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
        return values.astype(float).to_numpy()
    if style is None or style == PLAIN:
        return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    number = check_style(style)
    out = np.full(len(values), np.nan)
    is_text = values.map(lambda v: isinstance(v, str)).to_numpy(dtype=bool)
    if not is_text.all():  # numbers (JSON) pass through; None and NaN are missing
        others = values[~is_text]
        out[~is_text] = pd.to_numeric(others.where(others.map(_is_number)),
                                      errors="coerce").to_numpy(dtype=float)
    if is_text.any():
        text = values[is_text].astype(str).str.strip()
        reads = text.str.fullmatch(_PATTERNS[number.name]).to_numpy(dtype=bool)
        cleaned = text[reads]
        if number.thousands:
            cleaned = cleaned.str.replace("[" + re.escape(number.thousands) + "]", "",
                                          regex=True)
        if number.decimal != ".":
            cleaned = cleaned.str.replace(number.decimal, ".", regex=False)
        parsed = np.full(len(text), np.nan)
        with np.errstate(over="ignore"):
            parsed[reads] = pd.to_numeric(cleaned, errors="coerce").to_numpy(dtype=float)
        out[is_text] = parsed
    return out


def _is_number(value: object) -> bool:
    return isinstance(value, int | float | np.integer | np.floating)


def unreadable(values: pd.Series, style: str | None) -> np.ndarray:
    """Positions (0-based, int64 (K,)) of the present values that do not read in ``style``
    (missing and blank values are not counted; ``inf`` reads in the plain style)."""
    parsed = parse_numbers(values, style)
    return np.flatnonzero(present_values(values) & np.isnan(parsed))


def detect_style(values: pd.Series) -> str | None:
    """The style a column's numbers are written in.

    The first style of :data:`DETECTION_ORDER` under which every present value reads;
    ``1234,5`` (a decimal comma) when that style's thousands separator occurs in no value
    (``3,14`` and ``12,5``). So ``5,632``, ``12``, ``1,234,567`` → ``1,234.5`` (5632);
    ``5,632``, ``12,5`` → ``1234,5`` (5.632 and 12.5); ``1.234.567,89`` → ``1.234,5``;
    ``12 500`` → ``1 234.5``. Ambiguous: a column whose every value is like ``5,632`` reads
    as thousands; a caller should name the choice and take an override.

    Args:
        values: The column, (N,) (text as read, or numbers).

    Returns:
        ``1234.5`` when every present value is a plain number (a numeric dtype too); the
        detected style; ``None`` when no style reads every present value, when there is no
        present value, or for a boolean column (booleans are categories).
    """
    if pd.api.types.is_bool_dtype(values):
        return None
    present = present_values(values)
    if not present.any():
        return None
    if pd.api.types.is_numeric_dtype(values):
        return PLAIN
    values = pd.Series(pd.unique(values[present].to_numpy(dtype=object)), dtype=object)
    if not np.isnan(parse_numbers(values, PLAIN)).any():
        return PLAIN
    text = values.astype(str).str.strip()
    if not text.str.fullmatch(NUMBER_LIKE).all():  # a word: no style reads it
        return None
    for name in DETECTION_ORDER:
        if np.isnan(parse_numbers(values, name)).any():
            continue
        style = STYLES[name]
        grouped = text.str.contains("[" + re.escape(style.thousands) + "]", regex=True).any()
        if not grouped and style.decimal == ",":
            return DECIMAL_COMMA
        return name
    return None


def as_written(values: pd.Series, style: str) -> tuple[str, float] | None:
    """One value of a column and the number it reads as in ``style``, for messages: the first
    value holding a separator or a decimal comma (where the style matters), else the first
    value that reads; ``None`` when none reads.

    Raises:
        ValueError: ``style`` is not a known style.
    """
    parsed = parse_numbers(values, style)
    reads = np.flatnonzero(~np.isnan(parsed))
    if not len(reads):
        return None
    marks = STYLES[style].thousands + ("," if STYLES[style].decimal == "," else "")
    text = values.iloc[reads].astype(str).str.strip()
    if marks:
        marked = np.flatnonzero(text.str.contains("[" + re.escape(marks) + "]", regex=True))
        if len(marked):
            return text.iloc[marked[0]], float(parsed[reads[marked[0]]])
    return text.iloc[0], float(parsed[reads[0]])
