"""Recipes: how the verbs compose the layers below into one piece of work.

``training.py`` is the training recipe (``entrena train``'s fit: backend and model, the plan,
batches, callbacks and trackers, the loop, the test, the baselines, the saved model and
``metrics.json``), readable top to bottom as torchtune's recipes are; ``planning.py`` is its
planning step (and what ``entrena plan`` shares with it); ``efficiency.py`` wires the
efficiency monitor and the diagnosis; ``verdicts.py`` compares the model with the task's
baselines and adds the data and model findings; ``predictions.py`` writes
``predictions/<role>.csv``. Nothing here names a task: the task comes from the
registry and is called through its protocol.
"""

__all__: list[str] = []
