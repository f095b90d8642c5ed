"""The options of a plan: this machine and catalog hardware, each with memory, time and cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from entrena.hardware.catalog import PRECISION_DTYPE, Accelerator, Catalog, Offer
from entrena.hardware.detection import Machine, cpu_bf16_pays
from entrena.hardware.precision import resolve_precision
from entrena.planning.memory import (
    GPU_MEMORY_RESERVE,
    MemoryEstimate,
    largest_batch,
    training_memory,
)
from entrena.planning.model import ModelProfile
from entrena.planning.timing import FORWARD_SHARE, BatchPlan, Calibration

__all__ = ["RunShape", "Option", "local_option", "catalog_option",
           "cpu_peak_flops", "cpu_isa", "peak_for_precision", "OVERSIZED_MEMORY_SHARE",
           "OVERSIZED_MINUTES", "OVERSIZED_USD_PER_HOUR"]

OVERSIZED_MEMORY_SHARE = 0.10
"""An accelerator whose predicted peak uses less than this share of its memory is flagged
oversized (entrena's threshold)."""
OVERSIZED_MINUTES = 10.0
OVERSIZED_USD_PER_HOUR = 10.0
"""An offer that finishes in under ``OVERSIZED_MINUTES`` at ``OVERSIZED_USD_PER_HOUR`` or more
is flagged oversized: start-up and idle time dominate the bill (entrena's thresholds)."""


@dataclass(frozen=True)
class RunShape:
    """What the run will do, independent of the hardware.

    Attributes:
        batch_size: Samples per micro-batch per device (``train.batch_size``).
        precision: ``train.precision`` as configured (``auto`` resolved per option).
        epochs: Planned epochs (``train.max_epochs``, fewer when ``train.max_steps`` ends
            sooner); early stopping may end the run earlier still.
        devices: Devices the run uses (``train.devices``; ``auto`` counts as 1).
        train: The first epoch's batches.
        eval_flops: Forward FLOPs of every evaluation and the test pass over the whole fit.
        eval_batches: Number of evaluation batches over the whole fit (for per-step costs).
        accelerator: ``train.accelerator`` (``cpu`` keeps this machine's option on its CPU
            even when it has a GPU).
        threads: CPU threads the fit uses (``train.num_threads``; ``None``: the usable
            cores), for this CPU's nominal peak.
        undo_copy: The divergence guard keeps a copy of the weights and optimizer state
            (``train.divergence_factor`` set).
    """

    batch_size: int
    precision: str
    epochs: float
    devices: int
    train: BatchPlan
    eval_flops: float
    eval_batches: int
    accelerator: str = "auto"
    threads: int | None = None
    undo_copy: bool = False


@dataclass
class Option:
    """One place to run, as planned (the keys of ``options[]`` in ``entrena plan --json``)."""

    name: str
    kind: str
    description: str
    device: str
    accelerator: str | None
    count: int
    fits: bool | None
    batch_size: int
    max_batch_size: int | None
    precision: str
    peak_memory_bytes: int | None
    memory_capacity_bytes: int | None
    memory: dict[str, Any] | None
    epoch_time_s: float | None
    total_time_s: float | None
    time_source: str | None
    usd_per_hour: float | None
    usd_per_hour_spot: float | None
    cost_usd: float | None
    cost_usd_spot: float | None
    oversized: bool = False
    notes: list[str] = field(default_factory=list)
    budget: dict[str, Any] | None = None
    """``entrena plan --budget``: what the budget buys here
    (:func:`entrena.planning.budget.option_budget`)."""
    sources: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def cpu_isa(features: dict[str, bool], precision: str = "32-true") -> tuple[str, str]:
    """The catalog's FLOP/cycle entry for a CPU with these ``/proc/cpuinfo`` flags training
    at ``precision``: ``(table, key)``, e.g. ``("flop_per_cycle_bf16", "amx_bf16")``.

    Chosen from the flags alone (never the vendor name): under a bf16 precision AMX-BF16,
    else AVX-512 BF16; without either (or in fp32) AVX-512F, else AVX2 with FMA, else SSE.
    """
    if PRECISION_DTYPE.get(precision) == "bf16":
        if features.get("amx_bf16"):
            return "flop_per_cycle_bf16", "amx_bf16"
        if features.get("avx512_bf16"):
            return "flop_per_cycle_bf16", "avx512_bf16"
    if features.get("avx512f"):
        return "flop_per_cycle_fp32", "avx512"
    if features.get("avx2") and features.get("fma"):
        return "flop_per_cycle_fp32", "avx2_fma"
    return "flop_per_cycle_fp32", "sse"


def cpu_peak_flops(machine: Machine, catalog: Catalog, threads: int | None = None,
                   precision: str = "32-true") -> tuple[float | None, str]:
    """Nominal peak FLOP/s of this CPU for ``threads`` threads (default: every physical
    core) at ``precision``: cores used × clock × FLOP/cycle of the instruction set its flags
    offer (:func:`cpu_isa`; the catalog's ``cpu`` entry), and that instruction set's key.
    ``(None, key)`` when the clock or the figure is unknown."""
    cpu = machine.cpu
    figures = catalog.accelerators["cpu"].figures if "cpu" in catalog.accelerators else {}
    table, key = cpu_isa(cpu.features, precision)
    per_cycle = figures.get(f"{table}.{key}")
    if per_cycle is None or not cpu.frequency_mhz:
        return None, key
    cores = min(cpu.cores, threads) if threads else cpu.cores
    return cores * cpu.frequency_mhz * 1e6 * per_cycle.value, key


def peak_for_precision(acc: Accelerator, precision: str) -> float | None:
    """The catalog peak (FLOP/s) of ``acc`` for the matrix dtype of ``precision``."""
    dtype = PRECISION_DTYPE.get(precision, "fp32")
    peak = acc.peak_flops.get(dtype)
    if peak is None and dtype == "bf16":
        peak = acc.peak_flops.get("fp16")
    return peak


def _times(shape: RunShape, profile: ModelProfile, rate: float | None,
           step_overhead_s: float) -> tuple[float | None, float | None]:
    """(epoch, total) seconds: training steps per epoch; total adds evaluation passes."""
    if not rate:
        return None, None
    flops = shape.train.flops(profile)
    epoch = float(np.sum(step_overhead_s + flops / rate))
    evaluation = shape.eval_flops / rate + shape.eval_batches * step_overhead_s * FORWARD_SHARE
    return epoch, shape.epochs * epoch + evaluation


def _cost(total_s: float | None, usd_per_hour: float | None) -> float | None:
    if total_s is None or usd_per_hour is None:
        return None
    return total_s / 3600.0 * usd_per_hour


def _fill_memory(option: Option, estimate: MemoryEstimate, capacity: float | None,
                 max_batch: int | None) -> None:
    option.peak_memory_bytes = int(estimate.peak_bytes)
    option.memory = estimate.as_dict()
    option.memory_capacity_bytes = int(capacity) if capacity else None
    option.max_batch_size = max_batch
    option.fits = None if capacity is None else estimate.peak_bytes <= capacity


def local_option(machine: Machine, catalog: Catalog, profile: ModelProfile, shape: RunShape,
                 *, calibration: Calibration | None, base_rss_bytes: float,
                 weights_in_base: bool) -> Option:
    """This machine: its first GPU when torch sees one, else its CPU.

    Args:
        machine: This machine.
        catalog: For the peaks, the CPU FLOP/cycle and the efficiency factors.
        profile: The model.
        shape: The run.
        calibration: A probe's result, or ``None`` (catalog peak × efficiency).
        base_rss_bytes: Resident memory of the process the fit runs in, before the fit.
        weights_in_base: Whether ``base_rss_bytes`` already holds the model's weights.

    Returns:
        The ``local`` :class:`Option`.
    """
    notes: list[str] = []
    local_price = catalog.local_usd_per_hour.value if catalog.local_usd_per_hour else None
    if machine.gpus and shape.accelerator != "cpu":
        gpu = machine.gpus[0]
        acc = catalog.accelerator_for_device(gpu.name)
        precision = resolve_precision(shape.precision, "cuda", bf16=gpu.bf16)
        device, description = "cuda", f"this machine: {gpu.name}"
        isa = "catalog"
        peak = peak_for_precision(acc, precision) if acc else None
        efficiency = catalog.efficiency.get("gpu_fp32" if precision == "32-true"
                                            else "gpu_mixed")
        capacity = gpu.memory_total_bytes * (1 - GPU_MEMORY_RESERVE)
        estimate = training_memory(profile, batch_size=shape.batch_size,
                                   tokens=shape.train.longest, device="cuda",
                                   precision=precision, undo_copy=shape.undo_copy)
        max_batch = largest_batch(profile, tokens=shape.train.longest, device="cuda",
                                  precision=precision, capacity_bytes=capacity,
                                  undo_copy=shape.undo_copy)
        if acc is None:
            notes.append(f"{gpu.name} is not in the catalog: its peak is unknown (use "
                         "--calibrate, or add it to a catalog file)")
    else:
        precision = resolve_precision(
            shape.precision, "cpu",
            bf16=cpu_bf16_pays(machine.cpu.bf16_fast, profile.linear_parameters))
        device = "cpu"
        description = (f"this machine: {machine.cpu.model}, {machine.cpu.cores} cores, "
                       "CPU only")
        peak, isa = cpu_peak_flops(machine, catalog, shape.threads, precision)
        efficiency = catalog.efficiency.get(f"cpu_{isa}") or (
            catalog.efficiency.get("cpu_fp32") if isa in ("avx2_fma", "sse") else None)
        capacity = machine.memory.get("available_bytes")
        measured, fit_above_base = None, None
        if (calibration is not None and calibration.device == "cpu"
                and calibration.train_step_bytes is not None):
            measured = (calibration.train_step_bytes, calibration.eval_step_bytes)
            fit_above_base = calibration.fit_peak_above_base_bytes
        estimate = training_memory(profile, batch_size=shape.batch_size,
                                   tokens=shape.train.longest, device="cpu",
                                   precision=precision, base_bytes=base_rss_bytes,
                                   weights_in_base=weights_in_base, undo_copy=shape.undo_copy,
                                   measured=measured, fit_above_base=fit_above_base)
        max_batch = largest_batch(profile, tokens=shape.train.longest, device="cpu",
                                  precision=precision, capacity_bytes=capacity or 0,
                                  base_bytes=base_rss_bytes, weights_in_base=weights_in_base,
                                  undo_copy=shape.undo_copy)
    option = Option(name="local", kind="local", description=description, device=device,
                    accelerator=None, count=1, fits=None, batch_size=shape.batch_size,
                    max_batch_size=None, precision=precision, peak_memory_bytes=None,
                    memory_capacity_bytes=None, memory=None, epoch_time_s=None,
                    total_time_s=None, time_source=None, usd_per_hour=local_price,
                    usd_per_hour_spot=None, cost_usd=None, cost_usd_spot=None, notes=notes)
    _fill_memory(option, estimate, capacity, max_batch)
    if calibration is not None and calibration.device == device and calibration.flops_per_s:
        option.epoch_time_s, option.total_time_s = _times(
            shape, profile, calibration.flops_per_s, calibration.step_overhead_s)
        option.time_source = (
            f"probe: {calibration.steps} real steps on this machine "
            f"({calibration.probe_s:.1f}s)" if calibration.source == "probe" else
            f"the memory measurement's step at the longest batch on this machine "
            f"({calibration.shapes[0][2]:.1f}s), until the fit's own steps are timed"
            if calibration.source == "memory measurement" else
            f"the fit's own first steps: {calibration.steps} optimizer steps on this machine")
    elif peak and efficiency:
        per_op = catalog.efficiency.get(f"{device}_seconds_per_op")
        overhead = per_op.value * profile.ops_per_step if per_op else 0.0
        option.epoch_time_s, option.total_time_s = _times(shape, profile,
                                                          peak * efficiency.value, overhead)
        option.time_source = (f"nominal {isa} peak {peak / 1e12:.2f} TFLOP/s x efficiency "
                              f"{efficiency.value:g} (catalog)"
                              + (f" + {overhead * 1000:.1f} ms per step "
                                 f"({profile.ops_per_step} operators)" if per_op else "")
                              + "; --calibrate measures instead")
    else:
        option.notes.append("time unknown without a probe: run `entrena plan --calibrate`")
    option.cost_usd = _cost(option.total_time_s, local_price) if local_price is not None \
        else (0.0 if option.total_time_s is not None else None)
    if local_price is None:
        option.notes.append("counted free: set local_usd_per_hour in a catalog file to price "
                            "this machine")
    return option


def catalog_option(entry: Offer | Accelerator, catalog: Catalog, profile: ModelProfile,
                   shape: RunShape) -> Option:
    """An option for a catalog offer (priced) or a bare accelerator (unpriced).

    Memory is checked per device; the run uses ``shape.devices`` of the offer's accelerators
    (data parallel, each with the configured batch), and the whole instance is billed.
    """
    offer = entry if isinstance(entry, Offer) else None
    acc: Accelerator = entry.accelerator if isinstance(entry, Offer) else entry
    device = "tpu" if acc.kind == "tpu" else "cuda"
    precision = resolve_precision(shape.precision, device, bf16=acc.bf16)
    notes: list[str] = []
    if precision in ("bf16-mixed", "bf16-true") and not acc.bf16:
        notes.append(f"{acc.name} has no native bf16: {precision} is emulated and slow; use "
                     "16-mixed")
    count = offer.count if offer else 1
    used = min(shape.devices, count)
    kind = "tpu" if acc.kind == "tpu" else ("cloud" if offer else "gpu")
    if offer:
        description = f"{offer.provider} {offer.instance}: {count}x {acc.name}"
    else:
        description = f"{acc.name} (no price in the catalog)"
    option = Option(name=(offer or acc).name, kind=kind, description=description,
                    device=device, accelerator=acc.name, count=count, fits=None,
                    batch_size=shape.batch_size, max_batch_size=None, precision=precision,
                    peak_memory_bytes=None, memory_capacity_bytes=None, memory=None,
                    epoch_time_s=None, total_time_s=None, time_source=None,
                    usd_per_hour=offer.usd_per_hour if offer else None,
                    usd_per_hour_spot=offer.usd_per_hour_spot if offer else None,
                    cost_usd=None, cost_usd_spot=None, notes=notes)
    capacity = acc.memory_bytes * (1 - GPU_MEMORY_RESERVE) if acc.memory_bytes else None
    estimate = training_memory(profile, batch_size=shape.batch_size, tokens=shape.train.longest,
                               device=device, precision=precision, undo_copy=shape.undo_copy)
    max_batch = (largest_batch(profile, tokens=shape.train.longest, device=device,
                               precision=precision, capacity_bytes=capacity,
                               undo_copy=shape.undo_copy)
                 if capacity else None)
    _fill_memory(option, estimate, capacity, max_batch)
    if capacity is None:
        notes.append(f"memory of {acc.name} unknown in the catalog")
    if device == "tpu":
        notes.append("TPU memory and speed use the GPU mixed-precision terms (XLA fuses "
                     "differently; not measured)")
    peak = peak_for_precision(acc, precision)
    eff_key = "tpu_bf16" if device == "tpu" else ("gpu_fp32" if precision == "32-true"
                                                   else "gpu_mixed")
    efficiency = catalog.efficiency.get(eff_key) or (
        catalog.efficiency.get("gpu_mixed") if device == "tpu" else None)
    per_op = catalog.efficiency.get("gpu_seconds_per_op") if device == "cuda" else None
    if peak and efficiency:
        rate = peak * efficiency.value * used
        overhead = per_op.value * profile.ops_per_step if per_op else 0.0
        option.epoch_time_s, option.total_time_s = _times(shape, profile, rate, overhead)
        option.time_source = (f"catalog peak {peak / 1e12:g} TFLOP/s x efficiency "
                              f"{efficiency.value:g} x {used} device(s)"
                              + (f" + {overhead * 1000:.1f} ms per step ({profile.ops_per_step} "
                                 f"operators)" if per_op else
                                 "; per-step overheads not modelled (a lower bound for small "
                                 "models)"))
    else:
        notes.append(f"time unknown: no {PRECISION_DTYPE.get(precision, 'fp32')} peak or "
                     "efficiency for it in the catalog")
    if offer:
        option.cost_usd = _cost(option.total_time_s, offer.usd_per_hour)
        option.cost_usd_spot = _cost(option.total_time_s, offer.usd_per_hour_spot)
        option.sources = {k: f"{v.source} ({v.date})" for k, v in offer.figures.items()}
        if offer.usd_per_hour is None:
            notes.append("on-demand price unknown in the catalog")
        if not offer.host_included:
            notes.append("price covers the accelerator only; the host VM is billed on top")
        if used < count:
            notes.append(f"uses {used} of {count} devices (train.devices: {shape.devices}); "
                         "the whole instance is billed")
        if offer.note:
            notes.append(offer.note)
    share = (estimate.peak_bytes / acc.memory_bytes) if acc.memory_bytes else None
    short = option.total_time_s is not None and option.total_time_s < OVERSIZED_MINUTES * 60
    pricey = (offer.usd_per_hour or 0) >= OVERSIZED_USD_PER_HOUR if offer else False
    if share is not None and share < OVERSIZED_MEMORY_SHARE:
        option.oversized = True
        notes.append(f"oversized: the run uses {share:.0%} of the device memory")
    if short and pricey:
        option.oversized = True
        notes.append(f"oversized: done in minutes at ${offer.usd_per_hour:.2f}/h; start-up "
                     "and billing minimums dominate")
    return option
