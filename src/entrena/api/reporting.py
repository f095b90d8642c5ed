"""``entrena.report(run)``: (re)build ``report.html`` from a run directory."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from entrena.core.rundir import RunPaths
from entrena.errors import ConfigError
from entrena.reporting.html import write_report

__all__ = ["compare", "report", "write_report"]

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


def compare(runs: list[str | Path], output: str | Path | None = None) -> Path:
    """Write one page comparing runs side by side: config differences, curves overlaid,
    final metrics, time and cost.

    Args:
        runs: Two or more run directories (``runs/<name>``).
        output: The HTML file to write; default ``compare.html`` in the folder that holds
            the runs (their common parent: ``runs/compare.html``).

    Returns:
        The path of the page (written atomically).

    Raises:
        ConfigError: Fewer than two runs, a run named twice, a folder that is not a run
            directory (each named), or an output that is a folder, whose folder does not
            exist, or that is an existing file entrena did not write (an earlier report or
            comparison is replaced).
    """
    from entrena.core.files import write_atomic
    from entrena.reporting.compare import COMPARE_FILE, build_comparison
    from entrena.reporting.html import is_entrena_page

    run_dirs = [Path(r) for r in runs]
    if len(run_dirs) < 2:
        raise ConfigError(f"report --compare: got {len(run_dirs)} run(s); give two or more "
                          f"run directories, e.g. entrena report --compare runs/a runs/b")
    seen: dict[Path, Path] = {}
    for d in run_dirs:
        first = seen.setdefault(d.resolve(), d)
        if first is not d:
            what = (f"{d} is named twice" if str(d) == str(first)
                    else f"{first} and {d} are the same run directory")
            raise ConfigError(f"report --compare: {what}; give two or more different run "
                              f"directories, e.g. entrena report --compare runs/a runs/b")
    missing = [str(d) for d in run_dirs if not RunPaths(d).metrics.is_file()
               and not RunPaths(d).events.is_file()]
    if missing:
        raise ConfigError(f"report --compare: not a run directory (no metrics.json or "
                          f"events.jsonl): {', '.join(missing)}; give folders `entrena train` "
                          f"wrote, e.g. runs/<name>")
    if output is None:
        parent = Path(os.path.commonpath([d.resolve().parent for d in run_dirs]))
        path = parent / COMPARE_FILE
    else:
        path = Path(output)
        if path.is_dir():
            raise ConfigError(f"report --compare --output {path} is a folder; give a file name "
                              f"such as {path / COMPARE_FILE}")
        if not path.parent.is_dir():
            raise ConfigError(f"report --compare --output {path}: the folder {path.parent} "
                              f"does not exist; create it or choose another path")
    if path.exists() and not path.is_dir() and not is_entrena_page(path):
        raise ConfigError(f"report --compare: {path} exists and is not a report entrena wrote; "
                          f"choose another path with --output, or delete it (an earlier "
                          f"report or comparison is replaced)")
    page = build_comparison(run_dirs).encode("utf-8")
    write_atomic(path, lambda handle: handle.write(page), durable=False)
    return path
