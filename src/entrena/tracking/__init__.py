"""Tracking: events.jsonl and MLflow."""

__all__: list[str] = []
