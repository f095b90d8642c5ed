"""Image transforms and batch sources: pixels → resized, augmented, normalised tensors.

Every image goes through the same steps, in training, evaluation, export and prediction:

1. decode and convert to the training images' mode (:func:`entrena.data.images.decode_image`);
2. resize to the model's input size, ``S × S`` (bilinear with antialiasing, on uint8; the aspect
   ratio is not kept) — the *decoded cache* stores the result of this step, so a cached and an
   uncached run see the same pixels;
3. training only: the random augmentations (:class:`Augmentation`), drawn from a numpy
   generator seeded by ``(seed, epoch, index)`` (not torch's global one), so an epoch's
   augmentations do not depend on the number of workers, on what else drew random numbers,
   or on a resume;
4. scale to [0, 1] and normalise per channel with the mean and standard deviation
   (:class:`ImageTransforms`).

:class:`ImageBatches` is the loop's batch source (``plan(epoch)`` / ``collate(indices)``); with
``num_workers > 0`` a :class:`torch.utils.data.DataLoader` decodes the epoch's batches ahead in
worker processes, in the order of the plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from entrena.data.batching import random_batches
from entrena.data.images import decode_image

__all__ = ["Augmentation", "ImageTransforms", "ImageBatches", "resize_pixels",
           "decode_resized", "iter_resized", "channel_stats", "augmentation_seed", "crop_box"]


@dataclass(frozen=True)
class Augmentation:
    """Random changes applied to training images only.

    Attributes:
        random_resized_crop: Crop a random part covering ``crop_scale_min`` to all of the
            area (aspect ratio 3/4 to 4/3) and resize it back to S × S (Szegedy et al. 2015).
        crop_scale_min: Smallest share of the area a crop keeps, in (0, 1].
        horizontal_flip: Mirror left-right with probability 0.5 (wrong for digits and text).
    """

    random_resized_crop: bool = True
    crop_scale_min: float = 0.35
    horizontal_flip: bool = True

    @property
    def active(self) -> bool:
        return self.random_resized_crop or self.horizontal_flip


def augmentation_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of one example's augmentation in one epoch (a 63-bit mix of the three)."""
    value = (seed * 0x9E3779B1 + epoch * 0x85EBCA77 + index * 0xC2B2AE3D) & ((1 << 63) - 1)
    return value ^ (value >> 29)


