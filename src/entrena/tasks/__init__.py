"""Tasks: how to build the model, encode a batch and score predictions, one module per task."""

__all__: list[str] = []
