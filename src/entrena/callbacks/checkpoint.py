"""Best weights (kept in memory and in ``best.pt``, restored at the end of the fit) and the
schedule of resumable checkpoints (the loop writes them where resuming is exact)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from entrena.callbacks.monitor import Monitor
from entrena.core.callback import Callback
from entrena.core.files import write_atomic
from entrena.core.state import TrainState

__all__ = ["ModelCheckpoint", "PeriodicCheckpoint", "save_atomic", "unwrap"]

log = logging.getLogger("entrena")


def save_atomic(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file in the same folder, fsync, then rename over ``path``.

    A reader never sees a half-written file: the rename is atomic on POSIX file systems.
    """
    write_atomic(path, lambda handle: torch.save(obj, handle))


def unwrap(model: Any) -> torch.nn.Module:
    """The plain module inside a Fabric wrapper."""
    return getattr(model, "module", model)


def _cpu_state(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in unwrap(model).state_dict().items()}


class ModelCheckpoint(Callback):
    """Keep the best weights (by ``monitor``) and write them to ``best.pt``.

    After each evaluation that improves the metric, the weights are copied to CPU memory and
    to ``best.pt``. At fit end the best weights are loaded back into the model (unless
    ``restore`` is off), whatever ended training (early stopping, max epochs, max steps, time
    limit, a signal). Its state (in every
    resumable checkpoint) holds the best score and step, and the best weights unless they are
    the checkpoint's own weights (best step = checkpoint step), so a resumed run restores the
    same best weights even when ``best.pt`` has moved on since.

    Args:
        directory: The run's ``checkpoints/`` folder; ``None`` keeps the best weights in
            memory only.
        monitor: The metric deciding "best".
        restore: Load the best weights back at fit end; ``False`` keeps the final weights
            (``best.pt`` is still written), as Keras' ``restore_best_weights=False``.
    """

    def __init__(self, directory: Path | None, monitor: Monitor, restore: bool = True):
        self.directory = directory
        self.monitor = monitor
        self.restore = restore
        self.best_score: float | None = None
        self.best_step: int | None = None
        self.best_weights: dict[str, torch.Tensor] | None = None
        self.restored = False
        self._step = 0
        self._best_is_model = False

    def on_fit_start(self, state: TrainState) -> None:
        self._step = state.step
        if self._best_is_model:  # restored: the best weights are the checkpoint's weights
            self.best_weights = _cpu_state(state.model)
            self._best_is_model = False
        state.best_score, state.best_step = self.best_score, self.best_step

    def on_batch_end(self, state: TrainState) -> None:
        self._step = state.step

    def on_eval_end(self, state: TrainState) -> None:
        value = self.monitor.value(state.eval_metrics)
        if self.monitor.improved(value, self.best_score):
            self.best_score, self.best_step = value, state.step
            state.best_score, state.best_step = value, state.step
            self.best_weights = _cpu_state(state.model)
            if self.directory is not None:
                save_atomic({"model": self.best_weights, "step": state.step, "score": value,
                             "monitor": self.monitor.key}, self.directory / "best.pt")

    def on_fit_end(self, state: TrainState) -> None:
        if not self.restore:
            state.best_step, state.best_score = self.best_step, self.best_score
            if self.best_step is not None:
                log.info("kept the final weights (step %s; train.restore_best_weights is off); "
                         "the best %s was %.4f at step %s", state.step, self.monitor.key,
                         self.best_score, self.best_step)
            return
        if self.best_weights is not None:
            unwrap(state.model).load_state_dict(self.best_weights)
            self.restored = True
            state.best_step, state.best_score = self.best_step, self.best_score
            log.info("restored the best weights (step %s, %s = %.4f)",
                     self.best_step, self.monitor.key, self.best_score)

    def state_dict(self) -> dict[str, Any]:
        same = self.best_step is not None and self.best_step == self._step
        return {"best_score": self.best_score, "best_step": self.best_step,
                "weights": None if same else self.best_weights}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_score = state["best_score"]
        self.best_step = state["best_step"]
        self.best_weights = state.get("weights")
        self._best_is_model = self.best_step is not None and self.best_weights is None


class PeriodicCheckpoint(Callback):
    """Asks the loop for a resumable checkpoint every ``every_steps`` optimizer steps and
    every ``every_minutes`` minutes (the loop always writes one at the end of each epoch and
    when training stops; any checkpoint restarts the minute count).

    Args:
        every_steps: Step interval, or ``None``.
        every_minutes: Time interval in minutes, or ``None``.
        clock: Seconds, monotonic (tests pass a fake one).
    """

    def __init__(self, every_steps: int | None = None, every_minutes: float | None = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.every_steps = every_steps
        self.every_s = every_minutes * 60.0 if every_minutes else None
        self.clock = clock
        self._last = 0.0

    def on_fit_start(self, state: TrainState) -> None:
        self._last = self.clock()

    def on_step_end(self, state: TrainState) -> None:
        if state.checkpoint_due:
            return
        if self.every_steps and state.step and state.step % self.every_steps == 0:
            state.checkpoint_due = "steps"
        elif self.every_s is not None and self.clock() - self._last >= self.every_s:
            state.checkpoint_due = "minutes"

    def on_checkpoint(self, state: TrainState) -> None:
        self._last = self.clock()
