"""Configuration: pydantic schema, YAML loading and ``--set`` overrides (no torch import)."""

from entrena.config.loading import LoadedConfig, load_config, parse_overrides
from entrena.config.schema import (
    Config,
    DataConfig,
    EarlyStoppingConfig,
    ModelConfig,
    TrackingConfig,
    TrainConfig,
)

__all__ = [
    "Config",
    "DataConfig",
    "EarlyStoppingConfig",
    "LoadedConfig",
    "ModelConfig",
    "TrackingConfig",
    "TrainConfig",
    "load_config",
    "parse_overrides",
]
