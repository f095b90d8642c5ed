"""The report's plots: matplotlib figures as inline base64 PNG ``<img>`` tags (no network)."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

from entrena.core.metrics import METRIC_KEYS
from entrena.reporting.formatting import escape, human_name

__all__ = ["png", "line_plot", "confusion", "value_errors", "series", "curves",
           "efficiency_plots", "plan_vs_actual_chart"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig: Any, alt: str) -> str:
    """``fig`` as an ``<img>`` with a PNG data URI (90 dpi), closed after."""
    plt = _pyplot()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img class="plot" alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def line_plot(lines: dict[str, tuple[list[float], list[float]]], title: str, xlabel: str,
              ylabel: str, *, percent: bool = False) -> str:
    """One plot of several ``{name: (x, y)}`` lines; ``percent`` shows fractions as %."""
    lines = {k: v for k, v in lines.items() if v[0]}
    if not lines:
        return f"<p class='empty'>{escape(title)}: no data recorded</p>"
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for name, (x, y) in lines.items():
        y = [100 * v for v in y] if percent else y
        ax.plot(x, y, marker="o" if len(x) < 30 else None, markersize=3, label=name)
    ax.set(title=title, xlabel=xlabel, ylabel=f"{ylabel} (%)" if percent else ylabel)
    ax.grid(alpha=0.3)
    if len(lines) > 1:
        ax.legend()
    return png(fig, title)


def confusion(matrix: dict[str, Any]) -> str:
    """The test confusion matrix (rows: true label, columns: predicted), counts in cells."""
    values, labels = matrix.get("matrix"), matrix.get("labels")
    if not values:
        return "<p class='empty'>no test set: no confusion matrix</p>"
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(3.8, 3.4))
    ax.imshow(values, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set(xlabel="predicted", ylabel="true", title="test confusion matrix")
    for i, row in enumerate(values):
        for j, count in enumerate(row):
            ax.text(j, i, f"{count:,}", ha="center", va="center")
    return png(fig, "test confusion matrix")


def value_errors(predictions: Path) -> str:
    """A regressor's test errors from ``predictions/test.csv`` (columns ``target`` and
    ``predicted_value``): predicted against actual, and residuals against predicted."""
    import pandas as pd

    if not predictions.is_file():
        return "<p class='empty'>no test predictions (predictions/test.csv): no error plots</p>"
    frame = pd.read_csv(predictions)
    if not {"target", "predicted_value"} <= set(frame.columns):
        return "<p class='empty'>predictions/test.csv has no target/predicted_value</p>"
    plt = _pyplot()
    actual, predicted = frame["target"].to_numpy(float), frame["predicted_value"].to_numpy(float)
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    ax.scatter(actual, predicted, s=8, alpha=0.6)
    low = float(min(actual.min(), predicted.min()))
    high = float(max(actual.max(), predicted.max()))
    ax.plot([low, high], [low, high], color="#888", linewidth=1)
    ax.set(xlabel="actual", ylabel="predicted", title="test: predicted vs actual")
    scatter = png(fig, "test: predicted vs actual")
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    ax.scatter(predicted, actual - predicted, s=8, alpha=0.6)
    ax.axhline(0, color="#888", linewidth=1)
    ax.set(xlabel="predicted", ylabel="actual - predicted", title="test: residuals")
    return scatter + png(fig, "test: residuals")


def series(records: list[dict[str, Any]], kind: str, key: str) -> tuple[list, list]:
    """``(steps, values)`` of ``key`` in the ``events.jsonl`` records of type ``kind``."""
    points = [(r["step"], r[key]) for r in records
              if r.get("type") == kind and isinstance(r.get(key), int | float)]
    return [p[0] for p in points], [p[1] for p in points]


def validation_series(events: list[dict[str, Any]]) -> dict[str, tuple[list, list]]:
    """``{metric: (steps, values)}`` of every numeric validation metric of the ``eval``
    records (a nested figure, such as an LLM's ``answers``, is not a curve)."""
    evals = [r for r in events if r.get("type") == "eval"]
    keys = list(dict.fromkeys(k for r in evals for k in (r.get("validation") or {})))
    found = {}
    for key in keys:
        points = [(r["step"], r["validation"][key]) for r in evals
                  if isinstance(r.get("validation", {}).get(key), int | float)]
        if points:
            found[key] = ([p[0] for p in points], [p[1] for p in points])
    return found


def curves(events: list[dict[str, Any]]) -> str:
    """Training and validation loss, the validation metrics (one plot per unit: fractions
    together, in %; a regressor's errors in target units together; R² alone) and the
    learning rate."""
    by_unit: dict[str, dict[str, tuple[list, list]]] = {}
    for key, points in validation_series(events).items():
        entry = METRIC_KEYS.get(f"validation.{key}")
        unit = "loss" if key == "loss" else (entry.unit if entry else "") or key
        by_unit.setdefault(unit, {})[human_name(f"validation.{key}")] = points
    loss = {"training loss": series(events, "step", "loss"), **by_unit.pop("loss", {})}
    plots = [line_plot(loss, "loss", "step", "loss")]
    plots += [line_plot(lines, "validation metrics", "step",
                        "" if unit == "fraction" else unit, percent=unit == "fraction")
              for unit, lines in by_unit.items()]
    plots.append(line_plot({"learning rate": series(events, "step", "learning_rate")},
                           "learning rate", "step", "learning rate"))
    return "".join(plots) + ("<p class='legend'>loss: the task's training objective "
                             "(cross-entropy in nats for a classifier; MSE of the "
                             "standardised target for a regressor)</p>")


def efficiency_plots(events: list[dict[str, Any]]) -> str:
    """Throughput; data wait, padding and MFU (%); peak memory (GiB) over the fit."""
    memory = series(events, "efficiency", "peak_memory_bytes")
    return "".join([
        line_plot({"samples/s": series(events, "efficiency", "throughput_samples_per_s")},
                  "throughput", "step", "samples/s"),
        line_plot({"data wait": series(events, "efficiency", "data_wait_fraction"),
                   "padding": series(events, "efficiency", "padding_fraction"),
                   "MFU": series(events, "efficiency", "mfu")},
                  "data wait, padding, MFU", "step", "share", percent=True),
        line_plot({"peak memory": (memory[0], [v / 2**30 for v in memory[1]])},
                  "memory", "step", "GiB")])


def plan_vs_actual_chart(pairs: dict[str, dict[str, Any]]) -> str:
    """Bars of the planner's prediction beside the measurement, one panel per quantity
    (peak memory in GiB, epoch time in s), each labelled with actual / predicted."""
    shown = {k: v for k, v in pairs.items()
             if isinstance(v.get("predicted"), int | float)
             and isinstance(v.get("actual"), int | float)}
    if not shown:
        return "<p class='empty'>no plan to compare with (plan.json)</p>"
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(shown), figsize=(2.8 * len(shown) + 0.6, 2.8),
                             squeeze=False)
    for ax, (key, pair) in zip(axes[0], shown.items(), strict=True):
        scale, unit = (2**30, "GiB") if key.endswith("_bytes") else (1.0, "s")
        values = [pair["predicted"] / scale, pair["actual"] / scale]
        ax.bar(["plan", "actual"], values, color=["#9ab", "#357"])
        ratio = pair["actual"] / pair["predicted"] if pair["predicted"] else float("nan")
        title = key.removesuffix("_bytes").removesuffix("_s").replace("_", " ")
        ax.set(title=f"{title}: actual {ratio:.2f}x plan", ylabel=unit)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return png(fig, "plan vs actual")
