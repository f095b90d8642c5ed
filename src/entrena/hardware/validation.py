"""Validation of catalog files: numbers with a source, keys, closest names; errors collected.

Kept apart from :mod:`entrena.hardware.catalog` (which assembles the entries) so each stays
small. Standard library and :mod:`entrena.errors` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from entrena.errors import closest_choices

__all__ = ["Number", "Errors", "parse_number", "check_keys", "closest_names",
           "scan_user_numbers"]


@dataclass(frozen=True)
class Number:
    """A catalog figure with its provenance.

    Attributes:
        value: The number, in the unit its key names.
        source: Citation (from the catalog's source table, or the user file's path).
        date: When the source was read or published (ISO date), or ``None``.
        note: How it was derived or what to watch for.
    """

    value: float
    source: str
    date: str | None = None
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "date": self.date,
                **({"note": self.note} if self.note else {})}


def closest_names(name: str, choices: list[str], n: int = 1) -> list[str]:
    """The closest choices to ``name`` for a catalog message: :func:`closest_choices` with
    fragments (``p4d`` finds ``aws-p4d.24xlarge``)."""
    return closest_choices(name, choices, n=n, fragments=True)


class Errors:
    """Problems found in one file, one message per key, in order."""

    def __init__(self, file: str):
        self.file = file
        self.items: list[str] = []
        self.keys: set[str] = set()

    def add(self, key: str, message: str) -> None:
        if key not in self.keys:  # one message per key: the first is the most specific
            self.keys.add(key)
            self.items.append(f"{self.file}: {key}: {message}")


def parse_number(raw: Any, key: str, errors: Errors, sources: dict[str, dict[str, Any]],
            user_file: str | None, *, required: bool) -> Number | None:
    """Parse one figure; ``None`` for null (an error when ``required``)."""
    if raw is None:
        if required:
            errors.add(key, "is null or missing; this number is required (write its value, "
                            "e.g. `{value: 16, source: my-notes}` or a plain number)")
        return None
    note = None
    if isinstance(raw, dict):
        unknown = set(raw) - {"value", "source", "date", "note"}
        if unknown:
            errors.add(key, f"unknown field(s) {sorted(unknown)}; allowed: value, source, date, "
                            "note")
        value, source_id, date, note = (raw.get("value"), raw.get("source"), raw.get("date"),
                                        raw.get("note"))
        if "value" not in raw:
            errors.add(key, "has no `value`")
            return None
        if value is None:
            if required:
                errors.add(key, "value is null; this number is required")
            return None
    else:
        value, source_id, date = raw, None, None
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors.add(key, f"must be a number, got {value!r}")
        return None
    if value < 0:
        errors.add(key, f"must not be negative, got {value}")
        return None
    if source_id is None:
        if user_file is None:
            errors.add(key, "has no source (every shipped number names one)")
            return None
        return Number(float(value), f"user catalog {user_file}", date, note)
    if source_id not in sources:
        choices = closest_names(str(source_id), list(sources))
        errors.add(key, f"unknown source {source_id!r}"
                        + (f"; did you mean {choices[0]!r}?" if choices else "")
                        + " (sources are declared under `sources:`)")
        return None
    entry = sources[source_id]
    return Number(float(value), str(entry.get("citation", source_id)),
                  str(date or entry.get("date") or "") or None, note)


def check_keys(raw: dict[str, Any], allowed: set[str], key: str, errors: Errors) -> None:
    for name in sorted(set(raw) - allowed):
        choices = closest_names(name, sorted(allowed))
        errors.add(f"{key}.{name}", "unknown key"
                   + (f"; did you mean {choices[0]!r}?" if choices else "")
                   + f" (allowed: {', '.join(sorted(allowed))})")


_NUMBER_PATHS = {"accelerators": ("memory_gib", "bandwidth_gbps", "peak_tflops.fp32",
                                  "peak_tflops.tf32", "peak_tflops.fp16", "peak_tflops.bf16"),
                 "offers": ("usd_per_hour", "usd_per_hour_spot")}


def scan_user_numbers(user: dict[str, Any], errors: Errors) -> None:
    """A user file's numbers: written but empty (null) or negative is an error."""

    def check(raw: Any, key: str) -> None:
        value = raw.get("value") if isinstance(raw, dict) else raw
        if isinstance(raw, dict) and "value" not in raw:
            return  # reported by the parser
        if value is None:
            errors.add(key, "is missing a number (empty or null); write the value, or delete "
                            "the key to keep the shipped one")
        elif isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
            errors.add(key, f"must not be negative, got {value}")

    for section, paths in _NUMBER_PATHS.items():
        entries = user.get(section) or {}
        if not isinstance(entries, dict):
            errors.add(section, "must be a mapping of names to entries")
            continue
        for name, entry in entries.items():
            if not isinstance(entry, dict):
                errors.add(f"{section}.{name}", "must be a mapping of fields")
                continue
            for path in paths:
                node: Any = entry
                parts = path.split(".")
                for part in parts:
                    node = node.get(part, _ABSENT) if isinstance(node, dict) else _ABSENT
                if node is not _ABSENT:
                    check(node, f"{section}.{name}.{path}")
    for name, raw in (user.get("efficiency") or {}).items():
        check(raw, f"efficiency.{name}")
    if "local_usd_per_hour" in user:
        check(user["local_usd_per_hour"], "local_usd_per_hour")


_ABSENT = object()


