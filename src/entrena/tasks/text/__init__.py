"""Text tasks: the text data path, encoder model, batches, baselines, planning, export and
prediction that ``text-classification`` (its task here) and ``text-regression``
(:mod:`entrena.tasks.text_regression`, the same pieces with a one-output head) share."""

__all__ = ["TextClassificationTask"]


def __getattr__(name: str):
    if name == "TextClassificationTask":  # imported on first use: no torch at config time
        from entrena.tasks.text.task import TextClassificationTask

        return TextClassificationTask
    raise AttributeError(name)
