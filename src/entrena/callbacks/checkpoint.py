"""Best and last checkpoints, written atomically; best weights restored at the end of the fit."""

from __future__ import annotations

import copy
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from entrena.callbacks.monitor import Monitor
from entrena.core.callback import Callback
from entrena.core.state import TrainState

__all__ = ["ModelCheckpoint", "save_atomic", "unwrap"]

log = logging.getLogger("entrena")


def save_atomic(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file in the same folder, fsync, then rename over ``path``.

    A reader never sees a half-written file: the rename is atomic on POSIX file systems.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def unwrap(model: Any) -> torch.nn.Module:
    """The plain module inside a Fabric wrapper."""
    return getattr(model, "module", model)


def _cpu_state(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in unwrap(model).state_dict().items()}


class ModelCheckpoint(Callback):
    """Keep the best weights (by ``monitor``) and write ``best.pt`` and ``last.pt``.

    After each evaluation: if the metric improved, the weights are copied (in memory and to
    ``best.pt``); ``last.pt`` always gets the full resumable state (model, optimizer, scheduler,
    counters, callback states). At fit end the best weights are loaded back into the model,
    whatever ended training (early stopping, max epochs, max steps).

    Args:
        directory: The run's ``checkpoints/`` folder; ``None`` keeps the best weights in memory only.
        monitor: The metric deciding "best".
        extra_state: Returns what else ``last.pt`` must hold (callback states, config hash).
        write_last: Write ``last.pt`` (off for quick experiments).
    """

    def __init__(self, directory: Path | None, monitor: Monitor,
                 extra_state: Callable[[], dict[str, Any]] | None = None, write_last: bool = True):
        self.directory = directory
        self.monitor = monitor
        self.extra_state = extra_state or dict
        self.write_last = write_last
        self.best_score: float | None = None
        self.best_step: int | None = None
        self.best_weights: dict[str, torch.Tensor] | None = None
        self.restored = False

    def on_eval_end(self, state: TrainState) -> None:
        value = self.monitor.value(state.eval_metrics)
        if self.monitor.improved(value, self.best_score):
            self.best_score, self.best_step = value, state.step
            state.best_score, state.best_step = value, state.step
            self.best_weights = _cpu_state(state.model)
            if self.directory is not None:
                save_atomic({"model": self.best_weights, "step": state.step, "score": value,
                             "monitor": self.monitor.key}, self.directory / "best.pt")
        if self.directory is not None and self.write_last:
            self.save_last(state)

    def save_last(self, state: TrainState) -> None:
        """Write the full resumable state to ``last.pt``."""
        assert self.directory is not None
        payload = {
            "model": _cpu_state(state.model),
            "optimizer": copy.deepcopy(state.optimizer.state_dict()),
            "counters": state.counters(),
            **self.extra_state(),
        }
        save_atomic(payload, self.directory / "last.pt")

    def on_fit_end(self, state: TrainState) -> None:
        if self.best_weights is not None:
            unwrap(state.model).load_state_dict(self.best_weights)
            self.restored = True
            state.best_step, state.best_score = self.best_step, self.best_score
            log.info("restored the best weights (step %s, %s = %.4f)",
                     self.best_step, self.monitor.key, self.best_score)

    def state_dict(self) -> dict[str, Any]:
        return {"best_score": self.best_score, "best_step": self.best_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_score = state["best_score"]
        self.best_step = state["best_step"]
        if self.directory is not None and (self.directory / "best.pt").is_file():
            self.best_weights = torch.load(self.directory / "best.pt", weights_only=True)["model"]
