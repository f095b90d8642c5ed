"""Image models: a timm model by name, or a small CNN for tiny images.

The model maps ``pixel_values`` (B, C, S, S) float32 — normalised pixels, B batch, C channels
(1 or 3), S the input side in pixels — to logits (B, K), K classes.

- ``small-cnn`` (:class:`SmallCNN`): three-by-three convolutions with batch norm, a 2 × 2 max
  pool after each stage while the side is above 4 pixels, global average pooling, dropout and a
  linear head; about 0.1 M parameters. Meant for tiny images (8 × 8 digits, 28 × 28 MNIST-like
  sets), where an ImageNet network would first upsample them to 224 × 224.
- any timm name (``resnet18``, ``mobilenetv3_small_100``, ``efficientnet_b0`` …), built by
  :func:`timm.create_model` with ``num_classes`` = K and ``in_chans`` = C. ``pretrained: true``
  loads the weights from a local file (``weights_file``) or, with internet, the Hugging Face hub;
  timm adapts the first convolution to 1 channel and drops a head of another class count.

The saved model folder holds ``model.safetensors`` (the state dict of :class:`ImageClassifier`)
and ``entrena_model.json`` (task, model name, labels, transforms); :func:`load_image_classifier`
rebuilds it without any download.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from entrena.errors import ConfigError, closest_choices

__all__ = ["SMALL_CNN", "SmallCNN", "ImageClassifier", "resolve_image_model",
           "default_input_size", "pretrained_normalisation", "build_image_classifier",
           "save_image_classifier", "load_image_classifier"]

SMALL_CNN = "small-cnn"
WEIGHTS_FILE = "model.safetensors"
META_FILE = "entrena_model.json"


class SmallCNN(nn.Module):
    """A small convolutional network for tiny images.

    Args:
        in_channels: C, 1 or 3.
        num_labels: K.
        image_size: S, the input side in pixels (decides how many stages pool).
        width: Channels of the first stage; each later stage doubles them (at most 4 stages).
        dropout: Dropout before the head.
    """

    def __init__(self, in_channels: int, num_labels: int, image_size: int, width: int = 32,
                 dropout: float = 0.1):
        super().__init__()
        layers: list[nn.Module] = []
        channels, side, stage = in_channels, image_size, 0
        while True:
            out = width * 2 ** stage
            layers += [nn.Conv2d(channels, out, 3, padding=1, bias=False), nn.BatchNorm2d(out),
                       nn.ReLU(inplace=True)]
            channels, stage = out, stage + 1
            if side <= 4 or stage >= 4:
                break
            layers.append(nn.MaxPool2d(2))
            side //= 2
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(channels, num_labels)
        self.num_features = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, K) of images (B, C, S, S)."""
        pooled = self.features(x).mean(dim=(2, 3))  # (B, F)
        return self.head(self.dropout(pooled))


class ImageClassifier(nn.Module):
    """The task's model: takes the loop's keyword input.

    Args:
        network: A module mapping (B, C, S, S) to logits (B, K).
        model_name: ``small-cnn`` or the timm name (saved with the weights).
        dropout: The head dropout it was built with (saved with the weights).
        channels_last: Convert inputs to channels-last memory format (faster convolutions on
            GPUs with tensor cores; set with the model's own ``memory_format``).
    """

    def __init__(self, network: nn.Module, model_name: str = "", dropout: float = 0.0,
                 channels_last: bool = False):
        super().__init__()
        self.network = network
        self.model_name = model_name
        self.dropout = dropout
        self.channels_last = channels_last

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Logits (B, K) of normalised pixels (B, C, S, S) float32."""
        if self.channels_last:
            pixel_values = pixel_values.contiguous(memory_format=torch.channels_last)
        return self.network(pixel_values)


def resolve_image_model(name: str, key: str = "model.name") -> str:
    """Check that ``name`` is ``small-cnn`` or a timm model.

    Raises:
        ConfigError: An unknown name, with the closest timm names.
    """
    import timm

    if name == SMALL_CNN or timm.is_model(name):
        return name
    choices = [SMALL_CNN, *timm.list_models()]
    close = closest_choices(name, choices, n=5)
    hint = (f"closest names: {', '.join(close)}" if close
            else "see timm.list_models() for the names")
    raise ConfigError(f"{key}: {name!r} is not a timm model nor {SMALL_CNN!r} "
                      f"({len(choices) - 1} timm names are known); {hint}")


def default_input_size(name: str) -> int | None:
    """The input side S a timm model was designed for (224 for most), ``None`` for
    ``small-cnn`` (which takes the training images' size)."""
    if name == SMALL_CNN:
        return None
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    if cfg is None or not getattr(cfg, "input_size", None):
        return 224
    return int(cfg.input_size[-1])


def pretrained_normalisation(name: str, channels: int) -> tuple[tuple[float, ...],
                                                                  tuple[float, ...]]:
    """Mean and std the pretrained weights expect (from timm's pretrained config; ImageNet's
    for most), averaged to one value for 1 channel."""
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name) if name != SMALL_CNN else None
    mean = tuple(getattr(cfg, "mean", None) or (0.485, 0.456, 0.406))
    std = tuple(getattr(cfg, "std", None) or (0.229, 0.224, 0.225))
    if channels == 1:
        return (sum(mean) / len(mean),), (sum(std) / len(std),)
    return mean, std


