"""This CPU's measured matrix-multiply peak (FLOP/s), for MFU on a CPU.

A nominal CPU peak (cores × clock × FLOP/cycle) is rarely reached by any library, and depends
on turbo, SMT and what else runs; MFU against it says little. The denominator used instead is
what a large matrix multiply achieves here, in the fit's matrix dtype (fp32, or bf16 when the fit
runs under bf16 autocast) with its thread count: measured once (a fraction of a second) and
cached per CPU model, dtype, thread count and torch version.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any

from entrena.hardware.measured import cached_measurement

__all__ = ["measure_matmul_flops", "cpu_peak_flops_measured"]

CACHE_FILE = "cpu_peak.json"


def measure_matmul_flops(threads: int, *, size: int = 1024, min_time_s: float = 0.3,
                         dtype: str = "fp32") -> float:
    """Best FLOP/s of ``size × size`` matrix multiplies of ``dtype`` (``fp32`` or ``bf16``)
    over about ``min_time_s`` seconds (2·n³ FLOPs each; one warm-up call not timed)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        # A private generator: the global RNG must not move, or a run that measures the
        # peak would train differently from one that reads it from the cache.
        generator = torch.Generator().manual_seed(0)
        kind = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        a = torch.randn(size, size, generator=generator).to(kind)
        b = torch.randn(size, size, generator=generator).to(kind)
        torch.mm(a, b)  # warm-up
        best = 0.0
        spent = 0.0
        while spent < min_time_s:
            started = time.perf_counter()
            torch.mm(a, b)
            elapsed = time.perf_counter() - started
            spent += elapsed
            best = max(best, 2 * size**3 / max(elapsed, 1e-9))
        return best
    finally:
        torch.set_num_threads(previous)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_peak_flops_measured(cache_dir: Path | None, threads: int,
                            dtype: str = "fp32") -> tuple[float, str]:
    """This CPU's matrix-multiply FLOP/s in ``dtype`` (``fp32`` or ``bf16``) with ``threads``
    threads, cached in ``cache_dir/cpu_peak.json``.

    Returns:
        ``(flop_per_s, source)``; the source says it was measured, when, and with how many threads.
    """
    import torch

    key = f"{_cpu_name()}|threads={threads}|torch={torch.__version__}"
    if dtype != "fp32":  # fp32 keys stay as caches written before bf16 existed
        key += f"|dtype={dtype}"

    def measure() -> dict[str, Any]:
        return {"flop_per_s": measure_matmul_flops(threads, dtype=dtype),
                "source": (f"measured: {dtype} 1024x1024 matmul, {threads} thread(s), "
                           f"{time.strftime('%Y-%m-%d')}")}

    entry, _ = cached_measurement(
        cache_dir / CACHE_FILE if cache_dir is not None else None, key, measure,
        valid=lambda e: isinstance(e, dict) and bool(e.get("flop_per_s")))
    return float(entry["flop_per_s"]), str(entry["source"])
