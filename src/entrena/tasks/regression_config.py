"""Config sections every regression task shares: the target's transform, and early stopping
and tuning on the regression metrics (early stopping watches ``validation.rmse`` by default).

Pydantic only (no torch): the registry imports it when a config is loaded.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import model_validator

from entrena.config.schema import EarlyStoppingConfig, StrictModel, TrainConfig, TuneConfig

__all__ = ["REGRESSION_METRICS", "TargetConfig", "RegressionEarlyStoppingConfig",
           "RegressionTrainConfig", "RegressionTuneConfig", "target_keys"]

REGRESSION_METRICS = ("loss", "rmse", "mae", "r2", "median_absolute_error")
"""The validation metrics of a regression task."""


class TargetConfig(StrictModel):
    """The data keys of a number to predict (mixed into a task's data section)."""

    target_transform: Literal["none", "log"] = "none"
    """Transform of the target before it is standardised: `log` learns log(1 + target)
    (prices, counts, durations: a skewed, non-negative target; refused when a value is
    <= -1); predictions and every reported figure are in the target's own units either way."""
    target_outliers: Literal["keep", "drop", "clip"] = "keep"
    """Targets more than 3.5 robust z-scores (median and median absolute deviation of the
    training targets, after `target_transform`) from the median are named with their rows in
    the data report; `keep` trains on them (a warning), `drop` leaves them out of the
    training rows, `clip` pulls them to those bounds. A validation split carved from the
    training file is treated the same; a test (or validation) file is scored as given."""

    @model_validator(mode="after")
    def _no_class_label_keys(self) -> TargetConfig:
        """The keys that clean or split class labels mean nothing for a number."""
        for key in ("label_map", "normalise_labels", "multi_label"):
            if getattr(self, key, None):
                raise ValueError(f"data.{key} applies to class labels; a regression target "
                                 f"is a number: remove data.{key}")
        return self


class RegressionEarlyStoppingConfig(EarlyStoppingConfig):
    """Stop when the monitored validation metric stops improving."""

    METRICS: ClassVar[tuple[str, ...]] = REGRESSION_METRICS

    monitor: str = "validation.rmse"
    """Metric to watch: `validation.rmse` (the default), `validation.mae`, `validation.r2`,
    `validation.median_absolute_error` or `validation.loss` (the mean squared error of the
    standardised, possibly log-transformed, target)."""


class RegressionTrainConfig(TrainConfig):
    """How the fit runs."""

    early_stopping: RegressionEarlyStoppingConfig = RegressionEarlyStoppingConfig()
    """Early stopping settings (on `validation.rmse` by default)."""


class RegressionTuneConfig(TuneConfig):
    """Hyperparameter search (`entrena tune`; `entrena train` ignores this section)."""

    METRICS: ClassVar[tuple[str, ...]] = REGRESSION_METRICS

    metric: str = "validation.rmse"
    """Validation metric optimised, reported to the pruner at every evaluation:
    `validation.rmse` (the default), `.mae`, `.r2`, `.median_absolute_error` or `.loss`."""


def target_keys(data: object) -> TargetConfig:
    """``data`` (a data section) as the keys of a number to predict, for the data path that
    reads a table or texts for a classifier and a regressor alike.

    Raises:
        TypeError: ``data`` is not a regression task's data section (a task asked for a
            numeric target with a classifier's config: a bug, not a user's error).
    """
    if not isinstance(data, TargetConfig):
        raise TypeError(f"a numeric target needs the target keys (TargetConfig) in the data "
                        f"section; {type(data).__name__} has none")
    return data
