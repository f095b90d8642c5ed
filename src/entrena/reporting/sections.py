"""The bodies of the report's sections (HTML), each from one part of the run directory.

Figures are named in words with their ``METRIC_KEYS`` meaning as a tooltip and shown in
human units (:mod:`entrena.reporting.formatting`); plots come from
:mod:`entrena.reporting.plots`.
"""

from __future__ import annotations

from typing import Any

from entrena.core.metrics import split_scores
from entrena.reporting.formatting import (
    baseline_name,
    escape,
    figure_cell,
    human_name,
    human_value,
    table,
)

__all__ = ["figures_table", "summary", "baseline", "samples", "predictions", "diagnosis",
           "data_report", "plan_vs_actual_table", "environment", "per_class"]

_WORDY = ("stop_reason", "device", "precision", "peak_source")


def _value(key: str, value: Any) -> str:
    if key.rsplit(".", 1)[-1] in _WORDY and isinstance(value, str):
        return escape(value.replace("_", " "))
    return human_value(key, value)


def figures_table(items: list[tuple[str, Any]]) -> str:
    """Rows of ``(dotted key, value)``: the figure in words (tooltip: its meaning and unit)
    and its value in human units."""
    if not items:
        return "<p class='empty'>nothing recorded</p>"
    rows = "".join(f"<tr>{figure_cell(key)}<td>{_value(key, value)}</td></tr>"
                   for key, value in items if not isinstance(value, dict | list))
    return f"<table><tr><th>figure</th><th>value</th></tr>{rows}</table>"


def summary(metrics: dict[str, Any]) -> str:
    """Scores of each split, the fit's figures and the cost."""
    items = [(f"{s}.{k}", v) for s in ("test", "validation")
             for k, v in split_scores(metrics.get(s))]
    items += [(f"fit.{k}", v) for k, v in (metrics.get("fit") or {}).items() if v is not None]
    items += [(f"cost.{k}", v) for k, v in (metrics.get("cost") or {}).items()]
    return figures_table(items)


def per_class(metrics: dict[str, Any]) -> str:
    """Precision, recall, F1 (%) and support of each class on test."""
    classes = (metrics.get("test") or {}).get("per_class") or {}
    rows = [(name, v.get("precision"), v.get("recall"), v.get("f1"), v.get("support"))
            for name, v in classes.items()]
    return table(rows, ("class", "precision", "recall", "F1", "support"),
                 (None, "test.per_class", "test.per_class", "test.per_class", "support"))


def baseline(metrics: dict[str, Any]) -> str:
    """The verdict, then the model and each baseline per split, in the task's metrics."""
    baselines = {name: result for name, result in (metrics.get("baseline") or {}).items()
                 if name != "comparison"}
    names = [k for k, _ in split_scores(metrics.get("validation")) if k != "loss"]
    rows = []
    for split in ("validation", "test"):
        if split in metrics:
            rows.append(("model", split, *(metrics[split].get(k) for k in names),
                         (metrics.get("fit") or {}).get("train_time_s")))
    for name, result in baselines.items():
        for split in ("validation", "test"):
            if split in result:
                drawn = result[split].get("prompts")  # a sampled baseline (zero-shot)
                label = baseline_name(name) + (f" ({drawn:,} prompts)" if drawn else "")
                rows.append((label, split, *(result[split].get(k) for k in names),
                             result.get("time_s")))
    return table(rows, ("model", "split", *(human_name(n) for n in names), "time"),
                 (None, None, *(f"validation.{n}" for n in names), "fit.train_time_s"))


def samples(metrics: dict[str, Any]) -> str:
    """A task's sample table (``test.samples``: prompt, reference, generation …), or ``""``."""
    found = (metrics.get("test") or {}).get("samples") or []
    if not found:
        return ""
    header = tuple(found[0])
    return table([tuple(s.get(k) for k in header) for s in found],
                 tuple(h.replace("_", " ") for h in header))


