"""The training recipe: the torch side of ``entrena.train``, in four phases that
:func:`run_fit` calls in order, as torchtune's recipes read as setup, train and save.

1. **Setup** (:func:`_set_up`): threads, seed, the task's model (built on the CPU first:
   ``precision: auto`` on a CPU depends on its size), the Fabric backend, and the weights as
   the fit will train them (mapped weights copied, attention kernels, frozen weights stored).
2. **Plan** (:func:`_plan`): ``plan.json`` (rank 0 only: the memory of a step at the longest
   batch, measured on a copy of the model; its time figures fitted to the fit's own first
   steps), and what the plan changes: ``train.budget`` caps the planned time and re-plans the
   steps during the fit (:func:`_budget_fit`), the planned time decides ``train.compile``.
3. **Fit**: the task's batches (sharded under several processes), AdamW, the backend's setup
   (:func:`_wire`); the callbacks, in order (:func:`_callbacks`): LR schedule, budget, early
   stopping, best weights, periodic checkpoints, preemption, time limit, efficiency monitor,
   ``events.jsonl``, progress bar, the plan's step timing, the trackers
   ``tracking.backends`` names (:mod:`entrena.tracking.base`), the callbacks
   ``train.callbacks`` names (:mod:`entrena.callbacks.registry`), the caller's; a checkpoint
   restored (resume, :func:`_resume`), the trackers started, the loop (:func:`_run_loop`,
   which gets the task's loss). A stop signal or a non-finite stop ends here with what was
   saved (:mod:`entrena.recipes.stops`).
4. **Finish** (:func:`_finish`): validation again with the restored weights (a non-finite
   model is never saved), the test split, the fit figures; rank 0 then compares with the
   task's baselines, plan against actual, efficiency and the diagnosis (:func:`_judge`),
   and saves the predictions, the model, ``metrics.json`` and ``report.html``; the trackers
   finish (:func:`_save`).

The task comes from the registry and is called through its protocol; nothing here names one.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from entrena.callbacks.checkpoint import ModelCheckpoint, PeriodicCheckpoint, unwrap
from entrena.callbacks.diagnosis import order_findings
from entrena.callbacks.early_stopping import EarlyStopping
from entrena.callbacks.lr_schedule import LRSchedule
from entrena.callbacks.monitor import Monitor
from entrena.callbacks.preemption import Preemption, TimeLimit
from entrena.callbacks.progress import ProgressBar
from entrena.callbacks.registry import build_callbacks
from entrena.callbacks.step_timing import StepTiming
from entrena.config import LoadedConfig
from entrena.core.callback import Callback
from entrena.core.files import dumps_strict
from entrena.core.rundir import RunPaths
from entrena.core.state import TrainState
from entrena.engine.attention import apply_attention
from entrena.engine.backend import (
    auto_cpu_bf16,
    configure_threads,
    create_backend,
    seed_everything,
)
from entrena.engine.checkpointing import (
    CheckpointInfo,
    CheckpointStore,
    restore_rng,
    restore_training,
    training_payload,
)
from entrena.engine.compiling import compile_decision, compile_model
from entrena.engine.distributed import ShardedBatches
from entrena.engine.frozen import store_frozen_weights
from entrena.engine.loop import FitSettings, fit, predict
from entrena.engine.mapped import copy_mapped_weights
from entrena.errors import ConfigError, Interrupted
from entrena.hardware.catalog import load_catalog
from entrena.hardware.cost import HourlyPrice, hourly_price, run_cost
from entrena.hardware.memory import memory_in_use_bytes, peak_memory_bytes, reset_peak_memory
from entrena.planning.budget import budget_seconds
from entrena.planning.caches import cache_root
from entrena.recipes.budget import DEFAULT_TAIL_S, BudgetFit, build_budget, remembered_tail_s
from entrena.recipes.efficiency import build_monitor, efficiency_metrics
from entrena.recipes.planning import FitPlan, plan_run, plan_timed, plan_vs_actual
from entrena.recipes.predictions import write_predictions
from entrena.recipes.stops import interrupted_error, nonfinite_error, refuse_nonfinite_model
from entrena.recipes.verdicts import (
    baseline_finding,
    baseline_verdict,
    constant_value_finding,
    every_tag_finding,
    mean_finding,
    no_test_finding,
    one_answer_finding,
    one_class_finding,
)
from entrena.tasks.base import AnyTask, Prepared, TaskBatches
from entrena.tasks.registry import get_task
from entrena.tracking.base import TrackingContext, build_trackers
from entrena.tracking.events import EventLog
from entrena.units import parse_duration_s, short_list

__all__ = ["run_fit", "build_optimizer", "write_report"]

log = logging.getLogger("entrena")


def fused_optimizer(accelerator: str) -> bool:
    """Whether AdamW runs fused (one kernel over all parameters) on ``accelerator``: on a
    CPU, where PyTorch's default is a loop over the parameters and the fused step measured
    25 ms against 146 ms for MiniLM-L6's 22.6 M parameters on 2 AVX2 cores
    (``benchmarks/experiments/step_profile.py``, ``bench:step-profile``). Elsewhere PyTorch's
    default stays (multi-tensor on CUDA, whose memory the planner's AdamW temporary models)."""
    return accelerator == "cpu"


def build_optimizer(model: torch.nn.Module, learning_rate: float, weight_decay: float, *,
                    fused: bool = False) -> torch.optim.Optimizer:
    """AdamW with no weight decay on biases and normalisation weights (1-D tensors), as in
    BERT (Devlin et al., 2019) and the Hugging Face Trainer; ``fused`` as
    :func:`fused_optimizer` decides (the same update and the same ``state_dict``)."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for _, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if param.ndim < 2 else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, fused=fused or None)


def _console(console: Any) -> Any:
    if console is not None:
        return console
    from entrena.core.console import stderr_console

    return stderr_console()


def _cpu_features(accelerator: str) -> dict[str, bool] | None:
    """The CPU's instruction-set flags when training on it (``None`` elsewhere)."""
    if accelerator != "cpu":
        return None
    from entrena.hardware.detection import detect_cpu

    return detect_cpu().features


def _planned_train_s(plan: dict[str, Any] | None) -> float | None:
    """The plan's seconds of training steps on this machine (evaluation excluded)."""
    local: dict[str, Any] = next((o for o in (plan or {}).get("options", [])
                                  if o.get("kind") == "local"), {})
    return local.get("total_time_s")


@dataclass
class Setup:
    """What the setup phase made (:func:`_set_up`).

    Attributes:
        task: The task (the registry's, called through its protocol).
        model: The task's model, its weights as the fit trains them (not yet set up by the
            backend).
        backend: The Fabric backend (device, precision, processes).
        threads: CPU threads the fit uses.
        max_length: The truncation length, tokens (text only; ``None`` for fixed-size
            inputs).
    """

    task: AnyTask
    model: Any
    backend: Any
    threads: int
    max_length: int | None

    @property
    def world(self) -> int:
        """Processes the fit runs in."""
        return self.backend.world_size

    @property
    def leader(self) -> bool:
        """Rank 0: the only process that plans, tests, compares, writes and tracks."""
        return self.backend.is_global_zero


@dataclass
class Planned:
    """What the plan phase decided (:func:`_plan`).

    Attributes:
        fit_plan: The plan (``plan.json``; rank 0, CPU and CUDA only), or ``None``.
        step_timing: The callback that times the fit's first steps to finish the plan's
            time figures, or ``None`` (a resumed plan is already timed).
        budget_s: ``train.budget`` in seconds, or ``None``.
        compile: Whether the model is compiled (``train.compile``, ``auto`` by the planned
            time).
    """

    fit_plan: FitPlan | None
    step_timing: StepTiming | None
    budget_s: float | None
    compile: bool

    @property
    def document(self) -> dict[str, Any] | None:
        """``plan.json`` as it stands (timed once the fit's first steps are)."""
        return self.fit_plan.document if self.fit_plan else None


@dataclass
class Callbacks:
    """The fit's callbacks in the order each event calls them (``all``), and the ones the
    recipe reads after the loop."""

    all: list[Callback]
    checkpoint: ModelCheckpoint
    preemption: Preemption
    budget: BudgetFit | None
    efficiency: Any
    trackers: list[Any]


@dataclass
class Wiring:
    """The fit's pieces (:func:`_wire`): the model and optimizer set up by the backend, this
    process's training batches, the validation batches, the evaluation the loop calls (its
    latest result kept in ``last_evaluation`` for the finish) and the callbacks."""

    model: Any
    optimizer: Any
    train: Any
    validation: Any
    evaluate: Callable[[Any], dict[str, float]]
    last_evaluation: list[tuple[Any, Any, float]]
    callbacks: Callbacks


def run_fit(loaded: LoadedConfig, paths: RunPaths, sources: dict[str, str],
            prepared: Prepared, console: Any = None, *, resume: CheckpointInfo | None = None,
            config_hash: str = "", callbacks: Sequence[Callback] = (),
            tracking_tags: dict[str, str] | None = None,
            cost_from: tuple[float, HourlyPrice] | None = None,
            budget_started_at: float | None = None) -> dict[str, Any]:
    """Fit on the prepared data (from ``resume`` if given), restore the best weights, test,
    save the model, write metrics.

    Args:
        prepared: The checked, split and encoded data (the task's ``prepare``).
        resume: A verified checkpoint to continue from.
        config_hash: The config's hash, recorded in every checkpoint.
        callbacks: Extra callbacks, called after the built-in ones (their state is saved too).
        cost_from: ``(time.perf_counter() when the train command started, this machine's
            price)`` for ``metrics["cost"]``; default: from this call, priced by the catalog.
        budget_started_at: ``time.time()`` when ``train.budget``'s clock started (the
            command's launch); default: this call.

    Returns:
        The metrics written to ``metrics.json``.

    Raises:
        Interrupted: A stop signal arrived; a checkpoint was saved.
        NonFiniteError: ``train.on_nonfinite: stop`` and a loss or gradient went NaN/Inf.
    """
    wall_start = time.perf_counter()
    started_at = time.time() if budget_started_at is None else budget_started_at
    if cost_from is None:
        cost_from = (wall_start, hourly_price(load_catalog()))
    setup = _set_up(loaded, sources, prepared)
    planned = _plan(loaded, sources, prepared, setup, paths, resumed=resume is not None,
                    price=cost_from[1])
    wiring = _wire(loaded, prepared, setup, planned, paths, console=console, extra=callbacks,
                   started_at=started_at, resumed=resume is not None)
    state, rng_state = _resume(wiring, setup, resume, paths)
    for tracker in wiring.callbacks.trackers:
        tracker.start(loaded.config.model_dump(mode="json"),
                      tags={"entrena.run_dir": str(paths.root.resolve()),
                            **(tracking_tags or {})})
    try:
        state = _run_loop(loaded, prepared, setup, wiring, paths, state, rng_state,
                          config_hash)
        return _finish(loaded, prepared, setup, planned, wiring, state, paths,
                       wall_start=wall_start, fit_ended_at=time.time(), cost_from=cost_from)
    except BaseException as exc:  # a run that ends early: trackers close what they opened
        stopped = isinstance(exc, Interrupted) or not isinstance(exc, Exception)  # a signal
        for tracker in wiring.callbacks.trackers:
            close = getattr(tracker, "close", None)
            if callable(close):
                close("KILLED" if stopped else "FAILED")
        raise


# -- 1. setup ------------------------------------------------------------------------------

def _set_up(loaded: LoadedConfig, sources: dict[str, str], prepared: Prepared) -> Setup:
    """Threads, seed, the task's model, the backend, and the weights as the fit trains
    them: all before the plan, whose memory probe and timed steps measure them."""
    cfg = loaded.config
    tcfg = cfg.train
    threads = configure_threads(tcfg.num_threads)
    task = get_task(cfg.task)
    # Built before the backend (on the CPU, as before): `precision: auto` on a CPU depends on
    # the model's size. Its initial weights depend on the seed alone.
    seed_everything(tcfg.seed)
    model = task.build_model(loaded, sources, prepared)
    backend = create_backend(accelerator=tcfg.accelerator, devices=tcfg.devices,
                             precision=tcfg.precision, seed=tcfg.seed,
                             deterministic=tcfg.deterministic, num_nodes=tcfg.num_nodes,
                             strategy=tcfg.strategy,
                             cpu_bf16=auto_cpu_bf16(model, tcfg.precision))
    log.info("device %s, precision %s, %d CPU thread%s", backend.device, backend.precision,
             threads, "" if threads == 1 else "s")
    if backend.accelerator == "cpu":  # before any step writes them (engine/mapped.py)
        _note(copy_mapped_weights(model))
    attention = getattr(cfg.model, "attn_implementation", None)
    if attention is not None:  # before the plan: its memory probe and timed steps use it
        _note(apply_attention(model, attention, device=backend.accelerator,
                              precision=backend.precision, batch_size=tcfg.batch_size,
                              max_length=getattr(prepared, "max_length", None) or 512,
                              threads=threads, cache_dir=cache_root(loaded)))
    # Before the plan (its memory probe measures the stored weights); not under sharded
    # strategies, which flatten parameters into groups of one dtype.
    if tcfg.strategy not in ("fsdp", "deepspeed"):
        _note(store_frozen_weights(model, getattr(cfg.model, "base_dtype", None),
                                   backend.precision))
    return Setup(task, model, backend, threads, getattr(prepared, "max_length", None))


def _note(note: str | None) -> None:
    if note:
        log.info(note)


# -- 2. plan -------------------------------------------------------------------------------

def _plan(loaded: LoadedConfig, sources: dict[str, str], prepared: Prepared, setup: Setup,
          paths: RunPaths, *, resumed: bool, price: HourlyPrice) -> Planned:
    """``plan.json`` (rank 0), then what the plan changes: ``train.budget`` caps the planned
    time (and re-plans the fit's steps as it goes: :func:`_budget_fit`), and the planned
    time decides ``train.compile: auto``.

    Raises:
        ResourceError: On a CPU, the batch would not fit in the available RAM.
        ConfigError: ``train.budget`` with several processes, or a money budget without a
            price.
    """
    tcfg = loaded.config.train
    backend = setup.backend
    fit_plan = plan_run(loaded, sources, prepared, setup.model, paths.plan,
                        accelerator=backend.accelerator, precision=backend.precision,
                        # fixed-size inputs (tables, images): one "token" a sample
                        max_length=setup.max_length or 1, resumed=resumed) \
        if setup.leader else None
    # The plan's time model is fitted to the fit's own optimizer steps 2 to 6 (a GPU's short
    # steps: 2 to 11), so planning costs no training time.
    step_timing = StepTiming(10 if backend.accelerator == "cuda" else 5,
                             lambda shapes: plan_timed(fit_plan, shapes, paths.plan)) \
        if fit_plan is not None and fit_plan.needs_timing else None
    budget_s = (budget_seconds(tcfg.budget, price.usd_per_hour, price.source)
                if tcfg.budget else None)
    if budget_s is not None and setup.world > 1:  # each process would re-plan on its own clock
        raise ConfigError(
            f"train.budget {tcfg.budget!r} with {setup.world} processes: a budget is re-planned "
            f"from one process's clock, and the processes would stop at different steps; train "
            f"on one device (train.devices: 1), or end the run with train.max_time instead")
    planned_s = _planned_train_s(fit_plan.document if fit_plan else None)
    if budget_s is not None and planned_s is not None:
        planned_s = min(planned_s, budget_s)
    decision = compile_decision(tcfg.compile, backend.accelerator, planned_s,
                                backend.precision, _cpu_features(backend.accelerator),
                                sum(p.numel() for p in setup.model.parameters()))
    log.info("compile: %s (%s)", "on" if decision.compile else "off", decision.reason)
    return Planned(fit_plan, step_timing, budget_s, decision.compile)


def _budget_fit(loaded: LoadedConfig, prepared: Prepared, setup: Setup, planned: Planned, *,
                schedule: LRSchedule, train: Any, started_at: float, resumed: bool,
                emit: Callable[..., None] | None) -> BudgetFit | None:
    """The budget's re-planning during the fit (``train.budget``; ``None`` without one): the
    steps it buys, laid over ``schedule`` and re-fitted to the fit's own times. Built before
    anything is fitted: a budget too small is refused.

    Raises:
        ConfigError: The budget is too small (fresh runs only).
    """
    if planned.budget_s is None:
        return None
    tcfg = loaded.config.train
    splits = prepared.splits
    steps_per_epoch = math.ceil(len(train.plan(0)) / tcfg.gradient_accumulation_steps)
    task, model = setup.task, setup.model
    return build_budget(
        planned.budget_s, started_at, schedule,
        plan=planned.document, steps_per_epoch=steps_per_epoch,
        cap_steps=(min(steps_per_epoch * tcfg.max_epochs, tcfg.max_steps) if tcfg.max_steps
                   else steps_per_epoch * tcfg.max_epochs),
        batch_size=tcfg.batch_size, validation_rows=len(splits.validation),
        test_rows=len(splits.test) if splits.test is not None else 0,
        restore_best_weights=tcfg.restore_best_weights,
        evals_per_epoch=tcfg.evals_per_epoch,
        tail_s=remembered_tail_s(cache_root(loaded), loaded.config.task) or DEFAULT_TAIL_S,
        resumed=resumed, emit=emit,
        forward_share=task.forward_share(unwrap(model))
        if hasattr(task, "forward_share") else None)


# -- 3. fit --------------------------------------------------------------------------------

def _batches(loaded: LoadedConfig, prepared: Prepared, setup: Setup,
             role: str) -> TaskBatches:
    """The task's batches of ``role``: shuffled at ``train.batch_size`` for ``train``, else
    in order at the evaluation batch size."""
    tcfg = loaded.config.train
    shuffle = role == "train"
    return setup.task.batches(loaded, prepared, role, shuffle=shuffle,
                              batch_size=tcfg.batch_size if shuffle
                              else tcfg.eval_batch_size or 2 * tcfg.batch_size)


def _wire(loaded: LoadedConfig, prepared: Prepared, setup: Setup, planned: Planned,
          paths: RunPaths, *, console: Any, extra: Sequence[Callback], started_at: float,
          resumed: bool) -> Wiring:
    """The batches, AdamW, compilation (in place: ``state_dict`` keys, checkpoints and
    exports unchanged), the backend's setup, the evaluation and the callbacks."""
    tcfg = loaded.config.train
    task, backend, world = setup.task, setup.backend, setup.world
    train_data = _batches(loaded, prepared, setup, "train")
    fit_data: Any = train_data
    if world > 1:  # each rank takes its share of a global batch of batch_size x world
        fit_data = ShardedBatches(
            task.batches(loaded, prepared, "train", shuffle=True,
                         batch_size=tcfg.batch_size * world),
            backend.global_rank, world)
    validation_data = _batches(loaded, prepared, setup, "validation")
    optimizer = build_optimizer(setup.model, tcfg.learning_rate, tcfg.weight_decay,
                                fused=fused_optimizer(backend.accelerator))
    if planned.compile:
        compile_model(setup.model)
    model, optimizer = backend.setup(setup.model, optimizer)
    last_evaluation: list[tuple[Any, Any, float]] = []  # this process's latest, for reuse

    def evaluate(current_model: Any) -> dict[str, float]:
        outputs, targets, loss = predict(backend, current_model, validation_data, task.loss)
        last_evaluation[:] = [(outputs, targets, loss)]
        return {"loss": loss, **task.evaluate(outputs, targets, prepared)}

    chosen = _callbacks(loaded, prepared, setup, planned, paths, fit_data,
                        train_data.lengths, console=console, extra=extra,
                        started_at=started_at, resumed=resumed)
    return Wiring(model, optimizer, fit_data, validation_data, evaluate, last_evaluation,
                  chosen)


def _callbacks(loaded: LoadedConfig, prepared: Prepared, setup: Setup, planned: Planned,
               paths: RunPaths, train: Any, lengths: Any, *, console: Any,
               extra: Sequence[Callback], started_at: float, resumed: bool) -> Callbacks:
    """The built-in callbacks, the trackers, the named and the caller's callbacks, in the
    order each event calls them (docs/architecture.md gives the order's reasons)."""
    cfg = loaded.config
    tcfg = cfg.train
    backend, leader = setup.backend, setup.leader
    es = tcfg.early_stopping
    monitor = Monitor(es.monitor, _monitor_mode(setup.task, es.monitor, es.mode), es.min_delta)
    early_stopping = EarlyStopping(monitor, es.patience) if es.enabled else None
    schedule = LRSchedule(tcfg.scheduler, tcfg.warmup_fraction, monitor,
                          factor=tcfg.plateau_factor, patience=tcfg.plateau_patience,
                          peak_learning_rate=tcfg.learning_rate)
    checkpoint = ModelCheckpoint(paths.checkpoints if leader else None, monitor,
                                 restore=tcfg.restore_best_weights)
    preemption = Preemption()
    time_limit = TimeLimit(parse_duration_s(tcfg.max_time)) if tcfg.max_time else None
    trackers = build_trackers(cfg.tracking.backends, TrackingContext(
        run_name=cfg.name, run_dir=paths.root, runs_root=paths.runs_root,
        experiment=cfg.tracking.experiment, uri=cfg.tracking.uri,
        every_steps=tcfg.log_every_steps)) if cfg.tracking.enabled and leader else []
    event_log = EventLog(paths.events, tcfg.log_every_steps)
    budget = _budget_fit(loaded, prepared, setup, planned, schedule=schedule, train=train,
                         started_at=started_at, resumed=resumed,
                         emit=event_log.write if leader else None)
    efficiency = build_monitor(
        plan=planned.document, lengths=lengths, accelerator=backend.accelerator,
        precision=backend.precision, threads=setup.threads, cache_dir=cache_root(loaded),
        every_steps=tcfg.log_every_steps, emit=event_log.write,
        peak_memory=lambda: peak_memory_bytes(backend.accelerator),
        memory_now=lambda: memory_in_use_bytes(backend.accelerator))
    chain: list[Callback] = [
        schedule, *([budget] if budget else []),
        *([early_stopping] if early_stopping else []), checkpoint,
        PeriodicCheckpoint(tcfg.checkpoint.every_steps, tcfg.checkpoint.every_minutes),
        preemption, *([time_limit] if time_limit else []),
        *([efficiency, event_log, ProgressBar(_console(console))] if leader else []),
        *([planned.step_timing] if planned.step_timing else []),
        # every tracker is a Callback too (tracking.base.Tracker: what a tracker does
        # besides reacting to the loop's events)
        *cast("list[Callback]", trackers), *build_callbacks(tcfg.callbacks), *extra]
    return Callbacks(chain, checkpoint, preemption, budget, efficiency, trackers)


def _resume(wiring: Wiring, setup: Setup, resume: CheckpointInfo | None,
            paths: RunPaths) -> tuple[TrainState, Any]:
    """A fresh :class:`TrainState`, or the one ``resume`` holds restored with the model,
    optimizer and callbacks; and the checkpoint's random state (``None`` when fresh).

    Raises:
        ConfigError: The checkpoint does not fit this model or optimizer.
    """
    state = TrainState()
    if resume is None:
        return state, None
    payload = CheckpointStore(paths.checkpoints).load(resume)
    try:
        restore_training(payload, state, model=wiring.model, optimizer=wiring.optimizer,
                         backend=setup.backend, callbacks=wiring.callbacks.all,
                         on_mismatch=log.info)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise ConfigError(
            f"{resume.path}: the checkpoint does not fit this model or optimizer "
            f"({type(exc).__name__}: {str(exc).splitlines()[0]}); the config changed too much "
            f"to resume: use --restart or another --run-dir") from exc
    return state, payload["rng"]


def _run_loop(loaded: LoadedConfig, prepared: Prepared, setup: Setup, wiring: Wiring,
              paths: RunPaths, state: TrainState, rng_state: Any,
              config_hash: str) -> TrainState:
    """The loop, from ``state``; then a stop signal or a non-finite stop ends the run.

    Raises:
        Interrupted: A stop signal arrived; a checkpoint was saved.
        NonFiniteError: ``train.on_nonfinite: stop`` and a loss or gradient went NaN/Inf.
    """
    tcfg = loaded.config.train
    backend, splits = setup.backend, prepared.splits
    save_checkpoint = _checkpoint_saver(loaded, setup, wiring, paths, config_hash)
    # the model's outputs: classes, or a multi-label task's tags (its label map holds sets)
    outputs_named = list(getattr(prepared, "tags", splits.labels))
    log.info("training on %d examples, validating on %d%s", len(splits.train),
             len(splits.validation), f"; {len(outputs_named)} labels: "
             f"{short_list(outputs_named)}" if outputs_named else "")
    reset_peak_memory(backend.accelerator)  # the fit's own peak, after planning's probe
    preemption = wiring.callbacks.preemption
    with preemption.installed():
        if rng_state is not None:
            restore_rng(rng_state)  # last thing before the loop: nothing may draw in between
        else:
            # The loop's random stream (dropout) depends on the seed alone, whatever planning,
            # probes or monitors drew since the model was built: a measurement read from a
            # cache draws nothing, one taken fresh may (a cache hit must not change results).
            backend.seed(tcfg.seed + 1)
        state = fit(backend=backend, model=wiring.model, optimizer=wiring.optimizer,
                    train=wiring.train, loss=setup.task.loss, evaluate=wiring.evaluate,
                    settings=_fit_settings(loaded, backend.precision),
                    callbacks=wiring.callbacks.all, state=state,
                    save_checkpoint=save_checkpoint)
    if preemption.signal_name and not state.interrupted:
        # It came as the fit ended (no step left to stop at): stop as outside the fit.
        signal.raise_signal(getattr(signal, preemption.signal_name))
    if state.interrupted == "nonfinite":
        raise nonfinite_error(state, paths, splits, loaded)
    if state.interrupted:
        raise interrupted_error(state, preemption)
    return state


def _fit_settings(loaded: LoadedConfig, precision: str) -> FitSettings:
    tcfg = loaded.config.train
    return FitSettings(max_epochs=tcfg.max_epochs, max_steps=tcfg.max_steps,
                       gradient_accumulation_steps=tcfg.gradient_accumulation_steps,
                       gradient_clip_norm=tcfg.gradient_clip_norm,
                       evals_per_epoch=tcfg.evals_per_epoch,
                       on_nonfinite=tcfg.on_nonfinite,
                       check_gradients=precision != "16-mixed",
                       divergence_factor=tcfg.divergence_factor,
                       max_skipped_fraction=tcfg.max_skipped_fraction)


def _checkpoint_saver(loaded: LoadedConfig, setup: Setup, wiring: Wiring, paths: RunPaths,
                      config_hash: str) -> Callable[[TrainState, str], dict[str, Any]]:
    """The loop's ``save_checkpoint``: rank 0 writes the training state with the resolved
    config (as ``api/training.py`` hashes and compares it); other ranks write nothing."""
    tcfg = loaded.config.train
    store = CheckpointStore(paths.checkpoints)
    resolved = loaded.portable_dump()

    def save_checkpoint(current: TrainState, reason: str) -> dict[str, Any]:
        if not setup.leader:
            return {"step": current.step, "path": None}
        started = time.perf_counter()
        payload = training_payload(current, model=wiring.model, optimizer=wiring.optimizer,
                                   backend=setup.backend, callbacks=wiring.callbacks.all,
                                   config_hash=config_hash)
        info = store.save(payload, {"step": current.step, "epoch": current.epoch,
                                    "batch_in_epoch": current.batch_in_epoch, "reason": reason,
                                    "config_hash": config_hash, "config": resolved},
                          keep_last=tcfg.checkpoint.keep_last,
                          protect_steps=[current.best_step])
        write_s = time.perf_counter() - started
        log.debug("checkpoint %s (%s): %d bytes in %.3fs", info.path.name, reason, info.bytes,
                  write_s)
        return {"path": str(info.path), "step": info.step, "bytes": info.bytes,
                "write_s": write_s, "saved_monotonic": time.monotonic()}

    return save_checkpoint


# -- 4. finish -----------------------------------------------------------------------------

def _finish(loaded: LoadedConfig, prepared: Prepared, setup: Setup, planned: Planned,
            wiring: Wiring, state: TrainState, paths: RunPaths, *, wall_start: float,
            fit_ended_at: float, cost_from: tuple[float, HourlyPrice]) -> dict[str, Any]:
    """Validation with the restored weights, the test split and the fit figures (every
    rank); rank 0 then judges (:func:`_judge`) and saves (:func:`_save`).

    Raises:
        NonFiniteError: The weights or their validation loss are not finite.
    """
    metrics, scored = _final_evaluation(loaded, prepared, setup, wiring, state)
    # The plan's peak covers the training steps and every evaluation pass (during the fit,
    # the final validation and the test); the baselines, fitted next, are outside both.
    fit_peak_bytes = peak_memory_bytes(setup.backend.accelerator)
    metrics["fit"] = _fit_figures(setup, wiring, state, fit_peak_bytes, wall_start)
    budget = wiring.callbacks.budget
    if budget is not None:  # used_s, overshoot_s and the tail: completed by the api
        now = time.time()
        metrics["budget"] = {**budget.summary(state), "fit_ended_at": fit_ended_at,
                             "tail_started_at": now, "summarised_at": now}
    if not setup.leader:  # rank 0 tests, compares, saves and tracks
        return metrics
    _judge(loaded, prepared, setup, planned, wiring, state, metrics, scored, fit_peak_bytes)
    _save(loaded, prepared, setup, wiring, paths, metrics, scored, cost_from)
    return metrics


def _final_evaluation(loaded: LoadedConfig, prepared: Prepared, setup: Setup, wiring: Wiring,
                      state: TrainState) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]]]:
    """``metrics`` with ``validation`` (the weights kept) and ``test``, and the outputs and
    targets of each split (``scored``, for ``predictions/``)."""
    task, backend, model = setup.task, setup.backend, wiring.model
    metrics: dict[str, Any] = {}
    scored: dict[str, tuple[Any, Any]] = {}  # role -> (outputs, targets), for predictions/
    # The fit's last evaluation saw these very weights when it was at the step they are
    # from (the restored best step, or the final one): its outputs are reused, not recomputed.
    restored = wiring.callbacks.checkpoint.restored
    weights_step = state.best_step if restored else state.step
    if (wiring.last_evaluation and state.history
            and state.history[-1]["step"] == weights_step):
        outputs, targets, loss = wiring.last_evaluation[0]
    else:
        outputs, targets, loss = predict(backend, model, wiring.validation, task.loss)
    metrics["validation"] = {"loss": loss, **task.evaluate(outputs, targets, prepared)}
    scored["validation"] = (outputs, targets)  # with the restored best weights
    refuse_nonfinite_model(model, metrics["validation"], state, restored)
    if prepared.splits.test is not None:
        outputs, targets, loss = predict(backend, model,
                                         _batches(loaded, prepared, setup, "test"), task.loss)
        metrics["test"] = {"loss": loss, **task.evaluate(outputs, targets, prepared,
                                                         detailed=True)}
        scored["test"] = (outputs, targets)
    return metrics, scored


