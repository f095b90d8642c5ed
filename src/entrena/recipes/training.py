"""The training recipe: the torch side of ``entrena.train``, read top to bottom in
:func:`run_fit`.

1. Threads, seed, the task's model (built on the CPU first: ``precision: auto`` on a CPU
   depends on its size), the Fabric backend.
2. The plan (``plan.json``, rank 0 only: the memory of a step at the longest batch, measured
   on a copy of the model; its time figures fitted to the fit's own first steps).
3. The task's batches (sharded under several processes), AdamW, the backend's setup.
4. Callbacks, in order: LR schedule, early stopping, best weights, periodic checkpoints,
   preemption, time limit, efficiency monitor, ``events.jsonl``, progress bar, the trackers
   ``tracking.backends`` names (:mod:`entrena.tracking.base`), the callbacks
   ``train.callbacks`` names (:mod:`entrena.callbacks.registry`), the caller's.
5. Restore a checkpoint (resume), start the trackers, fit (the loop gets the task's loss).
6. A stop signal or a non-finite stop ends here with what was saved; otherwise validation
   again with the restored weights (a non-finite model is never saved), the test split, the
   fit figures, the task's baselines and advice, plan against actual, efficiency and the
   diagnosis.
7. The task saves the model; ``metrics.json``, ``report.html``; the trackers finish.

The task comes from the registry and is called through its protocol; nothing here names one.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Sequence
from typing import Any

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
from entrena.core.files import dumps_strict, write_json_atomic
from entrena.core.rundir import RunPaths
from entrena.core.state import TrainState
from entrena.data.splits import LabelledSplits
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
from entrena.errors import ConfigError, Interrupted, NonFiniteError
from entrena.hardware.catalog import load_catalog
from entrena.hardware.cost import HourlyPrice, hourly_price, run_cost
from entrena.planning.budget import budget_seconds
from entrena.recipes.budget import DEFAULT_TAIL_S, build_budget, remembered_tail_s
from entrena.recipes.efficiency import build_monitor, efficiency_metrics
from entrena.recipes.planning import (
    memory_in_use_bytes,
    peak_memory_bytes,
    plan_run,
    plan_timed,
    plan_vs_actual,
    reset_peak_memory,
)
from entrena.recipes.predictions import write_predictions
from entrena.recipes.verdicts import (
    baseline_finding,
    baseline_verdict,
    constant_value_finding,
    every_tag_finding,
    mean_finding,
    no_test_finding,
    one_class_finding,
)
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
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if param.ndim < 2 else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, fused=fused or None)


def _cache_dir(loaded: LoadedConfig) -> Any:
    from entrena.data.cache import default_cache_dir

    configured = loaded.config.data.cache_dir
    return default_cache_dir(loaded.resolve_path(configured) if configured else None)


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
    local = next((o for o in (plan or {}).get("options", []) if o.get("kind") == "local"), {})
    return local.get("total_time_s")


def run_fit(loaded: LoadedConfig, paths: RunPaths, sources: dict[str, str],
            prepared: Any, console: Any = None, *, resume: CheckpointInfo | None = None,
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
    if cost_from is None:
        cost_from = (wall_start, hourly_price(load_catalog()))
    cfg = loaded.config
    tcfg = cfg.train
    threads = configure_threads(tcfg.num_threads)
    task = get_task(cfg.task)
    splits = prepared.splits
    # Built before the backend (on the CPU, as before): `precision: auto` on a CPU depends on
    # the model's size. Its initial weights depend on the seed alone.
    seed_everything(tcfg.seed)
    model = task.build_model(loaded, sources, prepared)
    backend = create_backend(accelerator=tcfg.accelerator, devices=tcfg.devices,
                             precision=tcfg.precision, seed=tcfg.seed,
                             deterministic=tcfg.deterministic, num_nodes=tcfg.num_nodes,
                             strategy=tcfg.strategy,
                             cpu_bf16=auto_cpu_bf16(model, tcfg.precision))
    world, leader = backend.world_size, backend.is_global_zero  # only rank 0 writes and tracks
    log.info("device %s, precision %s, %d CPU threads", backend.device, backend.precision, threads)
    if backend.accelerator == "cpu":  # before any step writes them (engine/mapped.py)
        note = copy_mapped_weights(model)
        if note:
            log.info(note)
    attention = getattr(cfg.model, "attn_implementation", None)
    if attention is not None:  # before the plan: its memory probe and timed steps use it
        note = apply_attention(model, attention, device=backend.accelerator,
                               precision=backend.precision, batch_size=tcfg.batch_size,
                               max_length=getattr(prepared, "max_length", None) or 512,
                               threads=threads, cache_dir=_cache_dir(loaded))
        if note:
            log.info(note)
    # Before the plan (its memory probe measures the stored weights); not under sharded
    # strategies, which flatten parameters into groups of one dtype.
    if tcfg.strategy not in ("fsdp", "deepspeed"):
        note = store_frozen_weights(model, getattr(cfg.model, "base_dtype", None),
                                    backend.precision)
        if note:
            log.info(note)
    max_length = getattr(prepared, "max_length", None)  # text only: tokens
    plan_length = max_length or 1  # fixed-size inputs (tables, images): one "token" a sample

    fit_plan = plan_run(loaded, sources, prepared, model, paths.plan,
                        accelerator=backend.accelerator, precision=backend.precision,
                        max_length=plan_length, resumed=resume is not None) if leader else None
    plan = fit_plan.document if fit_plan else None
    # The plan's time model is fitted to the fit's own optimizer steps 2 to 6 (a GPU's short
    # steps: 2 to 11), so planning costs no training time.
    step_timing = StepTiming(10 if backend.accelerator == "cuda" else 5,
                             lambda shapes: plan_timed(fit_plan, shapes, paths.plan)) \
        if fit_plan is not None and fit_plan.needs_timing else None

    eval_batch = tcfg.eval_batch_size or 2 * tcfg.batch_size

    def batches(role: str, shuffle: bool) -> Any:
        return task.batches(loaded, prepared, role, shuffle=shuffle,
                            batch_size=tcfg.batch_size if shuffle else eval_batch)

    train_data = batches("train", shuffle=True)
    fit_data: Any = train_data
    if world > 1:  # each rank takes its share of a global batch of batch_size x world
        fit_data = ShardedBatches(
            task.batches(loaded, prepared, "train", shuffle=True,
                         batch_size=tcfg.batch_size * world),
            backend.global_rank, world)
    validation_data = batches("validation", shuffle=False)
    budget_s = (budget_seconds(tcfg.budget, cost_from[1].usd_per_hour, cost_from[1].source)
                if tcfg.budget else None)
    if budget_s is not None and world > 1:  # each process would re-plan on its own clock
        raise ConfigError(
            f"train.budget {tcfg.budget!r} with {world} processes: a budget is re-planned from "
            f"one process's clock, and the processes would stop at different steps; train on "
            f"one device (train.devices: 1), or end the run with train.max_time instead")
    optimizer = build_optimizer(model, tcfg.learning_rate, tcfg.weight_decay,
                                fused=fused_optimizer(backend.accelerator))
    planned_s = _planned_train_s(plan)
    if budget_s is not None and planned_s is not None:
        planned_s = min(planned_s, budget_s)
    decision = compile_decision(tcfg.compile, backend.accelerator, planned_s,
                                backend.precision, _cpu_features(backend.accelerator),
                                sum(p.numel() for p in model.parameters()))
    log.info("compile: %s (%s)", "on" if decision.compile else "off", decision.reason)
    if decision.compile:  # in place: state_dict keys, checkpoints and exports unchanged
        compile_model(model)
    model, optimizer = backend.setup(model, optimizer)

    last_evaluation: list[tuple[Any, Any, float]] = []  # this process's latest, for reuse

    def evaluate(current_model: Any) -> dict[str, float]:
        outputs, targets, loss = predict(backend, current_model, validation_data, task.loss)
        last_evaluation[:] = [(outputs, targets, loss)]
        return {"loss": loss, **task.evaluate(outputs, targets, prepared)}

    es = tcfg.early_stopping
    monitor = Monitor(es.monitor, _monitor_mode(task, es.monitor, es.mode), es.min_delta)
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
    budget = None
    if budget_s is not None:  # before anything is fitted: a budget too small is refused
        steps_per_epoch = math.ceil(len(fit_data.plan(0)) / tcfg.gradient_accumulation_steps)
        budget = build_budget(
            budget_s, time.time() - (time.perf_counter() - wall_start)
            if budget_started_at is None else budget_started_at, schedule,
            plan=plan, steps_per_epoch=steps_per_epoch,
            cap_steps=min(steps_per_epoch * tcfg.max_epochs, tcfg.max_steps or math.inf),
            batch_size=tcfg.batch_size, validation_rows=len(splits.validation),
            test_rows=len(splits.test) if splits.test is not None else 0,
            restore_best_weights=tcfg.restore_best_weights,
            evals_per_epoch=tcfg.evals_per_epoch,
            tail_s=remembered_tail_s(_cache_dir(loaded), cfg.task) or DEFAULT_TAIL_S,
            resumed=resume is not None, emit=event_log.write if leader else None,
            forward_share=task.forward_share(unwrap(model))
            if hasattr(task, "forward_share") else None)
    efficiency = build_monitor(
        plan=plan, lengths=train_data.lengths, accelerator=backend.accelerator,
        precision=backend.precision, threads=threads, cache_dir=_cache_dir(loaded),
        every_steps=tcfg.log_every_steps, emit=event_log.write,
        peak_memory=lambda: peak_memory_bytes(backend.accelerator),
        memory_now=lambda: memory_in_use_bytes(backend.accelerator))
    all_callbacks = [schedule, *([budget] if budget else []),
                     *([early_stopping] if early_stopping else []), checkpoint,
                     PeriodicCheckpoint(tcfg.checkpoint.every_steps,
                                        tcfg.checkpoint.every_minutes),
                     preemption, *([time_limit] if time_limit else []),
                     *([efficiency, event_log, ProgressBar(_console(console))] if leader
                       else []),
                     *([step_timing] if step_timing else []),
                     *trackers, *build_callbacks(tcfg.callbacks), *callbacks]

    state = TrainState()
    store = CheckpointStore(paths.checkpoints)
    rng_state = None
    if resume is not None:
        payload = store.load(resume)
        try:
            restore_training(payload, state, model=model, optimizer=optimizer, backend=backend,
                             callbacks=all_callbacks, on_mismatch=log.info)
        except (RuntimeError, ValueError, KeyError) as exc:
            raise ConfigError(
                f"{resume.path}: the checkpoint does not fit this model or optimizer "
                f"({type(exc).__name__}: {str(exc).splitlines()[0]}); the config changed too much "
                f"to resume: use --restart or another --run-dir") from exc
        rng_state = payload["rng"]
        del payload
    for tracker in trackers:
        tracker.start(cfg.model_dump(mode="json"),
                      tags={"entrena.run_dir": str(paths.root.resolve()),
                            **(tracking_tags or {})})
    try:
        resolved = loaded.portable_dump()  # as training.py hashes and compares it

        def save_checkpoint(current: TrainState, reason: str) -> dict[str, Any]:
            if not leader:
                return {"step": current.step, "path": None}
            started = time.perf_counter()
            payload = training_payload(current, model=model, optimizer=optimizer, backend=backend,
                                       callbacks=all_callbacks, config_hash=config_hash)
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

        settings = FitSettings(max_epochs=tcfg.max_epochs, max_steps=tcfg.max_steps,
                               gradient_accumulation_steps=tcfg.gradient_accumulation_steps,
                               gradient_clip_norm=tcfg.gradient_clip_norm,
                               evals_per_epoch=tcfg.evals_per_epoch,
                               on_nonfinite=tcfg.on_nonfinite,
                               check_gradients=backend.precision != "16-mixed",
                               divergence_factor=tcfg.divergence_factor,
                               max_skipped_fraction=tcfg.max_skipped_fraction)
        # the model's outputs: classes, or a multi-label task's tags (its label map holds sets)
        outputs_named = list(getattr(prepared, "tags", splits.labels))
        log.info("training on %d examples, validating on %d%s", len(splits.train),
                 len(splits.validation), f"; {len(outputs_named)} labels: "
                 f"{short_list(outputs_named)}" if outputs_named else "")
        reset_peak_memory(backend.accelerator)  # the fit's own peak, after planning's probe
        with preemption.installed():
            if rng_state is not None:
                restore_rng(rng_state)  # last thing before the loop: nothing may draw in between
            else:
                # The loop's random stream (dropout) depends on the seed alone, whatever planning,
                # probes or monitors drew since the model was built: a measurement read from a
                # cache draws nothing, one taken fresh may (a cache hit must not change results).
                backend.seed(tcfg.seed + 1)
            state = fit(backend=backend, model=model, optimizer=optimizer, train=fit_data,
                        loss=task.loss, evaluate=evaluate, settings=settings,
                        callbacks=all_callbacks, state=state, save_checkpoint=save_checkpoint)
        fit_ended_at = time.time()
        if preemption.signal_name and not state.interrupted:
            # It came as the fit ended (no step left to stop at): stop as outside the fit.
            signal.raise_signal(getattr(signal, preemption.signal_name))
        if state.interrupted == "nonfinite":
            raise _nonfinite_error(state, paths, splits, loaded)
        if state.interrupted:
            raise _interrupted_error(state, preemption)

        metrics: dict[str, Any] = {}
        scored: dict[str, tuple[Any, Any]] = {}  # role -> (outputs, targets), for predictions/
        # The fit's last evaluation saw these very weights when it was at the step they are
        # from (the restored best step, or the final one): its outputs are reused, not recomputed.
        weights_step = state.best_step if checkpoint.restored else state.step
        if last_evaluation and state.history and state.history[-1]["step"] == weights_step:
            outputs, targets, loss = last_evaluation[0]
        else:
            outputs, targets, loss = predict(backend, model, validation_data, task.loss)
        metrics["validation"] = {"loss": loss, **task.evaluate(outputs, targets, prepared)}
        scored["validation"] = (outputs, targets)  # with the restored best weights
        _refuse_nonfinite_model(model, metrics["validation"], state, checkpoint.restored)
        if splits.test is not None:
            outputs, targets, loss = predict(backend, model, batches("test", shuffle=False),
                                             task.loss)
            metrics["test"] = {"loss": loss, **task.evaluate(outputs, targets, prepared,
                                                             detailed=True)}
            scored["test"] = (outputs, targets)
        # The plan's peak covers the training steps and every evaluation pass (during the fit,
        # the final validation and the test); the baselines, fitted next, are outside both.
        fit_peak_bytes = peak_memory_bytes(backend.accelerator)
        metrics["fit"] = {
            "epochs": state.epoch + (1 if state.batch_in_epoch else 0),
            "steps": state.step,
            "best_step": state.best_step,
            "restored_best_weights": checkpoint.restored,
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
            "max_length": max_length,
            "precision": backend.precision,
            "device": str(backend.device),
            "peak_memory_bytes": fit_peak_bytes,
            "threads": threads,
            "world_size": world,
        }
        if budget is not None:  # used_s, overshoot_s and the tail: completed by the api
            now = time.time()
            metrics["budget"] = {**budget.summary(state), "fit_ended_at": fit_ended_at,
                                 "tail_started_at": now, "summarised_at": now}
        if not leader:  # rank 0 tests, compares, saves and tracks
            return metrics
        # Under the run's precision, as the model's evaluation: a baseline that is a network
        # (the base model zero-shot) computes as the model does; table baselines ignore it.
        with backend.autocast():
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
        plan = fit_plan.document if fit_plan else None  # timed by the fit's first steps
        comparison = plan_vs_actual(plan, peak_memory_bytes=fit_peak_bytes,
                                    train_time_s=state.train_time_s,
                                    samples_seen=state.samples_seen, train_rows=len(splits.train))
        if comparison is not None:
            metrics["plan_vs_actual"] = comparison
        remembered = fit_plan is not None and fit_plan.record_peak(fit_peak_bytes or 0)
        metrics["efficiency"], metrics["diagnosis"] = efficiency_metrics(
            state, efficiency, precision=backend.precision, max_epochs=tcfg.max_epochs, plan=plan,
            plan_vs_actual=comparison, peak_remembered=remembered)
        # The task's own advice speaks for the baselines when it has some (the tabular task's
        # trees_enough); the generic tie or loss is already logged by baseline_verdict.
        generic = baseline_finding(metrics["baseline"]["comparison"]) if finding is None else None
        no_test = no_test_finding(metrics)
        one_class = one_class_finding(metrics)
        for found in (finding, no_test, one_class):
            if found is not None:
                log.warning("%s: %s; %s", found["figure"], found["message"], found["change"])
        no_signal = mean_finding(metrics["baseline"]["comparison"], metrics)
        every_tag = every_tag_finding(model_rows, compared)
        constant = constant_value_finding(model_rows, compared)
        for found in (no_signal, every_tag, constant):
            if found is not None:
                log.warning("%s: %s; %s", found["figure"], found["message"], found["change"])
        own = [f for f in (one_class, every_tag, constant, no_signal, finding, generic, no_test)
               if f is not None]
        metrics["diagnosis"] = order_findings([*own, *(metrics["diagnosis"] or [])])

        predictions = write_predictions(task, loaded, prepared, scored, paths.predictions)
        if predictions:
            metrics["predictions"] = predictions
        task.save_model(unwrap(model), prepared, paths.model)
        metrics["cost"] = run_cost(time.perf_counter() - cost_from[0], cost_from[1])
        tmp = paths.metrics.with_name(".metrics.json.tmp")
        tmp.write_text(dumps_strict(metrics, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, paths.metrics)
        if budget is None:  # a budgeted run's report follows its registration (the time used)
            write_report(paths)
        for tracker in trackers:
            tracker.finish({k: v for k, v in metrics.items() if k != "history"},
                           [paths.metrics, paths.config, paths.data_report])
        return metrics
    except BaseException as exc:  # a run that ends early: trackers close what they opened
        stopped = isinstance(exc, Interrupted) or not isinstance(exc, Exception)  # a signal
        for tracker in trackers:
            close = getattr(tracker, "close", None)
            if callable(close):
                close("KILLED" if stopped else "FAILED")
        raise


def _monitor_mode(task: Any, key: str, mode: str) -> str:
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


def _interrupted_error(state: TrainState, preemption: Preemption) -> Interrupted:
    saved = state.last_checkpoint
    name = state.interrupted
    if saved and saved.get("reason") == name:
        delay = (saved["saved_monotonic"] - preemption.received_at
                 if preemption.received_at is not None else None)
        timing = f", {delay:.2f}s after the signal" if delay is not None else ""
        message = (f"saved checkpoint at step {saved['step']} ({name}){timing}: {saved['path']}; "
                   f"run the same command to resume")
        log.debug(message)
        return Interrupted(message, signal_name=name, step=int(saved["step"]),
                           signal_to_saved_s=delay)
    message = (f"stopped at step {state.step} ({name}); nothing new to save since the "
               f"checkpoint it resumed from; run the same command to resume")
    return Interrupted(message, signal_name=name, step=state.step)


def _refuse_nonfinite_model(model: Any, validation: dict[str, float], state: TrainState,
                            restored: bool) -> None:
    """A model whose weights or validation loss are not finite is never tested, saved or
    called finished (``NonFiniteError``; the checkpoints stay)."""
    loss = float(validation.get("loss", float("nan")))
    weights_finite = all(bool(torch.isfinite(p).all()) for p in unwrap(model).parameters())
    if weights_finite and math.isfinite(loss):
        return
    which = (f"the best weights (step {state.best_step})" if restored
             else f"the final weights (step {state.step})")
    what = ("hold non-finite values" if not weights_finite
            else f"give a non-finite validation loss ({loss})")
    raise NonFiniteError(
        f"{which} {what}, so no model was saved and the run is not finished "
        f"({state.skipped_steps} steps were skipped for a non-finite or diverged loss); lower "
        f"train.learning_rate, keep train.divergence_factor and train.on_nonfinite: stop on, "
        f"and run again with --restart")


def _nonfinite_error(state: TrainState, paths: RunPaths, splits: LabelledSplits,
                     loaded: LoadedConfig) -> NonFiniteError:
    bad = dict(state.extras.get("nonfinite", {}))
    last = state.last_checkpoint  # the stop's own save, or the same position saved just before
    checkpoint = last.get("path") if last.get("step") == state.step else None
    indices = [int(i) for i in bad.get("example_indices", [])]
    rows = [int(splits.train.row_ids[i]) for i in indices]
    report = {**bad, "data_file": loaded.resolve_path(loaded.config.data.train),
              "rows": rows,
              "texts": [splits.train.texts[i][:200] for i in indices],
              "checkpoint": checkpoint,
              "resume_step": state.step}
    write_json_atomic(paths.nonfinite, report)
    tcfg = loaded.config.train
    loss = float(bad.get("loss", float("nan")))
    if bad.get("reason") == "diverged":
        against = ("the larger of its running median and the loss of predicting the training "
                   "mean on that batch" if hasattr(loaded.config.data, "target_transform")
                   else "its running median")
        what = (f"diverged loss ({loss:.4g}, above {bad.get('loss_limit', 0.0):.4g} = "
                f"train.divergence_factor {tcfg.divergence_factor:g} x {against})")
    elif not math.isfinite(loss):
        what = f"non-finite loss ({loss})"
    else:
        what = f"non-finite gradient norm ({bad.get('grad_norm')})"
    bad_loss = bad.get("reason") == "diverged" or not math.isfinite(loss)
    if checkpoint:
        saved = f"the last good state (step {state.step}) is in {checkpoint}"
        if bad_loss and state.step < int(bad.get("step", 1)) - 1:
            saved += " (the step before gave this loss, so it was undone)"
    elif state.resumes:
        saved = (f"nothing new was saved: the checkpoint this session resumed from (step "
                 f"{state.step}) is the last state kept")
        if bad_loss:
            saved += " and it already gives this loss (lower the learning rate more, or --restart)"
    else:
        saved = ("no step had been taken yet, so there is no state to keep (the next run "
                 "starts over)")
    gave_up = ""
    if bad.get("attempted_steps") is not None:
        gave_up = (f"; train.on_nonfinite: skip_batch gave up after skipping "
                   f"{bad.get('skipped_steps')} of {bad.get('attempted_steps')} steps (more than "
                   f"train.max_skipped_fraction {tcfg.max_skipped_fraction:g})")
    shown = ", ".join(map(str, rows[:10])) + (" …" if len(rows) > 10 else "")
    skip = ("" if tcfg.on_nonfinite == "skip_batch"
            else "; or set train.on_nonfinite: skip_batch")
    heavy = None  # a regression's heavy-tailed target: the transform is the fix that works
    if getattr(loaded.config.data, "target_transform", None) == "none":
        from entrena.data.targets import skew_hint

        heavy = skew_hint(splits.train.labels, str(loaded.config.data.label_column))
    return NonFiniteError(
        f"{what} at step {bad.get('step')} (epoch "
        f"{int(bad.get('epoch', 0)) + 1}), caught before the weights changed{gave_up}; {saved}; "
        f"the batch's examples (rows {shown} of {loaded.config.data.train}) are listed in "
        f"{paths.nonfinite}. {'First: ' + heavy + '. Other' if heavy else 'Usual'} fixes: "
        f"lower train.learning_rate (now "
        f"{tcfg.learning_rate:g}); keep train.gradient_clip_norm on (now "
        f"{tcfg.gradient_clip_norm}); train in 32-true or bf16-mixed rather than 16-mixed "
        f"(train.precision); look at those rows for empty or extreme inputs{skip}. Then "
        f"resume with --resume-with-changes, or --restart")
