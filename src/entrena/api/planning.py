"""``entrena.plan``: memory, time and cost of a config on this machine and on catalog hardware.

The model profile, the run's shape and the calibration probe it shares with the planning
step of ``entrena train`` (:mod:`entrena.recipes.planning`: ``plan.json``,
``plan_vs_actual``) are in :mod:`entrena.planning.calibration`.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrena.api.preparing import prepare_data, resolve_model_sources
from entrena.config import Config, LoadedConfig
from entrena.errors import ConfigError
from entrena.hardware.catalog import Accelerator, Catalog, Offer, closest_names, load_catalog
from entrena.hardware.detection import Machine, detect_machine
from entrena.hardware.memory import current_rss_bytes
from entrena.planning.calibration import calibrate, model_profile, run_shape_of
from entrena.planning.options import Option
from entrena.planning.planner import LOCAL, build_plan
from entrena.planning.recommend import Recommendation
from entrena.planning.report import render_plan
from entrena.planning.timing import Calibration
from entrena.tasks.base import AnyTask, PlanningSpec, Prepared
from entrena.tasks.registry import get_task, load_config
from entrena.units import Budget, parse_budget

__all__ = ["PlanResult", "plan", "resolve_hardware"]

log = logging.getLogger("entrena")


@dataclass
class PlanResult:
    """What ``entrena plan`` found.

    Attributes:
        document: The JSON document (``--json``, ``plan.json``).
        options: The planned options, this machine first.
        recommendation: The recommendation.
    """

    document: dict[str, Any]
    options: list[Option]
    recommendation: Recommendation

    def as_dict(self) -> dict[str, Any]:
        return self.document

    def render(self) -> Any:
        """A Rich renderable: the options table and the recommendation."""
        return render_plan(self.document)


def resolve_hardware(names: list[str], catalog: Catalog) -> list[Offer | Accelerator | str]:
    """Catalog entries (or ``"local"``) for ``--hardware NAME ...``.

    Raises:
        ConfigError: A name is unknown; the message lists every choice and the closest one.
    """
    chosen: list[Offer | Accelerator | str] = []
    unknown = []
    for name in names:
        if name.strip().lower() in (LOCAL, "this", "here"):
            chosen.append(LOCAL)
            continue
        entry = catalog.find(name)
        if entry is None:
            unknown.append(name)
        else:
            chosen.append(entry)
    if unknown:
        choices = [LOCAL, *catalog.names()]
        hints = []
        for name in unknown:
            close = closest_names(name, choices)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(f"--hardware: unknown hardware {', '.join(hints)}; choose from: "
                          f"{', '.join(choices)}; or add it in a catalog file (--catalog)")
    return chosen


def _limit(text: str | float | None, *, option: str, bare: str) -> Budget | None:
    if text is None:
        return None
    try:
        return parse_budget(text, bare=bare, what=option)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def plan(config: str | Path | dict[str, Any] | Config, *, run_dir: str | Path | None = None,
         overrides: list[str] | dict[str, Any] | None = None, deadline: str | float | None = None,
         budget: str | float | None = None, local_only: bool = False,
         hardware: list[str] | None = None, calibrate: bool = False,
         catalog: str | Path | None = None) -> PlanResult:
    """Plan a run: the model, memory, time and cost on this machine and catalog hardware.

    Args:
        config: A YAML file, a dict or a :class:`~entrena.config.Config`.
        run_dir: The run directory (only its parent matters: the data cache lives there).
        overrides: ``--set`` style overrides.
        deadline: Latest acceptable total time (``"2h"``, ``"30m"``; a bare number is seconds).
        budget: ``"20usd"`` (a bare number is USD) or a duration.
        local_only: Plan this machine only.
        hardware: Plan only these options (catalog names, aliases, or ``local``).
        calibrate: Time a few real training steps on this machine (takes seconds to
            minutes; says how long in the result).
        catalog: A user catalog file merged over the shipped one (default: ``ENTRENA_CATALOG``).

    Returns:
        The :class:`PlanResult`; ``as_dict()`` is the ``--json`` document.

    Raises:
        ConfigError: Invalid config, deadline, budget or catalog file, or an unknown hardware
            name (with the choices and the closest).
        DataError: A data file is missing or unreadable.
    """
    started = time.perf_counter()
    deadline_limit = _limit(deadline, option="--deadline", bare="s")
    if deadline_limit is not None and deadline_limit.seconds is None:
        raise ConfigError(f"--deadline: {deadline!r} is an amount of money; a deadline is a "
                          f"duration such as '2h' (use --budget for money)")
    budget_limit = _limit(budget, option="--budget", bare="usd")
    loaded = load_config(config, overrides)
    sources = resolve_model_sources(loaded)
    merged = load_catalog(catalog)
    selection = resolve_hardware(hardware, merged) if hardware else None
    prepared = prepare_data(loaded, sources)
    cfg = loaded.config
    task = get_task(cfg.task)
    spec = task.planning(loaded, sources, prepared)
    max_length = spec.max_length
    profile = model_profile(loaded, task, spec, sources, prepared)
    shape = run_shape_of(cfg, spec, profile)
    machine = detect_machine(Path(run_dir).parent if run_dir else "runs")
    calibration = None
    base_rss = current_rss_bytes()
    weights_in_base = False
    if calibrate:
        calibration, base_rss = _calibrate_here(loaded, sources, prepared, task, spec, profile,
                                                machine, merged)
    elif "lightning_fabric" not in sys.modules:
        from entrena.planning.memory import FIT_IMPORTS_RSS_BYTES

        base_rss += FIT_IMPORTS_RSS_BYTES
    document, options, recommendation = build_plan(
        spec=spec, profile=profile, shape=shape, machine=machine, catalog=merged,
        max_length=max_length, calibration=calibration, base_rss_bytes=base_rss,
        weights_in_base=weights_in_base, selection=selection, local_only=local_only,
        deadline_s=deadline_limit.seconds if deadline_limit else None, budget=budget_limit,
        annotate=(None if budget_limit is None else
                  lambda options: _what_budget_buys(options, budget_limit, loaded, spec, shape)),
        extra=lambda: {
            "data_checks": [{k: c.get(k) for k in ("check", "status", "message")}
                            for c in (getattr(prepared, "report", None) or {}).get(
                                "checks", []) if c.get("status") != "ok"],
            "planning_time_s": time.perf_counter() - started})
    return PlanResult(document, options, recommendation)


def _what_budget_buys(options: list[Option], budget: Budget, loaded: LoadedConfig,
                      spec: PlanningSpec, shape: Any) -> None:
    """Set ``option.budget`` on each option: what ``--budget`` buys there as ``entrena train
    --budget`` would lay it out (:func:`entrena.planning.budget.option_budget`); a money
    budget through each option's price (none on an unpriced one)."""
    import math

    from entrena.planning.budget import DEFAULT_STARTUP_S, option_budget
    from entrena.planning.caches import cache_root
    from entrena.recipes.budget import DEFAULT_TAIL_S, remembered_tail_s

    cfg = loaded.config
    t = cfg.train
    cache = cache_root(loaded)
    tail = remembered_tail_s(cache, cfg.task)
    startup = remembered_tail_s(cache, cfg.task, "startup_s")
    steps_per_epoch = max(1, math.ceil(shape.train.batches / t.gradient_accumulation_steps))
    cap = steps_per_epoch * t.max_epochs
    cap = min(cap, t.max_steps) if t.max_steps else cap
    validation_rows, test_rows = len(spec.lengths("validation")), len(spec.lengths("test"))
    for option in options:
        seconds = budget.seconds
        if seconds is None and budget.usd is not None:
            price = option.usd_per_hour
            seconds = budget.usd / price * 3600.0 if price else None
        if seconds is None:
            option.budget = {"budget_usd": budget.usd, "enough": None,
                             "note": "no price: a money budget buys no time here"}
            continue
        local = option.kind == "local"
        option.budget = option_budget(
            seconds, epoch_s=option.epoch_time_s, total_s=option.total_time_s,
            epochs=shape.epochs, steps_per_epoch=steps_per_epoch, cap_steps=cap,
            evaluations=max(1, math.ceil(shape.epochs * t.evals_per_epoch)),
            validation_rows=validation_rows, test_rows=test_rows,
            restore_best_weights=t.restore_best_weights, evals_per_epoch=t.evals_per_epoch,
            startup_s=(startup if local and startup is not None else DEFAULT_STARTUP_S),
            tail_s=(tail if local and tail is not None else DEFAULT_TAIL_S))
        if budget.usd is not None:
            option.budget["budget_usd"] = budget.usd


