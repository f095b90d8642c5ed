"""Callbacks: early stopping, checkpoints, LR schedule, preemption, time limit, progress."""

from entrena.callbacks.checkpoint import ModelCheckpoint, PeriodicCheckpoint
from entrena.callbacks.early_stopping import EarlyStopping
from entrena.callbacks.lr_schedule import LRSchedule
from entrena.callbacks.monitor import Monitor
from entrena.callbacks.preemption import Preemption, TimeLimit
from entrena.callbacks.progress import ProgressBar

__all__ = ["EarlyStopping", "LRSchedule", "ModelCheckpoint", "Monitor", "PeriodicCheckpoint",
           "Preemption", "ProgressBar", "TimeLimit"]
