"""Trained weights copied out of the checkpoint file's memory map before the first step.

Transformers loads a ``.safetensors`` checkpoint through a private memory map of the file
(``safe_open(..., backend="mmap")``): the parameters' memory *is* the file's page cache
until something writes to it. On a CPU the first write is the first optimizer step, and
the kernel then copies each 4 KiB page on its own fault (copy-on-write), flushing the
other cores' TLBs for every page it replaces: with two threads updating in parallel that
is up to one inter-processor interrupt per page, each a VM exit on a cloud machine. For
MiniLM-L6 (86 MiB of weights, batch 32 × 128, 2 threads, AMD EPYC with AVX-512 BF16 under a
hypervisor) the first fused AdamW step took 0.23–0.24 s with the weights mapped against
0.02–0.04 s with them copied beforehand, and 0.01–0.02 s for a later step (``perf``: 29%
of the mapped step in ``native_write_msr``, 21% in ``smp_call_function_many_cond``, 15%
spinning on the page-table lock). The copy, once, on one thread, before the fit, took
0.04–0.05 s (``benchmarks/experiments/mapped_weights.py``; docs/benchmarks.md, "Trained weights
in the checkpoint's memory map") and leaves the file unmapped.

Only trained parameters are copied: a frozen base (a LoRA run) is never written, so its
pages stay shared with the page cache at no cost.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

__all__ = ["file_mappings", "copy_mapped_weights"]


def file_mappings(maps: Path = Path("/proc/self/maps")) -> list[tuple[int, int]]:
    """Address ranges of this process's memory maps of regular files.

    Args:
        maps: The ``/proc/<pid>/maps`` table to read (Linux; ``proc(5)``).

    Returns:
        ``(start, end)`` byte addresses, end exclusive, sorted; empty where the table
        cannot be read (macOS, Windows) or lists no file.
    """
    ranges = []
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue  # anonymous memory, [heap], [stack], [vdso] …
        start, end = (int(value, 16) for value in fields[0].split("-"))
        ranges.append((start, end))
    return sorted(ranges)


def _inside(address: int, ranges: list[tuple[int, int]], starts: list[int]) -> bool:
    i = bisect.bisect_right(starts, address) - 1
    return i >= 0 and address < ranges[i][1]


def copy_mapped_weights(model: Any, ranges: list[tuple[int, int]] | None = None) -> str | None:
    """Give each trained CPU parameter that lives in a file mapping memory of its own.

    Args:
        model: A ``torch.nn.Module`` (changed in place; a parameter shared by two modules
            stays shared: its ``data`` is replaced, not the parameter).
        ranges: File mappings as :func:`file_mappings` returns them (read now by default).

    Returns:
        A sentence for the log, or ``None`` when no trained parameter was in a file mapping
        (a model built from its config, weights read by ``torch.load``, another device).
    """
    import torch

    ranges = file_mappings() if ranges is None else ranges
    if not ranges:
        return None
    starts = [start for start, _ in ranges]
    mapped = [p for p in model.parameters()
              if p.requires_grad and p.device.type == "cpu" and p.numel()
              and _inside(p.data_ptr(), ranges, starts)]
    if not mapped:
        return None
    with torch.no_grad():
        for param in mapped:
            param.data = param.data.clone()
    size = sum(p.numel() * p.element_size() for p in mapped)
    return (f"trained weights: {size / 2**20:,.0f} MiB copied out of the checkpoint's memory "
            f"map (the first optimizer step would copy them page by page)")
