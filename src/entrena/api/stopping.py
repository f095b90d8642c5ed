"""Stop signals outside the fit: reading the config, preparing the data, planning and its
probe, testing and saving the model.

During the fit :class:`~entrena.callbacks.preemption.Preemption` turns a signal into "finish
the step, save a checkpoint, leave". Around it, :func:`stop_signals` turns SIGTERM, SIGUSR1
and SIGINT into a :class:`StopSignal` raised where the program is (never inside an import:
:mod:`entrena.core.signals`), and :func:`stopped_error` into an
:class:`~entrena.errors.Interrupted` whose one line says what was saved and what running the
same command will do (exit 143, or 130 for SIGINT).
"""

from __future__ import annotations

import logging
from typing import Any

from entrena.core.rundir import RunPaths
from entrena.core.signals import StopSignal, stop_signals
from entrena.engine.checkpointing import CheckpointStore
from entrena.errors import Interrupted

__all__ = ["FINAL_REASONS", "StopSignal", "stop_signals", "stopped_error"]

log = logging.getLogger("entrena")

FINAL_REASONS = frozenset({"max_epochs", "max_steps", "early_stopping", "max_time", "budget"})
"""Checkpoint reasons that mean training was over (a resume only tests and saves)."""


def _training_over(info: Any) -> bool:
    """Whether checkpoint ``info`` is the end of training (its reason, or its epoch or step
    against the limits of the config it was written with)."""
    if info.reason in FINAL_REASONS:
        return True
    train = (info.config or {}).get("train") or {}
    max_epochs, max_steps = train.get("max_epochs"), train.get("max_steps")
    return bool((max_epochs and info.epoch >= max_epochs and not info.batch_in_epoch)
                or (max_steps and info.step >= max_steps))


def stopped_error(signal_name: str, paths: RunPaths | None, phase: str = "") -> Interrupted:
    """The :class:`Interrupted` for a stop signal outside the fit: what is on disk and what
    the same command does next, read from the run directory.

    Args:
        signal_name: ``"SIGTERM"`` …
        paths: The run's files, or ``None`` when the signal came before they were known.
        phase: What was going on (``"preparing the data"``, ``"planning"``), for the message.
    """
    info = None
    if paths is not None and paths.root.is_dir():
        try:
            info = CheckpointStore(paths.checkpoints).latest_readable()
        except OSError:
            info = None
    during = f"while {phase}" if phase else "before training"
    if info is not None and _training_over(info):
        message = (f"stopped by {signal_name} after training, while testing or saving the "
                   f"model; the trained state is in {info.path} (step {info.step}); run the "
                   f"same command to test and save the model without training again")
    elif info is not None:
        message = (f"stopped by {signal_name} {during}; nothing new was saved and checkpoint "
                   f"{info.path} (step {info.step}) is kept; run the same command to resume "
                   f"from it")
    elif paths is None or not paths.root.is_dir():
        message = (f"stopped by {signal_name} {during}; nothing of the run was written "
                   f"(prepared data is cached only once complete); run the same command to "
                   f"start it")
    else:
        message = (f"stopped by {signal_name} {during}, before the first training step; "
                   f"nothing to resume yet in {paths.root}; run the same command to start the "
                   f"run over (the prepared data is cached)")
    log.debug(message)
    return Interrupted(message, signal_name=signal_name, step=info.step if info else 0)
