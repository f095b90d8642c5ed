"""``report.html``: one self-contained page from a run directory (plots as base64 PNG data
URIs, no network), built only from the files the run wrote."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from entrena.core.metrics import METRIC_KEYS, split_scores
from entrena.core.rundir import RunPaths

__all__ = ["build_report", "read_events", "SECTIONS", "write_report"]

SECTIONS = ("Summary", "Training curves", "Efficiency", "Errors",
            "Baseline vs model", "Predictions", "Diagnosis", "Data report", "Plan vs actual",
            "Environment")
"""Section titles, in page order (a test checks them)."""


def read_events(path: Path) -> list[dict[str, Any]]:
    """The records of ``events.jsonl`` (a torn last line is skipped)."""
    records = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img class="plot" src="data:image/png;base64,{data}">'


def _line_plot(series: dict[str, tuple[list[float], list[float]]], title: str, xlabel: str,
               ylabel: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {k: v for k, v in series.items() if v[0]}
    if not series:
        return f"<p class='empty'>{html.escape(title)}: no data recorded</p>"
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for name, (x, y) in series.items():
        ax.plot(x, y, marker="o" if len(x) < 30 else None, markersize=3, label=name)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return _png(fig)


def _confusion(matrix: dict[str, Any]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values, labels = matrix.get("matrix"), matrix.get("labels")
    if not values:
        return "<p class='empty'>no test set: no confusion matrix</p>"
    fig, ax = plt.subplots(figsize=(3.8, 3.4))
    ax.imshow(values, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set(xlabel="predicted", ylabel="true", title="test confusion matrix")
    for i, row in enumerate(values):
        for j, count in enumerate(row):
            ax.text(j, i, str(count), ha="center", va="center")
    return _png(fig)


def _value_errors(predictions: Path) -> str:
    """A regressor's test errors from ``predictions/test.csv`` (columns ``target`` and
    ``predicted_value``): predicted against actual, and residuals against predicted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    if not predictions.is_file():
        return "<p class='empty'>no test predictions (predictions/test.csv): no error plots</p>"
    frame = pd.read_csv(predictions)
    if not {"target", "predicted_value"} <= set(frame.columns):
        return "<p class='empty'>predictions/test.csv has no target/predicted_value</p>"
    actual, predicted = frame["target"].to_numpy(float), frame["predicted_value"].to_numpy(float)
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    ax.scatter(actual, predicted, s=8, alpha=0.6)
    low, high = float(min(actual.min(), predicted.min())), float(max(actual.max(),
                                                                     predicted.max()))
    ax.plot([low, high], [low, high], color="#888", linewidth=1)
    ax.set(xlabel="actual", ylabel="predicted", title="test: predicted vs actual")
    scatter = _png(fig)
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    ax.scatter(predicted, actual - predicted, s=8, alpha=0.6)
    ax.axhline(0, color="#888", linewidth=1)
    ax.set(xlabel="predicted", ylabel="actual - predicted", title="test: residuals")
    return scatter + _png(fig)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return html.escape(json.dumps(value)[:200])
    return html.escape(str(value))


def _table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    if not rows:
        return "<p class='empty'>nothing recorded</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _series(records: list[dict[str, Any]], kind: str, key: str) -> tuple[list, list]:
    points = [(r["step"], r[key]) for r in records
              if r.get("type") == kind and isinstance(r.get(key), (int, float))]
    return [p[0] for p in points], [p[1] for p in points]


def _curves(events: list[dict[str, Any]]) -> str:
    """Training and validation loss, the validation metrics (one plot per unit: fractions
    together, a regressor's errors in target units together, R² alone) and the learning
    rate."""
    evals = [r for r in events if r.get("type") == "eval"]
    keys = list(dict.fromkeys(k for r in evals for k in (r.get("validation") or {})))
    by_unit: dict[str, dict[str, tuple[list, list]]] = {}
    for key in keys:
        points = [(r["step"], r["validation"][key]) for r in evals
                  if isinstance(r.get("validation", {}).get(key), (int, float))]
        entry = METRIC_KEYS.get(f"validation.{key}")
        unit = "loss" if key == "loss" else (entry.unit if entry else "") or key
        by_unit.setdefault(unit, {})[f"validation {key}"] = ([p[0] for p in points],
                                                             [p[1] for p in points])
    loss = {"training loss": _series(events, "step", "loss"),
            **by_unit.pop("loss", {})}
    plots = [_line_plot(loss, "loss", "step", "loss (the task's: cross-entropy in nats, or "
                                               "MSE of the standardised target)")]
    plots += [_line_plot(series, "validation metrics", "step", unit)
              for unit, series in by_unit.items()]
    plots.append(_line_plot({"learning rate": _series(events, "step", "learning_rate")},
                            "learning rate", "step", "learning rate"))
    return "".join(plots)


