"""Figures for people: a metric key's name in words, its value in human units, its meaning.

Every unit comes from :data:`~entrena.core.metrics.METRIC_KEYS` (``fraction`` → ``%``,
``B`` → GiB, ``s`` → ``6m 37s``, ``USD`` → ``$0.042``, counts with thousands separators);
the meaning of a key is its ``METRIC_KEYS`` description, shown as the cell's tooltip.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from entrena.core.metrics import METRIC_KEYS, MetricKey
from entrena.units import format_bytes, format_duration, format_usd

__all__ = ["BASELINE_NAMES", "baseline_name", "human_name", "human_value", "metric_entry",
           "figure_cell", "table", "escape"]

escape = html.escape

BASELINE_NAMES = {
    "majority": "majority-class", "tfidf_logreg": "TF-IDF + logistic regression",
    "tfidf_ridge": "TF-IDF + ridge", "boosted_trees": "boosted trees",
    "mean": "training-mean", "median": "training-median", "every_tag": "every-tag",
    "thumbnail_logreg": "thumbnail logistic regression",
    "zero_shot": "zero-shot base model", "majority_answer": "majority answer",
}
"""Baseline names of ``metrics.json`` in words (the ``METRIC_KEYS`` entries describe them)."""

_WORDS = {"mfu": "MFU", "rmse": "RMSE", "mae": "MAE", "r2": "R²", "f1": "F1",
          "macro_f1": "macro-F1", "micro_f1": "micro-F1", "eos": "EOS", "cpu": "CPU",
          "gpu": "GPU", "usd": "", "lr": "learning rate"}
_NAMES = {"cost.usd": "cost", "cost.usd_per_hour": "price per hour",
          "cost.wall_time_s": "wall time of the train command",
          "cost.source": "price source", "fit.wall_time_s": "wall time of the fit",
          "efficiency.monitor_time_fraction": "monitor time share"}
_UNIT_SUFFIXES = ("_bytes", "_per_s", "_s", "_fraction", "_usd")
_SCALED = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def baseline_name(name: str) -> str:
    """``tfidf_logreg`` → ``TF-IDF + logistic regression`` (unknown names: underscores to
    spaces)."""
    return BASELINE_NAMES.get(name, name.replace("_", " "))


def metric_entry(key: str) -> MetricKey | None:
    """The ``METRIC_KEYS`` entry of ``key`` or of its nearest listed prefix
    (``baseline.majority.test.accuracy`` → ``baseline.majority.test``)."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        entry = METRIC_KEYS.get(".".join(parts[:end]))
        if entry is not None:
            return entry
    return None


def human_name(key: str) -> str:
    """A dotted key in words: ``fit.throughput_tokens_per_s`` → ``throughput, tokens``;
    ``efficiency.peak_memory_bytes`` → ``peak memory``; ``test.macro_f1`` → ``test
    macro-F1``. The section prefixes ``fit``, ``efficiency`` and ``cost`` are dropped."""
    if key in _NAMES:
        return _NAMES[key]
    parts = key.split(".")
    if parts[0] in ("fit", "efficiency", "plan_vs_actual") and len(parts) > 1:
        parts = parts[1:]
    words = []
    for part in parts:
        if part in _WORDS:
            words.append(_WORDS[part])
            continue
        if part.startswith("throughput_"):  # throughput_padded_tokens_per_s
            words.append("throughput, " + part[len("throughput_"):].removesuffix("_per_s")
                         .replace("_", " "))
            continue
        timed = part.endswith("_s") and not part.endswith("_per_s") and "time" not in part
        for suffix in _UNIT_SUFFIXES:
            if part.endswith(suffix) and len(part) > len(suffix):
                part = part[: -len(suffix)]
                break
        words.append(" ".join(_WORDS.get(w, w) for w in part.split("_"))
                     + (" time" if timed else ""))
    return " ".join(w for w in words if w) or key


def _number(value: float, digits: int = 4) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def human_value(key: str, value: Any) -> str:
    """``value`` of ``key`` in human units, escaped for HTML.

    Fractions become percentages (``0.0423`` → ``4.2%``), bytes GiB/MiB, seconds durations,
    USD dollars, FLOP and FLOP/s SI prefixes (``1.3 TFLOP/s``), rates and counts plain
    numbers with thousands separators. ``None`` is ``-``; lists and mappings are cut to 200
    characters.
    """
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return escape(json.dumps(value)[:200])
    if not isinstance(value, int | float):
        return escape(str(value))
    if isinstance(value, float) and not math.isfinite(value):
        return escape(str(value))
    entry = metric_entry(key)
    unit = entry.unit if entry else ""
    leaf = key.rsplit(".", 1)[-1]
    if leaf in ("support", "rows", "mistakes", "iterations") or unit in ("count", "rows"):
        return f"{int(value):,}"
    if unit == "fraction" or leaf.endswith("_fraction") or leaf in ("confidence",
                                                                         "label_probability"):
        return f"{100 * value:.1f}%" if abs(value) >= 0.001 or value == 0 else \
            f"{100 * value:.2g}%"
    if unit == "B" or leaf.endswith("_bytes"):
        return format_bytes(value)
    if unit == "s" or (not unit and leaf.endswith("_s") and not leaf.endswith("_per_s")):
        return format_duration(value)
    if unit == "USD":
        return escape(format_usd(value))
    if unit == "USD/h":
        return escape(format_usd(value)) + "/h"
    if unit in ("FLOP", "FLOP/s"):
        for scale, prefix in _SCALED:
            if abs(value) >= scale:
                return f"{value / scale:.3g} {prefix}{unit}"
        return f"{value:.3g} {unit}"
    if unit in ("samples/s", "tokens/s"):
        return f"{_number(value, 3)} {unit}"
    if isinstance(value, int) or unit in ("step", "epoch", "threads", "cores", "processes",
                                          "tokens", "samples"):
        return f"{int(value):,}"
    return _number(float(value))


def figure_cell(key: str, label: str | None = None) -> str:
    """A ``<td>`` naming ``key`` in words, its meaning (and unit) as the tooltip."""
    entry = metric_entry(key)
    tip = ""
    if entry is not None:
        unit = f" [{entry.unit}]" if entry.unit else ""
        tip = f" title='{escape(entry.description + unit, quote=True)}' class='tip'"
    return f"<td{tip}>{escape(label or human_name(key))}</td>"


def table(rows: list[tuple[Any, ...]], header: tuple[str, ...],
          keys: tuple[str | None, ...] | None = None) -> str:
    """An HTML table; cell ``i`` of a row is formatted by :func:`human_value` with
    ``keys[i]`` (``None``: as is, escaped)."""
    if not rows:
        return "<p class='empty'>nothing recorded</p>"
    keys = keys or (None,) * len(header)
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(
        f"<td>{human_value(k, c) if k else _plain(c)}</td>" for k, c in zip(keys, row,
                                                                            strict=False))
        + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return human_value("", value)
