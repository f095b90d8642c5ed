"""``events.jsonl``: one JSON object per logged step, evaluation and epoch."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from entrena.core.callback import Callback
from entrena.core.files import dumps_strict
from entrena.core.state import TrainState

__all__ = ["EventLog", "since_process_start_s"]


def since_process_start_s() -> float:
    """Seconds since this process started, by the kernel's record of its start (psutil's
    ``create_time``; interpreter start-up and imports included)."""
    import psutil

    return time.time() - psutil.Process().create_time()


class EventLog(Callback):
    """Appends records to ``events.jsonl`` (the report and tests read it).

    Record types: ``fit_start`` (planned steps; ``resumes`` > 0 after a resume), ``step``
    (the fit's first optimizer step, then every ``every_steps``: loss, learning rate,
    throughput; the first also ``since_process_start_s``, seconds from the process's start
    by the kernel's clock, imports included), ``eval``
    (validation metrics), ``epoch``, ``checkpoint`` (file, reason, bytes, write seconds),
    ``nonfinite`` (a NaN/Inf loss or gradient norm: action, example indices),
    ``out_of_memory`` (a step run again with smaller micro-batches: the sizes, the error),
    ``fit_end``
    (``stop_reason``, or ``interrupted`` with the signal). Every record has ``type``,
    ``time`` (Unix seconds), ``step`` and ``epoch``.

    Args:
        path: The file; appended to, so a resumed run continues it.
        every_steps: Interval of ``step`` records.
    """

    def __init__(self, path: Path, every_steps: int = 10):
        self.path = path
        self.every_steps = every_steps
        self._handle: Any = None
        self._window_start = (0.0, 0, 0)
        self._first_written = False

    def write(self, record_type: str, state: TrainState, **fields: Any) -> None:
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("a", encoding="utf-8")
        record = {"type": record_type, "time": round(time.time(), 3), "step": state.step,
                  "epoch": state.epoch, **fields}
        self._handle.write(dumps_strict(record) + "\n")
        self._handle.flush()

    def on_fit_start(self, state: TrainState) -> None:
        self._window_start = (state.train_time_s, state.samples_seen, state.tokens_seen)
        self.write("fit_start", state, max_steps=state.max_steps,
                   steps_per_epoch=state.steps_per_epoch, resumes=state.resumes)

    def on_batch_end(self, state: TrainState) -> None:
        if not state.extras.get("last_micro", True):
            return
        first = not self._first_written
        if state.step % self.every_steps and not first:
            return
        self._first_written = True
        extra = {"since_process_start_s": round(since_process_start_s(), 3)} if first else {}
        t0, s0, k0 = self._window_start
        elapsed = max(1e-9, state.train_time_s - t0)
        self.write("step", state, loss=state.loss, learning_rate=state.learning_rate,
                   throughput_samples_per_s=(state.samples_seen - s0) / elapsed,
                   throughput_tokens_per_s=(state.tokens_seen - k0) / elapsed,
                   padding_fraction=state.padding_fraction, samples_seen=state.samples_seen,
                   **extra)
        self._window_start = (state.train_time_s, state.samples_seen, state.tokens_seen)

    def on_eval_end(self, state: TrainState) -> None:
        self.write("eval", state, validation=dict(state.eval_metrics))

    def on_step_end(self, state: TrainState) -> None:
        bad = state.extras.get("nonfinite")
        if bad is not None:
            self.write("nonfinite", state, **bad)
        for split in state.extras.get("out_of_memory", ()):  # one per retry of this step
            self.write("out_of_memory", state, **split)

    def on_checkpoint(self, state: TrainState) -> None:
        info = state.last_checkpoint
        self.write("checkpoint", state, file=str(info.get("path", "")),
                   reason=info.get("reason"), bytes=info.get("bytes"),
                   write_s=info.get("write_s"))

    def on_epoch_end(self, state: TrainState) -> None:
        self.write("epoch", state, train_time_s=state.train_time_s)

    def on_fit_end(self, state: TrainState) -> None:
        extra = {"interrupted": state.interrupted} if state.interrupted else {}
        self.write("fit_end", state, stop_reason=state.stop_reason, best_step=state.best_step,
                   **extra)
        if self._handle is not None:
            self._handle.close()
            self._handle = None
