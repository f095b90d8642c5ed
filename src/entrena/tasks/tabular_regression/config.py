"""The config of ``task: tabular-regression``: the common sections plus its own keys.

Pydantic only (no torch): the registry imports it when a config is loaded.
"""

from __future__ import annotations

from typing import Literal

from entrena.tasks.regression_config import (
    RegressionTrainConfig,
    RegressionTuneConfig,
    TargetConfig,
)
from entrena.tasks.tabular.config import TabularDataConfig, TabularModelConfig, TabularTaskConfig

__all__ = ["TabularRegressionDataConfig", "TabularRegressionConfig"]


class TabularRegressionDataConfig(TabularDataConfig, TargetConfig):
    """Where the rows come from, which column is the target, and how the data is checked."""


class TabularRegressionConfig(TabularTaskConfig):
    """A tabular-regression run: an MLP predicting a number from numeric and categorical
    columns, beside boosted trees."""

    task: Literal["tabular-regression"] = "tabular-regression"
    """Predict a number (`data.label_column`) from the other columns of a CSV or Parquet
    file."""
    data: TabularRegressionDataConfig
    """Data section."""
    model: TabularModelConfig = TabularModelConfig()
    """Model section."""
    train: RegressionTrainConfig = RegressionTrainConfig()
    """Training section."""
    tune: RegressionTuneConfig = RegressionTuneConfig()
    """Search section (`entrena tune`)."""
