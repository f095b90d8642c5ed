"""``entrena.doctor``: this machine and what is wrong with its set-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrena.hardware import Machine, Problem, detect_machine, find_problems
from entrena.units import format_bytes

__all__ = ["DoctorReport", "doctor"]


@dataclass
class DoctorReport:
    """What ``entrena doctor`` found.

    Attributes:
        machine: CPU, memory, GPUs, MPS, TPU, disk, torch build and library versions.
        problems: Set-up problems, each with a fix; empty when all is well.
    """

    machine: Machine
    problems: list[Problem]

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` document: the machine's keys plus ``problems``."""
        return {**self.machine.as_dict(), "problems": [p.as_dict() for p in self.problems]}

    def render(self) -> Any:
        """A Rich renderable for the terminal (a table and the problems)."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        m = self.machine
        table = Table(title="this machine", show_header=False)
        table.add_column("what")
        table.add_column("value")
        features = ", ".join(k for k, v in m.cpu.features.items() if v) or "unknown"
        freq = f", {m.cpu.frequency_mhz / 1000:.2f} GHz" if m.cpu.frequency_mhz else ""
        table.add_row("CPU", f"{m.cpu.model}: {m.cpu.cores} cores ({m.cpu.logical_cores} "
                      f"logical){freq}")
        bf16 = ("yes (precision auto: bf16-mixed for models of 1 M+ linear weights)"
                if m.cpu.bf16_fast else "no")
        limit = (f" (ONEDNN_MAX_CPU_ISA={m.cpu.isa_limit.upper()} hides the rest)"
                 if m.cpu.isa_limit else "")
        table.add_row("CPU features", f"{features}{limit}; torch kernels: "
                      f"{m.cpu.torch_capability}; fast bf16: {bf16}")
        table.add_row("RAM", f"{format_bytes(m.memory['total_bytes'] or 0)} total, "
                      f"{format_bytes(m.memory['available_bytes'] or 0)} available")
        for gpu in m.gpus:
            free = (f", {format_bytes(gpu.memory_free_bytes)} free"
                    if gpu.memory_free_bytes is not None else "")
            table.add_row(f"GPU {gpu.index}", f"{gpu.name}: {format_bytes(gpu.memory_total_bytes)}"
                          f"{free}, compute capability {gpu.compute_capability}, bf16 "
                          f"{'yes' if gpu.bf16 else 'no'}")
        if not m.gpus:
            table.add_row("GPU", "none visible to torch")
        driver = m.gpu_driver
        if driver.get("driver_version"):
            table.add_row("NVIDIA driver", f"{driver['driver_version']} (CUDA "
                          f"{driver['cuda_driver_version']})")
        table.add_row("Apple MPS", "available" if m.mps["available"] else "no")
        tpu = m.tpu
        table.add_row("TPU", f"{tpu['devices']} via {tpu['source']}" if tpu["available"] else "no")
        ssd = {True: "SSD", False: "rotational disk", None: "disk kind unknown"}[m.disk["ssd"]]
        table.add_row("disk", f"{format_bytes(m.disk['free_bytes'])} free of "
                      f"{format_bytes(m.disk['total_bytes'])} at {m.disk['path']} ({ssd})")
        t = m.torch
        table.add_row("torch", f"{t['version']} ({t['build']} build"
                      + (f", CUDA {t['cuda']}" if t["cuda"] else "") + f"), {t['threads']} threads")
        table.add_row("libraries", ", ".join(f"{k} {v}" for k, v in m.libraries.items()
                                             if v and k != "torch"))
        table.add_row("Python", f"{m.python} on {m.platform}")
        lines: list[Any] = [table]
        if not self.problems:
            lines.append(Text("no problems found"))
        for problem in self.problems:
            lines.append(Text(f"{problem.severity}: {problem.message}\n  fix: {problem.fix}"))
        return Group(*lines)


def doctor(runs_dir: str | Path = "runs") -> DoctorReport:
    """Describe this machine and find set-up problems.

    Args:
        runs_dir: Where runs are written (its disk's free space is checked).

    Returns:
        The :class:`DoctorReport`; ``as_dict()`` gives the ``--json`` document with the keys
        ``cpu.cores``, ``memory.total_bytes``, ``gpus`` (a list), ``torch.version`` and
        ``problems`` (a list of ``code``, ``severity``, ``message``, ``fix``).
    """
    machine = detect_machine(runs_dir)
    return DoctorReport(machine=machine, problems=find_problems(machine))