def _calibrate_here(loaded: LoadedConfig, sources: dict[str, str], prepared: Prepared,
                    task: AnyTask, spec: PlanningSpec, profile: Any, machine: Machine,
                    catalog: Catalog) -> tuple[Calibration, int]:
    """``plan --calibrate``: set up the fit's backend (its imports belong to the base memory),
    measure the base memory, probe a fresh model (weights loaded as ``train`` would) on the
    device and precision the fit would use."""
    from entrena.engine.backend import configure_threads, create_backend
    from entrena.hardware.detection import cpu_bf16_pays

    cfg = loaded.config
    # as the fit does: the probe's speed depends on it
    threads = configure_threads(cfg.train.num_threads)
    backend = create_backend(  # cpu_bf16 only counts for `precision: auto` (as the fit's)
        accelerator=cfg.train.accelerator, devices=1, precision=cfg.train.precision,
        seed=cfg.train.seed, deterministic=False,
        cpu_bf16=cpu_bf16_pays(machine.cpu.bf16_fast, profile.linear_parameters))
    device = backend.accelerator if backend.accelerator in ("cpu", "cuda") else "cpu"
    precision = backend.precision if device == backend.accelerator else "32-true"
    base_rss = current_rss_bytes()
    model = task.build_model(loaded, sources, prepared).to(device)
    attention = getattr(cfg.model, "attn_implementation", None)
    if attention is not None:  # as the fit will train it
        from entrena.engine.attention import apply_attention
        from entrena.planning.caches import cache_root

        apply_attention(model, attention, device=device, precision=precision,
                        batch_size=cfg.train.batch_size,
                        max_length=getattr(prepared, "max_length", None) or 512,
                        threads=threads, cache_dir=cache_root(loaded))
    from entrena.engine.attention import eager_up_to
    from entrena.engine.frozen import store_frozen_weights

    store_frozen_weights(model, getattr(cfg.model, "base_dtype", None), precision)  # as the fit
    if device == "cpu":
        from entrena.engine.mapped import copy_mapped_weights

        copy_mapped_weights(model)  # as the fit: its timed steps write the weights
    calibration = calibrate(model, loaded, task, spec, profile, machine, catalog, device,
                            precision, base_rss, also_at_tokens=eager_up_to(model, precision))
    return calibration, base_rss
