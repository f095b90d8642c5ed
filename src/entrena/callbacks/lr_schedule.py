"""Learning-rate schedules: warmup + linear or cosine decay, ReduceLROnPlateau, constant."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from entrena.callbacks.monitor import Monitor
from entrena.core.callback import Callback
from entrena.core.state import TrainState

__all__ = ["LRSchedule", "ScheduleCurve", "warmup_decay_factor"]


def warmup_decay_factor(step: int, total_steps: int, warmup_steps: int, kind: str) -> float:
    """Multiplier of the peak learning rate at ``step``.

    Linear warmup from 0 over ``warmup_steps``, then ``linear`` decay to 0 at ``total_steps``,
    ``cosine`` decay to 0 (half a cosine period, as in Loshchilov & Hutter, SGDR, 2017),
    ``wsd`` (the peak held, then linear decay over the last :data:`WSD_DECAY_SHARE`), or
    ``constant``.
    """
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if kind == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return _decay_shape(kind, progress)


WSD_DECAY_SHARE = 0.2
"""``wsd``: the share of the steps after warmup over which the rate decays to 0 (the 20%
cooldown of Hägele et al., 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed
Training Durations"); before it the peak is held."""


def _decay_shape(kind: str, progress: float) -> float:
    """The factor at decay ``progress`` in [0, 1] (``linear``, ``cosine``, ``wsd``)."""
    progress = min(1.0, max(0.0, progress))
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if kind == "wsd":
        return min(1.0, (1.0 - progress) / WSD_DECAY_SHARE)
    return 1.0 - progress


@dataclass(frozen=True)
class ScheduleCurve:
    """Warmup then decay to 0 at ``total_steps``, whose length can change mid-fit without the
    learning rate jumping (a budgeted run re-plans its length as its real speed shows).

    Unchanged, it is :func:`warmup_decay_factor`: linear warmup to 1 over ``warmup_steps``,
    then ``linear`` or ``cosine`` decay to 0 at ``total_steps`` (``constant``: 1). A
    :meth:`refit` at step ``s`` keeps the factor at ``s`` and lays what is left over the new
    length: during the decay the progress still to go (``1 - p(s)``) is spread over the new
    remaining steps, so the shape is stretched or shortened from the current value; during
    the warmup, the warmup is re-laid to the new length's share, or ends at once (the decay
    starting from the current factor) when that share is already behind.

    Attributes:
        kind: ``linear``, ``cosine`` or ``constant``.
        total_steps: Step index at which the factor reaches 0, ``T``.
        warmup_steps: Warmup ends at this step index, ``W`` (the factor is 1 at ``W - 1``).
        anchor_step / anchor_factor: The last re-fit's step and its factor (the start of a
            re-laid warmup); ``-1`` / ``0`` unchanged.
        anchor_progress: Decay progress at ``max(anchor_step, warmup_steps)``.
        peak: The factor the decay starts from (below 1 when a re-fit ended the warmup early).
        warmup_fraction: The share of the length used for warmup (kept for re-fits).
        refits: How many times the length was re-fitted.
    """

    kind: str
    total_steps: int
    warmup_steps: int = 0
    anchor_step: int = -1
    anchor_factor: float = 0.0
    anchor_progress: float = 0.0
    peak: float = 1.0
    warmup_fraction: float = 0.0
    refits: int = 0

    @classmethod
    def over(cls, kind: str, total_steps: int, warmup_fraction: float) -> ScheduleCurve:
        """A fresh curve over ``total_steps`` with ``warmup_fraction`` of them for warmup."""
        warmup = int(round(warmup_fraction * total_steps)) if kind != "constant" else 0
        return cls(kind=kind, total_steps=max(1, total_steps), warmup_steps=warmup,
                   warmup_fraction=warmup_fraction)

    def factor(self, step: int) -> float:
        """Multiplier of the peak learning rate at ``step`` (0-based optimizer step index)."""
        if self.kind == "constant":
            return 1.0
        if step < self.warmup_steps:
            start = self.anchor_step
            span = max(1, self.warmup_steps - 1 - start)
            return self.anchor_factor + (1.0 - self.anchor_factor) * (step - start) / span
        start = max(self.anchor_step, self.warmup_steps)
        span = max(1, self.total_steps - start)
        progress = self.anchor_progress + (1.0 - self.anchor_progress) * (step - start) / span
        return self.peak * _decay_shape(self.kind, progress)

    def _progress(self, step: int) -> float:
        start = max(self.anchor_step, self.warmup_steps)
        span = max(1, self.total_steps - start)
        return min(1.0, self.anchor_progress + (1.0 - self.anchor_progress)
                   * max(0, step - start) / span)

    def refit(self, step: int, total_steps: int) -> ScheduleCurve:
        """The curve with the steps after ``step`` laid over ``total_steps`` in all; the factor
        at ``step`` is unchanged (no jump). ``total_steps`` is raised to ``step + 1``."""
        total = max(step + 1, int(total_steps))
        now = self.factor(step)
        count = self.refits + 1
        if self.kind == "constant":
            return replace(self, total_steps=total, refits=count)
        if step < self.warmup_steps:
            warmup = int(round(self.warmup_fraction * total))
            if warmup > step + 1:  # the warmup goes on, re-laid from here
                return replace(self, total_steps=total, warmup_steps=warmup, anchor_step=step,
                               anchor_factor=now, anchor_progress=0.0, refits=count)
            # its share is behind already: the decay starts now, from the current factor
            return replace(self, total_steps=total, warmup_steps=step, anchor_step=step,
                           anchor_factor=now, anchor_progress=0.0, peak=now, refits=count)
        return replace(self, total_steps=total, anchor_step=step,
                       anchor_progress=self._progress(step), refits=count)

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ScheduleCurve:
        return cls(**state)


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
        self.curve: ScheduleCurve | None = None
        self._pending: dict[str, Any] | None = None
        self._pending_curve: ScheduleCurve | None = None

    def on_fit_start(self, state: TrainState) -> None:
        optimizer = state.optimizer
        if self.kind == "plateau":
            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode="max" if self.monitor.maximize else "min",
                factor=self.factor, patience=self.patience, threshold=self.monitor.min_delta,
                threshold_mode="abs")
        else:
            # A curve restored from a checkpoint keeps the length it was re-fitted to.
            self.curve = self._pending_curve or ScheduleCurve.over(
                self.kind, state.max_steps, self.warmup_fraction)
            self._pending_curve = None
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda step: self._factor(step))
        if self._pending is not None:
            self.scheduler.load_state_dict(self._pending)
            self._pending = None
            rates = self.scheduler.get_last_lr()
            if self.peak_learning_rate is not None and self.kind != "plateau":
                peak = self.peak_learning_rate
                self.scheduler.base_lrs = [peak for _ in optimizer.param_groups]
                step = self.scheduler.last_epoch
                rates = [peak * self._factor(step) for _ in self.scheduler.lr_lambdas]
                for group in optimizer.param_groups:
                    group["initial_lr"] = peak
            # Building a LambdaLR sets every group's rate to the schedule's value at step 0;
            # put back the rate of the restored step (else the rate "resets" on resume).
            for group, rate in zip(optimizer.param_groups, rates, strict=True):
                group["lr"] = rate
            self.scheduler._last_lr = list(rates)  # noqa: SLF001  # what get_last_lr() says
        state.scheduler = self.scheduler
        state.learning_rate = optimizer.param_groups[0]["lr"]

    def _factor(self, step: int) -> float:
        assert self.curve is not None
        return self.curve.factor(step)

    def lay_over(self, total_steps: int, step: int) -> None:
        """Lay the schedule over ``total_steps`` optimizer steps in all, ``step`` of them taken.

        Before the first step the curve starts afresh over the new length; after it the rest
        of the curve is re-fitted (:meth:`ScheduleCurve.refit`: the current rate is kept). A
        ``plateau`` schedule, driven by the metric, is left as it is.
        """
        if self.kind == "plateau" or self.scheduler is None or self.curve is None:
            return
        if step == 0 and self.curve.refits == 0:
            self.curve = ScheduleCurve.over(self.kind, total_steps, self.warmup_fraction)
        else:
            self.curve = self.curve.refit(step, total_steps)
        factor = self.curve.factor(self.scheduler.last_epoch)
        rates = [base * factor for base in self.scheduler.base_lrs]
        for group, rate in zip(self.scheduler.optimizer.param_groups, rates, strict=True):
            group["lr"] = rate
        self.scheduler._last_lr = list(rates)  # noqa: SLF001  # what get_last_lr() says

    def on_batch_end(self, state: TrainState) -> None:
        if self.kind != "plateau" and state.extras.get("last_micro", True):
            self.scheduler.step()

    def on_eval_end(self, state: TrainState) -> None:
        if self.kind == "plateau":
            self.scheduler.step(self.monitor.value(state.eval_metrics))

    def state_dict(self) -> dict[str, Any]:
        if self.scheduler is None:
            return {}
        return {"scheduler": self.scheduler.state_dict(),
                "curve": self.curve.state_dict() if self.curve is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state and "scheduler" in state:
            curve = state.get("curve")
            self._pending_curve = ScheduleCurve.from_state(curve) if curve else None
            state = state["scheduler"]
        self._pending = state or None
