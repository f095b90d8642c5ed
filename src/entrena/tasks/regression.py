"""What every regression task shares: the target's scaling, the loss, the metrics, the mean
baseline and the wrapper that turns the network's output back into the target's units.

The network learns a standardised target ``z = (t(y) - mean) / std``, with ``t`` the
``data.target_transform`` (``none``: identity; ``log``: ``log1p``) and the mean and standard
deviation of ``t(y)`` over the training split only; the loss is the mean squared error on
``z``. Every reported figure, prediction and export is in the target's own units
(``y = t⁻¹(z·std + mean)``). A regression task composes these (``loss =
staticmethod(mse_loss)`` …), as the classification tasks compose :mod:`entrena.tasks.metrics`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["REGRESSION_HIGHER_IS_BETTER", "COMPARISON_METRIC", "TIE_RELATIVE", "TargetScaler",
           "WithTarget", "value_table",
           "mse_loss", "regression_metrics", "evaluate_regression", "mean_baseline",
           "median_baseline",
           "score_baseline", "outcome_against", "regression_rows"]

REGRESSION_HIGHER_IS_BETTER = {"loss": False, "rmse": False, "mae": False, "r2": True,
                               "median_absolute_error": False}
"""An evaluation's metrics (``validation.<name>``) and whether a larger value is better."""
COMPARISON_METRIC = "rmse"
"""The metric the model and its baselines are compared on."""
TIE_RELATIVE = 0.01
"""Two RMSEs within 1% of each other tie."""


@dataclass(frozen=True)
class TargetScaler:
    """The target's transform and standardisation, fitted on the training split.

    Attributes:
        transform: ``none`` or ``log`` (``log1p``; targets must be > -1).
        mean: Mean of the transformed training targets.
        std: Their standard deviation (population; 1.0 when it is 0).
    """

    transform: str
    mean: float
    std: float

    @classmethod
    def fit(cls, targets: np.ndarray, transform: str = "none") -> TargetScaler:
        """Fit on training targets (N,) in the target's units."""
        values = _forward(np.asarray(targets, dtype=np.float64), transform)
        std = float(values.std())
        return cls(transform, float(values.mean()), std if std > 0 else 1.0)

    def to_model(self, targets: np.ndarray) -> np.ndarray:
        """Targets (N,) in their units → the standardised values the network learns, float32."""
        z = (_forward(np.asarray(targets, dtype=np.float64), self.transform) - self.mean)
        return (z / self.std).astype(np.float32)

    def from_model(self, outputs: np.ndarray) -> np.ndarray:
        """Network outputs (N,) or (N, 1) → values in the target's units, float64 (N,)."""
        z = np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)[:, 0]
        values = z * self.std + self.mean
        return np.expm1(values) if self.transform == "log" else values

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TargetScaler:
        return cls(str(data["transform"]), float(data["mean"]), float(data["std"]))


class WithTarget:
    """A task's prepared data (its splits' ``labels`` the targets in their units) and the
    target scaling fitted on its training split; every other attribute is the prepared
    data's own (``splits``, ``report``, ``from_cache``, ``encoded`` …).

    Args:
        prepared: What the data preparation returned.
        target_scaler: The fitted :class:`TargetScaler`.
    """

    def __init__(self, prepared: Any, target_scaler: TargetScaler):
        self.prepared = prepared
        self.target_scaler = target_scaler

    @property
    def splits(self) -> Any:
        """The prepared data's splits (:class:`~entrena.tasks.base.Prepared`)."""
        return self.prepared.splits

    @property
    def report(self) -> dict[str, Any]:
        """The prepared data's report (``data_report.json``)."""
        return self.prepared.report

    @property
    def from_cache(self) -> bool:
        """Whether the prepared data came from the cache."""
        return bool(self.prepared.from_cache)

    def __getattr__(self, name: str) -> Any:
        if name == "prepared":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.prepared, name)


def value_table(inputs: dict[str, Any], outputs: np.ndarray, targets: np.ndarray,
                row_ids: Any, scaler: TargetScaler) -> Any:
    """One row per example for ``predictions/<role>.csv``: ``row``, the inputs, ``target``,
    ``predicted_value`` and ``residual`` (target − predicted), in the target's units.

    Args:
        inputs: Input column name → values (N,), in example order.
        outputs: Network outputs (N, 1) (standardised).
        targets: The batches' standardised targets (N,).
        row_ids: Each example's row number in its file (1-based).
        scaler: The fitted target scaling.
    """
    import pandas as pd

    frame = pd.DataFrame({"row": np.asarray(row_ids, dtype=np.int64)})
    for column, values in inputs.items():
        frame[column] = list(values)
    truth, predicted = scaler.from_model(np.asarray(targets)), scaler.from_model(outputs)
    frame["target"] = truth
    frame["predicted_value"] = predicted
    frame["residual"] = truth - predicted
    return frame


