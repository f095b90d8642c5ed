"""The config of ``task: text-regression``: the common sections plus its own keys.

Pydantic only (no torch): the registry imports it when a config is loaded.
"""

from __future__ import annotations

from typing import Literal

from entrena.tasks.regression_config import (
    RegressionTrainConfig,
    RegressionTuneConfig,
    TargetConfig,
)
from entrena.tasks.text.config import TextDataConfig, TextModelConfig, TextTaskConfig

__all__ = ["TextRegressionDataConfig", "TextRegressionConfig"]


class TextRegressionDataConfig(TextDataConfig, TargetConfig):
    """Where the texts come from, which column is the target, and how the data is checked."""


class TextRegressionConfig(TextTaskConfig):
    """A text-regression run: a pretrained text encoder fine-tuned to predict a number, beside
    TF-IDF + ridge regression."""

    task: Literal["text-regression"] = "text-regression"
    """Predict a number (`data.label_column`) from a text column."""
    data: TextRegressionDataConfig
    """Data section."""
    model: TextModelConfig = TextModelConfig()
    """Model section."""
    train: RegressionTrainConfig = RegressionTrainConfig()
    """Training section."""
    tune: RegressionTuneConfig = RegressionTuneConfig()
    """Search section (`entrena tune`)."""