def _efficiency(events: list[dict[str, Any]], efficiency: dict[str, Any]) -> str:
    plots = "".join([
        _line_plot({"samples/s": _series(events, "efficiency", "throughput_samples_per_s")},
                   "throughput", "step", "samples/s"),
        _line_plot({"data wait": _series(events, "efficiency", "data_wait_fraction"),
                    "padding": _series(events, "efficiency", "padding_fraction"),
                    "MFU": _series(events, "efficiency", "mfu")},
                   "data wait, padding, MFU", "step", "fraction"),
        _line_plot({"peak memory (GiB)": (
            _series(events, "efficiency", "peak_memory_bytes")[0],
            [v / 2**30 for v in _series(events, "efficiency", "peak_memory_bytes")[1]])},
            "memory", "step", "GiB")])
    return plots + _table(sorted(efficiency.items()), ("figure", "value"))


def _baseline(metrics: dict[str, Any]) -> str:
    baselines = {name: result for name, result in (metrics.get("baseline") or {}).items()
                 if name != "comparison"}
    names = [k for k, _ in split_scores(metrics.get("validation")) if k != "loss"]
    rows = []
    for split in ("validation", "test"):
        if split in metrics:
            rows.append(("model", split, *(metrics[split].get(k) for k in names),
                         metrics.get("fit", {}).get("train_time_s")))
    for name, result in baselines.items():
        for split in ("validation", "test"):
            if split in result:
                rows.append((name, split, *(result[split].get(k) for k in names),
                             result.get("time_s")))
    verdict = (metrics.get("baseline") or {}).get("comparison") or {}
    note = ""
    if verdict:
        outcome = verdict.get("outcome") or ("beats" if verdict.get("model_beats_baseline")
                                             else "loses")
        words = {"beats": "beats", "ties": "ties with", "loses": "DOES NOT BEAT"}[outcome]
        style = {"beats": "ok", "ties": "warn", "loses": "bad"}[outcome]
        note = (f"<p class='{style}'>The model {words} the best baseline "
                f"({html.escape(str(verdict.get('best')))}) on {verdict.get('split')} "
                f"{verdict.get('metric')}: {_fmt(verdict.get('model'))} vs "
                f"{_fmt(verdict.get('best_score'))}.</p>")
    return note + _table(rows, ("model", "split", *names, "time (s)"))


def _predictions(metrics: dict[str, Any]) -> str:
    """Links to ``predictions/<role>.csv`` and each split's most confident mistakes."""
    saved = metrics.get("predictions") or {}
    parts = []
    if "test" not in metrics:
        parts.append("<p class='warn'>No test file (data.test): every score here is a "
                     "validation score, on the rows that also chose the best weights, so it "
                     "leans optimistic. Set data.test to held-out data for an unbiased "
                     "score.</p>")
    if not saved:
        return "".join(parts) + "<p class='empty'>no per-row predictions were written</p>"
    for role, entry in saved.items():
        file = html.escape(str(entry.get("file", "")))
        wrong = entry.get("mistakes")
        count = f", {wrong} wrong" if wrong is not None else ""
        parts.append(f"<h3>{html.escape(role)}</h3><p><a href='{file}'>{file}</a> "
                     f"({entry.get('rows')} rows{count})</p>")
        mistakes = entry.get("most_confident_mistakes") or []
        if mistakes:
            header = tuple(mistakes[0].keys())
            parts.append("<p>The wrong predictions the model was surest of:</p>"
                         + _table([tuple(m.get(k) for k in header) for m in mistakes], header))
    return "".join(parts)


def _samples(samples: list[dict[str, Any]]) -> str:
    """A task's sample table (``test.samples``: prompts, references, generations …)."""
    if not samples:
        return ""
    header = list(samples[0])
    return "<h3>Samples (test)</h3>" + _table([[s.get(k) for k in header] for s in samples],
                                              tuple(header))


