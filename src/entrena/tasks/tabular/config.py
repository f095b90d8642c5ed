"""The config of ``task: tabular-classification``: the common sections plus its own keys.

Pydantic only (no torch): the registry imports it when a config is loaded.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from entrena.config.schema import Config, DataConfig, ModelConfig
from entrena.errors import closest_choice

__all__ = ["NUMBER_FORMATS", "TabularDataConfig", "TabularModelConfig", "TabularTaskConfig",
           "TabularClassificationConfig"]

NUMBER_FORMATS = ("1234.5", "1,234.5", "1.234,5", "1 234.5", "1 234,5", "1'234.5", "1234,5",
                  "category")
"""The values of ``data.number_format``: the styles of :mod:`entrena.data.numbers` (repeated
here so that loading a config imports no pandas; a test checks they match) and
``category``."""


class TabularDataConfig(DataConfig):
    """Where the rows come from, which columns hold what, and how the data is checked."""

    drop_columns: list[str] = []
    """Columns that are not features (ids, free text, leaking columns): the features are
    every column but the label and these."""
    number_format: dict[str, str] = {}
    """How a column's numbers are written, `{column: style}`, each style an example:
    `1234.5` (plain), `1,234.5`, `1.234,5`, `1 234.5`, `1 234,5` (a space, no-break or narrow
    no-break space), `1'234.5`, `1234,5` (decimal comma); or `category` (keep the column as
    categories). A column not named here whose training values are not all plain numbers
    takes the first style under which every value reads (`1,234.5`, `1.234,5`, `1 234.5`,
    `1 234,5`, `1'234.5`), reported in the `number_styles` check; a column of values like
    `5,632` only reads as thousands (5632): set `1234,5` here for a decimal comma. A training
    value that does not read in a style set here is refused."""

    @field_validator("number_format")
    @classmethod
    def _known_number_formats(cls, value: dict[str, str]) -> dict[str, str]:
        wrong = []
        for column, style in value.items():
            if style not in NUMBER_FORMATS:
                close = closest_choice(style, NUMBER_FORMATS)
                wrong.append(f"{column}: {style!r}"
                             + (f" (did you mean {close!r}?)" if close else ""))
        if wrong:
            raise ValueError(f"unknown number style ({'; '.join(wrong)}); use one of "
                             f"{', '.join(map(repr, NUMBER_FORMATS))}")
        return value


class TabularModelConfig(ModelConfig):
    """The MLP fitted on the preprocessed features."""

    hidden_sizes: list[Annotated[int, Field(ge=1)]] = [256, 128]
    """Widths of the hidden layers of the MLP."""


class TabularTaskConfig(Config):
    """What every table task's config has, which the table data path reads: the table data
    and MLP sections (``tabular-classification`` and ``tabular-regression`` derive their
    configs from it)."""

    data: TabularDataConfig
    """Data section."""
    model: TabularModelConfig = TabularModelConfig()
    """Model section."""


class TabularClassificationConfig(TabularTaskConfig):
    """A tabular-classification run: an MLP on numeric and categorical columns, beside
    boosted trees."""

    task: Literal["tabular-classification"] = "tabular-classification"
    """Classify rows of numeric and categorical columns of a CSV or Parquet file."""
    data: TabularDataConfig
    """Data section."""
    model: TabularModelConfig = TabularModelConfig()
    """Model section."""
