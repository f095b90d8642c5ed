"""Weights & Biases (the ``wandb`` extra: ``pip install 'entrena[wandb]'``).

One W&B run per entrena run: project ``tracking.experiment``, name ``config.name``, config =
the resolved config; the step and validation scalars of
:class:`~entrena.tracking.scalars.StepScalars` logged at their optimizer step, the final
numbers of ``metrics.json`` in the run summary. Files go under ``RUN/wandb/``. The mode is
W&B's own (``WANDB_MODE``); with no ``WANDB_MODE`` and no API key (``WANDB_API_KEY`` or
``wandb login``) the run is written offline (``wandb sync RUN/wandb/offline-run-*`` uploads
it later) instead of waiting for a login prompt. W&B's console capture is off, so ``--json``
output stays one document. A resumed entrena run continues the same W&B run (its id is in
the checkpoints). Failures are handled by :func:`~entrena.tracking.base.guard`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from entrena.core.callback import Callback
from entrena.core.state import TrainState
from entrena.tracking.scalars import StepScalars, final_scalars

__all__ = ["INIT_TIMEOUT_S", "WandbTracker"]

log = logging.getLogger("entrena")

INIT_TIMEOUT_S = 30.0
"""Seconds ``wandb.init`` may take (W&B's default is 90) before the tracker warns and turns
itself off."""


class WandbTracker(Callback):
    """Logs a run to W&B (see the module docstring).

    Args:
        run_dir: The run directory (W&B writes ``run_dir/wandb/``).
        project: W&B project (``tracking.experiment``).
        run_name: W&B run name (``config.name``).
        every_steps: Interval of step scalars (``train.log_every_steps``).
    """

    def __init__(self, run_dir: Path, project: str, run_name: str, every_steps: int = 10):
        self.run_dir = run_dir
        self.project = project
        self.run_name = run_name
        self.scalars = StepScalars(every_steps)
        self.run_id: str | None = None
        self._run: Any = None

    @staticmethod
    def _mode() -> str | None:
        """``None`` (W&B decides, from ``WANDB_MODE`` or its login), or ``offline`` when
        there is neither ``WANDB_MODE`` nor a key (``WANDB_API_KEY``, or the ``.netrc`` entry
        of ``WANDB_BASE_URL``'s host that ``wandb login`` writes)."""
        if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
            return None
        import netrc
        from urllib.parse import urlparse

        host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
        try:
            hosts = netrc.netrc(os.environ.get("NETRC")).hosts
        except (OSError, netrc.NetrcParseError):
            hosts = {}
        return None if host in hosts else "offline"

    def start(self, params: dict[str, Any], tags: dict[str, str] | None = None) -> None:
        """Start (or, after a resume, continue) the W&B run with ``params`` as its config."""
        import wandb

        mode = self._mode()
        if mode == "offline":
            log.info("W&B: no API key (WANDB_API_KEY or `wandb login`); logging offline to "
                     "%s (upload later with `wandb sync`)", self.run_dir / "wandb")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=self.project, name=self.run_name, dir=str(self.run_dir), config=params,
            id=self.run_id, resume="allow" if self.run_id else None, mode=mode,
            reinit="create_new",
            settings=wandb.Settings(console="off", init_timeout=INIT_TIMEOUT_S, silent=True,
                                    save_code=False, disable_git=True))
        self.run_id = self._run.id

    def _log(self, scalars: dict[str, float], step: int) -> None:
        if self._run is not None and scalars:
            self._run.log(scalars, step=step)

    def on_batch_end(self, state: TrainState) -> None:
        found = self.scalars.at_batch_end(state)
        if found:
            self._log(found, state.step)

    def on_eval_end(self, state: TrainState) -> None:
        self._log(self.scalars.at_eval_end(state), state.step)

    def on_fit_end(self, state: TrainState) -> None:
        if state.interrupted and self._run is not None:
            self._run.finish(exit_code=1)  # resumable: the next session continues it
            self._run = None

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.run_id = state.get("run_id") or self.run_id

    def finish(self, metrics: dict[str, Any], artifacts: list[Path]) -> None:
        """Put the final metrics in the run summary and finish the run (the files stay in the
        run directory; W&B does not copy them)."""
        if self._run is None:
            return
        self._run.summary.update(final_scalars(metrics))
        self._run.finish()
        self._run = None
