"""The ``tabular-classification`` task: data, model, batches, baselines, export, prediction."""

__all__ = ["TabularClassificationTask"]


def __getattr__(name: str):
    if name == "TabularClassificationTask":  # imported on first use: no torch at config time
        from entrena.tasks.tabular_classification.task import TabularClassificationTask

        return TabularClassificationTask
    raise AttributeError(name)
