"""The planning step of the training recipe: ``plan.json`` before the fit (always
calibrated, on a copy of the run's own model), its time figures fitted to the fit's first
steps, and ``plan_vs_actual`` in ``metrics.json``. What ``entrena plan`` shares with it (the
model profile, the run's shape, the probe, the caches) is in :mod:`entrena.planning`."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from entrena.config import LoadedConfig
from entrena.engine.attention import eager_up_to
from entrena.errors import EntrenaError, ResourceError
from entrena.hardware.catalog import load_catalog
from entrena.hardware.detection import detect_machine
from entrena.hardware.memory import current_rss_bytes
from entrena.planning.caches import (
    FIT_PEAK_FIELD,
    cache_memory,
    cached_memory,
    memory_cache_path,
    record_fit_peak,
)
from entrena.planning.calibration import (
    batch_flops,
    calibrate,
    device_peak,
    model_profile,
    run_shape_of,
)
from entrena.planning.options import local_option
from entrena.planning.planner import build_plan
from entrena.planning.recommend import ram_refusal
from entrena.planning.timing import Calibration
from entrena.tasks.base import Prepared
from entrena.tasks.registry import get_task

__all__ = ["FitPlan", "plan_for_fit", "plan_timed", "plan_run", "plan_vs_actual"]

log = logging.getLogger("entrena")


@dataclass
class FitPlan:
    """The plan of a fit: ``document`` (``plan.json``) and, until the fit's own first steps
    are timed, how to plan again with their timing (:meth:`timed`)."""

    document: dict[str, Any]
    _replan: Callable[[Calibration], dict[str, Any]] | None = None
    _batch_flops: Callable[[float, float], float] | None = None
    _record_peak: Callable[[float], bool] | None = None

    @property
    def needs_timing(self) -> bool:
        """Whether the time figures still come from the catalog (no step timed yet)."""
        return self._replan is not None

    def flops(self, batch_size: float, tokens: float) -> float:
        """Training FLOPs of a step of ``batch_size`` examples padded to ``tokens``."""
        assert self._batch_flops is not None
        return self._batch_flops(batch_size, tokens)

    def record_peak(self, peak_bytes: float) -> bool:
        """Keep the fit's peak (CPU resident set, bytes) beside the cached step memory, so
        that the next plan of this model and batch shape on this machine counts what the
        heap grew over a whole fit. Returns whether that entry exists (``False`` off a CPU,
        for a model without a shape key, or when it could not be read)."""
        if self._record_peak is None or not peak_bytes:
            return False
        return self._record_peak(peak_bytes)

    def timed(self, steps: Calibration) -> dict[str, Any]:
        """The plan again with the step timing of ``steps`` (memory figures unchanged)."""
        assert self._replan is not None
        self.document = self._replan(steps)
        self._replan = None
        return self.document


def plan_for_fit(loaded: LoadedConfig, sources: dict[str, str], prepared: Prepared,
                 model: Any, *, device: str, precision: str, max_length: int) -> FitPlan:
    """The plan ``entrena train`` writes to ``plan.json`` before its fit.

    Planning spends no training time: the memory of a step at the epoch's longest batch and
    of an evaluation batch is measured on a deep copy of ``model`` (forward and backward, no
    optimizer step; the run's model and random state are left untouched), and the time of a
    step is fitted to the fit's own first optimizer steps (:class:`FitPlan.timed`, through
    :class:`~entrena.callbacks.step_timing.StepTiming`); until then the time comes from the
    catalog. On a CPU, a batch whose estimated peak exceeds the available RAM is refused
    first.

    Args:
        loaded: The loaded config.
        sources: Model and tokenizer sources.
        prepared: The prepared data.
        model: The run's model, built, on the CPU or already on ``device``.
        device: ``cpu`` or ``cuda`` (what the backend chose).
        precision: The resolved precision.
        max_length: The truncation length the fit uses (1 for fixed-size inputs).

    Returns:
        The :class:`FitPlan` (options: this machine only).

    Raises:
        ResourceError: On a CPU, the batch would not fit in the available RAM (the message
            gives the largest batch that fits and the accumulation that keeps the batch).
    """
    started = time.perf_counter()
    cfg = loaded.config
    machine = detect_machine(Path("runs"))
    catalog = load_catalog()
    task = get_task(cfg.task)
    spec = task.planning(loaded, sources, prepared)
    profile = model_profile(loaded, task, spec, sources, prepared, model)
    shape = run_shape_of(cfg, spec, profile)
    shape = replace(shape, precision=precision, accelerator=device)
    base_rss = current_rss_bytes()
    if device == "cpu":  # before the probe, which would already train at this batch size
        estimate = local_option(machine, catalog, profile, shape, calibration=None,
                                base_rss_bytes=base_rss, weights_in_base=True)
        refusal = ram_refusal(estimate, cfg.train.gradient_accumulation_steps)
        if refusal is not None:
            raise ResourceError(refusal)
    unfused_up_to = eager_up_to(model, precision)
    cache = memory_cache_path(loaded, spec, machine, device, precision, shape, unfused_up_to)
    memory = cached_memory(cache, device, precision, base_rss)
    if memory is None:
        twin = copy.deepcopy(model).to(device)
        memory = calibrate(twin, loaded, task, spec, profile, machine, catalog, device,
                           precision, base_rss, timed=False, also_at_tokens=unfused_up_to)
        del twin
        cache_memory(cache, memory)
    else:  # read from the cache: the peak (a fresh measurement has it from calibrate)
        memory.peak_flops = device_peak(machine, catalog, cfg.train.num_threads, device,
                                        precision)
    planning_s = time.perf_counter() - started

    def build(calibration: Calibration) -> dict[str, Any]:
        return build_plan(spec=spec, profile=profile, shape=shape, machine=machine,
                          catalog=catalog, max_length=max_length, calibration=calibration,
                          base_rss_bytes=base_rss, weights_in_base=device == "cpu",
                          local_only=True, extra=lambda: {"planning_time_s": planning_s})[0]

    record = None
    if cache is not None and base_rss is not None:
        def record(peak_bytes: float) -> bool:
            return record_fit_peak(cache, peak_bytes - base_rss)

    return FitPlan(build(memory), lambda steps: build(memory.with_steps(steps)),
                   lambda size, tokens: batch_flops(profile, size, tokens), record)


def plan_vs_actual(plan_document_: dict[str, Any] | None, *, peak_memory_bytes: int | None,
                   train_time_s: float, samples_seen: int, train_rows: int
                   ) -> dict[str, Any] | None:
    """``metrics.json``'s ``plan_vs_actual``: predicted (from ``plan.json``) against measured.

    Args:
        plan_document_: The plan written before the fit, or ``None``.
        peak_memory_bytes: The fit's peak (CPU resident set, or CUDA allocator peak).
        train_time_s: Seconds in training steps over the fit.
        samples_seen: Training samples processed over the fit.
        train_rows: Training rows per epoch (after subsampling, splitting, de-duplication).

    Returns:
        ``{"peak_memory_bytes": {"predicted", "actual"}, "epoch_time_s": {"predicted",
        "actual"}}`` (the actual epoch time is the training time per sample times the rows of
        an epoch), or ``None`` without a plan.
    """
    if not plan_document_:
        return None
    local = next((o for o in plan_document_.get("options", []) if o.get("kind") == "local"),
                 None)
    if local is None:
        return None
    epoch = train_time_s / samples_seen * train_rows if samples_seen else None
    return {"peak_memory_bytes": {"predicted": local.get("peak_memory_bytes"),
                                  "actual": peak_memory_bytes},
            "epoch_time_s": {"predicted": local.get("epoch_time_s"), "actual": epoch}}


def plan_run(loaded: LoadedConfig, sources: dict[str, str], prepared: Prepared, model: Any,
             plan_path: Path, *, accelerator: str, precision: str, max_length: int,
             resumed: bool) -> FitPlan | None:
    """``entrena train``'s planning step: plan (memory measured on the run's device), write
    ``plan.json``, log the prediction. A resumed run keeps the plan it wrote first.

    Planning never stops training, but for a batch that would not fit in RAM: another
    failure is logged and ``None`` returned.

    Raises:
        ResourceError: On a CPU, the batch would not fit in the available RAM.

    Returns:
        The :class:`FitPlan` (its time figures to be fitted to the fit's first steps:
        :func:`plan_timed`), or ``None``.
    """
    import json

    if resumed and plan_path.is_file():
        try:
            return FitPlan(json.loads(plan_path.read_text()))
        except (OSError, ValueError):
            pass
    if accelerator not in ("cpu", "cuda"):
        log.info("no plan on %s: the probe runs on CPU and CUDA devices", accelerator)
        return None
    try:
        plan = plan_for_fit(loaded, sources, prepared, model, device=accelerator,
                            precision=precision, max_length=max_length)
    except EntrenaError:
        raise  # a batch that does not fit in RAM: refused before the probe
    except Exception as exc:  # noqa: BLE001 - a planning bug must not cost the user the run
        log.warning("planning failed (%s: %s); training goes on without plan.json",
                    type(exc).__name__, exc)
        log.debug("planning failure", exc_info=True)
        return None
    from entrena.core.files import write_json_atomic
    from entrena.units import format_bytes, format_duration

    write_json_atomic(plan_path, plan.document, durable=False)
    local = plan.document["options"][0]
    calibration = plan.document.get("calibration") or {}
    measured = ("estimated" if calibration.get("train_step_bytes") is None
                else "measured at the longest batch by an earlier run, cached"
                if calibration.get("memory_cached")
                else f"measured at the longest batch in {calibration['probe_s']:.1f}s")
    if calibration.get(FIT_PEAK_FIELD) is not None:
        measured += (f"; an earlier fit of this shape here peaked "
                     f"{format_bytes(calibration[FIT_PEAK_FIELD])} above its base")
    epoch = local["epoch_time_s"]
    log.info("plan: peak memory %s (%s); %s per epoch of training steps%s",
             format_bytes(local["peak_memory_bytes"] or 0), measured,
             format_duration(epoch) if epoch is not None else "time unknown",
             ("" if not plan.needs_timing else
              " by the memory measurement's step until the fit's first steps are timed"
              if calibration.get("source") == "memory measurement" else
              " by the catalog until the first steps are timed"))
    return plan


def plan_timed(plan: FitPlan, shapes: list[list[float]], plan_path: Path) -> None:
    """Plan again with the fit's first optimizer steps' timing; write ``plan.json`` and log.

    Args:
        plan: The fit's plan (:attr:`FitPlan.needs_timing`).
        shapes: ``[samples, mean padded tokens, seconds]`` of each timed optimizer step.
        plan_path: ``plan.json``.
    """
    from entrena.core.files import write_json_atomic
    from entrena.planning.timing import calibration_from_steps
    from entrena.units import format_duration

    calibration = plan.document.get("calibration") or {}
    steps = calibration_from_steps(
        shapes, [plan.flops(size, tokens) for size, tokens, _ in shapes],
        device=calibration.get("device", "cpu"),
        precision=calibration.get("precision", "32-true"),
        peak_flops=calibration.get("peak_flops"))
    document = plan.timed(steps)
    write_json_atomic(plan_path, document, durable=False)
    local = document["options"][0]
    log.info("plan: %s per epoch of training steps, %s in all (timed on the fit's first %d "
             "optimizer steps: %.1f GFLOP/s)", format_duration(local["epoch_time_s"] or 0),
             format_duration(local["total_time_s"] or 0), steps.steps,
             (steps.flops_per_s or 0) / 1e9)
