"""The run directory: one place names every file a run writes, finds the directory of a
run, and reads and writes its ``status.json``."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from entrena.errors import ConfigError

__all__ = ["RunPaths", "RunState", "resolve_run_dir", "read_status", "write_status"]

RunState = Literal["running", "finished", "failed", "interrupted", "pruned"]
"""What ``status.json`` says of a run (``pruned``: an ``entrena tune`` trial the pruner
stopped)."""


@dataclass(frozen=True)
class RunPaths:
    """Paths inside ``runs/<name>/`` (see docs/architecture.md)."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def plan(self) -> Path:
        """What the planner predicted before the fit (``entrena.api.planning``)."""
        return self.root / "plan.json"

    @property
    def data_report(self) -> Path:
        return self.root / "data_report.json"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.json"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @property
    def nonfinite(self) -> Path:
        """The batch that made the loss or gradients non-finite (``train.on_nonfinite: stop``)."""
        return self.root / "nonfinite_batch.json"

    @property
    def status(self) -> Path:
        """``{"status": "running" | "finished" | "failed" | "interrupted"}``, written atomically."""
        return self.root / "status.json"

    @property
    def predictions(self) -> Path:
        """``predictions/``: ``validation.csv`` and ``test.csv``, one row per example with its
        prediction (classification: each class's probability and whether it is correct)."""
        return self.root / "predictions"

    @property
    def report(self) -> Path:
        """``report.html``: the run's self-contained report."""
        return self.root / "report.html"

    @property
    def runs_root(self) -> Path:
        """The folder holding run directories (MLflow store and encoding cache live here)."""
        return self.root.parent

    @property
    def cache(self) -> Path:
        return self.runs_root / ".cache" / "encoded"


def resolve_run_dir(name: str, run_dir: str | Path | None) -> Path:
    """``run_dir`` if given, else ``runs/<name>`` under the working directory.

    Args:
        name: The run's name (``config.name``).
        run_dir: ``--run-dir``, or ``None``.

    Raises:
        ConfigError: The path, or a folder above it, is an existing file.
    """
    path = Path(run_dir) if run_dir is not None else Path("runs") / name
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                given = "--run-dir" if run_dir is not None else "the run directory"
                raise ConfigError(f"{given} {path}: {folder} is a file, not a folder; give a "
                                  "folder path (it is created when missing)")
            break
    return path


def read_status(paths: RunPaths) -> dict[str, Any] | None:
    """The run's ``status.json`` (``{"status": RunState, ...}``), or ``None`` when it is
    missing or unreadable."""
    try:
        status = json.loads(paths.status.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) and "status" in status else None


def write_status(paths: RunPaths, state: RunState, **fields: Any) -> None:
    """Write ``status.json`` atomically: ``{"status": state, "time": <unix s>, **fields}``
    (``started`` / ``finished`` instead of ``time`` for those states, as before)."""
    from entrena.core.files import write_json_atomic

    stamp = {"running": "started", "finished": "finished"}.get(state, "time")
    write_json_atomic(paths.status, {"status": state, stamp: time.time(), **fields},
                      durable=False)
