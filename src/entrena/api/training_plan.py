"""The planning step of ``entrena.train``: ``plan.json`` before the fit (always calibrated),
the fit's own peak memory, and ``plan_vs_actual`` in ``metrics.json``."""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from entrena.api.planning import _calibrate, _model_profile, _shape
from entrena.config import LoadedConfig
from entrena.hardware.catalog import load_catalog
from entrena.hardware.detection import detect_machine
from entrena.hardware.memory import current_rss_bytes
from entrena.planning.planner import make_plan, plan_document
from entrena.tasks.registry import get_task

__all__ = ["plan_for_fit", "plan_run", "plan_vs_actual", "reset_peak_memory",
           "peak_memory_bytes"]

log = logging.getLogger("entrena")


def plan_for_fit(loaded: LoadedConfig, sources: dict[str, str], prepared: Any,
                 model: Any, *, device: str, precision: str, max_length: int) -> dict[str, Any]:
    """The plan ``entrena train`` writes to ``plan.json`` before its fit (always calibrated).

    The probe trains a deep copy of ``model`` (the run's model and random state are left
    untouched) with the run's batch size on the run's device.

    Args:
        loaded: The loaded config.
        sources: Model and tokenizer sources.
        prepared: The prepared data.
        model: The run's model, built, on the CPU or already on ``device``.
        device: ``cpu`` or ``cuda`` (what the backend chose).
        precision: The resolved precision.
        max_length: The truncation length the fit uses (1 for fixed-size inputs).

    Returns:
        The plan document (options: this machine only).
    """
    started = time.perf_counter()
    cfg = loaded.config
    machine = detect_machine(Path("runs"))
    catalog = load_catalog()
    task = get_task(cfg.task)
    spec = task.planning(loaded, sources, prepared)
    profile = _model_profile(loaded, task, spec, sources, prepared, model)
    shape = _shape(cfg, spec, profile)
    shape = replace(shape, precision=precision, accelerator=device)
    base_rss = current_rss_bytes()
    twin = copy.deepcopy(model).to(device)
    calibration = _calibrate(twin, loaded, task, spec, profile, machine, catalog, device,
                             precision, base_rss)
    del twin
    options, recommendation = make_plan(
        profile=profile, shape=shape, machine=machine, catalog=catalog, local_only=True,
        calibration=calibration, base_rss_bytes=base_rss, weights_in_base=device == "cpu")
    return plan_document(
        machine=machine, profile=profile, shape=shape, options=options,
        recommendation=recommendation, max_length=max_length,
        train_lengths=spec.lengths("train"),
        model_name=spec.model_name,
        calibration=calibration, catalog=catalog, deadline_s=None, budget=None,
        extra={"planning_time_s": time.perf_counter() - started})


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


def plan_run(loaded: LoadedConfig, sources: dict[str, str], prepared: Any, model: Any,
             plan_path: Path, *, accelerator: str, precision: str, max_length: int,
             resumed: bool) -> dict[str, Any] | None:
    """``entrena train``'s planning step: plan (calibrated on the run's device), write
    ``plan.json``, log the prediction. A resumed run keeps the plan it wrote first.

    Planning never stops training: a failure is logged and ``None`` returned.

    Returns:
        The plan document, or ``None``.
    """
    import json

    if resumed and plan_path.is_file():
        try:
            return json.loads(plan_path.read_text())
        except (OSError, ValueError):
            pass
    if accelerator not in ("cpu", "cuda"):
        log.info("no plan on %s: the probe runs on CPU and CUDA devices", accelerator)
        return None
    try:
        document = plan_for_fit(loaded, sources, prepared, model, device=accelerator,
                                precision=precision, max_length=max_length)
    except Exception as exc:  # noqa: BLE001 - a planning bug must not cost the user the run
        log.warning("planning failed (%s: %s); training goes on without plan.json",
                    type(exc).__name__, exc)
        log.debug("planning failure", exc_info=True)
        return None
    from entrena.core.files import write_json_atomic
    from entrena.units import format_bytes, format_duration

    write_json_atomic(plan_path, document, durable=False)
    local = document["options"][0]
    calibration = document.get("calibration") or {}
    log.info("plan: peak memory %s, %s per epoch of training steps (probe: %d steps in %.1fs)",
             format_bytes(local["peak_memory_bytes"] or 0),
             format_duration(local["epoch_time_s"] or 0), calibration.get("steps", 0),
             calibration.get("probe_s", 0.0))
    return document


def reset_peak_memory(accelerator: str) -> None:
    """Start measuring the fit's peak memory now (CPU resident set or CUDA allocator)."""
    if accelerator == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()
    else:
        from entrena.hardware.memory import reset_peak_rss

        reset_peak_rss()


def peak_memory_bytes(accelerator: str) -> int | None:
    """Peak memory since :func:`reset_peak_memory`: ``torch.cuda.max_memory_allocated`` on
    CUDA, the process's peak resident set elsewhere."""
    if accelerator == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated())
    from entrena.hardware.memory import peak_rss_bytes

    return peak_rss_bytes()
