"""``entrena train``'s efficiency step: build the monitor (peak, FLOP formula, memory
capacity) and, after the fit, ``metrics.json``'s ``efficiency`` and ``diagnosis``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from entrena.callbacks.diagnosis import diagnose
from entrena.callbacks.efficiency import EfficiencyMonitor, Emit
from entrena.core.state import TrainState

__all__ = ["build_monitor", "device_peak_flops", "efficiency_metrics"]

log = logging.getLogger("entrena")


def device_peak_flops(accelerator: str, precision: str, threads: int,
                      cache_dir: Path | None) -> tuple[float | None, str]:
    """The MFU denominator: on CPU a measured (cached) matmul peak in the precision's matrix
    dtype (bf16 under ``bf16-mixed``/``bf16-true``, else fp32); on a GPU the catalog's dense
    peak for that dtype.

    Returns:
        ``(flop_per_s or None, source)``.
    """
    if accelerator == "cpu":
        from entrena.hardware.peak import cpu_peak_flops_measured

        dtype = "bf16" if precision.startswith("bf16") else "fp32"
        return cpu_peak_flops_measured(cache_dir, threads, dtype)
    if accelerator == "cuda":
        import torch

        from entrena.hardware.catalog import load_catalog
        from entrena.planning.options import peak_for_precision

        name = torch.cuda.get_device_name()
        acc = load_catalog().accelerator_for_device(name)
        peak = peak_for_precision(acc, precision) if acc else None
        if acc is None or peak is None:
            return None, f"{name}: no catalog peak for {precision}"
        return peak, f"catalog peak of {acc.name} for {precision}"
    return None, f"no peak known for {accelerator}"


def _capacity_bytes(accelerator: str) -> int | None:
    if accelerator == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    import psutil

    return int(psutil.virtual_memory().total)


def build_monitor(*, plan: dict[str, Any] | None, lengths: np.ndarray, accelerator: str,
                  precision: str, threads: int, cache_dir: Path | None, every_steps: int,
                  emit: Emit | None, peak_memory: Any,
                  memory_now: Any = None) -> EfficiencyMonitor:
    """The :class:`EfficiencyMonitor` of a fit; the FLOP formula comes from ``plan.json``
    (no plan: no MFU). Never fails the run: a missing figure is ``None``."""
    formula = None
    raw = ((plan or {}).get("model") or {}).get("flops_per_sample_formula")
    if raw:
        formula = (float(raw["constant"]), float(raw["per_token"]),
                   float(raw["per_token_squared"]))
        if ((plan or {}).get("data") or {}).get("max_length") == 1:
            # A fixed-size profile (one "token" per example, as the LLM task's one-example
            # profile): every example costs the formula at one token, whatever the real
            # token lengths the monitor counts throughput with.
            formula = (sum(formula), 0.0, 0.0)
    try:
        peak, source = device_peak_flops(accelerator, precision, threads, cache_dir)
    except Exception as exc:  # noqa: BLE001 - a missing peak only costs the MFU figure
        log.debug("no device peak: %s", exc, exc_info=True)
        peak, source = None, f"unknown ({type(exc).__name__})"
    from entrena.hardware.threads import usable_cpus

    return EfficiencyMonitor(
        lengths=lengths, flops_formula=formula, peak_flops_per_s=peak, peak_source=source,
        device=accelerator, threads=threads, memory_capacity_bytes=_capacity_bytes(accelerator),
        peak_memory=peak_memory, memory_now=memory_now, every_steps=every_steps, emit=emit,
        cores=usable_cpus()[0])  # not the machine's: `taskset -c 0` may give one core


def efficiency_metrics(state: TrainState, monitor: EfficiencyMonitor, *, precision: str,
                       max_epochs: int, plan: dict[str, Any] | None,
                       plan_vs_actual: dict[str, Any] | None,
                       peak_remembered: bool = False) -> tuple[dict[str, Any], list]:
    """``(efficiency, diagnosis)`` for ``metrics.json``; each finding is logged.
    ``peak_remembered``: the fit's peak was kept for the next plan of its shape
    (:meth:`~entrena.recipes.planning.FitPlan.record_peak`)."""
    summary = state.extras.get("efficiency") or monitor.summary(state)
    summary = {**summary, "precision": precision}
    epochs = state.epoch + (1 if state.batch_in_epoch else 0)
    local: dict[str, Any] = next((o for o in (plan or {}).get("options", [])
                                  if o.get("kind") == "local"), {})
    fit = {"stop_reason": state.stop_reason, "epochs": epochs, "max_epochs": max_epochs,
           "epoch_time_s": state.train_time_s / epochs if epochs else None,
           "usd_per_hour": local.get("usd_per_hour"), "peak_remembered": peak_remembered}
    findings = diagnose(summary, plan_vs_actual=plan_vs_actual, fit=fit)
    for finding in findings:
        log_finding(finding)
    return summary, findings


def log_finding(finding: dict[str, Any]) -> None:
    """A warning for what the user can change (data, model, training); the machine's figures
    (hardware, plan) at INFO: they are in ``metrics.json`` and the report for whoever tunes
    throughput, and a newcomer's console leads with what they can act on. A finding that
    asks for no change (early stopping's saving) is news, not a warning: INFO."""
    quiet = finding.get("group") in ("hardware", "plan") or \
        str(finding.get("change", "")).startswith("nothing to change")
    level = logging.INFO if quiet else logging.WARNING
    log.log(level, "diagnosis (%s): %s [%s] -> %s", finding.get("group", "model"),
            finding["message"], finding["figure"], finding["change"])