def _fit_figures(setup: Setup, wiring: Wiring, state: TrainState,
                 fit_peak_bytes: int | None, wall_start: float) -> dict[str, Any]:
    """``metrics.json``'s ``fit``: what the loop did, how fast, on what."""
    backend = setup.backend
    return {
        "epochs": state.epoch + (1 if state.batch_in_epoch else 0),
        "steps": state.step,
        "best_step": state.best_step,
        "restored_best_weights": wiring.callbacks.checkpoint.restored,
        "stop_reason": state.stop_reason,
        "skipped_steps": state.skipped_steps,
        "resumes": state.resumes,
        "micro_batch_size": state.micro_batch_size,
        "out_of_memory_retries": state.out_of_memory_retries,
        "train_time_s": state.train_time_s,
        "wall_time_s": time.perf_counter() - wall_start,
        "throughput_samples_per_s": state.samples_seen / max(state.train_time_s, 1e-9),
        "throughput_tokens_per_s": state.tokens_seen / max(state.train_time_s, 1e-9),
        "padding_fraction": state.padding_fraction,
        "max_length": setup.max_length,
        "precision": backend.precision,
        "device": str(backend.device),
        "peak_memory_bytes": fit_peak_bytes,
        "threads": setup.threads,
        "world_size": setup.world,
    }


