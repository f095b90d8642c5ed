"""The ``text-regression`` task: a number predicted from a text."""

__all__ = ["TextRegressionTask"]


def __getattr__(name: str):
    if name == "TextRegressionTask":  # imported on first use: no torch at config time
        from entrena.tasks.text_regression.task import TextRegressionTask

        return TextRegressionTask
    raise AttributeError(name)
