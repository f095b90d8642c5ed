"""``entrena.train``: prepare (cached) + fit + test + track, in one run directory."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from entrena.api.preparing import (
    check_failure,
    prepare_data,
    report_table,
    resolve_model_sources,
    write_report,
)
from entrena.api.stopping import StopSignal, stop_signals, stopped_error
from entrena.config import Config, LoadedConfig
from entrena.config.fingerprint import config_changes, config_hash, format_changes
from entrena.core.files import write_json_atomic
from entrena.core.rundir import RunPaths, read_status, resolve_run_dir, write_status
from entrena.core.signals import stop_in
from entrena.data.changes import data_changes
from entrena.engine.checkpointing import CheckpointInfo, CheckpointStore
from entrena.engine.distributed import launched_rank
from entrena.errors import ConfigError, DataError, EntrenaError, Interrupted
from entrena.hardware.catalog import load_catalog
from entrena.hardware.cost import hourly_price
from entrena.tasks.registry import load_config
from entrena.tracking.base import prestart as prestart_trackers
from entrena.units import format_duration

__all__ = ["TrainResult", "train", "resolve_run_dir"]

log = logging.getLogger("entrena")


@dataclass
class TrainResult:
    """What a training run produced.

    Attributes:
        run_dir: The run directory.
        metrics: The content of ``metrics.json`` (``test.accuracy``, ``validation.loss`` …).
        already_finished: The run was finished before this call, nothing was trained.
        resumed_from_step: The checkpoint's step this call resumed from, or ``None``.
        worker: This process is a rank above 0 of a distributed fit (it wrote nothing).
    """

    run_dir: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    already_finished: bool = False
    resumed_from_step: int | None = None
    worker: bool = False

    @property
    def model_dir(self) -> Path:
        return RunPaths(self.run_dir).model


def _write_json_atomic(path: Path, data: Any) -> None:
    write_json_atomic(path, data, durable=False)


def _status(paths: RunPaths) -> str | None:
    status = read_status(paths)
    return status["status"] if status else None


_check_model_source = resolve_model_sources  # the name tests and older callers use


def _training_lost_s(paths: RunPaths, checkpoint: CheckpointInfo) -> float:
    """Seconds of training done after ``checkpoint`` by the session that died (redone now).

    The last session's training ran from its ``fit_start`` record to the last write of
    ``events.jsonl`` (a record every ``train.log_every_steps`` steps, evaluations and
    checkpoints), so this is a slight underestimate.
    """
    try:
        last_write = paths.events.stat().st_mtime
        lines = paths.events.read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0.0
    session_start = 0.0
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        if record.get("type") == "fit_start":
            session_start = float(record.get("time", 0.0))
            break
    return max(0.0, last_write - max(checkpoint.saved_at, session_start))


def _choose_resume(paths: RunPaths, resolved: dict[str, Any], new_hash: str,
                   resume_with_changes: bool, console: Any) -> CheckpointInfo | None:
    """The checkpoint to resume from (announced on ``console``), or ``None`` to start over.

    Raises:
        ConfigError: The config changed since the checkpoint (lists the changes), unless
            ``resume_with_changes``.
    """
    store = CheckpointStore(paths.checkpoints)
    store.clean()
    info = store.latest_readable()
    if info is None:
        return None
    if info.config is not None:
        changes = config_changes(info.config, resolved)
    else:
        changes = [] if info.config_hash == new_hash else [("config hash", info.config_hash,
                                                            new_hash)]
    if changes and not resume_with_changes:
        raise ConfigError(
            f"{paths.root}: the config differs from the one checkpoint {info.path.name} "
            f"(step {info.step}) was trained with:\n{format_changes(changes)}\nresuming would "
            f"not continue the same run; pass --resume-with-changes to resume with the new "
            f"values, --restart to start over, or --run-dir for a new run")
    lost = _training_lost_s(paths, info)
    message = (f"resuming from step {info.step}, epoch {info.epoch + 1}; "
               f"{format_duration(lost)} of training lost")
    _announce(console, message)
    log.debug("%s (checkpoint %s, written for %s)", message, info.path, info.reason)
    if changes:
        log.warning("resuming with a changed config (--resume-with-changes):\n%s",
                    format_changes(changes))
    return info


def _check_data_unchanged(paths: RunPaths, report: dict[str, Any],
                          resume_with_changes: bool) -> None:
    """A resumed run whose data differs from the data it started on is refused, as a changed
    config is, unless ``resume_with_changes`` (then a warning lists the changes).

    Raises:
        DataError: Lists what changed (files, hashes, rows) and the ways on.
    """
    try:
        before = json.loads(paths.data_report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    changes = data_changes(before, report) if isinstance(before, dict) else []
    if not changes:
        return
    listed = "\n".join(f"  {line}" for line in changes)
    if not resume_with_changes:
        raise DataError(
            f"{paths.root}: the data differs from the data this run was trained on:\n{listed}\n"
            f"resuming would go on with other data than the checkpoint saw; pass "
            f"--resume-with-changes to go on with the new data, --restart to start over on "
            f"it, or --run-dir for a new run")
    log.warning("resuming with changed data (--resume-with-changes):\n%s", listed)


def _announce_table(console: Any, renderable: Any) -> None:
    if console is None:
        from entrena.core.console import stderr_console

        console = stderr_console()
    console.print(renderable, soft_wrap=True)


def _announce(console: Any, message: str) -> None:
    if console is None:
        from entrena.core.console import stderr_console

        console = stderr_console()
    console.print(message, markup=False, highlight=False, soft_wrap=True)


LIBRARY_LOGGERS = ("lightning_fabric", "lightning_utilities", "py.warnings")
"""Loggers whose records go only to ``train.log`` during a run: Lightning's banners (the
AMP line …) and Python warnings (scikit-learn's convergence and metric warnings, torch's
user warnings), which would otherwise reach stderr raw."""


@contextmanager
def library_output_to(handler: logging.Handler) -> Iterator[None]:
    """Route :data:`LIBRARY_LOGGERS` (and Python warnings, through ``logging``) to
    ``handler`` alone while the block runs; restore them after."""
    saved = []
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.level, logger.propagate))
        logger.handlers = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False
        logger.entrena_captured = True  # type: ignore[attr-defined]  # backend.py reads it
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        for logger, handlers, level, propagate in saved:
            logger.handlers = handlers
            logger.setLevel(level)
            logger.propagate = propagate
            logger.entrena_captured = False  # type: ignore[attr-defined]


def _attach_log_file(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("entrena")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return handler


def _train_worker(loaded: LoadedConfig, sources: dict[str, str], paths: RunPaths,
                  callbacks: list[Any]) -> TrainResult:
    """Rank > 0 of a distributed fit: the checkpoint rank 0 resumes from (chosen and checked
    before it started this process), the cached data, and the fit; no file is written."""
    resume = CheckpointStore(paths.checkpoints).latest_readable() if paths.root.exists() \
        else None
    prepared = prepare_data(loaded, sources)
    from entrena.recipes.training import run_fit

    metrics = run_fit(loaded, paths, sources, prepared, resume=resume,
                      config_hash=config_hash(loaded.portable_dump()),
                      callbacks=callbacks)
    return TrainResult(paths.root, metrics, resumed_from_step=resume.step if resume else None,
                       worker=True)


def train(config: str | Path | dict[str, Any] | Config, *, run_dir: str | Path | None = None,
          overrides: list[str] | dict[str, Any] | None = None, restart: bool = False,
          resume_with_changes: bool = False, callbacks: list[Any] | None = None,
          console: Any = None, tracking_tags: dict[str, str] | None = None,
          launched_at: float | None = None) -> TrainResult:
    """Train a model as the config says and write the run directory; resume an unfinished one.

    Args:
        config: A YAML file, a dict, or a :class:`~entrena.config.Config`.
        run_dir: Where the run is written; default ``runs/<name>``.
        overrides: ``--set`` style overrides (``["train.max_epochs=2"]`` or a dict).
        restart: Delete an existing run directory and start over.
        resume_with_changes: Resume an unfinished run even though its config changed.
        callbacks: Extra :class:`~entrena.core.callback.Callback` objects for the loop (called
            after the built-in ones; their ``state_dict()`` is saved in checkpoints).
        console: A ``rich.console.Console`` for progress and the resume notice (default: one
            on stderr).
        tracking_tags: Extra tags of the MLflow run (``mlflow.parentRunId`` nests it).
        launched_at: ``time.time()`` when the user launched the run (the CLI passes its
            process's start): ``train.budget`` counts from it; default: this call.

    Returns:
        The run's :class:`TrainResult`. A run that was already finished is not retrained:
        its metrics are returned with ``already_finished=True``. An unfinished run (killed,
        interrupted, crashed) continues from its newest readable checkpoint.

    Raises:
        ConfigError: The config is invalid, names an unknown model (before data is read), or
            differs from the unfinished run's (without ``resume_with_changes``).
        DataError: A data file is missing, unreadable or inconsistent with the config, or
            differs from the data the unfinished run started on (without
            ``resume_with_changes``).
        ResourceError: The requested device is missing, or the disk is full at a checkpoint.
        Interrupted: SIGTERM, SIGUSR1 or SIGINT arrived; a checkpoint was saved first.
        NonFiniteError: A NaN/Inf loss or gradient under ``train.on_nonfinite: stop``.

    A stop signal outside the fit (preparing the data, planning, testing, saving) raises
    ``Interrupted`` too, at once, saying what is saved and what the same command will do.
    """
    where: dict[str, Any] = {}
    try:
        with stop_signals():  # an error that wraps a StopSignal leaves it as the StopSignal
            return _train(config, run_dir=run_dir, overrides=overrides, restart=restart,
                          resume_with_changes=resume_with_changes, callbacks=callbacks,
                          console=console, tracking_tags=tracking_tags, where=where,
                          launched_at=launched_at if launched_at is not None else time.time())
    except StopSignal as stop:
        raise stopped_error(stop.signal_name, where.get("paths"),
                            where.get("phase", "")) from None


def _close_budget(paths: RunPaths, metrics: dict[str, Any], loaded: LoadedConfig) -> dict[str, Any]:
    """Complete ``metrics.json``'s ``budget`` once the run is finished (model registered):
    the time used, the overshoot, the time after the last step, and remember the tail for
    the next budgeted run of the task here; the report is written again to show it."""
    from entrena.data.cache import default_cache_dir
    from entrena.recipes.budget import remember_tail

    now = time.time()
    budget = dict(metrics["budget"])
    fit_ended_at = budget.pop("fit_ended_at", None)
    tail_started_at = budget.pop("tail_started_at", None)
    used = budget["used_s"] + (now - budget.pop("summarised_at", now))
    budget["used_s"] = used
    budget["overshoot_s"] = max(0.0, used - budget["requested_s"])
    if fit_ended_at is not None:
        budget["finish_s"] = now - fit_ended_at
    if tail_started_at is not None:
        budget["tail_s"] = now - tail_started_at
        configured = loaded.config.data.cache_dir
        remember_tail(default_cache_dir(loaded.resolve_path(configured) if configured else None),
                      loaded.config.task, budget["tail_s"],
                      budget.get("spent_before_fit_s")
                      if not metrics.get("fit", {}).get("resumes") else None)
    metrics = {**metrics, "budget": budget}
    _write_json_atomic(paths.metrics, metrics)
    from entrena.recipes.training import write_report

    write_report(paths)
    return metrics


def _register_model(paths: RunPaths, tracking: dict[str, Any]) -> None:
    """The finished run as a registered MLflow model (when its tracking asks for it; a
    failure warns)."""
    from entrena.tracking.base import wants_mlflow_model

    if wants_mlflow_model(tracking):
        from entrena.api.mlflow_models import register_model

        register_model(paths.root, paths.root, tracking, after_tracking=True)


def _train(config: str | Path | dict[str, Any] | Config, *, run_dir: str | Path | None,
           overrides: list[str] | dict[str, Any] | None, restart: bool,
           resume_with_changes: bool, callbacks: list[Any] | None, console: Any,
           tracking_tags: dict[str, str] | None, where: dict[str, Any],
           launched_at: float) -> TrainResult:
    """:func:`train`'s work; fills ``where`` (``paths``, ``phase``) for a stop message."""
    started = time.perf_counter()  # the run's cost counts from here (cost.wall_time_s)
    where["phase"] = "reading the config"
    loaded = load_config(config, overrides)
    price = hourly_price(load_catalog())  # a bad ENTRENA_INSTANCE fails before any work
    if loaded.config.train.budget:  # a money budget on an unpriced machine, before any work
        from entrena.planning.budget import budget_seconds

        budget_seconds(loaded.config.train.budget, price.usd_per_hour, price.source)
    sources = _check_model_source(loaded)
    paths = RunPaths(resolve_run_dir(loaded.config.name, run_dir))
    where["paths"] = paths
    if launched_rank() > 0:  # a process that rank 0 started (DDP): it reads, never writes
        return _train_worker(loaded, sources, paths, callbacks or [])

    if paths.root.exists() and restart:
        shutil.rmtree(paths.root)
    if _status(paths) == "finished":
        metrics = json.loads(paths.metrics.read_text()) if paths.metrics.is_file() else {}
        return TrainResult(paths.root, metrics, already_finished=True)
    resolved = loaded.portable_dump()  # absolute data paths: loads from the run dir too
    new_hash = config_hash(resolved)
    resume = None
    if paths.root.exists() and any(p.name != paths.data_report.name  # prepare's report only
                                   for p in paths.root.iterdir()):
        resume = _choose_resume(paths, resolved, new_hash, resume_with_changes, console)
        if resume is None:
            log.warning("run directory %s holds an unfinished run without a complete "
                        "checkpoint; starting it over", paths.root)
            shutil.rmtree(paths.root)

    tracking = loaded.config.tracking  # MLflow's process starts on an idle core meanwhile
    prestart_trackers(tracking.enabled, tracking.backends, paths.runs_root, tracking.uri)
    where["phase"] = "preparing the data"
    prepared = prepare_data(loaded, sources)  # data errors come before anything is written
    _announce_table(console, report_table(prepared.report))
    if resume is not None:
        _check_data_unchanged(paths, prepared.report, resume_with_changes)
    failure = check_failure(prepared.report, paths.data_report)
    if failure is not None:  # a check set to `error` failed: the report, and nothing else
        write_report(paths, prepared.report, only_if_untrained=False)
        raise failure

    from entrena.recipes.training import run_fit  # heavy imports (torch) only past validation

    created = resume is None
    where["phase"] = "planning"
    paths.root.mkdir(parents=True, exist_ok=True)
    handler = _attach_log_file(paths.log)
    try:
        paths.config.write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
        _write_json_atomic(paths.data_report, prepared.report)
        write_status(paths, "running",
                     **({"resumed_from_step": resume.step} if resume else {}))
        with library_output_to(handler):
            metrics = run_fit(loaded, paths, sources, prepared, console=console, resume=resume,
                              config_hash=new_hash, callbacks=callbacks or [],
                              tracking_tags=tracking_tags, cost_from=(started, price),
                              budget_started_at=launched_at)
        write_status(paths, "finished")
        _register_model(paths, loaded.config.tracking.model_dump())
        if "budget" in metrics:
            metrics = _close_budget(paths, metrics, loaded)
        return TrainResult(paths.root, metrics,
                           resumed_from_step=resume.step if resume else None)
    except Interrupted as exc:
        write_status(paths, "interrupted", signal=exc.signal_name, step=exc.step)
        raise
    except StopSignal as exc:  # outside the fit: train() says what is saved
        write_status(paths, "interrupted", signal=exc.signal_name, phase=where.get("phase"))
        raise
    except EntrenaError as exc:
        if (created and not paths.events.is_file()
                and not CheckpointStore(paths.checkpoints).complete()):
            shutil.rmtree(paths.root, ignore_errors=True)  # bad input before the fit began
        else:  # keep what can be resumed
            write_status(paths, "failed", error=type(exc).__name__, message=str(exc))
            exc.entrena_log = str(paths.log)  # type: ignore[attr-defined]
        raise
    except BaseException as exc:
        stop = stop_in(exc)  # a StopSignal wrapped by a library (a RuntimeError …)
        if stop is not None:
            write_status(paths, "interrupted", signal=stop.signal_name,
                         phase=where.get("phase"))
            raise
        write_status(paths, "failed", error=type(exc).__name__)
        log.debug("run failed", exc_info=True)
        exc.entrena_log = str(paths.log)  # type: ignore[attr-defined]  # the CLI names it
        raise
    finally:
        logging.getLogger("entrena").removeHandler(handler)
        handler.close()