def _judge(loaded: LoadedConfig, prepared: Prepared, setup: Setup, planned: Planned,
           wiring: Wiring, state: TrainState, metrics: dict[str, Any],
           scored: dict[str, tuple[Any, Any]], fit_peak_bytes: int | None) -> None:
    """Add to ``metrics`` the baselines' verdict, the data's sizes, the history, plan
    against actual, efficiency and the diagnosis; log the findings that need a change."""
    task, splits = setup.task, prepared.splits
    # Under the run's precision, as the model's evaluation: a baseline that is a network
    # (the base model zero-shot) computes as the model does; table baselines ignore it.
    with setup.backend.autocast():
        found = task.baselines(loaded, prepared)
    compared = "test" if "test" in metrics else "validation"
    rows_of = getattr(task, "comparison_rows", None)  # optional: per-example rows
    model_rows = (rows_of(*scored[compared], prepared)
                  if rows_of is not None and compared in scored else None)
    metrics["baseline"] = baseline_verdict(found, metrics, task, model_rows)
    advice = getattr(task, "advice", None)  # optional: what a task says about its baselines
    finding = advice(metrics["baseline"]["comparison"], metrics["baseline"]) if advice else None
    metrics["data"] = {"train_rows": len(splits.train),
                       "validation_rows": len(splits.validation),
                       "test_rows": len(splits.test) if splits.test is not None else 0,
                       **({"labels": list(getattr(prepared, "tags", splits.labels))}
                          if splits.labels else {})}
    metrics["history"] = state.history
    plan = planned.document  # timed by the fit's first steps
    comparison = plan_vs_actual(plan, peak_memory_bytes=fit_peak_bytes,
                                train_time_s=state.train_time_s,
                                samples_seen=state.samples_seen, train_rows=len(splits.train))
    if comparison is not None:
        metrics["plan_vs_actual"] = comparison
    fit_plan = planned.fit_plan
    remembered = fit_plan is not None and fit_plan.record_peak(fit_peak_bytes or 0)
    metrics["efficiency"], metrics["diagnosis"] = efficiency_metrics(
        state, wiring.callbacks.efficiency, precision=setup.backend.precision,
        max_epochs=loaded.config.train.max_epochs, plan=plan, plan_vs_actual=comparison,
        peak_remembered=remembered)
    # The task's own advice speaks for the baselines when it has some (the tabular task's
    # trees_enough); the generic tie or loss is already logged by baseline_verdict.
    generic = baseline_finding(metrics["baseline"]["comparison"]) if finding is None else None
    no_test = no_test_finding(metrics)
    one_class = one_class_finding(metrics)
    one_answer = one_answer_finding(metrics)
    _warn(finding, no_test, one_class, one_answer)
    no_signal = mean_finding(metrics["baseline"]["comparison"], metrics)
    every_tag = every_tag_finding(model_rows, compared)
    constant = constant_value_finding(model_rows, compared)
    _warn(no_signal, every_tag, constant)
    own = [f for f in (one_class, one_answer, every_tag, constant, no_signal, finding, generic,
                       no_test) if f is not None]
    metrics["diagnosis"] = order_findings([*own, *(metrics["diagnosis"] or [])])


