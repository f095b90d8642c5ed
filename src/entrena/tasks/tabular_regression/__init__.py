"""The ``tabular-regression`` task: a number predicted from a table's columns."""

__all__ = ["TabularRegressionTask"]


def __getattr__(name: str):
    if name == "TabularRegressionTask":  # imported on first use: no torch at config time
        from entrena.tasks.tabular_regression.task import TabularRegressionTask

        return TabularRegressionTask
    raise AttributeError(name)
