"""What this machine has: CPU, memory, GPUs, Apple MPS, TPU, disk, torch build, libraries.

:func:`detect_machine` returns a :class:`Machine` whose :meth:`Machine.as_dict` is the JSON of
``entrena doctor --json`` (``cpu.cores``, ``memory.total_bytes``, ``gpus``, ``torch.version`` …
are a contract: scripts read them). torch is imported inside the functions, never at import
time; NVML is read through ``ctypes`` when the NVIDIA driver is installed (no extra package).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import math
import os
import platform
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from entrena.errors import ResourceError

__all__ = ["Machine", "CpuInfo", "GpuInfo", "detect_machine", "detect_cpu", "detect_gpus",
           "cuda_library_bytes", "LIBRARIES", "CPU_BF16_MIN_LINEAR_PARAMETERS",
           "cpu_bf16_pays", "resolve_accelerator", "ONEDNN_ISA_MASKS", "onednn_isa_limit",
           "limit_features"]

LIBRARIES = ("torch", "lightning-fabric", "transformers", "tokenizers", "safetensors", "numpy",
             "pandas", "pyarrow", "scikit-learn", "mlflow", "pydantic", "onnx", "onnxruntime",
             "torch_xla", "jax")
"""Distributions whose installed version ``doctor`` reports (``null`` when absent)."""

_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16",
              "amx_int8")

ONEDNN_ISA_MASKS = {
    "sse41": 0x1, "avx": 0x3, "avx2": 0x7, "avx2_vnni": 0xF, "avx2_vnni_2": 0x1F,
    "avx512_core": 0x27, "avx512_core_vnni": 0x67, "avx512_core_bf16": 0xE7,
    "avx10_1_512": 0x1EF, "avx512_core_fp16": 0x1EF, "avx10_1_512_amx": 0xFEF,
    "avx512_core_amx": 0xFEF, "avx10_1_512_amx_fp16": 0x1FEF, "avx512_core_amx_fp16": 0x1FEF,
}
"""oneDNN's ``dnnl_cpu_isa_t`` bit masks (oneDNN developer guide, "enum dnnl_cpu_isa_t"):
an instruction set is allowed under a ``ONEDNN_MAX_CPU_ISA`` limit when all its bits are in
the limit's. torch's bf16 matrix products go through oneDNN: under ``ONEDNN_MAX_CPU_ISA=AVX2``
a bf16 1024² product ran at 1 GFLOP/s against 416 without it on an Intel Xeon with AMX (fp32,
through MKL, unchanged), so a limited oneDNN must not count as native bf16."""

_FLAG_NEEDS_ISA = {"avx512f": 0x27, "avx512_vnni": 0x67, "avx512_bf16": 0xE7,
                   "amx_tile": 0xFEF, "amx_bf16": 0xFEF, "amx_int8": 0xFEF}
"""The oneDNN instruction set each CPU flag's kernels need (``ONEDNN_ISA_MASKS`` values)."""


def onednn_isa_limit(environ: dict[str, str] | None = None) -> str | None:
    """The instruction-set ceiling a user set for oneDNN, lower case, or ``None``.

    Reads ``ONEDNN_MAX_CPU_ISA`` (or its older name ``DNNL_MAX_CPU_ISA``); ``DEFAULT``/``ALL``
    and names oneDNN does not know (which it ignores) are no limit.
    """
    env = os.environ if environ is None else environ
    value = (env.get("ONEDNN_MAX_CPU_ISA") or env.get("DNNL_MAX_CPU_ISA") or "").strip().lower()
    return value if value in ONEDNN_ISA_MASKS else None


def limit_features(features: dict[str, bool], limit: str | None) -> dict[str, bool]:
    """``features`` with the flags whose oneDNN kernels ``limit`` forbids turned off.

    Args:
        features: CPU flag → present (:attr:`CpuInfo.features`).
        limit: A :data:`ONEDNN_ISA_MASKS` key, or ``None`` (no limit: ``features`` as given).
    """
    if limit is None:
        return dict(features)
    mask = ONEDNN_ISA_MASKS[limit]
    return {name: present and (_FLAG_NEEDS_ISA.get(name, 0) & mask) == _FLAG_NEEDS_ISA.get(name, 0)
            for name, present in features.items()}


