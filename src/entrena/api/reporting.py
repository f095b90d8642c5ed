"""``entrena.report(run)``: (re)build ``report.html`` from a run directory."""

from __future__ import annotations

import logging
from pathlib import Path

from entrena.core.rundir import RunPaths
from entrena.errors import ConfigError
from entrena.reporting.html import write_report

__all__ = ["report", "write_report"]

log = logging.getLogger("entrena")


def report(run: str | Path) -> Path:
    """Build the HTML report of a run directory (plots inline, no network needed).

    Args:
        run: The run directory (``runs/<name>``).

    Returns:
        The path of ``report.html``.

    Raises:
        ConfigError: ``run`` is not a run directory with ``metrics.json`` or ``events.jsonl``.
    """
    run_dir = Path(run)
    paths = RunPaths(run_dir)
    if not paths.metrics.is_file() and not paths.events.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no metrics.json or events.jsonl); "
                          f"give the folder `entrena train` wrote, e.g. runs/<name>")
    return write_report(run_dir)
