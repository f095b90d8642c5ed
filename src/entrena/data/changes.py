"""What changed between two data reports (``data_report.json``): the files, their rows and
hashes, per split. A resume compares the data it trains on with the data the run started on,
as it compares the config."""

from __future__ import annotations

from typing import Any

__all__ = ["data_changes"]


def _short(digest: Any) -> str:
    return str(digest)[:12] if digest else "?"


def _files(split: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(f.get("file")): f for f in split.get("files") or [] if isinstance(f, dict)}


def _split_changes(role: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    old_files, new_files = _files(before), _files(after)
    for name in sorted(old_files.keys() | new_files.keys()):
        old, new = old_files.get(name), new_files.get(name)
        if old is None or new is None:
            lines.append(f"data.{role}: {name}: {'added' if old is None else 'removed'}")
            continue
        parts = []
        if old.get("sha256") != new.get("sha256"):
            parts.append(f"SHA-256 {_short(old.get('sha256'))}… -> {_short(new.get('sha256'))}…")
        if old.get("bytes") != new.get("bytes"):
            parts.append(f"{old.get('bytes')} -> {new.get('bytes')} bytes")
        if old.get("rows_read") != new.get("rows_read"):
            parts.append(f"{old.get('rows_read')} -> {new.get('rows_read')} rows")
        if parts:
            lines.append(f"data.{role}: {name}: {', '.join(parts)}")
    if not lines:  # no per-file record (image folders), or the same files
        for key in ("rows_read", "rows_kept", "label_counts"):
            if before.get(key) != after.get(key):
                lines.append(f"data.{role}: {key.replace('_', ' ')} {before.get(key)} -> "
                             f"{after.get(key)}")
    return lines


def data_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per difference between two data reports, or ``[]`` when the prepared data is
    the same (same fingerprint).

    Args:
        before: The report the run started on.
        after: The report of the data read now.

    Returns:
        Lines like ``data.train: data/train.csv: SHA-256 9c7cb456f6e2… -> 1a2b3c4d5e6f…``;
        when no file or count differs but the fingerprint does, one line naming the
        fingerprints (a setting of the tokenizer or the encoding changed).
    """
    old_print, new_print = before.get("fingerprint"), after.get("fingerprint")
    if not old_print or not new_print or old_print == new_print:
        return []
    old_splits, new_splits = before.get("splits") or {}, after.get("splits") or {}
    lines = []
    for role in ("train", "validation", "test"):
        if role in old_splits or role in new_splits:
            lines += _split_changes(role, old_splits.get(role) or {}, new_splits.get(role) or {})
    return lines or [f"prepared-data fingerprint {old_print} -> {new_print} (the same files; "
                     f"the tokenizer or an encoding setting differs)"]
