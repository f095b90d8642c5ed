"""What every task's model card (``MODEL_CARD.md``) shares: figures formatted, the data lines
from ``data_report.json``, the metric rows from ``metrics.json`` and the weights line, for a
task's card function (``tasks/<name>/card.py`` or its export module) to compose with its own
task, intended-use and limits sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from entrena.core.metrics import split_scores
from entrena.exporting.bundle import RunModel

__all__ = ["data_lines", "metric_rows", "num", "pct", "weights_line"]


def pct(value: Any) -> str:
    """``0.873`` → ``"87.3%"``; ``"n/a"`` for anything but a number."""
    return f"{100 * value:.1f}%" if isinstance(value, int | float) else "n/a"


def num(value: Any, fmt: str = "{:.4f}") -> str:
    """``value`` through ``fmt`` (4 decimals by default); ``"n/a"`` for anything but a
    number."""
    return fmt.format(value) if isinstance(value, int | float) else "n/a"


def _count(value: Any) -> int:
    return len(value) if isinstance(value, list) else int(value or 0)


def data_lines(run: RunModel) -> list[str]:
    """One line per split from ``data_report.json`` (both its older flat layout and the
    per-split layout with ``rows_read`` / ``rows_kept``)."""
    report = run.data_report
    lines = []
    for role, split in report.get("splits", {}).items():
        read = split.get("rows_read", split.get("read"))
        kept = split.get("rows_kept", split.get("kept"))
        empty = sum(_count(split.get(key, split.get(f"skipped_{key}")))
                    for key in ("empty_text", "empty_label"))
        # the file's name only: the bundle ships, the trainer's folders stay private
        where = f"`{Path(str(split['file'])).name}`" if split.get("file") \
            else split.get("source", "")
        lines.append(f"- {role}: {where}: {read} rows read, {kept} kept ({empty} with an empty "
                     "text or label)")
        if split.get("label_counts"):
            lines.append("  - label counts: " + ", ".join(
                f"{label} {count}" for label, count in split["label_counts"].items()))
    rows = report.get("rows", {})
    if rows:
        lines.append(f"- Rows used: train {rows.get('train')}, validation "
                     f"{rows.get('validation')}, test {rows.get('test')}")
    if report.get("validation_split"):
        vs = report["validation_split"]
        lines.append(f"- Validation: {pct(vs.get('fraction'))} of the training rows, split off "
                     f"stratified by label (seed {vs.get('seed')})")
    per_split = any(split.get("label_counts") for split in report.get("splits", {}).values())
    for role, counts in ({} if per_split else report.get("label_counts", {})).items():
        lines.append(f"- Label counts ({role}): "
                     + ", ".join(f"{label} {count}" for label, count in counts.items()))
    return lines or ["- not recorded (the run has no data_report.json)"]


def metric_rows(metrics: dict[str, Any]) -> list[str]:
    """Markdown table rows ``| split.metric | value |`` of validation and test (and the test
    per-class precision / recall / F1), from ``metrics.json``."""
    rows = []
    for section in ("validation", "test"):
        for key, value in split_scores(metrics.get(section)):
            rows.append(f"| {section}.{key} | {num(value)} |")
    for label, scores in metrics.get("test", {}).get("per_class", {}).items():
        rows.append(f"| test.per_class.{label} (precision / recall / F1, support) | "
                    f"{num(scores.get('precision'), '{:.3f}')} / "
                    f"{num(scores.get('recall'), '{:.3f}')} / {num(scores.get('f1'), '{:.3f}')}, "
                    f"{scores.get('support')} |")
    return rows or ["| (no metrics.json) | |"]


def weights_line(fit: dict[str, Any]) -> str:
    """Which weights the run kept (the best step restored, or the final ones)."""
    if fit.get("restored_best_weights", True):
        return f"weights of step {fit.get('best_step', 'n/a')} restored"
    return (f"final weights kept (step {fit.get('steps', 'n/a')}; best evaluation at step "
            f"{fit.get('best_step', 'n/a')})")
