"""The config of ``task: image-classification``: the common sections plus its own keys.

Pydantic only (no torch): the registry imports it when a config is loaded.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from entrena.config.schema import Config, DataConfig, ModelConfig, StrictModel

__all__ = ["AugmentationConfig", "ImageDataConfig", "ImageModelConfig",
           "ImageClassificationConfig"]


class AugmentationConfig(StrictModel):
    """Random changes to training images; validation, test and
    prediction images are only resized and normalised. Each image's changes are seeded by
    `train.seed`, the epoch and its position, so runs and resumes repeat them."""

    random_resized_crop: bool = True
    """Crop a random part (`crop_scale_min` to all of the area, aspect ratio 3/4 to 4/3) and
    resize it back to the input size."""
    crop_scale_min: Annotated[float, Field(gt=0.0, le=1.0)] = 0.35
    """Smallest share of the image area a random crop keeps."""
    horizontal_flip: bool = True
    """Mirror left-right with probability 0.5; turn it off where a mirror image means
    something else (digits, letters, text)."""


class ImageDataConfig(DataConfig):
    """Where the images come from (class folders or a CSV of paths) and how they are read."""

    image_column: str = "image"
    """Column of a CSV of images holding the image paths, relative to the CSV's folder. An
    image folder (one subfolder per class) needs no columns."""
    num_workers: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    """Worker processes decoding images ahead of training: `auto` is 0 when the decoded cache
    holds the pixels, else up to 4, one core left to training."""
    decoded_cache: bool | Literal["auto"] = "auto"
    """Decode and resize every image once and keep the pixels (uint8) in the prepared-data
    cache: `auto` when the input side is at most 64 pixels and all splits fit in 1 GiB."""
    augmentation: AugmentationConfig = AugmentationConfig()
    """Training-image augmentation."""


class ImageModelConfig(ModelConfig):
    """The network: `small-cnn` (tiny images) or a timm model."""

    name: str | None = None
    """`small-cnn` (tiny images) or a timm model name (`resnet18`, `mobilenetv3_small_100`,
    `efficientnet_b0` …); required (the task names the choices when it is missing)."""

    image_size: Literal["auto"] | Annotated[int, Field(ge=4)] = "auto"
    """Side S in pixels images are resized to (S x S, aspect ratio not kept): `auto` is the
    timm model's input size, 224 for most; for `small-cnn` the median side of the training
    images."""
    pretrained: bool = False
    """Start from pretrained weights: from `weights_file` when set, else from the Hugging
    Face hub (needs internet)."""
    weights_file: str | None = None
    """A local weights file (`.safetensors` or `.pth`) of the timm model for
    `pretrained: true`; relative paths resolve against the config file's folder."""


class ImageClassificationConfig(Config):
    """An image-classification run: a small CNN or a timm model on class folders."""

    task: Literal["image-classification"] = "image-classification"
    """Classify images (class folders or a CSV of image paths)."""
    data: ImageDataConfig
    """Data section."""
    model: ImageModelConfig = ImageModelConfig()
    """Model section."""
