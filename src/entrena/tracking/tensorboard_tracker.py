"""TensorBoard: event files under ``RUN/tensorboard/`` (``tensorboard --logdir runs``).

Written with PyTorch's ``torch.utils.tensorboard.SummaryWriter`` (the ``tensorboard`` package
does the encoding): the step and validation scalars of :class:`~entrena.tracking.scalars.
StepScalars` (``train/loss``, ``train/learning_rate``, ``efficiency/throughput_*``,
``efficiency/mfu``, ``efficiency/peak_memory_bytes`` …, ``validation/<metric>``), the final
numbers of ``metrics.json`` at the last step, the resolved config as text (``config``) and
the hyperparameters with the final metrics through the hparams plugin (the HPARAMS tab).
Failures are handled by :func:`~entrena.tracking.base.guard`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from entrena.core.callback import Callback
from entrena.core.state import TrainState
from entrena.tracking.scalars import StepScalars, final_scalars, hyperparameters

__all__ = ["HPARAM_METRICS", "TensorBoardTracker", "tag"]

HPARAM_METRICS = ("validation.", "test.")
"""Prefixes of the final metrics shown beside the hyperparameters (HPARAMS tab)."""


def tag(name: str) -> str:
    """TensorBoard's tag of a metric: ``validation.accuracy`` → ``validation/accuracy`` (the
    first part groups the charts)."""
    return name.replace(".", "/", 1)


class TensorBoardTracker(Callback):
    """Writes a run's event files (see the module docstring).

    Args:
        log_dir: ``RUN/tensorboard``; a resumed run adds an event file beside the first.
        every_steps: Interval of step scalars (``train.log_every_steps``).
    """

    def __init__(self, log_dir: Path, every_steps: int = 10):
        self.log_dir = log_dir
        self.scalars = StepScalars(every_steps)
        self.step = 0
        self._writer: Any = None
        self._params: dict[str, Any] = {}

    def start(self, params: dict[str, Any], tags: dict[str, str] | None = None) -> None:
        """Open the event file; write the config as text."""
        import yaml
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(log_dir=str(self.log_dir), flush_secs=30)
        self._params = params
        text = yaml.safe_dump(params, sort_keys=False)
        # Markdown: a 4-space indent keeps the YAML as a code block
        self._writer.add_text("config", "\n".join(f"    {line}" for line in text.splitlines()))

    def _write(self, scalars: dict[str, float], step: int) -> None:
        if self._writer is None:
            return
        for name, value in scalars.items():
            self._writer.add_scalar(tag(name), value, global_step=step)
        self.step = max(self.step, step)

    def on_batch_end(self, state: TrainState) -> None:
        found = self.scalars.at_batch_end(state)
        if found:
            self._write(found, state.step)

    def on_eval_end(self, state: TrainState) -> None:
        self._write(self.scalars.at_eval_end(state), state.step)
        if self._writer is not None:
            self._writer.flush()

    def on_fit_end(self, state: TrainState) -> None:
        self.step = max(self.step, state.step)
        if self._writer is not None:
            self._writer.flush()

    def finish(self, metrics: dict[str, Any], artifacts: list[Path]) -> None:
        """Write the final metrics (at the last step) and the hparams summary; close."""
        if self._writer is None:
            return
        from torch.utils.tensorboard.summary import hparams

        final = final_scalars(metrics)
        step = int(metrics.get("fit", {}).get("steps") or self.step)
        shown = {f"final/{k}": v for k, v in final.items() if k.startswith(HPARAM_METRICS)}
        for name, value in final.items():
            self._writer.add_scalar(f"final/{name}", value, global_step=step)
        experiment, start, end = hparams(hyperparameters(self._params), shown)
        writer = self._writer.file_writer
        for summary in (experiment, start, end):
            writer.add_summary(summary, global_step=step)
        self._writer.close()
        self._writer = None
