"""The config of ``task: text-classification``: the common sections plus its own keys.

Pydantic only (no torch): the registry imports it when a config is loaded.
"""

from __future__ import annotations

from typing import Literal

from entrena.config.schema import Config, DataConfig

__all__ = ["TextDataConfig", "TextClassificationConfig"]


class TextDataConfig(DataConfig):
    """Where the texts come from, which columns hold what, and how the data is checked."""

    text_column: str = "text"
    """Column holding the input text."""


class TextClassificationConfig(Config):
    """A text-classification run: a pretrained encoder (or a built one) with a linear head."""

    task: Literal["text-classification"] = "text-classification"
    """Classify a text column."""
    data: TextDataConfig
    """Data section."""
