"""The config of ``task: tabular-classification``: the common sections plus its own keys.

Pydantic only (no torch): the registry imports it when a config is loaded.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from entrena.config.schema import Config, DataConfig, ModelConfig

__all__ = ["TabularDataConfig", "TabularModelConfig", "TabularClassificationConfig"]


class TabularDataConfig(DataConfig):
    """Where the rows come from, which columns hold what, and how the data is checked."""

    drop_columns: list[str] = []
    """Columns that are not features (ids, free text, leaking columns): the features are
    every column but the label and these."""


class TabularModelConfig(ModelConfig):
    """The MLP fitted on the preprocessed features."""

    hidden_sizes: list[Annotated[int, Field(ge=1)]] = [256, 128]
    """Widths of the hidden layers of the MLP."""


class TabularClassificationConfig(Config):
    """A tabular-classification run: an MLP on numeric and categorical columns, beside
    boosted trees."""

    task: Literal["tabular-classification"] = "tabular-classification"
    """Classify rows of numeric and categorical columns of a CSV or Parquet file."""
    data: TabularDataConfig
    """Data section."""
    model: TabularModelConfig = TabularModelConfig()
    """Model section."""
