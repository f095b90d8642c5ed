"""``entrena report --compare RUN RUN…``: one self-contained page comparing runs side by side.

What people otherwise do by hand in the MLflow UI: the config values that differ, the
training and validation curves overlaid, the final metrics, and time and cost, one column a
run. Built only from each run's ``config.yaml``, ``metrics.json`` and ``events.jsonl``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from entrena.core.metrics import split_scores
from entrena.core.rundir import RunPaths
from entrena.reporting import plots
from entrena.reporting.formatting import (
    escape,
    figure_cell,
    human_name,
    human_value,
    metric_entry,
)
from entrena.reporting.headline import cost_words, hardware_words, outcome_sentence
from entrena.reporting.html import page, read_events, read_json

__all__ = ["build_comparison", "config_differences", "COMPARE_FILE"]

COMPARE_FILE = "compare.html"
"""The page's default name, in the folder that holds the runs (``runs/compare.html``)."""


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): node}


def config_differences(configs: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """The dotted config keys whose values are not the same in every config, in the first
    config's order, with each config's value (``None`` where a config lacks the key)."""
    flats = [_flatten(c) for c in configs]
    keys = list(dict.fromkeys(k for flat in flats for k in flat))
    return [(k, [flat.get(k) for flat in flats]) for k in keys
            if len({repr(flat.get(k)) for flat in flats}) > 1]


def _row(cells: list[str], first: str) -> str:
    return f"<tr>{first}" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _header(names: list[str]) -> str:
    return "<tr><th></th>" + "".join(f"<th>{escape(n)}</th>" for n in names) + "</tr>"


def _metrics_table(names: list[str], metrics: list[dict[str, Any]]) -> str:
    keys = list(dict.fromkeys(f"{split}.{k}" for m in metrics for split in ("test", "validation")
                              for k, _ in split_scores(m.get(split))))
    rows = []
    for key in keys:
        split, name = key.split(".", 1)
        rows.append(_row([human_value(key, (m.get(split) or {}).get(name)) for m in metrics],
                         figure_cell(key)))
    verdicts = [outcome_sentence(m)[0] for m in metrics]
    rows.append(_row(verdicts, "<td>against the best baseline</td>"))
    return f"<table>{_header(names)}{''.join(rows)}</table>"


def _time_cost_table(names: list[str], metrics: list[dict[str, Any]],
                     plans: list[dict[str, Any]]) -> str:
    rows = []
    for key in ("fit.epochs", "fit.steps", "fit.train_time_s", "cost.wall_time_s",
                "fit.peak_memory_bytes", "fit.throughput_samples_per_s", "cost.usd_per_hour",
                "cost.usd"):
        section, name = key.split(".", 1)
        rows.append(_row([human_value(key, (m.get(section) or {}).get(name)) for m in metrics],
                         figure_cell(key)))
    rows.append(_row([escape(hardware_words(m.get("fit") or {}, p))
                      for m, p in zip(metrics, plans, strict=True)], "<td>hardware</td>"))
    costs = [cost_words(m.get("cost") or {}) for m in metrics]
    rows.append(_row([escape(source) for _, source in costs], "<td>price source</td>"))
    return f"<table>{_header(names)}{''.join(rows)}</table>"


def _curves(names: list[str], events: list[list[dict[str, Any]]]) -> str:
    training = {name: plots.series(e, "step", "loss") for name, e in zip(names, events,
                                                                           strict=True)}
    parts = [plots.line_plot(training, "training loss", "step", "loss")]
    per_metric: dict[str, dict[str, tuple[list, list]]] = {}
    for name, records in zip(names, events, strict=True):
        for key, points in plots.validation_series(records).items():
            per_metric.setdefault(key, {})[name] = points
    for key, lines in per_metric.items():
        entry = metric_entry(f"validation.{key}")
        percent = entry is not None and entry.unit == "fraction"
        parts.append(plots.line_plot(lines, human_name(f"validation.{key}"), "step",
                                     "" if percent else (entry.unit if entry else ""),
                                     percent=percent))
    return "".join(parts)


def build_comparison(run_dirs: list[Path]) -> str:
    """The HTML page comparing ``run_dirs`` (two or more run directories).

    Returns:
        The whole HTML document: config differences, final metrics, time and cost, curves
        overlaid (one line a run).
    """
    names = [d.name for d in run_dirs]
    if len(set(names)) < len(names):  # runs/a/x and runs/b/x: name them by their parents too
        names = [f"{d.parent.name}/{d.name}" for d in run_dirs]
    paths = [RunPaths(d) for d in run_dirs]
    metrics = [read_json(p.metrics) for p in paths]
    plans = [read_json(p.plan) for p in paths]
    configs = []
    for p in paths:
        try:
            loaded = yaml.safe_load(p.config.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            loaded = None
        configs.append(loaded if isinstance(loaded, dict) else {})
    differences = config_differences(configs)
    config_rows = "".join(_row([human_value("", v) for v in values],
                               f"<td>{escape(key)}</td>") for key, values in differences)
    config_table = (f"<table>{_header(names)}{config_rows}</table>" if differences
                    else "<p class='empty'>the configs are the same</p>")
    events = [read_events(p.events) for p in paths]
    body = (f"<p class='headline'>{len(run_dirs)} runs: {escape(', '.join(names))}</p>"
            f"<section><h2>Config differences</h2>{config_table}</section>"
            f"<section><h2>Final metrics</h2>{_metrics_table(names, metrics)}</section>"
            f"<section><h2>Time and cost</h2>"
            f"{_time_cost_table(names, metrics, plans)}</section>"
            f"<section><h2>Curves</h2>{_curves(names, events)}</section>")
    return page("entrena comparison", body)