def build_image_classifier(*, name: str, num_labels: int, channels: int, image_size: int,
                           pretrained: bool = False, weights_file: str | None = None,
                           dropout: float = 0.0) -> ImageClassifier:
    """Build the classifier (random weights unless ``pretrained``).

    Args:
        name: ``small-cnn`` or a timm name (checked by :func:`resolve_image_model`).
        num_labels: K.
        channels: C, 1 or 3.
        image_size: S in pixels.
        pretrained: Load pretrained weights (timm models only).
        weights_file: A local weights file (``.safetensors``, ``.pth``, ``.bin``) for
            ``pretrained``; ``None`` downloads from the hub (needs internet).
        dropout: Dropout before the head.

    Raises:
        ConfigError: ``pretrained`` with ``small-cnn``, a missing weights file, or weights that
            cannot be downloaded.
    """
    if name == SMALL_CNN:
        if pretrained:
            raise ConfigError(f"model.pretrained: {SMALL_CNN!r} has no pretrained weights; "
                              f"set model.pretrained: false or pick a timm model")
        return ImageClassifier(SmallCNN(channels, num_labels, image_size, dropout=dropout), name,
                               dropout)
    import timm

    kwargs: dict[str, Any] = {"num_classes": num_labels, "in_chans": channels,
                              "drop_rate": dropout}
    if pretrained and weights_file is not None:
        if not Path(weights_file).is_file():
            raise ConfigError(f"model.weights_file: {weights_file} does not exist; give the "
                              f"path of a {name} weights file (.safetensors or .pth)")
        kwargs["pretrained_cfg_overlay"] = {"file": str(weights_file)}
    try:
        network = timm.create_model(name, pretrained=pretrained, **kwargs)
    except (OSError, RuntimeError) as exc:
        if not pretrained:
            raise
        raise ConfigError(f"model.pretrained: could not load {name} weights "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); without "
                          f"internet set model.weights_file to a local file, or "
                          f"model.pretrained: false") from exc
    return ImageClassifier(network, name, dropout)


def save_image_classifier(model: ImageClassifier, directory: Path, *, labels: list[str],
                          transforms: dict[str, Any]) -> None:
    """Write the model folder (weights + ``entrena_model.json``). Overwrites ``directory``."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / WEIGHTS_FILE))
    meta = {"task": "image-classification", "model_name": model.model_name, "labels": labels,
            "transforms": transforms, "dropout": model.dropout}
    (directory / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def load_image_classifier(directory: str | Path) -> tuple[ImageClassifier, dict[str, Any]]:
    """Rebuild a saved classifier.

    Returns:
        ``(model in eval mode on CPU, metadata)``; metadata has ``labels``, ``model_name`` and
        ``transforms`` (:meth:`~entrena.data.image_batches.ImageTransforms.as_dict`).
    """
    from safetensors.torch import load_file

    directory = Path(directory)
    meta = json.loads((directory / META_FILE).read_text())
    transforms = meta["transforms"]
    model = build_image_classifier(name=meta["model_name"], num_labels=len(meta["labels"]),
                                   channels=int(transforms["channels"]),
                                   image_size=int(transforms["size"]),
                                   dropout=float(meta.get("dropout", 0.0)))
    model.load_state_dict(load_file(str(directory / WEIGHTS_FILE)))
    return model.eval(), meta
