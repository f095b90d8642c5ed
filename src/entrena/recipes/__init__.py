"""Recipes: how the verbs compose the layers below into one piece of work.

``training.py`` is the training recipe (``entrena train``'s fit), four phases that
:func:`~entrena.recipes.training.run_fit` calls in order, as torchtune's recipes read:
setup (backend, model and its weights), plan, fit (batches, callbacks and trackers, the
loop) and finish (the test, the baselines, the saved model and ``metrics.json``);
``planning.py`` is its planning step (``plan.json`` on a copy of the run's model, timed by
the fit's first steps), composed from :mod:`entrena.planning`; ``budget.py`` wires
``train.budget``; ``efficiency.py`` wires the efficiency monitor and the diagnosis;
``verdicts.py`` compares the model with the task's baselines and adds the data and model
findings; ``predictions.py`` writes ``predictions/<role>.csv``; ``stops.py`` reports a fit
that stops early. Nothing here names a task: the task comes from the registry and is called
through its protocol.
"""

__all__: list[str] = []
