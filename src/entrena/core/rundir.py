"""The run directory layout: one place names every file a run writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunPaths"]


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
    def runs_root(self) -> Path:
        """The folder holding run directories (MLflow store and encoding cache live here)."""
        return self.root.parent

    @property
    def cache(self) -> Path:
        return self.runs_root / ".cache" / "encoded"
