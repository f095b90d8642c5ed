"""How many CPU threads a llama.cpp model should run on here: measured, not the core count.

llama.cpp's threads meet at a barrier after every operation of the graph (ggml's
``ggml_graph_compute``), so one thread on a core that another process holds is descheduled
for whole scheduler slices and every other thread waits for it. Issue 44 measured the same
q8_0 file at 36 tokens/s with one thread and 0.3 with two on a 2-core machine where another
process kept one core busy: on a shared machine, fewer threads than cores is much faster.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ThreadChoice", "busy_cpus", "choose_threads", "free_threads", "usable_cpus"]

SAMPLE_S = 0.2
"""How long ``/proc/stat`` is sampled to see which cores other processes keep busy."""
ROUND_UP_FROM = 0.75
"""A fraction of a free core counts as a whole core from this share on (0.8 free → 1)."""


@dataclass(frozen=True)
class ThreadChoice:
    """The threads chosen and why.

    Attributes:
        threads: CPU threads to run on.
        usable_cpus: Cores this process may use (affinity, cgroup quota, physical cores).
        busy_cpus: Cores other processes kept busy while sampled (``None``: given, not measured).
        source: ``"--threads"``, ``"/proc/stat"`` or ``"load average"``.
    """

    threads: int
    usable_cpus: int
    busy_cpus: float | None
    source: str

    def describe(self) -> str:
        """One phrase for the log: ``2 threads (4 usable cores, 1.9 busy; /proc/stat)``."""
        if self.busy_cpus is None:
            return f"{self.threads} thread{'s' if self.threads != 1 else ''} ({self.source})"
        return (f"{self.threads} thread{'s' if self.threads != 1 else ''} ({self.usable_cpus} "
                f"usable core{'s' if self.usable_cpus != 1 else ''}, {self.busy_cpus:.1f} busy "
                f"with other work, from {self.source})")


def free_threads(usable: int, busy: float) -> int:
    """The rule: the cores left free, ``usable − busy``, rounded down unless within
    ``1 − ROUND_UP_FROM`` of the next whole core; at least 1.

    Args:
        usable: Cores this process may use.
        busy: Cores' worth of CPU time other processes used while sampled.
    """
    return max(1, min(usable, math.floor(usable - busy + (1 - ROUND_UP_FROM))))


def usable_cpus() -> tuple[int, list[int] | None]:
    """``(count, cpu ids)``: the cores in this process's CPU affinity (all where there is
    none), capped by the cgroup CPU quota and by the physical cores (llama.cpp's own default
    is one thread per physical core; a second hyperthread adds no matrix throughput)."""
    from entrena.hardware.detection import _cpu_quota

    try:
        ids: list[int] | None = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        ids = None
    count = len(ids) if ids else (os.cpu_count() or 1)
    quota = _cpu_quota()
    if quota:
        count = min(count, max(1, math.ceil(quota)))
    try:
        import psutil

        count = min(count, psutil.cpu_count(logical=False) or count)
    except ImportError:
        pass
    return max(1, count), ids


def _cpu_times(stat: str, ids: list[int] | None) -> tuple[int, int]:
    """``(busy, total)`` jiffies over ``ids`` (every CPU when ``None``) from ``/proc/stat``'s
    ``cpuN user nice system idle iowait irq softirq steal …`` lines (``proc(5)``). Idle,
    I/O wait and *nice* time are not busy: a process with a positive nice value gives the
    core way to ours (``/work``'s ``background`` helper and batch jobs run that way)."""
    busy = total = 0
    wanted = None if ids is None else {f"cpu{i}" for i in ids}
    for line in stat.splitlines():
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu" or (wanted and name not in wanted):
            continue
        numbers = [int(v) for v in values[:8]]
        free = numbers[1] + numbers[3] + (numbers[4] if len(numbers) > 4 else 0)
        total += sum(numbers)
        busy += sum(numbers) - free
    return busy, total


def _own_jiffies() -> int:
    """CPU time of this process's threads (``/proc/self/stat`` utime + stime, the same clock
    ticks as ``/proc/stat``): spinning PyTorch/OpenMP threads of our own are not others'."""
    fields = Path("/proc/self/stat").read_text(encoding="ascii").rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def busy_cpus(ids: list[int] | None, *, sample_s: float = SAMPLE_S) -> tuple[float, str]:
    """``(cores' worth busy, source)``: the CPU time other processes used on the cores
    ``ids`` while this process sleeps ``sample_s`` (``/proc/stat`` less this process's own
    time), or the 1-minute load average where there is no ``/proc/stat`` (it counts this
    process too when it was busy)."""
    stat = Path("/proc/stat")
    try:
        first, own = _cpu_times(stat.read_text(encoding="ascii"), ids), _own_jiffies()
        time.sleep(sample_s)
        second = _cpu_times(stat.read_text(encoding="ascii"), ids)
        own = _own_jiffies() - own
    except (OSError, ValueError, IndexError):
        try:
            return float(os.getloadavg()[0]), "load average"
        except (AttributeError, OSError):
            return 0.0, "load average"
    busy, total = second[0] - first[0] - own, second[1] - first[1]
    cpus = len(ids) if ids else max(1, os.cpu_count() or 1)
    return (max(0.0, cpus * busy / total) if total > 0 else 0.0), "/proc/stat"


def choose_threads(requested: int | None = None) -> ThreadChoice:
    """The threads for llama.cpp: ``requested`` (``--threads``) when given, else the free
    cores (:func:`free_threads` of :func:`usable_cpus` and :func:`busy_cpus`)."""
    if requested:
        return ThreadChoice(int(requested), int(requested), None, "--threads")
    usable, ids = usable_cpus()
    busy, source = busy_cpus(ids)
    return ThreadChoice(free_threads(usable, busy), usable, busy, source)
