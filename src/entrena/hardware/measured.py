"""Measurements of this machine kept between runs: one JSON object per file, keyed by what
the measurement depends on (the CPU model, threads, torch version …).

A cache never stops a run: an unreadable file reads as empty, and a failed write is logged at
debug level (the measurement is simply taken again next time).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["cached_measurement"]

log = logging.getLogger("entrena")


def _read(path: Path) -> dict[str, Any]:
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def cached_measurement(path: Path | None, key: str, measure: Callable[[], dict[str, Any]],
                       valid: Callable[[Any], bool]) -> tuple[dict[str, Any], bool]:
    """The entry ``key`` of the JSON cache at ``path``, measured and stored if missing.

    Args:
        path: The cache file (``None``: measure, keep nothing).
        key: What the measurement depends on.
        measure: Takes the measurement; returns the entry (a JSON object).
        valid: Whether a cached entry is usable (a file from an older version may lack
            fields).

    Returns:
        ``(entry, was_cached)``.
    """
    if path is not None and path.is_file():
        entry = _read(path).get(key)
        if valid(entry):
            return entry, True
    entry = measure()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            cached = _read(path) if path.is_file() else {}
            cached[key] = entry
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(cached, indent=1))
            tmp.replace(path)
        except OSError as exc:
            log.debug("could not cache a measurement in %s: %s", path, exc)
    return entry, False
