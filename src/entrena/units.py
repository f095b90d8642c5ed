"""Parsing and formatting of quantities with units (standard library only)."""

from __future__ import annotations

import math
import re
from typing import NamedTuple

__all__ = ["parse_duration_s", "format_duration", "format_bytes", "Budget", "parse_budget",
           "format_usd", "short_list"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d)?\s*$", re.IGNORECASE)
_SECONDS_PER = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(sec|min|hr|s|m|h|d)", re.IGNORECASE)
_COMPOUND = re.compile(r"^\s*(?:\d+(?:\.\d+)?\s*(?:sec|min|hr|s|m|h|d)\s*){2,}$", re.IGNORECASE)


def parse_duration_s(text: str | float | int) -> float:
    """Parse a duration such as ``"90s"``, ``"15m"``, ``"2h"``, ``"1.5d"`` or ``"1h30m"``
    into seconds.

    A bare number is seconds; parts of several units add up (``"1h 30m"``).

    Args:
        text: The duration.

    Returns:
        The duration in seconds.

    Raises:
        ValueError: The text is not a number followed by one of s, m, min, h, d.
    """
    if isinstance(text, int | float):
        return float(text)
    match = _DURATION.match(text)
    if not match and _COMPOUND.match(text):
        return float(sum(float(number) * _SECONDS_PER[unit.lower()]
                         for number, unit in _PART.findall(text)))
    if not match:
        raise ValueError(
            f"invalid duration {text!r}: write a number and a unit, e.g. '90s', '15m', '2h'"
        )
    unit = (match.group(2) or "s").lower()
    return float(match.group(1)) * _SECONDS_PER[unit]


def format_duration(seconds: float) -> str:
    """Format seconds for humans: ``"42s"``, ``"3m 05s"``, ``"1h 02m"``."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m {sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def format_bytes(n_bytes: float) -> str:
    """Format a byte count with binary prefixes: ``"1.5 GiB"``."""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class Budget(NamedTuple):
    """A limit on a run: money (``usd``) or time (``seconds``); exactly one is set."""

    usd: float | None = None
    seconds: float | None = None

    def __str__(self) -> str:
        return format_usd(self.usd) if self.usd is not None else format_duration(self.seconds or 0)


_MONEY = re.compile(r"^\s*(?:\$\s*)?(\d+(?:\.\d+)?)\s*(usd|\$|dollars?)?\s*$", re.IGNORECASE)


MAX_BUDGET_S = 365 * 86400.0
"""The longest budget or deadline accepted: a year (a larger number is a typo, and an
infinite one cannot be planned)."""
MAX_BUDGET_USD = 1e9
"""The largest money budget accepted."""


def parse_budget(text: str | float | int, *, bare: str = "usd", what: str = "budget") -> Budget:
    """Parse a budget or deadline: ``"20usd"``, ``"$20"``, ``"30m"``, ``"2h"``, ``"1.5d"``.

    The one parser behind ``entrena plan --budget`` and ``--deadline``.

    Args:
        text: The limit. A bare number (``"20"``) takes the unit ``bare``.
        bare: ``"usd"`` (a bare number is dollars, as for ``--budget``) or ``"s"`` (seconds).
        what: The option's name, used in error messages.

    Returns:
        A :class:`Budget` with either ``usd`` or ``seconds`` set.

    Raises:
        ValueError: The text is neither an amount of USD nor a duration, or is not positive.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"invalid {what} {text!r}: write an amount such as '20usd' or a "
                         f"duration such as '30m' or '2h'")
    value = text.strip()
    bare_number = re.fullmatch(r"\d+(?:\.\d+)?", value)
    money = _MONEY.match(value)
    if money and (money.group(2) or value.startswith("$") or (bare_number and bare == "usd")):
        usd = float(money.group(1))
        if not math.isfinite(usd) or usd > MAX_BUDGET_USD:
            raise ValueError(f"invalid {what} {text!r}: more than any run costs; give at most "
                             f"'${MAX_BUDGET_USD:,.0f}'")
        if usd <= 0:
            raise ValueError(f"invalid {what} {text!r}: must be more than 0 USD, such as "
                             f"'20usd' or '$2.50'")
        return Budget(usd=usd)
    forms = (f"write an amount such as '20usd' (a bare number is "
             f"{'USD' if bare == 'usd' else 'seconds'}) or a duration such as '30m', '2h' or "
             f"'1.5d'")
    try:
        seconds = parse_duration_s(value)
    except ValueError:
        negative = value.startswith("-")  # "-3m": say why, not only the accepted forms
        raise ValueError(f"invalid {what} {text!r}: {'must be positive; ' if negative else ''}"
                         f"{forms}") from None
    if not math.isfinite(seconds) or seconds > MAX_BUDGET_S:
        raise ValueError(f"invalid {what} {text!r}: longer than any run; give at most "
                         f"'{MAX_BUDGET_S // 86400:.0f}d' (or leave the budget out)")
    if seconds <= 0:
        raise ValueError(f"invalid {what} {text!r}: must be a positive duration, such as "
                         f"'30m' or '2h'")
    return Budget(seconds=seconds)


def format_usd(amount: float | None) -> str:
    """Format dollars for humans: ``"$0.042"``, ``"$1.50"``, ``"$1,234"``; ``"-"`` for None."""
    if amount is None:
        return "-"
    if amount < 1:
        return f"${amount:.3f}"
    if amount < 1000:
        return f"${amount:.2f}"
    return f"${amount:,.0f}"


def short_list(names: list[str] | tuple[str, ...], limit: int = 10) -> str:
    """``"a, b, c"``, or for more than ``limit`` names the first ``limit`` and a count:
    ``"a, b, …, j and 190 more"`` (a log line stays one readable line)."""
    shown = ", ".join(str(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
