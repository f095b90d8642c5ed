"""The verbs: one public function per CLI command."""

from entrena.api.training import TrainResult, train

__all__ = ["TrainResult", "train"]
