"""What is wrong with this machine's set-up for training, each problem with its fix.

:func:`find_problems` is a pure function of a :class:`~entrena.hardware.detection.Machine`
(and the environment variables), so every rule is tested on made-up machines.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from entrena.hardware.detection import Machine
from entrena.units import format_bytes

__all__ = ["Problem", "find_problems", "MIN_FREE_DISK_BYTES", "MIN_AVAILABLE_MEMORY_BYTES"]

MIN_FREE_DISK_BYTES = 5 * 2**30
"""Below this much free disk where runs are written, ``doctor`` warns. A MiniLM-L6 run
writes about 0.6 GB (two resumable checkpoints of weights + AdamW states, ``best.pt`` and the
model folder); 5 GiB leaves room for several runs and the encoding cache (entrena's choice)."""

MIN_AVAILABLE_MEMORY_BYTES = 2 * 2**30
"""Below this much available RAM, ``doctor`` warns: importing the training stack alone
takes about 1.2 GB of resident memory (measured with a CUDA build of torch 2.14; see
docs/benchmarks.md, plan section)."""

_BUSY_GPU_FREE_FRACTION = 0.5


@dataclass(frozen=True)
class Problem:
    """One finding of ``doctor``.

    Attributes:
        code: Stable identifier (``cuda_torch_without_gpu`` …) scripts can match on.
        severity: ``"error"`` (training cannot use the hardware as intended) or ``"warning"``.
        message: What is wrong, with the figures.
        fix: What to do about it (a command where there is one).
    """

    code: str
    severity: str
    message: str
    fix: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _public_version(version: str | None) -> str:
    return (version or "").split("+")[0]


def _cuda_wheel_tag(cuda_driver_version: str | None) -> str:
    """The PyTorch wheel index suffix (``cu126``) for the driver's CUDA version, best effort."""
    if not cuda_driver_version:
        return "cu126"
    major, _, minor = cuda_driver_version.partition(".")
    return f"cu{major}{minor[:1] or '0'}"


def find_problems(machine: Machine, env: Mapping[str, str] | None = None) -> list[Problem]:
    """The set-up problems of ``machine``, most serious first.

    Args:
        machine: What :func:`~entrena.hardware.detection.detect_machine` found.
        env: Environment variables (default ``os.environ``); ``OMP_NUM_THREADS`` is read.

    Returns:
        The problems found; an empty list when all is well.
    """
    env = os.environ if env is None else env
    problems: list[Problem] = []
    torch_info: dict[str, Any] = machine.torch
    build = torch_info.get("build")
    version = _public_version(torch_info.get("version"))
    driver_gpus = machine.gpu_driver.get("nvml_gpus") or 0

    if build == "cuda" and not machine.gpus and not driver_gpus:
        size = torch_info.get("cuda_libraries_bytes") or 0
        problems.append(Problem(
            "cuda_torch_without_gpu", "warning",
            f"torch {torch_info.get('version')} is a CUDA {torch_info.get('cuda')} build on a "
            f"machine with no NVIDIA GPU: its CUDA libraries "
            f"({format_bytes(size) if size else 'several GB'}) take disk, and every process that "
            f"imports torch loads them, for nothing",
            f"install the CPU build: pip install --force-reinstall 'torch=={version}' "
            f"--index-url https://download.pytorch.org/whl/cpu"))
    if build == "cpu" and driver_gpus:
        tag = _cuda_wheel_tag(machine.gpu_driver.get("cuda_driver_version"))
        problems.append(Problem(
            "gpu_without_cuda_torch", "error",
            f"the NVIDIA driver sees {driver_gpus} GPU(s) but torch {torch_info.get('version')} "
            f"is a CPU-only build: training would run on the CPU",
            f"install a CUDA build: pip install --force-reinstall 'torch=={version}' "
            f"--index-url https://download.pytorch.org/whl/{tag}"))
    if build == "cuda" and driver_gpus and not machine.gpus:
        problems.append(Problem(
            "gpu_not_usable", "error",
            f"the NVIDIA driver ({machine.gpu_driver.get('driver_version')}, CUDA "
            f"{machine.gpu_driver.get('cuda_driver_version')}) sees {driver_gpus} GPU(s) but "
            f"torch (built for CUDA {torch_info.get('cuda')}) cannot use them",
            "update the NVIDIA driver to one supporting CUDA "
            f"{torch_info.get('cuda')}, or install a torch build for the driver's CUDA "
            "version; check CUDA_VISIBLE_DEVICES"))
    for gpu in machine.gpus:
        free = gpu.memory_free_bytes
        if free is not None and free < _BUSY_GPU_FREE_FRACTION * gpu.memory_total_bytes:
            problems.append(Problem(
                "gpu_memory_in_use", "warning",
                f"GPU {gpu.index} ({gpu.name}) has {format_bytes(free)} free of "
                f"{format_bytes(gpu.memory_total_bytes)}: another process holds the rest",
                "see `nvidia-smi` for the process; plans assume the whole device is free"))
    disk = machine.disk
    if disk.get("free_bytes") is not None and disk["free_bytes"] < MIN_FREE_DISK_BYTES:
        problems.append(Problem(
            "low_disk", "warning",
            f"{format_bytes(disk['free_bytes'])} free on the disk holding {disk['path']} "
            f"(runs need room for checkpoints and the model)",
            "free space, or write runs elsewhere with --run-dir"))
    available = machine.memory.get("available_bytes")
    if available is not None and available < MIN_AVAILABLE_MEMORY_BYTES:
        problems.append(Problem(
            "low_memory", "warning",
            f"only {format_bytes(available)} of RAM available",
            "close other programs; smaller train.batch_size and model.max_length lower the "
            "peak (see `entrena plan`)"))
    cores = machine.cpu.cores
    quota = machine.cpu.cpu_quota
    if quota is not None and quota < cores:
        usable = max(1, math.floor(quota))
        problems.append(Problem(
            "cpu_quota_below_cores", "warning",
            f"a container quota grants {quota:g} CPUs but {cores} cores are visible: one "
            f"thread per core oversubscribes the quota and slows training",
            f"set train.num_threads: {usable} (or OMP_NUM_THREADS={usable})"))
    threads = torch_info.get("threads")
    omp = env.get("OMP_NUM_THREADS")
    if threads is not None and threads < cores and (quota is None or threads < math.floor(quota)):
        cause = f" (OMP_NUM_THREADS={omp})" if omp else ""
        problems.append(Problem(
            "few_threads", "warning",
            f"torch uses {threads} thread(s) on {cores} physical cores{cause}; `entrena train` "
            f"sets train.num_threads (default: the usable cores), other tools do not",
            "unset OMP_NUM_THREADS" if omp else
            f"export OMP_NUM_THREADS={cores}, or set train.num_threads in the config"))
    order = {"error": 0, "warning": 1}
    return sorted(problems, key=lambda p: order.get(p.severity, 2))
