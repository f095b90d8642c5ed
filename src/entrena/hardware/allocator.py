"""The C allocator's settings for a CPU fit: large tensors go back to the system when freed.

glibc's ``malloc`` serves blocks at or above its *mmap threshold* with their own memory map,
returned to the system by ``free``; smaller blocks come from the heap, whose freed pages stay
resident. The threshold starts at 128 KiB and, by default, rises to the size of each mapped
block that is freed, up to 32 MiB on 64-bit systems (``mallopt(3)``, ``M_MMAP_THRESHOLD``).
A transformer's activations are mostly a few MiB to a few tens of MiB and change shape from
batch to batch (length-grouped batches), so after the first large frees they land in the heap,
whose free blocks rarely fit the next shapes exactly: the resident set climbs over the fit
although the live tensors do not (benchmarks/experiments/memory_climb.py; docs/benchmarks.md,
section "memory climb"). Fixing the threshold (any ``mallopt`` of it turns the adaptation off) keeps
the tensors above it mapped, returned when freed. Too low a threshold costs time: a mapped
block is zero-filled by the kernel, page by page, at each new use (see
:data:`MMAP_THRESHOLD_BYTES`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

__all__ = ["configure_allocator", "MMAP_THRESHOLD_BYTES"]

log = logging.getLogger("entrena")

M_MMAP_THRESHOLD = -3
"""``mallopt`` parameter number of the mmap threshold (glibc ``malloc.h``)."""

MMAP_THRESHOLD_BYTES = 16 * 2**20
"""Blocks of at least this size are mapped (and unmapped when freed): 16 MiB. At 1 MiB a
MiniLM-L6 step (batch 32 × 160 tokens, 2 threads, AMD EPYC with AVX-512 BF16) took 2.60 s in
bf16 and 3.91 s in fp32 with ~1.1 M page faults, against 1.50 s and 2.91 s at 16 MiB and
1.37 s and 2.73 s with glibc's adaptive threshold (0.07–0.15 M faults;
``benchmarks/experiments/allocator_faults.py``). At 16 MiB the largest activations (a MiniLM
feed-forward layer's 32 × 272 × 1536 × 4 bytes = 51 MiB) stay mapped and the peak still climbs
~11% over a 60-step fit (12.5% adaptive, 0.3% at 1 MiB; docs/benchmarks.md, "The allocator's
page faults")."""

_configured: bool | None = None


def configure_allocator(threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold for this process (once; later calls return the first
    answer). A no-op elsewhere (musl, macOS, Windows).

    Args:
        threshold_bytes: The fixed threshold, bytes.

    Returns:
        Whether the setting took effect.
    """
    global _configured
    if _configured is not None:
        return _configured
    _configured = False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _configured = bool(libc.mallopt(M_MMAP_THRESHOLD, int(threshold_bytes)))
    except (OSError, AttributeError) as exc:
        log.debug("mallopt unavailable: %s", exc)
    return _configured
