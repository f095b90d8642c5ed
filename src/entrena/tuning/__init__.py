"""Hyperparameter search with Optuna: the search space, pruning, and a study under a budget.

The function that runs one trial is injected by :mod:`entrena.api.tuning`, so this package
never imports the engine.
"""

from entrena.tuning.pruning import PruningCallback
from entrena.tuning.space import DEFAULT_SPACE, suggest
from entrena.tuning.study import (
    StudyResult,
    TrialFunction,
    open_storage,
    run_study,
    running_trials,
)

__all__ = ["DEFAULT_SPACE", "PruningCallback", "StudyResult", "TrialFunction", "open_storage",
           "run_study", "running_trials", "suggest"]