def crop_box(height: int, width: int, scale: tuple[float, float], rng: np.random.Generator,
             ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """A random crop ``(top, left, height, width)`` in pixels covering ``scale`` of the area
    with an aspect ratio in ``ratio`` (log-uniform): the sampling of Inception's
    random-sized crop (Szegedy et al. 2015, as in torchvision's ``RandomResizedCrop``); after
    10 misses, the centred crop with the ratio clamped to ``ratio``."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        h, w = height, int(round(height * ratio[1]))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def resize_pixels(pixels: np.ndarray, size: int) -> torch.Tensor:
    """Step 2: uint8 pixels (H, W, C) → uint8 tensor (C, S, S), bilinear with antialiasing."""
    from torchvision.transforms.v2 import functional as TF

    image = torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1)  # (C, H, W)
    if image.shape[1] == size and image.shape[2] == size:
        return image.contiguous()
    return TF.resize(image, [size, size], antialias=True).contiguous()


def decode_resized(path: str | Path | bytes, channels: int, size: int) -> torch.Tensor:
    """Steps 1-2 for one file: uint8 tensor (C, S, S)."""
    return resize_pixels(decode_image(path, channels), size)


@dataclass(frozen=True)
class ImageTransforms:
    """Steps 3-4 and what the saved model needs to repeat them.

    Attributes:
        size: The model's input side S (pixels); images become S × S.
        channels: 1 (grayscale) or 3 (RGB).
        mean: Per-channel mean of pixels scaled to [0, 1], length C.
        std: Per-channel standard deviation, length C.
        augmentation: Training augmentations.
    """

    size: int
    channels: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augmentation: Augmentation = field(default_factory=Augmentation)

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (…, C, S, S) → float32 (…, C, S, S): ``(x / 255 - mean) / std``."""
        mean = torch.tensor(self.mean, dtype=torch.float32).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(-1, 1, 1)
        return (images.to(torch.float32) / 255.0 - mean) / std

    def augment(self, image: torch.Tensor, generator_seed: int) -> torch.Tensor:
        """Step 3 on one uint8 image (C, S, S); the same seed gives the same result."""
        from torchvision.transforms.v2 import functional as TF

        aug = self.augmentation
        if not aug.active:
            return image
        rng = np.random.default_rng(generator_seed)
        if aug.random_resized_crop:
            top, left, height, width = crop_box(image.shape[-2], image.shape[-1],
                                                (aug.crop_scale_min, 1.0), rng)
            image = TF.resized_crop(image, top, left, height, width, [self.size, self.size],
                                    antialias=True)
        if aug.horizontal_flip and rng.random() < 0.5:
            image = TF.horizontal_flip(image)
        return image.contiguous()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ImageTransforms:
        return cls(size=int(data["size"]), channels=int(data["channels"]),
                   mean=tuple(data["mean"]), std=tuple(data["std"]),
                   augmentation=Augmentation(**data.get("augmentation", {})))


def channel_stats(images: Iterator[torch.Tensor] | Sequence[torch.Tensor],
                  channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation of uint8 images (C, S, S), scaled to [0, 1].

    Returns:
        ``(mean, std)``, each of length ``channels``; a std of 0 (a constant channel) becomes 1.
    """
    total = np.zeros(channels)
    squares = np.zeros(channels)
    count = 0
    for image in images:
        pixels = image.reshape(channels, -1).to(torch.float64) / 255.0
        total += pixels.sum(1).numpy()
        squares += (pixels * pixels).sum(1).numpy()
        count += pixels.shape[1]
    if count == 0:
        return (0.5,) * channels, (0.5,) * channels
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean * mean, 0.0))
    return (tuple(round(float(m), 6) for m in mean),
            tuple(round(float(s), 6) if s > 1e-6 else 1.0 for s in std))


class _Items(torch.utils.data.Dataset):
    """One split's examples; an item key is ``index`` or ``(epoch, index)`` (training)."""

    def __init__(self, paths: Sequence[Path], labels: np.ndarray, transforms: ImageTransforms,
                 decoded: np.ndarray | None, train: bool, seed: int):
        self.paths = [str(p) for p in paths]
        self.labels = labels
        self.transforms = transforms
        self.decoded = decoded
        self.train = train
        self.seed = seed

    def __len__(self) -> int:
        return len(self.labels)

    def pixels(self, index: int) -> torch.Tensor:
        """uint8 (C, S, S) after steps 1-2."""
        if self.decoded is not None:
            return torch.from_numpy(np.array(self.decoded[index]))
        t = self.transforms
        return decode_resized(self.paths[index], t.channels, t.size)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        epoch, index = key if isinstance(key, tuple) else (0, key)
        image = self.pixels(index)
        if self.train:
            image = self.transforms.augment(image, augmentation_seed(self.seed, epoch, index))
        return self.transforms.normalise(image), int(self.labels[index])


def _collate(items: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.stack([image for image, _ in items]),
            "labels": torch.tensor([label for _, label in items], dtype=torch.long)}


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)  # one decode per worker; the trainer keeps its threads


class _PlanSampler:
    """A batch sampler whose batches are swapped in before each pass (workers persist)."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def __iter__(self) -> Iterator[list[Any]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class ImageBatches:
    """Batches of one image split for the loop.

    Args:
        paths: Image files, shape (N,) (used when ``decoded`` is ``None``).
        labels: Label index per image, shape (N,).
        transforms: The transforms (size, channels, normalisation, augmentation).
        batch_size: Images per batch.
        shuffle: Training: a new seeded order each epoch (``seed + epoch``) and augmentation;
            otherwise file order, no augmentation (deterministic).
        seed: Base seed of the order and of the augmentations.
        decoded: The decoded cache: uint8 (N, C, S, S) (may be memory-mapped), or ``None`` to
            decode the files in every epoch.
        num_workers: Worker processes decoding ahead (0: decode in this process, when asked).
    """

    def __init__(self, paths: Sequence[Path], labels: np.ndarray, *,
                 transforms: ImageTransforms, batch_size: int, shuffle: bool, seed: int = 0,
                 decoded: np.ndarray | None = None, num_workers: int = 0):
        self.labels = np.asarray(labels, dtype=np.int64)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.items = _Items(paths, self.labels, transforms, decoded, shuffle, seed)
        self.num_workers = num_workers
        self.lengths = np.ones(len(self.labels), dtype=np.int64)  # one "token" per image
        self._epoch = 0
        self._plan: list[list[int]] = []
        self._loader: Any = None
        self._sampler = _PlanSampler()
        self._pending: Iterator[dict[str, torch.Tensor]] | None = None
        self._expected: list[list[int]] = []

    def __len__(self) -> int:
        return len(self.labels)

    def plan(self, epoch: int) -> list[list[int]]:
        """The batches of ``epoch``: shuffled per epoch in training, file order otherwise."""
        key = epoch if self.shuffle else 0
        if key != self._epoch or not self._plan:
            n = len(self.labels)
            self._plan = (random_batches(n, self.batch_size, self.seed + key) if self.shuffle
                          else [list(range(i, min(i + self.batch_size, n)))
                                for i in range(0, n, self.batch_size)])
            self._epoch = key
            self._pending = None
        return self._plan

    def collate(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        """``pixel_values`` float32 (B, C, S, S) and ``labels`` int64 (B,) of one batch."""
        indices = [int(i) for i in indices]
        if self.num_workers <= 0:
            return _collate([self.items[(self._epoch, i)] for i in indices])
        if self._pending is not None and self._expected and self._expected[0] == indices:
            self._expected.pop(0)
            return next(self._pending)
        try:  # start decoding ahead from this batch of the plan
            start = self._plan.index(indices)
        except ValueError:
            return _collate([self.items[(self._epoch, i)] for i in indices])
        self._expected = [list(b) for b in self._plan[start + 1:]]
        self._pending = self._start([[(self._epoch, i) for i in b] for b in self._plan[start:]])
        return next(self._pending)

    def _start(self, batches: list[list[Any]]) -> Iterator[dict[str, torch.Tensor]]:
        if self._loader is None:
            # Its own generator: a DataLoader's first iterator draws its workers' base seed
            # from torch's global generator otherwise, which shifts dropout's stream by one
            # draw in whichever run (a fresh one, a resumed one) happens to create it later.
            self._loader = torch.utils.data.DataLoader(
                self.items, batch_sampler=self._sampler, num_workers=self.num_workers,
                collate_fn=_collate, persistent_workers=True, worker_init_fn=_worker_init,
                prefetch_factor=4, generator=torch.Generator().manual_seed(self.seed))
        self._sampler.batches = batches
        return iter(self._loader)

    def close(self) -> None:
        """Stop the worker processes (they also stop with this object)."""
        self._pending = None
        self._loader = None


def iter_resized(paths: Sequence[Path], channels: int, size: int,
                 threads: int = 1) -> Iterator[torch.Tensor]:
    """Steps 1-2 over many files, in order, with ``threads`` decoding at once."""
    decode: Callable[[Path], torch.Tensor] = lambda p: decode_resized(p, channels, size)  # noqa: E731
    if threads <= 1:
        yield from map(decode, paths)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:
        yield from pool.map(decode, paths, chunksize=max(1, math.ceil(len(paths) / 64)))
