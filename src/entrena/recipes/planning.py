"""The planning step of the training recipe: ``plan.json`` before the fit (always
calibrated), the fit's own peak memory, and ``plan_vs_actual`` in ``metrics.json``; and what
``entrena plan`` shares with it: the task's model profile (cached), the run's shape and the
calibration probe."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from entrena.config import Config, LoadedConfig
from entrena.engine.attention import eager_up_to
from entrena.errors import EntrenaError, ResourceError
from entrena.hardware.catalog import Catalog, load_catalog
from entrena.hardware.detection import Machine, detect_machine
from entrena.hardware.memory import current_rss_bytes
from entrena.planning.llm_profile import llm_plan_details, llm_run_profile
from entrena.planning.options import local_option
from entrena.planning.planner import make_plan, plan_document, run_shape
from entrena.planning.recommend import ram_refusal
from entrena.planning.timing import Calibration
from entrena.tasks.base import PlanningSpec
from entrena.tasks.registry import get_task

__all__ = ["FitPlan", "plan_for_fit", "plan_timed", "batch_flops", "plan_run",
           "plan_vs_actual", "reset_peak_memory", "peak_memory_bytes", "memory_in_use_bytes",
           "model_profile", "run_shape_of", "calibrate"]

log = logging.getLogger("entrena")


def model_profile(loaded: LoadedConfig, task: Any, spec: PlanningSpec,
                   sources: dict[str, str], prepared: Any, model: Any = None) -> Any:
    """The task's model profile: a sequence model measured on the meta device at three
    lengths (cached); a fixed-size one on a copy of ``model`` (default: one the task builds)
    at one training example; an LLM's (``spec.llm``) from the formulas."""
    if spec.llm is not None:
        return llm_run_profile(spec.llm)
    if spec.meta_model is not None:
        return _profile(loaded, spec, task)
    from entrena.planning.fixed import profile_fixed

    if model is None:
        model = task.build_model(loaded, sources, prepared)
    batch = spec.example_batch() if spec.example_batch is not None else {}
    return profile_fixed(model, {k: v for k, v in batch.items() if k != "labels"},
                         loss=task.loss)


