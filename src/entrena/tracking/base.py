"""The tracker extension point: a :class:`Tracker` protocol and a registry by name.

A tracker is a :class:`~entrena.core.callback.Callback` (it sees the loop's events: step and
validation metrics) that also opens a run with the config as parameters (:meth:`start`) and
closes it with the final metrics and the run's files (:meth:`finish`). ``tracking.backends``
names the trackers a run uses; the training recipe builds them with :func:`build_trackers`
and never names one. A tracker's failure warns once and never stops training; a tracker
opens its store once, through :func:`open_within`, so that a store that cannot be opened
costs at most :data:`STORE_PROBE_TIMEOUT_S` and one warning (not a client's own retries).
Both live in :mod:`entrena.tracking.store`, which a tracker module imports: a tracker never
imports this module, which imports the shipped trackers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from entrena.core.registry import Registry
from entrena.tracking.store import STORE_PROBE_TIMEOUT_S, open_within

__all__ = ["Tracker", "TrackingContext", "REGISTRY", "TRACKERS", "STORE_PROBE_TIMEOUT_S",
           "open_within", "register_tracker", "check_trackers", "build_trackers", "guard",
           "wants_mlflow_model", "prestart"]

log = logging.getLogger("entrena")


@runtime_checkable
class Tracker(Protocol):
    """What a tracker does besides reacting to the loop's events."""

    def start(self, params: dict[str, Any], tags: dict[str, str] | None = None) -> None:
        """Open (or, after a resume, reopen) the run and log ``params`` (the config)."""
        ...

    def finish(self, metrics: dict[str, Any], artifacts: list[Path]) -> None:
        """Log the final ``metrics`` (``metrics.json``) and ``artifacts`` (files or folders)
        and close the run."""
        ...

    # Optional: ``close(status)``, called instead of ``finish`` when a run ends early with an
    # error (``"FAILED"``) or a stop signal (``"KILLED"``); not part of the protocol's check.


@dataclass(frozen=True)
class TrackingContext:
    """What a tracker factory gets.

    Attributes:
        run_name: The entrena run name (``config.name``).
        run_dir: The run directory.
        runs_root: Its parent folder (where default stores live: ``mlflow.db`` …).
        experiment: ``tracking.experiment``.
        uri: ``tracking.uri`` (``None``: the tracker's default).
        every_steps: ``train.log_every_steps``: the interval of step metrics.
    """

    run_name: str
    run_dir: Path
    runs_root: Path
    experiment: str
    uri: str | None
    every_steps: int


def _tensorboard(context: TrackingContext) -> Tracker:
    from entrena.tracking.tensorboard_tracker import TensorBoardTracker

    return TensorBoardTracker(context.run_dir / "tensorboard", context.every_steps)


def _wandb(context: TrackingContext) -> Tracker:
    from entrena.tracking.wandb_tracker import WandbTracker

    return WandbTracker(context.run_dir, context.experiment, context.run_name,
                        context.every_steps)


def _mlflow(context: TrackingContext) -> Tracker:
    from entrena.tracking.mlflow_tracker import MLflowTracker, default_tracking_uri

    return MLflowTracker(default_tracking_uri(context.runs_root, context.uri),
                         context.experiment, context.run_name,
                         context.runs_root / "mlartifacts", context.every_steps)


REGISTRY: Registry[Callable[[TrackingContext], Tracker]] = Registry("tracker",
                                                                   "tracking.backends")
"""Tracker factories by name (:class:`~entrena.core.registry.Registry`)."""

TRACKERS: dict[str, Callable[[TrackingContext], Tracker]] = REGISTRY.registered
"""Trackers by ``tracking.backends`` name → a factory taking a :class:`TrackingContext`."""
TRACKERS.update({"mlflow": _mlflow, "tensorboard": _tensorboard, "wandb": _wandb})


def register_tracker(name: str, factory: Callable[[TrackingContext], Tracker]) -> None:
    """Add (or replace) the tracker ``name``; ``factory`` builds it for one run."""
    REGISTRY.register(name, factory)


def check_trackers(names: Sequence[str]) -> None:
    """Refuse a ``tracking.backends`` name no tracker is registered under (checked before any
    data is read).

    Raises:
        ConfigError: An unknown name (the known ones and the closest are listed).
    """
    REGISTRY.check(names)


def build_trackers(names: Sequence[str], context: TrackingContext) -> list[Tracker]:
    """The trackers ``names`` asks for, built for one run, in order (a name given twice is
    built once).

    Raises:
        ConfigError: An unknown name (the known ones and the closest are listed).
    """
    check_trackers(names)
    return [guard(REGISTRY.get(name)(context), name) for name in dict.fromkeys(names)]


_EVENTS = ("on_fit_start", "on_epoch_start", "on_batch_start", "on_after_backward",
           "on_batch_end", "on_eval_start", "on_eval_end", "on_step_end", "on_epoch_end",
           "on_checkpoint", "on_fit_end")


def guard(tracker: Any, name: str) -> Any:
    """Make ``tracker`` unable to stop training: the first exception any of its methods
    raises (``start``, ``finish``, an event, ``state_dict`` …) logs one warning and turns the
    tracker off; its later calls do nothing (``state_dict`` still answers, ``{}`` if it
    fails, so that checkpoints are written). The methods are wrapped on the instance, so its
    class (the key of its state in checkpoints) and ``isinstance`` checks are unchanged.

    Args:
        tracker: A built tracker.
        name: Its ``tracking.backends`` name, for the warning.

    Returns:
        ``tracker`` itself.
    """
    off = [False]

    def wrap(method_name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        keeps_state = method_name in ("state_dict", "load_state_dict")

        def safe(*args: Any, **kwargs: Any) -> Any:
            if off[0] and not keeps_state:
                return None
            try:
                return method(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a tracker never stops training
                if not off[0]:
                    first = (str(exc).splitlines() or [""])[0]
                    log.warning("tracker %r off: %s failed (%s: %s); training goes on", name,
                                method_name, type(exc).__name__, first)
                    log.debug("tracker %r failure", name, exc_info=True)
                off[0] = True
                return {} if method_name == "state_dict" else None
        return safe

    for method_name in ("start", "finish", "close", "state_dict", "load_state_dict", *_EVENTS):
        method = getattr(tracker, method_name, None)
        if callable(method):
            setattr(tracker, method_name, wrap(method_name, method))
    return tracker


def wants_mlflow_model(tracking: dict[str, Any]) -> bool:
    """Whether a run's resolved ``tracking`` section asks for its model in MLflow's model
    registry: ``enabled``, ``mlflow`` among ``backends`` and ``log_model`` (each defaulting
    as the schema does, for runs written before the key existed)."""
    return bool(tracking.get("enabled", True) and tracking.get("log_model", True)
                and "mlflow" in tracking.get("backends", ["mlflow"]))


def prestart(enabled: bool, backends: Sequence[str], runs_root: Path, uri: str | None) -> None:
    """Start what a run's trackers can start before the run: MLflow's worker process
    (:func:`entrena.tracking.mlflow_tracker.prestart`), which imports MLflow and opens the
    store on an idle core while the training process loads its data and model. A failure
    here is silent: the tracker tries again when the run starts, and warns then."""
    if not enabled or "mlflow" not in backends:
        return
    from entrena.tracking.mlflow_tracker import default_tracking_uri
    from entrena.tracking.mlflow_tracker import prestart as start_worker

    try:
        start_worker(default_tracking_uri(runs_root, uri))
    except (OSError, ValueError) as exc:
        log.debug("MLflow worker not started ahead of the run: %s", exc)
