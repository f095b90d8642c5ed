"""The image entries of the prepared-data cache: checked splits and decoded pixels.

An entry is a folder ``<cache root>/images/<key>/`` (the key: see
:mod:`entrena.tasks.image_classification.data`) holding ``meta.json`` and, with the decoded cache,
``train.npy``, ``validation.npy``, ``test.npy``: uint8 (N, C, S, S) pixels after decoding and
resizing, memory-mapped when read. A reader finds a whole entry or none; a damaged entry is
deleted and built again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from entrena.data.image_batches import ImageTransforms

__all__ = ["ImageSplit", "ImageSplits", "write_entry", "load_entry"]

log = logging.getLogger("entrena")


@dataclass
class ImageSplit:
    """One split: files and integer labels, aligned.

    Attributes:
        paths: Image files, (N,).
        labels: Label index per image, (N,) int64.
        row_ids: Position of each image in its source's listing (0-based), (N,) int64.
        sha256: Hex SHA-256 of each file, (N,).
    """

    paths: list[Path]
    labels: np.ndarray
    row_ids: np.ndarray
    sha256: list[str]

    def __len__(self) -> int:
        return len(self.paths)


@dataclass
class ImageSplits:
    """Train/validation/test image splits sharing one label map."""

    train: ImageSplit
    validation: ImageSplit
    test: ImageSplit | None
    labels: list[str]

    def roles(self) -> list[tuple[str, ImageSplit]]:
        return [(r, s) for r, s in (("train", self.train), ("validation", self.validation),
                                    ("test", self.test)) if s is not None]



def write_entry(entry: Path, splits: ImageSplits, transforms: ImageTransforms,
                 decoded: dict[str, np.ndarray | None], report: dict[str, Any]) -> None:
    """Write an entry folder atomically (a temporary folder renamed into place): ``meta.json``
    (labels, transforms, report, every split's paths, labels, positions and hashes) and one
    ``<role>.npy`` of uint8 (N, C, S, S) per decoded split."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        meta = {"labels": splits.labels, "transforms": transforms.as_dict(), "report": report,
                "splits": {role: {"paths": [str(p) for p in s.paths],
                                  "labels": s.labels.tolist(), "row_ids": s.row_ids.tolist(),
                                  "sha256": s.sha256} for role, s in splits.roles()}}
        for role, array in decoded.items():
            if array is not None:
                np.save(tmp / f"{role}.npy", np.ascontiguousarray(array))
        (tmp / "meta.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_entry(entry: Path) -> tuple[Any, ...] | None:
    """The entry's splits, transforms, decoded arrays and report; ``None`` if absent or
    damaged (a damaged entry is deleted)."""
    if not (entry / "meta.json").is_file():
        return None
    try:
        meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
        parts = {role: ImageSplit([Path(p) for p in s["paths"]],
                                  np.array(s["labels"], dtype=np.int64),
                                  np.array(s["row_ids"], dtype=np.int64), s["sha256"])
                 for role, s in meta["splits"].items()}
        transforms = ImageTransforms.from_dict(meta["transforms"])
        decoded: dict[str, np.ndarray | None] = {}
        for role, split in parts.items():
            path = entry / f"{role}.npy"
            decoded[role] = np.load(path, mmap_mode="r") if path.is_file() else None
            if decoded[role] is not None and decoded[role].shape[0] != len(split):
                raise ValueError(f"{path}: {decoded[role].shape[0]} images, {len(split)} listed")
        splits = ImageSplits(parts["train"], parts["validation"], parts.get("test"),
                             meta["labels"])
        return splits, transforms, decoded, meta["report"]
    except (OSError, ValueError, KeyError) as exc:
        log.warning("image cache entry %s is damaged (%s); building it again", entry, exc)
        shutil.rmtree(entry, ignore_errors=True)
        return None
