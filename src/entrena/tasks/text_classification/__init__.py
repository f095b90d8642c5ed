"""The ``text-classification`` task: data, model, batches, baselines, export, prediction."""

__all__ = ["TextClassificationTask"]


def __getattr__(name: str):
    if name == "TextClassificationTask":  # imported on first use: no torch at config time
        from entrena.tasks.text_classification.task import TextClassificationTask

        return TextClassificationTask
    raise AttributeError(name)
