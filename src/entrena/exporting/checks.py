"""Parity of an exported model with the PyTorch model, and latency figures (pure functions
plus one timing loop)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Thresholds", "parity_report", "value_parity_report", "percentiles_ms", "time_calls",
           "row_latency",
           "MAX_PARITY_EXAMPLES", "label_index"]


@dataclass(frozen=True)
class Thresholds:
    """What an exported model must meet (the issue's acceptance figures).

    Attributes:
        max_abs_diff: Full precision: largest allowed |exported − PyTorch| over all logits.
        min_label_agreement: Quantised: smallest share of examples whose predicted label
            matches the PyTorch model's.
        max_accuracy_drop: Quantised: largest allowed PyTorch accuracy − exported accuracy
            (a fraction: 0.01 is one point).
    """

    max_abs_diff: float = 1e-4
    min_label_agreement: float = 0.99
    max_accuracy_drop: float = 0.01
    max_rel_diff: float = 1e-3
    """A regressor in full precision: largest allowed |exported − PyTorch| / |PyTorch| over
    all predictions (in the target's units)."""
    max_r2_drop: float = 0.01
    """A quantised regressor: largest allowed PyTorch R² − exported R² (with targets)."""


def parity_report(reference: np.ndarray, exported: np.ndarray, labels: np.ndarray | None, *,
                  quantized: bool, thresholds: Thresholds,
                  also_compare: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """Compare exported logits with the PyTorch model's on the same examples.

    Full precision passes when the largest absolute logit difference is at most
    ``max_abs_diff``; a quantised model passes when the predicted labels agree on at least
    ``min_label_agreement`` of the examples and accuracy drops by at most
    ``max_accuracy_drop`` (only label agreement is required when ``labels`` is ``None``).

    Args:
        reference: PyTorch logits, (N, C).
        exported: Exported-model logits of the same examples, (N, C).
        labels: True label indices, (N,), or ``None``.
        quantized: Whether the exported model is quantised.
        thresholds: The pass criteria.
        also_compare: More ``(reference, exported)`` logits that count towards the largest
            and mean difference only (the same examples run at another batch shape).

    Returns:
        ``passed``, ``criteria``, ``examples``, ``max_abs_diff``, ``mean_abs_diff``,
        ``label_agreement`` and, with labels, ``accuracy_pytorch``, ``accuracy_exported``,
        ``accuracy_drop``.
    """
    if reference.shape != exported.shape:
        raise ValueError(f"logit shapes differ: {reference.shape} vs {exported.shape}")
    diff = np.abs(reference.astype(np.float64) - exported.astype(np.float64)).ravel()
    if also_compare is not None and len(also_compare[0]):
        more = np.abs(also_compare[0].astype(np.float64) - also_compare[1].astype(np.float64))
        diff = np.concatenate([diff, more.ravel()])
    ref_pred, exp_pred = reference.argmax(1), exported.argmax(1)
    report: dict[str, Any] = {
        "examples": int(len(reference)),
        "max_abs_diff": float(diff.max()) if diff.size else 0.0,
        "mean_abs_diff": float(diff.mean()) if diff.size else 0.0,
        "label_agreement": float(np.mean(ref_pred == exp_pred)) if len(reference) else 1.0,
    }
    if labels is not None and len(labels):
        report["accuracy_pytorch"] = float(np.mean(ref_pred == labels))
        report["accuracy_exported"] = float(np.mean(exp_pred == labels))
        report["accuracy_drop"] = report["accuracy_pytorch"] - report["accuracy_exported"]
    if quantized:
        report["criteria"] = (f"label_agreement >= {thresholds.min_label_agreement} and "
                              f"accuracy_drop <= {thresholds.max_accuracy_drop}")
        passed = report["label_agreement"] >= thresholds.min_label_agreement
        if "accuracy_drop" in report:
            # a tiny tolerance so that exactly one point of drop passes despite float rounding
            passed = passed and report["accuracy_drop"] <= thresholds.max_accuracy_drop + 1e-12
    else:
        report["criteria"] = f"max_abs_diff <= {thresholds.max_abs_diff}"
        passed = report["max_abs_diff"] <= thresholds.max_abs_diff
    report["passed"] = bool(passed)
    return report


def value_parity_report(reference: np.ndarray, exported: np.ndarray,
                        targets: np.ndarray | None, *, quantized: bool, thresholds: Thresholds,
                        also_compare: tuple[np.ndarray, np.ndarray] | None = None
                        ) -> dict[str, Any]:
    """Compare an exported regressor's predictions with the PyTorch model's.

    Full precision passes when the largest relative difference is at most
    ``max_rel_diff`` (relative to the PyTorch value, or to 1% of the values' standard
    deviation when that is larger: values near 0); a quantised model passes when its R² on
    the targets is at most ``max_r2_drop`` below PyTorch's (without targets: relative
    difference within 5%).

    Args:
        reference: PyTorch predictions in the target's units, (N, 1) or (N,).
        exported: The exported model's, same shape.
        targets: True values (N,) (NaN where unknown), or ``None``.
        quantized: Whether the exported model is quantised.
        thresholds: The pass criteria.
        also_compare: More ``(reference, exported)`` pairs counted in the differences (the
            same examples at another batch shape).

    Returns:
        ``passed``, ``criteria``, ``examples``, ``max_abs_diff`` (target units),
        ``mean_abs_diff``, ``max_rel_diff`` and, with targets, ``r2_pytorch``,
        ``r2_exported``, ``r2_drop``.
    """
    pairs = [(reference, exported)] + ([also_compare] if also_compare is not None
                                       and len(also_compare[0]) else [])
    ref = np.concatenate([np.asarray(a, np.float64).ravel() for a, _ in pairs])
    exp = np.concatenate([np.asarray(b, np.float64).ravel() for _, b in pairs])
    if ref.shape != exp.shape:
        raise ValueError(f"prediction shapes differ: {ref.shape} vs {exp.shape}")
    diff = np.abs(ref - exp)
    # relative to each value, with a floor of 1% of the values' spread: a prediction near 0
    # is not held to a relative error of float32 rounding noise
    relative = diff / np.maximum(np.abs(ref), 0.01 * float(ref.std()) + 1e-12)
    report: dict[str, Any] = {
        "examples": int(len(reference)),
        "max_abs_diff": float(diff.max()) if diff.size else 0.0,
        "mean_abs_diff": float(diff.mean()) if diff.size else 0.0,
        "max_rel_diff": float(relative.max()) if relative.size else 0.0,
    }
    known = None if targets is None else np.isfinite(np.asarray(targets, np.float64))
    if known is not None and known.sum() > 1:
        truth = np.asarray(targets, np.float64)[known]
        report["r2_pytorch"] = _r2(truth, np.asarray(reference, np.float64).ravel()[known])
        report["r2_exported"] = _r2(truth, np.asarray(exported, np.float64).ravel()[known])
        report["r2_drop"] = report["r2_pytorch"] - report["r2_exported"]
    if quantized and "r2_drop" in report:
        report["criteria"] = f"r2_drop <= {thresholds.max_r2_drop}"
        passed = report["r2_drop"] <= thresholds.max_r2_drop + 1e-12
    elif quantized:
        report["criteria"] = "max_rel_diff <= 0.05"
        passed = report["max_rel_diff"] <= 0.05
    else:
        report["criteria"] = f"max_rel_diff <= {thresholds.max_rel_diff}"
        passed = report["max_rel_diff"] <= thresholds.max_rel_diff
    report["passed"] = bool(passed)
    return report


def _r2(truth: np.ndarray, predicted: np.ndarray) -> float:
    """Coefficient of determination, 1 − SSE/SST (NaN when the truth is constant)."""
    total = float(np.sum((truth - truth.mean()) ** 2))
    return 1.0 - float(np.sum((truth - predicted) ** 2)) / total if total > 0 else float("nan")


def time_calls(calls: dict[str, Callable[[Any], Any]], inputs: Sequence[Any], warmup: int = 3
               ) -> dict[str, list[float]]:
    """Seconds taken by each ``calls[name](x)`` for each ``x`` of ``inputs``.

    The engines take turns input by input, so that a burst of other work on the machine
    slows them alike; each first gets ``warmup`` untimed calls on the first inputs.

    Returns:
        ``{name: [seconds per input]}``.
    """
    for call in calls.values():
        for x in list(inputs)[:warmup]:
            call(x)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for x in inputs:
        for name, call in calls.items():
            start = time.perf_counter()
            call(x)
            times[name].append(time.perf_counter() - start)
    return times


def percentiles_ms(times_s: Sequence[float]) -> dict[str, float]:
    """``{"p50_ms", "p95_ms", "mean_ms", "calls"}`` of durations given in seconds
    (linear-interpolated percentiles, numpy's default)."""
    values = np.asarray(times_s, dtype=np.float64) * 1000.0
    return {"p50_ms": float(np.percentile(values, 50)), "p95_ms": float(np.percentile(values, 95)),
            "mean_ms": float(values.mean()), "calls": int(len(values))}


def row_latency(runners: Sequence[Any], rows: np.ndarray, calls: int,
                batch_sizes: Sequence[int] = (1, 32)) -> dict[str, Any]:
    """p50/p95 latency per runner at each batch size, on the same fixed-size inputs.

    Args:
        runners: Callables with a ``name`` attribute (``exporting.inference.Runner``).
        rows: Model inputs stacked on axis 0 (images (N, C, H, W), table rows (N, F)); batches
            cycle through them.
        calls: Timed calls per runner and batch size.

    Returns:
        ``{runner name: {"batch_<size>": percentiles_ms(...)}}``.
    """
    n = len(rows)
    report: dict[str, Any] = {}
    for size in batch_sizes:
        inputs = [rows[[(c * size + k) % n for k in range(size)]] for c in range(calls)]
        times = time_calls({r.name: (lambda x, r=r: r(x)) for r in runners}, inputs)
        for name, seconds in times.items():
            report.setdefault(name, {})[f"batch_{size}"] = percentiles_ms(seconds)
    return report


MAX_PARITY_EXAMPLES = 10_000
"""Parity runs on at most this many rows of the test file (in file order)."""


def label_index(values: Any, labels: list[str]) -> np.ndarray:
    """Label index per row (−1 for a label the model does not know); integral floats
    (``1.0`` from a column with gaps) read as ``1``, as in training."""
    index_of = {name: i for i, name in enumerate(labels)}
    out = np.full(len(values), -1, dtype=np.int64)
    for row, value in enumerate(values):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        out[row] = index_of.get(str(value).strip(), -1)
    return out
