"""Parsing and formatting of quantities with units (standard library only)."""

from __future__ import annotations

import re

__all__ = ["parse_duration_s", "format_duration", "format_bytes"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d)?\s*$", re.IGNORECASE)
_SECONDS_PER = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400}


def parse_duration_s(text: str | float | int) -> float:
    """Parse a duration such as ``"90s"``, ``"15m"``, ``"2h"`` or ``"1.5d"`` into seconds.

    A bare number is seconds.

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
