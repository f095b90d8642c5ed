"""This process's resident memory: now, and the peak since a reset (Linux ``/proc``); and
the fit's device memory (a CUDA allocator's, else the resident set): the same three readings.

The fit's peak is measured from a reset just before the fit, so the planning probe and data
preparation before it do not count: writing ``5`` to ``/proc/self/clear_refs`` resets the
kernel's high-water mark ``VmHWM`` to the current resident set (Linux 4.0+, ``proc(5)``).
Elsewhere the peak falls back to ``getrusage``'s ``ru_maxrss`` (since process start).
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["current_rss_bytes", "reset_peak_rss", "peak_rss_bytes", "reset_peak_memory",
           "peak_memory_bytes", "memory_in_use_bytes"]

_STATUS = Path("/proc/self/status")


def _status_kib(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def current_rss_bytes() -> int:
    """Resident memory of this process now, bytes."""
    kib = _status_kib("VmRSS")
    if kib is not None:
        return kib * 1024
    import psutil

    return int(psutil.Process().memory_info().rss)


def reset_peak_rss() -> bool:
    """Reset the resident-memory high-water mark to the current resident set.

    Returns:
        Whether the reset worked (Linux with a writable ``/proc/self/clear_refs``).
    """
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int | None:
    """Peak resident memory since the last :func:`reset_peak_rss` (or process start), bytes."""
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    try:
        import resource

        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(maxrss if sys.platform == "darwin" else maxrss * 1024)
    except (ImportError, OSError):  # pragma: no cover - Windows
        return None


def reset_peak_memory(accelerator: str) -> None:
    """Start measuring the fit's peak memory now (CPU resident set or CUDA allocator)."""
    if accelerator == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()
    else:
        reset_peak_rss()


def peak_memory_bytes(accelerator: str) -> int | None:
    """Peak memory since :func:`reset_peak_memory`: ``torch.cuda.max_memory_allocated`` on
    CUDA, the process's peak resident set elsewhere."""
    if accelerator == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated())
    return peak_rss_bytes()


def memory_in_use_bytes(accelerator: str) -> int | None:
    """Memory in use now: ``torch.cuda.memory_allocated`` on CUDA, the process's resident set
    elsewhere (beside :func:`peak_memory_bytes` in each efficiency record)."""
    if accelerator == "cuda":
        import torch

        return int(torch.cuda.memory_allocated())
    return current_rss_bytes()