def _warn(*findings: dict[str, Any] | None) -> None:
    for found in findings:
        if found is not None:
            log.warning("%s: %s; %s", found["figure"], found["message"], found["change"])


def _save(loaded: LoadedConfig, prepared: Prepared, setup: Setup, wiring: Wiring,
          paths: RunPaths, metrics: dict[str, Any], scored: dict[str, tuple[Any, Any]],
          cost_from: tuple[float, HourlyPrice]) -> None:
    """``predictions/``, the model, the cost, ``metrics.json`` (temp file + rename),
    ``report.html`` (a budgeted run's follows its registration) and the trackers' end."""
    predictions = write_predictions(setup.task, loaded, prepared, scored, paths.predictions)
    if predictions:
        metrics["predictions"] = predictions
    setup.task.save_model(unwrap(wiring.model), prepared, paths.model)
    metrics["cost"] = run_cost(time.perf_counter() - cost_from[0], cost_from[1])
    tmp = paths.metrics.with_name(".metrics.json.tmp")
    tmp.write_text(dumps_strict(metrics, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, paths.metrics)
    if wiring.callbacks.budget is None:  # a budgeted run's report follows its registration
        write_report(paths)
    for tracker in wiring.callbacks.trackers:
        tracker.finish({k: v for k, v in metrics.items() if k != "history"},
                       [paths.metrics, paths.config, paths.data_report])


def _monitor_mode(task: AnyTask, key: str, mode: str) -> str:
    """``min``/``max`` for the monitored ``validation.<metric>``: as configured, or for
    ``auto`` as the task declares it (the metric-key table for metrics it does not name)."""
    if mode != "auto":
        return mode
    declared = getattr(task, "higher_is_better", {}).get(key.split(".", 1)[-1])
    return "auto" if declared is None else ("max" if declared else "min")


def write_report(paths: RunPaths) -> None:
    """report.html at the end of the fit; a report bug never costs the run."""
    from entrena.reporting.html import write_report

    try:
        log.info("report: %s", write_report(paths.root))
    except Exception as exc:  # noqa: BLE001
        log.warning("could not write report.html (%s: %s); run `entrena report %s`",
                    type(exc).__name__, exc, paths.root)
        log.debug("report failure", exc_info=True)


