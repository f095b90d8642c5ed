"""``entrena.report(run)``: (re)build ``report.html`` from a run directory."""

from __future__ import annotations

import logging
from pathlib import Path

from entrena.errors import ConfigError

__all__ = ["report", "write_report"]

log = logging.getLogger("entrena")


def write_report(run_dir: Path) -> Path:
    """Write ``run_dir/report.html`` atomically and return its path."""
    from entrena.core.files import write_atomic
    from entrena.reporting.html import build_report

    path = run_dir / "report.html"
    page = build_report(run_dir).encode("utf-8")
    write_atomic(path, lambda handle: handle.write(page), durable=False)
    return path


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
    if not (run_dir / "metrics.json").is_file() and not (run_dir / "events.jsonl").is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no metrics.json or events.jsonl); "
                          f"give the folder `entrena train` wrote, e.g. runs/<name>")
    return write_report(run_dir)