CPU_BF16_MIN_LINEAR_PARAMETERS = 1_000_000
"""Weights in ``nn.Linear`` layers from which bf16 autocast pays on a CPU with native bf16.

Measured on an AVX-512 BF16 CPU, 2 threads (``benchmarks/experiments/cpu_bf16.py``,
docs/benchmarks.md "bf16 autocast against fp32 on this CPU"): training steps under bf16 autocast
were fp32/bf16 = 1.57× faster at MiniLM-L6's shape (10.8 M linear weights), 1.52× at 3.2 M, 1.65×
for an MLP of 1.3 M, but only 1.27× at 0.4 M, 1.04× for the tests' 2-layer width-32 BERT
(17 k) and 0.73× (slower) for the credit example's MLP (13 k): the casts cost about what small
matrices gain. Below this size ``precision: auto`` keeps fp32.
"""


def cpu_bf16_pays(bf16_fast: bool, linear_parameters: int) -> bool:
    """Whether ``precision: auto`` should train under bf16 autocast on this CPU.

    Args:
        bf16_fast: :attr:`CpuInfo.bf16_fast` (native bf16 matrix maths: AVX-512 BF16 or AMX).
        linear_parameters: Weights of the model's ``nn.Linear`` layers (the matrices autocast
            multiplies in bf16).

    Returns:
        ``True`` when the CPU has native bf16 and the model has at least
        :data:`CPU_BF16_MIN_LINEAR_PARAMETERS` linear weights.
    """
    return bool(bf16_fast) and linear_parameters >= CPU_BF16_MIN_LINEAR_PARAMETERS


@dataclass
class CpuInfo:
    """The host CPU.

    Attributes:
        model: Marketing name (``/proc/cpuinfo`` model name, else ``platform.processor()``).
        cores: Physical cores usable by this process (``psutil``; capped by CPU affinity and
            a cgroup quota, rounded up).
        logical_cores: Logical CPUs (hardware threads) visible to the OS.
        frequency_mhz: Nominal (or current, when that is all the OS reports) clock in MHz.
        features: Instruction-set extensions that matter for training (AVX2, FMA, AVX-512,
            AVX-512 BF16/VNNI, AMX), ``True``/``False``; empty where the OS does not say.
            Those above a ``ONEDNN_MAX_CPU_ISA`` limit are ``False`` (:func:`limit_features`).
        torch_capability: What torch's CPU kernels dispatch to (``AVX2``, ``AVX512``,
            ``DEFAULT``…), from ``torch.backends.cpu.get_cpu_capability()``.
        bf16_fast: Whether bf16 matrix maths is native (AVX-512 BF16 or AMX), so bf16
            autocast on this CPU is faster than fp32 for large enough models
            (:func:`cpu_bf16_pays`).
        cpu_quota: CPUs granted by a cgroup quota (containers), or ``None`` when unlimited.
        isa_limit: The ``ONEDNN_MAX_CPU_ISA`` ceiling in force (``"avx2"``), or ``None``.
    """

    model: str
    cores: int
    logical_cores: int
    frequency_mhz: float | None = None
    features: dict[str, bool] = field(default_factory=dict)
    torch_capability: str | None = None
    bf16_fast: bool = False
    cpu_quota: float | None = None
    isa_limit: str | None = None


@dataclass
class GpuInfo:
    """One CUDA device as torch (and NVML, when present) sees it.

    Attributes:
        index: CUDA device index.
        name: Device name (``NVIDIA H100 80GB HBM3``).
        memory_total_bytes: Device memory, bytes.
        memory_free_bytes: Free device memory now, bytes (other processes included).
        compute_capability: ``"major.minor"`` (``"9.0"``).
        bf16: Native bfloat16 support (compute capability 8.0 and newer).
        multiprocessors: Streaming multiprocessors.
    """

    index: int
    name: str
    memory_total_bytes: int
    memory_free_bytes: int | None
    compute_capability: str
    bf16: bool
    multiprocessors: int | None = None


