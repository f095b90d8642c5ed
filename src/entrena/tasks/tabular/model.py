"""The tabular model: a multilayer perceptron over preprocessed features, and its folder.

The saved model folder holds ``model.safetensors`` (the MLP's weights), ``preprocessing.json``
(the fitted imputation, scaling and encoding of :mod:`entrena.data.preprocessing`) and
``entrena_model.json`` (task, labels, the MLP's shape, the feature columns);
:func:`load_mlp` rebuilds the model from it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["TabularMLP", "save_mlp", "load_mlp", "WEIGHTS_FILE", "PREPROCESSING_FILE",
           "META_FILE"]

WEIGHTS_FILE = "model.safetensors"
PREPROCESSING_FILE = "preprocessing.json"
META_FILE = "entrena_model.json"


class TabularMLP(nn.Module):
    """Linear → ReLU → dropout per hidden layer, then a linear head.

    Args:
        in_features: Preprocessed features per row, F.
        hidden_sizes: Widths of the hidden layers (``[256, 128]``).
        num_labels: Number of classes C.
        dropout: Dropout probability after each hidden layer.
    """

    def __init__(self, in_features: int, hidden_sizes: Sequence[int], num_labels: int,
                 dropout: float = 0.1):
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for size in hidden_sizes:
            layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(dropout)]
            width = size
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_labels)
        self.in_features = in_features
        self.hidden_sizes = list(hidden_sizes)
        self.dropout_p = dropout

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Class logits.

        Args:
            features: Preprocessed rows, (B, F) float32.

        Returns:
            Logits, (B, C).
        """
        return self.head(self.body(features))


def save_mlp(model: TabularMLP, directory: Path, *, labels: list[str],
             preprocessing: dict[str, Any], columns: dict[str, list[str]],
             task: str = "tabular-classification", extra: dict[str, Any] | None = None) -> None:
    """Write the model folder (weights, preprocessing, labels). Overwrites ``directory``.

    Args:
        labels: Class names in output order (empty for a regression MLP).
        columns: ``{"numeric": [...], "categorical": [...]}``: the raw columns a row needs.
        task: The task recorded in ``entrena_model.json``.
        extra: More entries for ``entrena_model.json`` (a regression MLP's ``target``).
    """
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(directory / WEIGHTS_FILE))
    (directory / PREPROCESSING_FILE).write_text(json.dumps(preprocessing, indent=2) + "\n")
    meta = {"task": task, "labels": labels, "outputs": model.head.out_features,
            "in_features": model.in_features, "hidden_sizes": model.hidden_sizes,
            "dropout": model.dropout_p, **columns, **(extra or {})}
    (directory / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def load_mlp(directory: str | Path) -> tuple[TabularMLP, dict[str, Any]]:
    """Rebuild a saved MLP.

    Returns:
        ``(model in eval mode, meta)``; meta has ``labels``, ``numeric``, ``categorical`` and
        ``preprocessing`` (the fitted parameters).
    """
    from safetensors.torch import load_file

    directory = Path(directory)
    meta = json.loads((directory / META_FILE).read_text())
    model = TabularMLP(meta["in_features"], meta["hidden_sizes"],
                       int(meta.get("outputs", len(meta["labels"]))),
                       meta.get("dropout", 0.1))
    model.load_state_dict(load_file(str(directory / WEIGHTS_FILE)))
    model.eval()
    meta["preprocessing"] = json.loads((directory / PREPROCESSING_FILE).read_text())
    return model, meta
