"""The search space: config paths mapped to Optuna distributions."""

from __future__ import annotations

from typing import Any

from entrena.config.schema import ParamSpec

__all__ = ["DEFAULT_SPACE", "suggest"]

DEFAULT_SPACE: dict[str, ParamSpec] = {
    "train.learning_rate": ParamSpec(low=1e-5, high=1e-3, log=True),
    "train.batch_size": ParamSpec(choices=[16, 32]),
    "train.weight_decay": ParamSpec(low=0.0, high=0.1),
    "model.dropout": ParamSpec(low=0.0, high=0.3),
}
"""The space searched when the config has no ``tune.space`` (documented in
``TuneConfig.space``)."""


def suggest(trial: Any, space: dict[str, ParamSpec]) -> dict[str, Any]:
    """Draw one value per dimension from an ``optuna.Trial``.

    Integer bounds (``low: 1, high: 8``) draw integers; other ranges draw floats.

    Returns:
        ``{config path: value}``, ready to be applied as overrides.
    """
    params: dict[str, Any] = {}
    for key, spec in space.items():
        if spec.choices is not None:
            params[key] = trial.suggest_categorical(key, spec.choices)
        elif isinstance(spec.low, int) and isinstance(spec.high, int) and (
                spec.step is None or isinstance(spec.step, int)):
            params[key] = trial.suggest_int(key, spec.low, spec.high, step=spec.step or 1,
                                            log=spec.log)
        else:
            params[key] = trial.suggest_float(key, float(spec.low), float(spec.high),
                                              step=spec.step, log=spec.log)
    return params
