"""``report.html``: one self-contained page from a run directory (plots as base64 PNG data
URIs, no network), built only from the files the run wrote.

The page opens with a headline (:mod:`entrena.reporting.headline`), then the sections of
:data:`SECTIONS` (:mod:`entrena.reporting.sections`, :mod:`entrena.reporting.plots`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from entrena.core.rundir import RunPaths
from entrena.reporting import plots, sections
from entrena.reporting.formatting import escape
from entrena.reporting.headline import headline, outcome_sentence

__all__ = ["build_report", "is_entrena_page", "read_events", "read_json", "page", "SECTIONS",
           "OPTIONAL_SECTIONS", "write_report"]

SECTIONS = ("Summary", "Training curves", "Efficiency", "Errors",
            "Baseline vs model", "Samples", "Predictions", "Diagnosis", "Data report",
            "Plan vs actual", "Environment")
"""Section titles, in page order (a test checks them)."""

OPTIONAL_SECTIONS = ("Samples",)
"""Sections shown only when the run has them (``Samples``: a task's ``test.samples``, such as
an LLM's prompts, references and generations)."""

STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;"
    "padding:2px 8px;font-size:13px;text-align:left;vertical-align:top}.plot{margin:4px}"
    ".tip{text-decoration:underline dotted #999;cursor:help}"
    ".headline{font-size:1.25em;padding:.6em .8em;border-left:6px solid #888;"
    "background:#f6f6f6}.headline.ok{border-color:#2a2}.headline.warn{border-color:#d90}"
    ".headline.bad{border-color:#c22}"
    ".bad{color:#b00;font-weight:bold}.ok{color:#070}.warn{color:#a60}.empty{color:#888}"
    ".headline.ok,.headline.bad,.headline.warn{color:#222;font-weight:normal}"
    ".legend{color:#555;font-size:13px}"
)
"""The page's CSS (inline: the file needs nothing else)."""


def read_events(path: Path) -> list[dict[str, Any]]:
    """The records of ``events.jsonl`` (a torn last line, or any line that is not JSON, even
    one that is not UTF-8, is skipped)."""
    records = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file, or ``{}`` when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


_HEAD = "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>"
PAGE_START = _HEAD + "entrena"
"""How every page entrena writes begins (its title starts with "entrena")."""


def page(title: str, body: str) -> str:
    """A whole HTML document around ``body`` (the report's style, no external resource);
    ``title`` starts with "entrena" (:func:`is_entrena_page` reads it)."""
    return (f"{_HEAD}{escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{escape(title)}</h1>{body}</body></html>\n")


def is_entrena_page(path: Path) -> bool:
    """Whether the file at ``path`` is an HTML page entrena wrote (a report or a comparison:
    one that may be written over)."""
    try:
        with path.open("rb") as handle:
            start = handle.read(len(PAGE_START))
    except OSError:
        return False
    return start == PAGE_START.encode("utf-8")


def _errors(metrics: dict[str, Any], run_dir: Path) -> str:
    if "rmse" in (metrics.get("validation") or {}):  # a regressor: errors in target units
        return plots.value_errors(run_dir / "predictions" / "test.csv")
    return (plots.confusion((metrics.get("test") or {}).get("confusion_matrix") or {})
            + sections.per_class(metrics))


def _verdict(metrics: dict[str, Any]) -> str:
    verdict = (metrics.get("baseline") or {}).get("comparison") or {}
    if not verdict:
        return ""
    text, style = outcome_sentence(metrics)
    return f"<p class='{style}'>{text[0].upper() + text[1:]}.</p>"


def build_report(run_dir: Path) -> str:
    """The HTML page of the run in ``run_dir``.

    Reads ``metrics.json``, ``events.jsonl``, ``data_report.json``, ``plan.json`` and, for a
    regressor, ``predictions/test.csv``; a missing file leaves its sections saying so.

    Returns:
        The whole HTML document.
    """
    paths = RunPaths(run_dir)
    metrics = read_json(paths.metrics)
    events = read_events(paths.events)
    plan = read_json(paths.plan)
    pairs = metrics.get("plan_vs_actual") or {}
    bodies = {
        "Summary": sections.summary(metrics),
        "Training curves": plots.curves(events),
        "Efficiency": plots.efficiency_plots(events)
        + sections.figures_table([(f"efficiency.{k}", v) for k, v in
                                  (metrics.get("efficiency") or {}).items() if v is not None]),
        "Errors": _errors(metrics, paths.root),
        "Baseline vs model": _verdict(metrics) + sections.baseline(metrics),
        "Samples": sections.samples(metrics),
        "Predictions": sections.predictions(metrics),
        "Diagnosis": sections.diagnosis(metrics.get("diagnosis") or []),
        "Data report": sections.data_report(read_json(paths.data_report)),
        "Plan vs actual": plots.plan_vs_actual_chart(pairs)
        + sections.plan_vs_actual_table(pairs),
        "Environment": sections.environment(plan),
    }
    legend = ("<p class='legend'>Hover over a figure's name (dotted underline) for what it "
              "measures; docs/reference/metrics.md lists every figure.</p>")
    body = headline(metrics, plan) + legend + "".join(
        f"<section><h2>{escape(title)}</h2>{bodies[title]}</section>"
        for title in SECTIONS if bodies[title] or title not in OPTIONAL_SECTIONS)
    return page(f"entrena report: {run_dir.name}", body)


def write_report(run_dir: Path) -> Path:
    """Write ``run_dir/report.html`` atomically and return its path."""
    from entrena.core.files import write_atomic

    path = RunPaths(run_dir).report
    text = build_report(run_dir).encode("utf-8")
    write_atomic(path, lambda handle: handle.write(text), durable=False)
    return path
