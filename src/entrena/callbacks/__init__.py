"""Callbacks: early stopping, checkpoints, LR schedule, preemption, time limit, progress,
and the registry of callbacks by name (:mod:`entrena.callbacks.registry`).

The callbacks are imported on first use, so that the registry (which a config load checks
``train.callbacks`` against) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["EarlyStopping", "LRSchedule", "ModelCheckpoint", "Monitor", "PeriodicCheckpoint",
           "Preemption", "ProgressBar", "TimeLimit"]

_WHERE = {"EarlyStopping": "early_stopping", "LRSchedule": "lr_schedule",
          "ModelCheckpoint": "checkpoint", "PeriodicCheckpoint": "checkpoint",
          "Monitor": "monitor", "Preemption": "preemption", "TimeLimit": "preemption",
          "ProgressBar": "progress"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"entrena.callbacks.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'entrena.callbacks' has no attribute {name!r}")