@dataclass
class Machine:
    """Everything ``entrena doctor`` reports, before the problems are derived.

    Attributes:
        cpu: The host CPU.
        memory: ``total_bytes`` and ``available_bytes`` of host RAM.
        gpus: CUDA devices; empty when there is none.
        gpu_driver: ``driver_version`` and ``cuda_driver_version`` (the newest CUDA the
            driver supports) from NVML, ``None`` values when NVML is absent; ``nvml_gpus``
            counts the GPUs the driver sees (even when torch cannot use them).
        mps: ``available`` (Apple GPU through Metal).
        tpu: ``available``, ``source`` (``torch_xla`` or ``jax``), ``devices``, ``kind``.
        disk: ``path``, ``free_bytes``, ``total_bytes`` and ``ssd`` (``None`` when unknown) of
            the folder where runs are written.
        torch: ``version``, ``cuda`` (the CUDA version torch was built with, or ``None``),
            ``build`` (``cuda``, ``rocm`` or ``cpu``), ``threads`` (intra-op threads now),
            ``cuda_libraries_bytes`` (size of the installed NVIDIA wheels).
        libraries: Installed versions (``None`` when absent) of :data:`LIBRARIES`.
        python: Python version; ``platform``: OS and architecture.
    """

    cpu: CpuInfo
    memory: dict[str, int | None]
    gpus: list[GpuInfo]
    gpu_driver: dict[str, Any]
    mps: dict[str, bool]
    tpu: dict[str, Any]
    disk: dict[str, Any]
    torch: dict[str, Any]
    libraries: dict[str, str | None]
    python: str
    platform: str

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready form (what ``entrena doctor --json`` prints, minus ``problems``)."""
        return asdict(self)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _cpu_quota() -> float | None:
    """CPUs granted by the cgroup (v2 ``cpu.max``, v1 ``cfs_quota_us``), ``None`` if unlimited."""
    text = _read("/sys/fs/cgroup/cpu.max")
    if text:
        quota, _, period = text.strip().partition(" ")
        if quota != "max" and period:
            return int(quota) / int(period)
        return None
    quota_text, period_text = (_read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                               _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    if quota_text and period_text and int(quota_text) > 0:
        return int(quota_text) / int(period_text)
    return None


def detect_cpu() -> CpuInfo:
    """Describe the host CPU (Linux ``/proc/cpuinfo`` when present; portable fallbacks)."""
    import psutil

    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    frequency = None
    cpuinfo = _read("/proc/cpuinfo") or ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and value.strip():
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
        elif key == "cpu MHz" and frequency is None:
            try:
                frequency = float(value)
            except ValueError:
                pass
    if frequency is None:
        freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
        frequency = float(freq.max or freq.current) if freq else None
    logical = os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    try:
        affinity = len(os.sched_getaffinity(0))
        physical = min(physical, affinity)
    except (AttributeError, OSError):  # not Linux
        pass
    quota = _cpu_quota()
    if quota:
        physical = min(physical, max(1, math.ceil(quota)))
    isa_limit = onednn_isa_limit()
    features = limit_features({name: name in flags for name in _CPU_FLAGS} if flags else {},
                              isa_limit)
    capability = None
    try:
        import torch

        capability = str(torch.backends.cpu.get_cpu_capability())
    except (ImportError, AttributeError, RuntimeError):
        pass
    bf16_fast = bool(features.get("avx512_bf16") or features.get("amx_bf16"))
    return CpuInfo(model=model, cores=int(physical), logical_cores=int(logical),
                   frequency_mhz=frequency, features=features, torch_capability=capability,
                   bf16_fast=bf16_fast, cpu_quota=quota, isa_limit=isa_limit)


def _nvml() -> dict[str, Any]:
    """Driver version, CUDA driver version and GPU count from NVML, or ``None`` values."""
    found: dict[str, Any] = {"driver_version": None, "cuda_driver_version": None,
                             "nvml_gpus": None}
    for name in ("libnvidia-ml.so.1", "libnvidia-ml.so", "nvml.dll"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return found
    try:
        if lib.nvmlInit_v2() != 0:
            return found
        buffer = ctypes.create_string_buffer(96)
        if lib.nvmlSystemGetDriverVersion(buffer, 96) == 0:
            found["driver_version"] = buffer.value.decode()
        version = ctypes.c_int()
        if lib.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(version)) == 0:
            found["cuda_driver_version"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
        count = ctypes.c_uint()
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0:
            found["nvml_gpus"] = int(count.value)
        lib.nvmlShutdown()
    except (AttributeError, OSError):  # an old or broken driver library
        pass
    return found


def detect_gpus() -> list[GpuInfo]:
    """The CUDA devices torch can use (empty on a CPU-only build or machine)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        try:
            free, _total = torch.cuda.mem_get_info(index)
        except RuntimeError:
            free = None
        gpus.append(GpuInfo(index=index, name=props.name,
                            memory_total_bytes=int(props.total_memory),
                            memory_free_bytes=int(free) if free is not None else None,
                            compute_capability=f"{props.major}.{props.minor}",
                            bf16=props.major >= 8,
                            multiprocessors=getattr(props, "multi_processor_count", None)))
    return gpus


