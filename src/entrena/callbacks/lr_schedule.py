"""Learning-rate schedules: warmup + linear or cosine decay, ReduceLROnPlateau, constant."""

from __future__ import annotations

import math
from typing import Any

import torch

from entrena.callbacks.monitor import Monitor
from entrena.core.callback import Callback
from entrena.core.state import TrainState

__all__ = ["LRSchedule", "warmup_decay_factor"]


def warmup_decay_factor(step: int, total_steps: int, warmup_steps: int, kind: str) -> float:
    """Multiplier of the peak learning rate at ``step``.

    Linear warmup from 0 over ``warmup_steps``, then ``linear`` decay to 0 at ``total_steps``,
    ``cosine`` decay to 0 (half a cosine period, as in Loshchilov & Hutter, SGDR, 2017), or
    ``constant``.
    """
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if kind == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return max(0.0, 1.0 - progress)


class LRSchedule(Callback):
    """Drives the optimizer's learning rate.

    Args:
        kind: ``linear``, ``cosine``, ``constant`` (stepped after each optimizer step) or
            ``plateau`` (``torch.optim.lr_scheduler.ReduceLROnPlateau``, stepped after each
            evaluation on ``monitor``).
        warmup_fraction: Share of planned steps used for warmup (not for ``plateau``).
        monitor: Metric for ``plateau``.
        factor / patience: ``ReduceLROnPlateau`` settings.
        peak_learning_rate: The configured peak rate: a restored schedule (a resume) takes it
            instead of the checkpoint's, so that a resume with a changed
            ``train.learning_rate`` trains at the new rate (not for ``plateau``, whose rate
            is the checkpoint's).
    """

    def __init__(self, kind: str, warmup_fraction: float = 0.0, monitor: Monitor | None = None,
                 factor: float = 0.5, patience: int = 0, peak_learning_rate: float | None = None):
        self.peak_learning_rate = peak_learning_rate
        self.kind = kind
        self.warmup_fraction = warmup_fraction
        self.monitor = monitor or Monitor()
        self.factor = factor
        self.patience = patience
        self.scheduler: Any = None
        self._pending: dict[str, Any] | None = None

    def on_fit_start(self, state: TrainState) -> None:
        optimizer = state.optimizer
        if self.kind == "plateau":
            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode="max" if self.monitor.maximize else "min",
                factor=self.factor, patience=self.patience, threshold=self.monitor.min_delta,
                threshold_mode="abs")
        else:
            total = state.max_steps
            warmup = int(round(self.warmup_fraction * total)) if self.kind != "constant" else 0
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda step: warmup_decay_factor(step, total, warmup, self.kind))
        if self._pending is not None:
            self.scheduler.load_state_dict(self._pending)
            self._pending = None
            rates = self.scheduler.get_last_lr()
            if self.peak_learning_rate is not None and self.kind != "plateau":
                peak = self.peak_learning_rate
                self.scheduler.base_lrs = [peak for _ in optimizer.param_groups]
                step = self.scheduler.last_epoch
                rates = [peak * f(step) for f in self.scheduler.lr_lambdas]
                for group in optimizer.param_groups:
                    group["initial_lr"] = peak
            # Building a LambdaLR sets every group's rate to the schedule's value at step 0;
            # put back the rate of the restored step (else the rate "resets" on resume).
            for group, rate in zip(optimizer.param_groups, rates, strict=True):
                group["lr"] = rate
            self.scheduler._last_lr = list(rates)  # noqa: SLF001  # what get_last_lr() says
        state.scheduler = self.scheduler
        state.learning_rate = optimizer.param_groups[0]["lr"]

    def on_batch_end(self, state: TrainState) -> None:
        if self.kind != "plateau" and state.extras.get("last_micro", True):
            self.scheduler.step()

    def on_eval_end(self, state: TrainState) -> None:
        if self.kind == "plateau":
            self.scheduler.step(self.monitor.value(state.eval_metrics))

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict() if self.scheduler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending = state or None
