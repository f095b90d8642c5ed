"""Table tasks: the table data path, MLP, batches, baselines, export and prediction that
``tabular-classification`` (its task here) and ``tabular-regression``
(:mod:`entrena.tasks.tabular_regression`, the same pieces with a one-output head) share."""

__all__ = ["TabularClassificationTask"]


def __getattr__(name: str):
    if name == "TabularClassificationTask":  # imported on first use: no torch at config time
        from entrena.tasks.tabular.task import TabularClassificationTask

        return TabularClassificationTask
    raise AttributeError(name)
