"""A regression network wrapped to answer in the target's units (for export and prediction).

The network learns a standardised (possibly ``log1p``-transformed) target
(:class:`entrena.tasks.regression.TargetScaler`); these wrappers add the inverse, so that an
exported ONNX file and ``entrena predict`` return values in the target's own units and no
consumer has to know the scaling.
"""

from __future__ import annotations

import torch
from torch import nn

from entrena.tasks.regression import TargetScaler

__all__ = ["TargetUnits", "FeaturesInTargetUnits", "TokensInTargetUnits"]


class TargetUnits(nn.Module):
    """``y = t⁻¹(z · std + mean)`` of a network's first output ``z``.

    Args:
        network: Maps its inputs to standardised outputs (B, 1).
        scaler: The fitted target scaling.
    """

    mean: torch.Tensor
    """The training target's mean (a buffer, after the optional ``log1p``)."""
    std: torch.Tensor
    """The training target's standard deviation (a buffer)."""

    def __init__(self, network: nn.Module, scaler: TargetScaler):
        super().__init__()
        self.network = network
        self.register_buffer("mean", torch.tensor(scaler.mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(scaler.std, dtype=torch.float32))
        self.log = scaler.transform == "log"

    def units(self, z: torch.Tensor) -> torch.Tensor:
        """(B, 1) standardised → (B, 1) float32 in the target's units."""
        values = z.float()[:, :1] * self.std + self.mean
        return torch.expm1(values) if self.log else values


class FeaturesInTargetUnits(TargetUnits):
    """A table network (input ``features`` (B, F) float32) answering in target units."""

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Values (B, 1) float32 in the target's units."""
        return self.units(self.network(features))


class TokensInTargetUnits(TargetUnits):
    """A text network (``input_ids``, ``attention_mask`` (B, T) int64) answering in target
    units."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Values (B, 1) float32 in the target's units."""
        return self.units(self.network(input_ids=input_ids, attention_mask=attention_mask))
