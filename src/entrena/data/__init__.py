"""Data: reading files, clean labelled splits, encoding cache, length-grouped batching."""

__all__: list[str] = []