def _data(report: dict[str, Any]) -> str:
    rows = []
    for role, split in (report.get("splits") or {}).items():
        rows.append((role, split.get("rows_read"), (report.get("rows") or {}).get(role),
                     split.get("exact_duplicates"), split.get("leaked_rows"),
                     split.get("truncated_fraction")))
    checks = report.get("checks")
    extra = ""
    if isinstance(checks, list):
        extra = _table([(c.get("check", c.get("name")), c.get("status", c.get("action")),
                         c.get("message")) for c in checks if isinstance(c, dict)],
                       ("check", "status", "message"))
    return _table(rows, ("split", "rows read", "rows used", "exact duplicates", "leaked rows",
                         "truncated fraction")) + extra


def build_report(run_dir: Path) -> str:
    """The HTML page of the run in ``run_dir`` (reads metrics.json, events.jsonl,
    data_report.json, plan.json, config.yaml)."""
    paths = RunPaths(run_dir)
    metrics = _read_json(paths.metrics)
    events = read_events(paths.events)
    data_report = _read_json(paths.data_report)
    plan = _read_json(paths.plan)
    fit = metrics.get("fit") or {}
    summary = [("run", run_dir.name), *[(f"{s}.{k}", v) for s in ("validation", "test")
                                        for k, v in split_scores(metrics.get(s))],
               *[(f"fit.{k}", v) for k, v in fit.items()]]
    pva = metrics.get("plan_vs_actual") or {}
    plan_rows = [(key, pair.get("predicted"), pair.get("actual"),
                  (pair["actual"] / pair["predicted"]) if pair.get("predicted")
                  and pair.get("actual") else None) for key, pair in pva.items()]
    diagnosis = metrics.get("diagnosis") or []
    machine = plan.get("machine") or {}
    env = [(k, v) for k, v in machine.items() if not isinstance(v, (dict, list))]
    for key in ("torch", "libraries"):
        if isinstance(machine.get(key), dict):
            env += [(f"{key}.{k}", v) for k, v in machine[key].items()]
    bodies = {
        "Summary": _table(summary, ("key", "value")),
        "Training curves": _curves(events),
        "Efficiency": _efficiency(events, metrics.get("efficiency") or {}),
        "Errors": _value_errors(paths.root / "predictions" / "test.csv")
        if "rmse" in (metrics.get("validation") or {}) else
        _confusion((metrics.get("test") or {}).get("confusion_matrix") or {})
        + _table([(name, *v.values()) for name, v in
                  ((metrics.get("test") or {}).get("per_class") or {}).items()],
                 ("class", "precision", "recall", "F1", "support")),
        "Baseline vs model": _baseline(metrics)
        + _samples((metrics.get("test") or {}).get("samples") or []),
        "Predictions": _predictions(metrics),
        "Diagnosis": _table([(d.get("message"), d.get("figure"), d.get("change"))
                             for d in diagnosis], ("finding", "figure", "change to make"))
        if diagnosis else "<p class='ok'>nothing to change</p>",
        "Data report": _data(data_report),
        "Plan vs actual": _table(plan_rows, ("quantity", "predicted", "actual", "actual/plan")),
        "Environment": _table(env, ("item", "value")),
    }
    sections = "".join(f"<section><h2>{html.escape(title)}</h2>{bodies[title]}</section>"
                       for title in SECTIONS)
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>entrena report: {html.escape(run_dir.name)}</title><style>"
            "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
            "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;"
            "padding:2px 8px;font-size:13px;text-align:left}.plot{margin:4px}"
            ".bad{color:#b00;font-weight:bold}.ok{color:#070}.warn{color:#a60}.empty{color:#888}"
            f"</style></head><body><h1>entrena report: {html.escape(run_dir.name)}</h1>"
            f"{sections}</body></html>\n")


def write_report(run_dir: Path) -> Path:
    """Write ``run_dir/report.html`` atomically and return its path."""
    from entrena.core.files import write_atomic

    path = RunPaths(run_dir).report
    page = build_report(run_dir).encode("utf-8")
    write_atomic(path, lambda handle: handle.write(page), durable=False)
    return path