def _profile_cache_key(spec: PlanningSpec) -> str | None:
    """A key for the model profile, or ``None`` when the task gives no shape to key it on."""
    import hashlib
    import importlib.metadata
    import json

    if spec.profile_key is None:
        return None
    versions = [importlib.metadata.version(d) for d in ("torch", "transformers")]
    blob = json.dumps([spec.profile_key, versions, 4], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _profile(loaded: LoadedConfig, spec: PlanningSpec, task: Any) -> Any:
    """The model profile, measured on the meta device once and then read from the cache
    (``<cache>/profiles/``): building the model imports most of transformers."""
    import json

    from entrena.data.cache import default_cache_dir
    from entrena.planning.model import ModelProfile, profile_model

    cfg = loaded.config
    key = _profile_cache_key(spec)
    configured = getattr(cfg.data, "cache_dir", None)
    path = (default_cache_dir(loaded.resolve_path(configured) if configured else None)
            / "profiles" / f"{key}.json") if key else None
    if path is not None and path.is_file():
        try:
            return ModelProfile(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            pass  # a damaged or outdated entry is measured again
    assert spec.meta_model is not None
    profile = profile_model(spec.meta_model(), spec.max_length, loss=task.loss)
    if path is not None:
        from entrena.core.files import write_json_atomic

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, profile.as_dict(), durable=False)
        except OSError:
            log.debug("could not cache the model profile in %s", path, exc_info=True)
    return profile


def run_shape_of(cfg: Config, spec: PlanningSpec, profile: Any) -> Any:
    t = cfg.train
    return run_shape(
        train_lengths=spec.lengths("train"), eval_lengths=spec.lengths("validation"),
        test_lengths=spec.lengths("test"), profile=profile,
        batch_size=t.batch_size, eval_batch_size=t.eval_batch_size or 2 * t.batch_size,
        precision=t.precision, max_epochs=t.max_epochs, max_steps=t.max_steps,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        evals_per_epoch=t.evals_per_epoch, devices=t.devices, seed=t.seed,
        group_by_length=t.group_by_length, accelerator=t.accelerator, threads=t.num_threads,
        undo_copy=t.divergence_factor is not None, batch_width=spec.batch_width)


def calibrate(model: Any, loaded: LoadedConfig, task: Any, spec: PlanningSpec, profile: Any,
               machine: Machine, catalog: Catalog, device: str, precision: str,
               base_rss: float | None, *, timed: bool = True) -> Calibration:
    from entrena.planning.timing import probe

    cfg = loaded.config
    batches = spec.probe_batches(cfg.train.batch_size)
    eval_size = cfg.train.eval_batch_size or 2 * cfg.train.batch_size
    eval_batch = spec.eval_batch(eval_size) if spec.eval_batch is not None else None
    # A fixed-size profile counts one example as one "token" (an LLM's is one median-length
    # example profiled whole), whatever the tensors' shapes.
    flops = [batch_flops(profile, int(b["labels"].shape[0]),
                         int(b["input_ids"].shape[1]) if "input_ids" in b else 1)
             for b in batches]
    peak = _device_peak(machine, catalog, cfg.train.num_threads, device, precision)
    # The median and the longest batch: two lengths separate the per-step cost from the FLOP
    # rate. A GPU step is short, so it is timed three times (the fastest counts).
    return probe(model, batches, flops, device=device, precision=precision,
                 repeats=3 if device == "cuda" else 1, peak_flops=peak, base_rss_bytes=base_rss,
                 loss=task.loss, eval_batch=eval_batch, timed=timed,
                 also_at_tokens=eager_up_to(model, precision))


def batch_flops(profile: Any, batch_size: float, tokens: float) -> float:
    """Training FLOPs of a batch of ``batch_size`` examples padded to ``tokens`` (a
    fixed-size profile counts one example as one "token", whatever the tensors' shapes)."""
    return batch_size * profile.flops_per_sample(tokens if profile.kind != "fixed" else 1)


def _device_peak(machine: Machine, catalog: Catalog, threads: int | None, device: str,
                 precision: str) -> float | None:
    from entrena.planning.options import cpu_peak_flops, peak_for_precision

    if device == "cpu":
        return cpu_peak_flops(machine, catalog, threads, precision)[0]
    acc = catalog.accelerator_for_device(machine.gpus[0].name) if machine.gpus else None
    return peak_for_precision(acc, precision) if acc else None


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


def plan_for_fit(loaded: LoadedConfig, sources: dict[str, str], prepared: Any,
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
    cache = _memory_cache_path(loaded, spec, machine, device, precision, shape,
                               eager_up_to(model, precision))
    memory = _cached_memory(cache, device, precision, base_rss)
    if memory is None:
        twin = copy.deepcopy(model).to(device)
        memory = calibrate(twin, loaded, task, spec, profile, machine, catalog, device,
                           precision, base_rss, timed=False)
        del twin
        _cache_memory(cache, memory)
    else:  # read from the cache: the peak (a fresh measurement has it from calibrate)
        memory.peak_flops = _device_peak(machine, catalog, cfg.train.num_threads, device,
                                         precision)
    planning_s = time.perf_counter() - started

    def build(calibration: Calibration) -> dict[str, Any]:
        options, recommendation = make_plan(
            profile=profile, shape=shape, machine=machine, catalog=catalog, local_only=True,
            calibration=calibration, base_rss_bytes=base_rss, weights_in_base=device == "cpu")
        return plan_document(
            machine=machine, profile=profile, shape=shape, options=options,
            recommendation=recommendation, max_length=max_length,
            train_lengths=spec.lengths("train"), model_name=spec.model_name,
            calibration=calibration, catalog=catalog, deadline_s=None, budget=None,
            extra={**(llm_plan_details(spec.llm) if spec.llm else {}),
                   "planning_time_s": planning_s})

    record = None
    if cache is not None and base_rss is not None:
        def record(peak_bytes: float) -> bool:
            return _record_fit_peak(cache, peak_bytes - base_rss)

    return FitPlan(build(memory), lambda steps: build(memory.with_steps(steps)),
                   lambda size, tokens: batch_flops(profile, size, tokens), record)


_MEMORY_FIELDS = ("train_step_bytes", "eval_step_bytes", "memory_shapes")
FIT_PEAK_FIELD = "fit_peak_above_base_bytes"
"""The step-memory cache entry's record of the largest fit's peak above its base, bytes."""


def _memory_cache_path(loaded: LoadedConfig, spec: PlanningSpec, machine: Machine,
                       device: str, precision: str, shape: Any,
                       unfused_up_to: int = 0) -> Path | None:
    """Where the step-memory measurement of this model, batch shape, padding multiple,
    precision and machine is kept, with the largest peak a fit of it reached
    (``<cache>/profiles/memory-<key>.json``), or ``None`` for a model the task gives
    no shape key for, or a GPU (whose allocator state other processes share).
    ``unfused_up_to``: the longest length the model trains with the unfused attention
    products (:func:`entrena.engine.attention.eager_up_to`), which the measurement covers."""
    import hashlib
    import importlib.metadata
    import json

    from entrena.data.cache import default_cache_dir

    if spec.profile_key is None or device != "cpu":
        return None
    cfg = loaded.config
    eval_lengths = list(spec.lengths("validation"))
    cpu = machine.cpu
    blob = json.dumps([
        1, spec.profile_key, cfg.model.model_dump(mode="json"), precision, device,
        cfg.train.batch_size, cfg.train.eval_batch_size or 2 * cfg.train.batch_size,
        shape.train.longest, max(eval_lengths) if eval_lengths else 0,
        cpu.model, sorted(k for k, v in cpu.features.items() if v), cpu.torch_capability,
        shape.threads, [importlib.metadata.version(d) for d in ("torch", "transformers")],
        unfused_up_to,
        # the batch widths a fit meets shape its heap, so the fit peak kept here too
        getattr(cfg.data, "pad_to_multiple_of", None),
    ], sort_keys=True, default=str)
    key = hashlib.sha256(blob.encode()).hexdigest()[:20]
    configured = getattr(cfg.data, "cache_dir", None)
    root = default_cache_dir(loaded.resolve_path(configured) if configured else None)
    return root / "profiles" / f"memory-{key}.json"


def _cached_memory(path: Path | None, device: str, precision: str,
                   base_rss: float | None) -> Calibration | None:
    """The step memory measured by an earlier run of the same model, batch shape, precision
    and machine (the measurement is the resident set's rise over one step: it does not depend
    on the process's base), or ``None``."""
    import json

    if path is None or not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
        return Calibration(device=device, precision=precision, flops_per_s=None,
                           step_overhead_s=0.0, probe_s=0.0, steps=0, shapes=[],
                           base_rss_bytes=base_rss, memory_cached=True,
                           fit_peak_above_base_bytes=saved.get(FIT_PEAK_FIELD),
                           **{k: saved[k] for k in _MEMORY_FIELDS})
    except (OSError, ValueError, TypeError, KeyError):
        return None  # a damaged or outdated entry is measured again


def _cache_memory(path: Path | None, memory: Calibration) -> None:
    if path is None or memory.train_step_bytes is None:
        return
    from entrena.core.files import write_json_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {k: getattr(memory, k) for k in _MEMORY_FIELDS},
                          durable=False)
    except OSError:
        log.debug("could not cache the step memory in %s", path, exc_info=True)


def _record_fit_peak(path: Path, above_base: float) -> bool:
    """Raise the cache entry's ``fit_peak_above_base_bytes`` to ``above_base`` (bytes) when
    larger (the entry written by the probe of the same run; absent: nothing is kept).
    Returns whether the entry holds at least ``above_base`` now."""
    import json

    from entrena.core.files import write_json_atomic

    try:
        saved = json.loads(path.read_text())
        if above_base > (saved.get(FIT_PEAK_FIELD) or 0.0):
            write_json_atomic(path, {**saved, FIT_PEAK_FIELD: float(above_base)},
                              durable=False)
        return True
    except (OSError, ValueError, TypeError, AttributeError):
        log.debug("could not keep the fit's peak in %s", path, exc_info=True)
        return False


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
             " by the catalog until the first steps are timed" if plan.needs_timing else "")
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


def memory_in_use_bytes(accelerator: str) -> int | None:
    """Memory in use now: ``torch.cuda.memory_allocated`` on CUDA, the process's resident set
    elsewhere (beside :func:`peak_memory_bytes` in each efficiency record)."""
    if accelerator == "cuda":
        import torch

        return int(torch.cuda.memory_allocated())
    return current_rss_bytes()