def _detect_tpu() -> dict[str, Any]:
    """TPU devices seen by torch_xla or JAX (imported only when installed)."""
    found: dict[str, Any] = {"available": False, "source": None, "devices": 0, "kind": None}
    if importlib.util.find_spec("torch_xla") is not None:
        try:
            import torch_xla.runtime as xr  # type: ignore[import-not-found]

            if xr.device_type() == "TPU":
                return {"available": True, "source": "torch_xla",
                        "devices": int(xr.global_runtime_device_count()), "kind": None}
        except Exception:  # noqa: BLE001 - a broken XLA install must not break doctor
            pass
    if importlib.util.find_spec("jax") is not None:
        try:
            import jax  # type: ignore[import-not-found]

            devices = jax.devices("tpu")
            if devices:
                return {"available": True, "source": "jax", "devices": len(devices),
                        "kind": getattr(devices[0], "device_kind", None)}
        except Exception:  # noqa: BLE001 - RuntimeError when there is no TPU backend
            pass
    return found


def _is_ssd(path: Path) -> bool | None:
    """Whether the block device holding ``path`` is non-rotational (Linux sysfs), else None."""
    try:
        device = os.stat(path).st_dev
        sys_dir = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}").resolve()
    except (OSError, AttributeError):
        return None
    for candidate in (sys_dir, sys_dir.parent):  # a partition's queue lives on its disk
        text = _read(str(candidate / "queue" / "rotational"))
        if text is not None:
            return text.strip() == "0"
    return None


def _disk(path: Path) -> dict[str, Any]:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    usage = shutil.disk_usage(existing)
    return {"path": str(path), "free_bytes": int(usage.free), "total_bytes": int(usage.total),
            "ssd": _is_ssd(existing)}


def cuda_library_bytes() -> int:
    """Bytes of the NVIDIA CUDA wheels installed beside torch (``site-packages/nvidia``)."""
    total = 0
    for entry in sys.path:
        folder = Path(entry) / "nvidia"
        if folder.is_dir():
            for root, _dirs, files in os.walk(folder):
                for name in files:
                    try:
                        total += os.path.getsize(os.path.join(root, name))
                    except OSError:
                        pass
            break
    return total


def _torch_info() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"version": None, "cuda": None, "build": None, "threads": None,
                "cuda_libraries_bytes": 0}
    hip = getattr(torch.version, "hip", None)
    build = "rocm" if hip else ("cuda" if torch.version.cuda else "cpu")
    return {"version": torch.__version__, "cuda": torch.version.cuda, "build": build,
            "threads": torch.get_num_threads(),
            "cuda_libraries_bytes": cuda_library_bytes() if build == "cuda" else 0}


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def detect_machine(runs_dir: str | Path = "runs") -> Machine:
    """Describe this machine.

    Args:
        runs_dir: Where runs are written; its file system is the one whose free space and
            kind (SSD or not) are reported. It need not exist yet.

    Returns:
        The :class:`Machine`. Nothing here raises for a missing component: an absent GPU is
        an empty ``gpus`` list, an unknown value is ``None``.
    """
    import psutil

    memory = psutil.virtual_memory()
    mps = False
    try:
        import torch

        mps_backend = getattr(torch.backends, "mps", None)
        mps = bool(mps_backend is not None and mps_backend.is_available())
    except ImportError:
        pass
    return Machine(
        cpu=detect_cpu(),
        memory={"total_bytes": int(memory.total), "available_bytes": int(memory.available)},
        gpus=detect_gpus(),
        gpu_driver=_nvml(),
        mps={"available": mps},
        tpu=_detect_tpu(),
        disk=_disk(Path(runs_dir).absolute()),
        torch=_torch_info(),
        libraries={name: _version(name) for name in LIBRARIES},
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
    )


def resolve_accelerator(accelerator: str) -> str:
    """The device type ``train.accelerator`` trains on: ``"cuda"``, ``"mps"`` or ``"cpu"``
    (``auto``: the first available, in that order).

    Raises:
        ResourceError: ``cuda`` or ``mps`` asked for but not available.
    """
    import torch

    if accelerator == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return "cpu"
    if accelerator == "cuda" and not torch.cuda.is_available():
        raise ResourceError("train.accelerator = 'cuda' but no CUDA device is visible; "
                            "use train.accelerator: auto or cpu")
    if accelerator == "mps" and not (getattr(torch.backends, "mps", None)
                                     and torch.backends.mps.is_available()):
        raise ResourceError("train.accelerator = 'mps' but MPS is not available; "
                            "use train.accelerator: auto or cpu")
    return accelerator