def predictions(metrics: dict[str, Any]) -> str:
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
        file = escape(str(entry.get("file", "")), quote=True)
        wrong = entry.get("mistakes")
        count = f", {wrong:,} wrong" if isinstance(wrong, int) else ""
        rows = entry.get("rows")
        parts.append(f"<h3>{escape(role)}</h3><p><a href='{file}'>{file}</a> "
                     f"({human_value('rows', rows)} rows{count})</p>")
        mistakes = entry.get("most_confident_mistakes") or []
        if mistakes:
            header = tuple(mistakes[0].keys())
            keys = tuple(h if h in ("confidence", "label_probability") else None
                         for h in header)
            parts.append("<p>The wrong predictions the model was surest of:</p>"
                         + table([tuple(m.get(k) for k in header) for m in mistakes],
                                 tuple(h.replace("_", " ") for h in header), keys))
    return "".join(parts)


def diagnosis(findings: list[dict[str, Any]]) -> str:
    """The findings: what, the figure that triggered it, what to change."""
    if not findings:
        return "<p class='ok'>nothing to change</p>"
    return table([(d.get("message"), d.get("figure"), d.get("change")) for d in findings],
                 ("finding", "figure", "change to make"))


def data_report(report: dict[str, Any]) -> str:
    """Rows read and used, duplicates, leaks and truncation per split; the checks."""
    rows = []
    for role, split in (report.get("splits") or {}).items():
        rows.append((role, split.get("rows_read"), (report.get("rows") or {}).get(role),
                     split.get("exact_duplicates"), split.get("leaked_rows"),
                     split.get("truncated_fraction")))
    checks = report.get("checks")
    extra = ""
    if isinstance(checks, list):
        extra = table([(str(c.get("check", c.get("name"))).replace("_", " "),
                        c.get("status", c.get("action")),
                        c.get("message")) for c in checks if isinstance(c, dict)],
                      ("check", "status", "message"))
    return table(rows, ("split", "rows read", "rows used", "exact duplicates", "leaked rows",
                        "truncated"),
                 (None, "rows", "rows", "rows", "rows", "truncated_fraction")) + extra


def plan_vs_actual_table(pairs: dict[str, dict[str, Any]]) -> str:
    """Predicted, actual and their ratio per quantity, in the quantity's unit."""
    rows = "".join(
        f"<tr>{figure_cell(f'plan_vs_actual.{key}')}"
        f"<td>{human_value(f'plan_vs_actual.{key}', pair.get('predicted'))}</td>"
        f"<td>{human_value(f'plan_vs_actual.{key}', pair.get('actual'))}</td>"
        f"<td>{_ratio(pair)}</td></tr>" for key, pair in pairs.items())
    if not rows:
        return ""
    return ("<table><tr><th>quantity</th><th>predicted</th><th>actual</th>"
            f"<th>actual / predicted</th></tr>{rows}</table>")


def _ratio(pair: dict[str, Any]) -> str:
    predicted, actual = pair.get("predicted"), pair.get("actual")
    if not predicted or not isinstance(actual, int | float):
        return "-"
    return f"{actual / predicted:.2f}x"


def environment(plan: dict[str, Any]) -> str:
    """This machine as the planner saw it (CPU, cores, memory, GPUs, torch)."""
    machine = plan.get("machine") or {}
    rows = []
    for key, value in machine.items():
        if key == "gpus":
            value = ", ".join(g.get("name", "?") if isinstance(g, dict) else str(g)
                              for g in value) or "none"
        elif isinstance(value, dict):
            rows += [(f"{key} {k}", v) for k, v in value.items()]
            continue
        rows.append((key, value))
    if not rows:
        return "<p class='empty'>no plan.json: environment unknown</p>"
    body = "".join(f"<tr><td>{escape(human_name(k))}</td><td>{human_value(k, v)}</td></tr>"
                   for k, v in rows)
    return f"<table><tr><th>item</th><th>value</th></tr>{body}</table>"
