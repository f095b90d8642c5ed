"""What a resumed run compares: the hash of the config keys that change results, and a diff.

A checkpoint records :func:`config_hash` of the resolved config it was trained with (and the
config itself). Resuming with a config whose hash differs is refused unless the user accepts
the changes. Keys that cannot change the weights are left out of the hash, so they may change
freely between sessions:

- ``name``: the run's name (the run directory is chosen on the command line anyway);
- ``data.cache_dir``: where prepared data is cached;
- ``tracking.*``: where metrics are sent;
- ``train.log_every_steps``: how often a step is logged;
- ``train.checkpoint.*``: how often checkpoints are written and how many are kept;
- ``train.max_time``: a time budget (raising it to continue a stopped run is the point);
- ``train.num_threads``: CPU threads. With a different thread count a CPU run is no longer
  bitwise identical to an uninterrupted one, but it is the same computation, and the
  default (``null``: the usable cores) changes with the machine without the config changing.

Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["RESULT_NEUTRAL_KEYS", "config_hash", "config_changes", "format_changes"]

RESULT_NEUTRAL_KEYS: tuple[str, ...] = (
    "name",
    "data.cache_dir",
    "tracking",
    "train.log_every_steps",
    "train.checkpoint",
    "train.max_time",
    "train.num_threads",
    "tune",  # `train` ignores the search section
)
"""Dotted keys (or section prefixes) left out of :func:`config_hash` and :func:`config_changes`."""


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _neutral(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in RESULT_NEUTRAL_KEYS)


def _relevant(resolved: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in _flatten(resolved).items() if not _neutral(k)}


def config_hash(resolved: dict[str, Any]) -> str:
    """SHA-256 (first 16 hex digits) of the result-relevant keys of a resolved config.

    Args:
        resolved: ``Config.model_dump(mode="json")``: every default filled in.

    Returns:
        16 hexadecimal characters; equal for configs that differ only in
        :data:`RESULT_NEUTRAL_KEYS`.
    """
    canonical = json.dumps(_relevant(resolved), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The result-relevant keys whose values differ, sorted by key.

    Returns:
        ``(dotted key, old value, new value)``; a key absent on one side has ``None`` there.
    """
    a, b = _relevant(old), _relevant(new)
    return [(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def format_changes(changes: list[tuple[str, Any, Any]]) -> str:
    """One line per change: ``  train.learning_rate: 0.001 -> 0.0003``."""
    return "\n".join(f"  {key}: {json.dumps(old)} -> {json.dumps(new)}"
                     for key, old, new in changes)
