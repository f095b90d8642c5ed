"""Progress on stderr: a Rich bar with loss, throughput and ETA on a terminal, plain log lines
elsewhere (CI, files)."""

from __future__ import annotations

import logging
import time

from entrena.core.callback import Callback
from entrena.core.state import TrainState
from entrena.units import format_duration

__all__ = ["ProgressBar"]

log = logging.getLogger("entrena")


class ProgressBar(Callback):
    """Shows training progress.

    Args:
        console: A ``rich.console.Console`` writing to stderr.
        plain_every_steps: Without a terminal, log a line every this many steps.
    """

    def __init__(self, console, plain_every_steps: int = 25):
        self.console = console
        self.plain_every_steps = plain_every_steps
        self.progress = None
        self.task = None
        self._start_time = 0.0
        self._start_step = 0

    def on_fit_start(self, state: TrainState) -> None:
        self._start_time, self._start_step = time.perf_counter(), state.step
        if not self.console.is_terminal:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]epoch {task.fields[epoch]}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[speed]}"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=self.console, transient=False)
        self.progress.start()
        self.task = self.progress.add_task("train", total=state.max_steps, completed=state.step,
                                           epoch=state.epoch + 1, loss="-", speed="")

    def _speed(self, state: TrainState) -> tuple[float, float]:
        elapsed = max(1e-9, time.perf_counter() - self._start_time)
        steps_per_s = (state.step - self._start_step) / elapsed
        eta = (state.max_steps - state.step) / steps_per_s if steps_per_s > 0 else float("nan")
        return steps_per_s, eta

    def on_batch_end(self, state: TrainState) -> None:
        samples_per_s = state.samples_seen / state.train_time_s if state.train_time_s else 0.0
        if self.progress is not None:
            self.progress.update(self.task, completed=state.step, total=state.max_steps,
                                 epoch=state.epoch + 1,
                                 loss=f"{state.loss:.3f}", speed=f"{samples_per_s:.1f} samples/s")
        elif state.step % self.plain_every_steps == 0 and state.extras.get("last_micro", True):
            _, eta = self._speed(state)
            log.info("epoch %d step %d/%d loss %.4f %.1f samples/s eta %s", state.epoch + 1,
                     state.step, state.max_steps, state.loss, samples_per_s,
                     format_duration(eta) if eta == eta else "?")

    def on_eval_end(self, state: TrainState) -> None:
        metrics = " ".join(f"{k} {v:.4f}" for k, v in state.eval_metrics.items()
                           if isinstance(v, float))
        message = f"validation at step {state.step} (epoch {state.epoch + 1}): {metrics}"
        if self.progress is not None:
            self.progress.console.print(message)
        log.info(message) if self.progress is None else log.debug(message)

    def on_fit_end(self, state: TrainState) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
