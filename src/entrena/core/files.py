"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["write_atomic", "write_json_atomic", "fsync_dir", "plain_mode", "strict_json",
           "dumps_strict", "check_the_path", "NONFINITE_KEY", "TEMP_SUFFIX"]

TEMP_SUFFIX = ".tmp"
"""Temporary files are ``.<name>.<random>.tmp`` beside their target."""


def _process_umask() -> int:
    mask = os.umask(0o022)  # the only way to read it (Python 3.11); put back at once
    os.umask(mask)
    return mask


_UMASK = _process_umask()
"""The umask at import (read once, single-threaded, rather than racing other threads later)."""


def plain_mode(path: str | Path, *, folder: bool = False) -> None:
    """Give a file or folder made by :mod:`tempfile` the mode ``open()`` or ``mkdir()`` gives.

    ``mkstemp`` creates files 0600 and ``mkdtemp`` folders 0700 whatever the umask, so a
    renamed temporary would leave a run's files, an export bundle or a predict output readable
    by their owner only (a server running as another user could not load the model). This sets
    0666 (0777 for a folder) less the umask.
    """
    os.chmod(path, (0o777 if folder else 0o666) & ~_UMASK)


def fsync_dir(directory: Path) -> None:
    """Flush a folder's entries (a rename inside it) to disk; a no-op where unsupported."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, write: Callable[[BinaryIO], Any], *, durable: bool = True) -> Any:
    """Write ``path`` through a temporary file in the same folder, then rename it over ``path``.

    Args:
        path: The target file.
        write: Called with the open binary temporary file; its return value is returned.
        durable: fsync the file before the rename and the folder after it, so the new file
            survives a power cut (a kill alone needs only the rename).

    Returns:
        What ``write`` returned.

    Raises:
        OSError: From the write, the fsync or the rename; the temporary file is removed and
            ``path`` is unchanged.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        plain_mode(tmp)
        with os.fdopen(fd, "wb") as handle:
            result = write(handle)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
        return result
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


NONFINITE_KEY = "nonfinite_values"
"""The key of a JSON object that lists the values written as ``null`` because they were NaN or
infinite: ``{"validation.loss": "NaN", "history[2].loss": "Infinity"}``."""


def strict_json(data: Any) -> tuple[Any, dict[str, str]]:
    """``data`` with every NaN or infinite float replaced by ``None``, and what was replaced.

    Returns:
        ``(the cleaned copy, {dotted path: "NaN" | "Infinity" | "-Infinity"})``; paths name
        object keys with dots and list items with ``[i]`` (``history[2].loss``).
    """
    found: dict[str, str] = {}

    def clean(value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return {key: clean(item, f"{path}.{key}" if path else str(key))
                    for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [clean(item, f"{path}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, bool) or value is None:
            return value
        if not isinstance(value, float) and getattr(getattr(value, "dtype", None), "kind",
                                                    "") == "f":
            value = float(value)  # a NumPy float32 scalar
        if isinstance(value, float) and not math.isfinite(value):
            found[path] = "NaN" if math.isnan(value) else ("Infinity" if value > 0
                                                          else "-Infinity")
            return None
        return value

    return clean(data, ""), found


def dumps_strict(data: Any, **kwargs: Any) -> str:
    """``json.dumps`` that writes strict JSON (RFC 8259): a NaN or infinite value becomes
    ``null``, and an object at the top gets :data:`NONFINITE_KEY` listing them (a list at the
    top is written without the list). ``kwargs`` go to ``json.dumps``."""
    cleaned, found = strict_json(data)
    if found and isinstance(cleaned, dict):
        cleaned[NONFINITE_KEY] = {**cleaned.get(NONFINITE_KEY, {}), **found}
    return json.dumps(cleaned, allow_nan=False, **kwargs)


def write_json_atomic(path: Path, data: Any, *, durable: bool = True) -> None:
    """:func:`write_atomic` of ``data`` as indented strict JSON (UTF-8, trailing newline;
    see :func:`dumps_strict`)."""
    text = dumps_strict(data, indent=2, default=str) + "\n"
    write_atomic(path, lambda handle: handle.write(text.encode("utf-8")), durable=durable)


def check_the_path(path: Path) -> str:
    """The fix for a file not found: ``"check the path"``, with the working directory it was
    looked for in when ``path`` is relative."""
    return "check the path" + ("" if path.is_absolute() else f" (cwd is {Path.cwd()})")
