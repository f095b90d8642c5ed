"""Shared helpers of the benchmark scripts: machine description and the sections of the
benchmark pages (docs/benchmarks-journal.md, docs/benchmarks.md)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = Path(os.environ.get("ENTRENA_BENCH_DOC") or ROOT / "docs" / "benchmarks-journal.md")
"""The file sections go to: the dated journal, where every script's section lives and new ones
are appended; ``ENTRENA_BENCH_DOC`` redirects it (``bench.py --smoke`` does)."""
HEADLINE_MD: Path | None = None if os.environ.get("ENTRENA_BENCH_DOC") else \
    ROOT / "docs" / "benchmarks.md"
"""The headline page (figures a user needs, copied from the journal by hand). It holds no
markers today; a section whose markers are moved there is updated there. ``None`` while
``ENTRENA_BENCH_DOC`` redirects the sections (a smoke run touches one file only)."""


def machine() -> str:
    """One line: CPU model, cores, RAM, Python and torch versions."""
    import psutil
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = psutil.virtual_memory().total / 2**30
    return (f"{cpu}, {os.cpu_count()} cores, {ram:.0f} GiB RAM, Python {platform.python_version()}, "
            f"torch {torch.__version__}")


def load_text(load: list[float]) -> str:
    """``load average A–B during the runs`` and whether other work shared the 2 cores (a
    1-minute load above 2.5 means something else was running beside the benchmark)."""
    if not load:
        return "load average not recorded (the runs were published from their printed lines)"
    busy = max(load) > 2.5
    return (f"load average {min(load):.1f}–{max(load):.1f} during the runs "
            + ("(other jobs ran: a busy machine)" if busy else "(nothing else running)"))


def today() -> str:
    return dt.date.today().isoformat()


def section_page(name: str) -> Path:
    """The page that holds section ``name``: :data:`HEADLINE_MD` if its start marker is there,
    else :data:`BENCHMARKS_MD` (the journal; a section found on neither page is appended to it)."""
    start = f"<!-- bench:{name}:start -->"
    if HEADLINE_MD is not None and HEADLINE_MD.is_file() and start in HEADLINE_MD.read_text():
        return HEADLINE_MD
    return BENCHMARKS_MD


def write_section(name: str, body: str) -> Path:
    """Replace (or append) the section between ``<!-- bench:NAME:start/end -->`` markers on
    its page (:func:`section_page`). Returns the page written."""
    page = section_page(name)
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = page.read_text() if page.is_file() else "# Benchmarks journal\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.DOTALL)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else \
        text.rstrip() + "\n\n" + block + "\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    return page


def publish_runs(name: str, title: str, *, load: list[float], command: str, about: list[str],
                 table: list[str], summary: list[str], write: bool) -> str:
    """The body of a section of repeated runs (title; date, machine, load and command; what
    was run; the table; the summary lines), printed, and with ``write`` put between the
    ``bench:NAME`` markers (:func:`write_section`). Returns the body."""
    body = "\n".join([f"## {title}", "",
                      f"Measured {today()} on {machine()}; {load_text(load)}. "
                      f"Command: `{command}`", *about, "", *table, "", *summary])
    print(body)
    if write:
        write_section(name, body)
    return body


def run_all(prefix: str, jobs: list[tuple], run: Any) -> tuple[list[dict], list[float]]:
    """``run(*job, folder)`` for each job in order, in one temporary folder; each result is
    printed as a JSON line as it comes. Returns the results and the 1-minute load average
    before the first and after each run (for :func:`load_text`)."""
    import json
    import tempfile

    load, results = [os.getloadavg()[0]], []
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for job in jobs:
            results.append(run(*job, Path(tmp)))
            load.append(os.getloadavg()[0])
            print(json.dumps(results[-1]), flush=True)
    return results, load


def read_rows(path: Path) -> list[dict]:
    """The runs of a results file (one JSON object a line), for ``--from FILE``."""
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line]


def forget_fit_peaks() -> None:
    """Drop the fit peaks ``entrena train`` keeps beside its cached step memory
    (``<cache>/profiles/memory-*.json``), so that the next plan is a first fit's: a plan
    check measures the planner, not the memory of an earlier run of the same shape."""
    import json

    from entrena.data.remote import default_cache_dir
    from entrena.planning.caches import FIT_PEAK_FIELD

    for path in (default_cache_dir() / "profiles").glob("memory-*.json"):
        saved = json.loads(path.read_text())
        if saved.pop(FIT_PEAK_FIELD, None) is not None:
            path.write_text(json.dumps(saved))


def train_json(config: Path, run_dir: Path, sets: list[str]) -> dict:
    """``entrena train CONFIG --run-dir RUN_DIR --restart --json --set …``: its metrics
    (the printed JSON), planned as a first fit (:func:`forget_fit_peaks`). Exits with the
    run's stderr tail when it fails."""
    import json
    import subprocess
    import sys

    forget_fit_peaks()
    entrena = Path(sys.executable).with_name("entrena")
    command = [str(entrena), "train", str(config), "--run-dir", str(run_dir), "--restart",
               "--json", *[arg for item in sets for arg in ("--set", item)]]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        sys.exit(f"run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)

