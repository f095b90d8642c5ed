"""The ``image-classification`` task: data, model, batches, baselines, export, prediction."""

__all__ = ["ImageClassificationTask"]


def __getattr__(name: str):
    if name == "ImageClassificationTask":  # imported on first use: no torch at config time
        from entrena.tasks.image_classification.task import ImageClassificationTask

        return ImageClassificationTask
    raise AttributeError(name)