def _forward(values: np.ndarray, transform: str) -> np.ndarray:
    return np.log1p(values) if transform == "log" else values


def mse_loss(outputs: Any, batch: dict[str, Any]) -> tuple[Any, int]:
    """Summed squared error of a batch on the standardised target, and its example count.

    Args:
        outputs: Network outputs (B, 1), any float dtype (computed in float32).
        batch: Holds ``labels`` (B,) float32, the standardised targets.

    Returns:
        ``(sum over the batch (scalar tensor), B)``; the mean squared error is their ratio.
    """
    labels = batch["labels"]
    error = outputs.float().reshape(labels.shape[0], -1)[:, 0] - labels.float()
    return (error * error).sum(), int(labels.shape[0])


def regression_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """RMSE, MAE, R² and the median absolute error, in the target's units.

    Args:
        y_true: True values (N,).
        y_pred: Predictions (N,).

    Returns:
        ``{"rmse", "mae", "r2", "median_absolute_error"}``; R² is 1 − SSE/SST (scikit-learn's
        ``r2_score``; 0 for a constant prediction of the mean, negative when worse).
    """
    from sklearn.metrics import mean_absolute_error, median_absolute_error, r2_score

    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    return {"rmse": float(np.sqrt(np.mean((y_true - y_pred) ** 2))),
            "mae": float(mean_absolute_error(y_true, y_pred)),
            "r2": float(r2_score(y_true, y_pred)) if len(y_true) > 1 else float("nan"),
            "median_absolute_error": float(median_absolute_error(y_true, y_pred))}


def evaluate_regression(outputs: np.ndarray, targets: np.ndarray, prepared: Any, *,
                        detailed: bool = False) -> dict[str, Any]:
    """Metrics of one split from the network's outputs, in the target's units.

    Args:
        outputs: Network outputs (N, 1) float32, in example order.
        targets: The batches' standardised targets (N,).
        prepared: The task's prepared data (``prepared.target_scaler``).
        detailed: Unused (kept for the protocol: the test split's figures are the same).

    Returns:
        :func:`regression_metrics`.
    """
    scaler: TargetScaler = prepared.target_scaler
    return regression_metrics(scaler.from_model(np.asarray(targets)), scaler.from_model(outputs))


def regression_rows(outputs: np.ndarray, targets: np.ndarray,
                    prepared: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(true values, predictions)`` (N,) in the target's units, as
    :func:`evaluate_regression` scores them (the paired comparison's rows)."""
    scaler: TargetScaler = prepared.target_scaler
    return (np.asarray(scaler.from_model(np.asarray(targets)), dtype=np.float64).reshape(-1),
            np.asarray(scaler.from_model(outputs), dtype=np.float64).reshape(-1))


def score_baseline(name: str, predict: Any, evaluation: dict[str, tuple[Any, np.ndarray]]
                   ) -> dict[str, Any]:
    """One baseline's metrics per split (and ``time_s`` from ``predict``'s fitting on).

    Args:
        name: For messages.
        predict: ``inputs -> predictions (N,)`` in the target's units, already fitted.
        evaluation: ``{split: (inputs, true values (N,))}``.
    """
    from entrena.tasks.significance import with_rows

    started = time.perf_counter()
    scores = {}
    for split, (x, y) in evaluation.items():
        guess = predict(x)
        scores[split] = with_rows(regression_metrics(y, guess), y, guess)
    return {**scores, "time_s": time.perf_counter() - started}


def mean_baseline(train_targets: np.ndarray,
                  evaluation: dict[str, tuple[Any, np.ndarray]]) -> dict[str, Any]:
    """The training mean predicted for every row: R² ≈ 0; what any model must beat."""
    mean = float(np.mean(train_targets))
    return score_baseline("mean", lambda x: np.full(len(x), mean), evaluation)


def median_baseline(train_targets: np.ndarray,
                    evaluation: dict[str, tuple[Any, np.ndarray]]) -> dict[str, Any]:
    """The training median predicted for every row: the constant with the least absolute
    error, and the better constant when the target has outliers."""
    median = float(np.median(train_targets))
    return score_baseline("median", lambda x: np.full(len(x), median), evaluation)


def outcome_against(model_rmse: float, other_rmse: float) -> str:
    """``beats``, ``ties with`` (within :data:`TIE_RELATIVE`) or ``loses to``: the model
    against another's RMSE."""
    if abs(model_rmse - other_rmse) <= TIE_RELATIVE * max(abs(other_rmse), 1e-12):
        return "ties with"
    return "beats" if model_rmse < other_rmse else "loses to"
