"""Image data for ``task: image-classification``: list, check, split and decode once.

The order (each step is counted in the split's report entry):

1. list each split (:func:`~entrena.data.images.list_images`) and hash every file's bytes;
   with a CSV of paths, ``data.group_column`` is read from the training CSV (an image folder
   has no columns: the key is refused). The fingerprint of the result is the files' paths,
   hashes, labels and groups with the ``data`` section, ``train.seed``, the model's input
   size and :data:`IMAGE_CACHE_FORMAT` — a second run of unchanged data hashes the files and
   loads the entry (no decoding, no checks);
2. decode every file in full; bad files are skipped and listed (``data.on_bad_rows``);
3. the data checks every task shares (:func:`~entrena.data.tables.check_and_split`), each
   image a row whose key is its file's SHA-256 (identical bytes, one key): the label map from
   training (a single class is refused), unseen validation/test labels, conflicting labels,
   exact duplicates, leakage, the validation split when no validation folder is given
   (stratified, seeded; identical files, or the rows of one ``data.group_column`` value, on
   one side), class balance, label spelling (``Cat`` and ``cat``), the seeded subsamples and
   the refusal of a single class left;
4. the channels (1 when every training image is grayscale, else 3), the input size, the
   normalisation (the pretrained weights' mean and std, else the training pixels'), and with
   the decoded cache the pixels of every split resized to S × S as uint8 arrays
   ``<cache>/images/<key>/<role>.npy`` (memory-mapped when read).

Validation and test images are never dropped for hygiene (only counted), as for texts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from entrena.data import checks as ck
from entrena.data import hygiene as hy
from entrena.data.cache import default_cache_dir
from entrena.data.image_batches import ImageTransforms, channel_stats, iter_resized
from entrena.data.image_cache import ImageSplit, ImageSplits, load_entry, write_entry
from entrena.data.images import ImageList, ScannedImages, choose_channels, list_images, scan_images
from entrena.data.labels import LabelCleanup
from entrena.data.reading import RawSplit
from entrena.data.tables import check_and_split, split_specs
from entrena.errors import ConfigError, DataError

__all__ = ["IMAGE_CACHE_FORMAT", "PreparedImages", "prepare_images", "decoded_cache_wanted",
           "worker_count"]

log = logging.getLogger("entrena")

IMAGE_CACHE_FORMAT = 2
"""Bumped whenever what an image entry holds, or how checks decide, changes (2: the checks
shared with every task, labels and groups in the key)."""
DECODED_CACHE_MAX_BYTES = 1 << 30
"""``decoded_cache: auto`` caches when every split's pixels at S × S fit in 1 GiB."""
DECODED_CACHE_MAX_SIDE = 64
"""… and the input side S is at most 64 pixels (small images, where decoding dominates)."""
STATS_SAMPLE = 2000
"""Training images the normalisation is measured on (a seeded sample)."""
SKIPPED_FILES = 20
"""Skipped files listed per split in the report (all are counted)."""
EXAMPLE_FILES = 5
"""Files a check message names (the report's ``examples`` hold up to 10)."""


@dataclass
class PreparedImages:
    """Checked, split data, ready to fit.

    Attributes:
        splits: The splits and label map.
        transforms: Size, channels, normalisation and augmentation.
        decoded: Per role, uint8 (N, C, S, S) pixels (memory-mapped), or ``None`` per role
            when the decoded cache is off.
        num_workers: Decoding workers of the batch sources.
        report: The data report.
        from_cache: Whether everything came from the cache.
    """

    splits: ImageSplits
    transforms: ImageTransforms
    decoded: dict[str, np.ndarray | None]
    num_workers: int
    report: dict[str, Any]
    from_cache: bool

    @property
    def failed_checks(self) -> list[dict[str, Any]]:
        return [c for c in self.report.get("checks", []) if c["status"] == "failed"]


def worker_count(configured: int | str, decoded: bool) -> int:
    """``data.num_workers``: ``auto`` is 0 with the decoded cache (nothing left to decode),
    else up to 4, leaving a core to the trainer."""
    if configured != "auto":
        return int(configured)
    return 0 if decoded else max(0, min(4, (os.cpu_count() or 1) - 1))


def decoded_cache_wanted(setting: bool | str, images: int, channels: int, size: int) -> bool:
    """``data.decoded_cache``: ``auto`` caches small images (see the module constants)."""
    if setting != "auto":
        return bool(setting)
    return (size <= DECODED_CACHE_MAX_SIDE
            and images * channels * size * size <= DECODED_CACHE_MAX_BYTES)


def _hash_file(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def _fingerprint(material: dict[str, Any]) -> str:
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _image_size(loaded: Any, model_name: str, sizes: np.ndarray) -> tuple[int, str]:
    from entrena.tasks.image_classification.model import default_input_size

    configured = loaded.config.model.image_size
    if configured != "auto":
        return int(configured), "model.image_size"
    default = default_input_size(model_name)
    if default is not None:
        return default, f"{model_name}'s input size"
    side = int(np.median(sizes.max(axis=1))) if len(sizes) else 32
    return max(4, side), "median side of the training images"


def prepare_images(loaded: Any, sources: dict[str, str]) -> PreparedImages:
    """Read, check, split and (optionally) decode the config's images, through the cache.

    Args:
        loaded: The loaded config (``task: image-classification``).
        sources: From the task's ``model_sources`` (``model``: the checked model name).

    Returns:
        The prepared images. Failed checks are in ``report["checks"]``; nothing is raised
        for them here.

    Raises:
        ConfigError: ``data.group_column`` with an image folder for training.
        DataError: A split is missing or unreadable, a single class (or one left once the
            checks have run), no images left, bad files under ``on_bad_rows: error``, unseen
            labels under ``error``, a group column the CSV lacks, or a validation split that
            cannot hold every class.
    """
    started = time.perf_counter()
    cfg = loaded.config
    data = cfg.data
    specs = split_specs(loaded)
    for role, spec in specs.items():
        if spec and "://" in spec:
            raise DataError(f"data.{role}: {spec}: image data must be a local folder or CSV; "
                            f"download it first")
    if data.group_column is not None and Path(str(specs["train"])).is_dir():
        raise ConfigError(f"data.group_column: {data.group_column!r} names a column, but "
                          f"data.train ({specs['train']}) is an image folder, which has none; "
                          "list the training images in a CSV with that column (data.image_column,"
                          " data.label_column) to keep each group on one side of the validation "
                          "split, or remove the key")
    listings = {role: list_images(spec, path_column=data.image_column,
                                  label_column=data.label_column, on_bad_rows=data.on_bad_rows)
                for role, spec in specs.items() if spec}
    groups = (_csv_groups(Path(str(specs["train"])), listings["train"], data.group_column)
              if data.group_column is not None else None)
    hashes = {role: [_hash_file(p) for p in listing.paths] for role, listing in listings.items()}
    data_section = data.model_dump(mode="json")
    data_section.pop("cache_dir", None)
    data_section.pop("num_workers", None)
    key = _fingerprint({"format": IMAGE_CACHE_FORMAT, "data": data_section, "specs": specs,
                        "files": {r: [[str(p), h, label] for p, h, label in
                                      zip(listings[r].paths, hashes[r], listings[r].labels,
                                          strict=True)]
                                  for r in listings},
                        "groups": None if groups is None else groups.tolist(),
                        "skipped": {r: listings[r].skipped for r in listings},
                        "seed": cfg.train.seed, "model": sources["model"],
                        "image_size": cfg.model.image_size, "pretrained": cfg.model.pretrained})
    root = default_cache_dir(loaded.resolve_path(data.cache_dir) if data.cache_dir else None)
    entry = root / "images" / key
    cached = load_entry(entry)
    if cached is not None:
        splits, transforms, decoded, report = cached
        report = {**report, "from_cache": True, "cache": str(entry),
                  "prepare_time_s": round(time.perf_counter() - started, 3)}
        log.info("images from the cache (%s) in %.2fs", entry, report["prepare_time_s"])
        return PreparedImages(splits, transforms, decoded,
                              worker_count(data.num_workers, decoded["train"] is not None),
                              report, True)
    splits, transforms, decoded, report = _build(loaded, sources, specs, listings, groups, entry)
    report = {**report, "from_cache": False, "cache": str(entry),
              "prepare_time_s": round(time.perf_counter() - started, 3)}
    log.info("images read, checked%s in %.1fs", " and decoded" if decoded["train"] is not None
             else "", report["prepare_time_s"])
    return PreparedImages(splits, transforms, decoded,
                          worker_count(data.num_workers, decoded["train"] is not None),
                          report, False)


def _build(loaded: Any, sources: dict[str, str], specs: dict[str, str | None],
           listings: dict[str, ImageList], groups: np.ndarray | None,
           entry: Path) -> tuple[Any, ...]:
    cfg = loaded.config
    data = cfg.data
    threads = max(1, worker_count(data.num_workers, False))
    scanned = {role: scan_images(listing, on_bad_rows=data.on_bad_rows, threads=threads,
                                 role=role) for role, listing in listings.items()}
    for role, scan in scanned.items():
        if len(scan) == 0:
            why = scan.skipped[0]["reason"] if scan.skipped else "none listed"
            raise DataError(f"{specs[role]}: no readable {role} images ({len(scan.skipped)} "
                            f"entries skipped, the first: {why}); check the folder or the "
                            f"CSV's data.image_column")
    raw = {role: _raw_split(role, str(specs[role]), scan,
                            _kept(groups, listings[role], scan) if role == "train" else None)
           for role, scan in scanned.items()}
    checked = check_and_split(
        raw, specs, label_column=data.label_column, validation_fraction=data.validation_fraction,
        max_train_samples=data.max_train_samples, max_eval_samples=data.max_eval_samples,
        seed=cfg.train.seed, group_column=data.group_column,
        on_unseen_labels=data.on_unseen_labels, policy=hy.CheckPolicy(**data.checks.model_dump()),
        normalise=False, empty_what="an empty path",
        check_keys="data.image_column and data.label_column",
        terms=_terms(scanned, folder=Path(str(specs["train"])).is_dir()),
        label_cleanup=LabelCleanup.from_config(data))
    names = checked.labels
    split_off = checked.report.get("validation_split") is not None

    def scan_of(role: str) -> ScannedImages:
        return scanned["train" if role == "validation" and split_off else role]

    parts: dict[str, ImageSplit] = {}
    for role, split in checked.roles():
        scan, at = scan_of(role), split.row_ids - 1  # rows are 1-based positions in the scan
        parts[role] = ImageSplit([scan.paths[i] for i in at], split.labels, at.astype(np.int64),
                                 [scan.sha256[i] for i in at])
    splits = ImageSplits(parts["train"], parts["validation"], parts.get("test"), labels=names)
    train_scan, train_at = scanned["train"], parts["train"].row_ids
    channels = choose_channels([train_scan.modes[i] for i in train_at])
    size, size_from = _image_size(loaded, sources["model"], train_scan.sizes[train_at])
    total = sum(len(s) for _, s in splits.roles())
    use_cache = decoded_cache_wanted(data.decoded_cache, total, channels, size)
    decoded: dict[str, np.ndarray | None] = {r: None for r, _ in splits.roles()}
    if use_cache:
        for role, image_split in splits.roles():
            stack = list(iter_resized(image_split.paths, channels, size, threads))
            decoded[role] = np.stack([t.numpy() for t in stack]) if stack else \
                np.zeros((0, channels, size, size), np.uint8)
    transforms = _transforms(loaded, sources["model"], channels, size, splits.train,
                             decoded["train"], threads)
    report = _image_report(checked.report, specs, listings, scanned, scan_of)
    sizes = train_scan.sizes[train_at]
    modes: dict[str, int] = {}
    for i in train_at:
        modes[train_scan.modes[i]] = modes.get(train_scan.modes[i], 0) + 1
    report["images"] = {"channels": channels, "training_modes": modes,
                        "training_sizes": {"min": sizes.min(0).tolist(),
                                           "median": np.median(sizes, 0).tolist(),
                                           "max": sizes.max(0).tolist()},
                        "image_size": size, "image_size_from": size_from,
                        "mean": list(transforms.mean), "std": list(transforms.std),
                        "decoded_cache": use_cache}
    report["fingerprint"] = entry.name
    write_entry(entry, splits, transforms, decoded, report)
    loaded_back = load_entry(entry)
    if loaded_back is not None:  # serve the memory-mapped arrays, like a cache hit
        decoded = loaded_back[2]
    return splits, transforms, decoded, report


def _csv_groups(csv_path: Path, listing: ImageList, column: str) -> np.ndarray:
    """The ``data.group_column`` value of each listed image, as group ids (in order of first
    appearance); an image with an empty value is a group of its own.

    Raises:
        DataError: The CSV has no such column.
    """
    import pandas as pd

    frame = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    if column not in frame.columns:
        raise DataError(f"{csv_path}: data.group_column {column!r} not found (columns: "
                        f"{', '.join(map(str, frame.columns))}); set it to the column naming "
                        "each image's group, or remove the key")
    values = frame[column].str.strip().to_numpy(dtype=object)
    ids: dict[str, int] = {}
    out = np.empty(len(listing.paths), dtype=np.int64)
    for i, row in enumerate(listing.rows):  # the CSV's line number: data row row - 2
        value = values[int(row or 0) - 2]
        out[i] = ids.setdefault(value, len(ids)) if value else -(i + 1)
    return out


def _kept(groups: np.ndarray | None, listing: ImageList, scan: ScannedImages
          ) -> np.ndarray | None:
    """``groups`` (one per listed file) of the files the scan kept: its paths are the
    listing's in order, the bad ones left out."""
    if groups is None:
        return None
    kept, j = [], 0
    for i, path in enumerate(listing.paths):
        if j < len(scan.paths) and scan.paths[j] == path:
            kept.append(i)
            j += 1
    return groups[np.array(kept, dtype=np.int64)]


def _raw_split(role: str, spec: str, scan: ScannedImages, groups: np.ndarray | None
               ) -> RawSplit:
    """One split's readable images as the shared checks see rows: the key of a row is its
    file's SHA-256 (equal bytes, equal keys), its row number its 1-based position in ``scan``."""
    names: dict[str, int] = {}
    codes = np.array([names.setdefault(str(label), len(names)) for label in scan.labels],
                     dtype=np.int64)
    return RawSplit(role, spec, pa.array(scan.sha256, type=pa.large_string()), list(names),
                    codes, groups, np.arange(1, len(scan) + 1, dtype=np.int64), len(scan))


def _terms(scanned: dict[str, ScannedImages], *, folder: bool) -> ck.Terms:
    """How the shared checks' messages speak of images: files named by their path under the
    split's folder (or the CSV's folder)."""

    def where(raw: RawSplit, rows: Sequence[int]) -> str:
        scan = scanned[raw.role]
        shown = [_relative(scan.paths[r - 1], scan) for r in rows[:EXAMPLE_FILES]]
        more = f" and {len(rows) - EXAMPLE_FILES} more" if len(rows) > EXAMPLE_FILES else ""
        return f"{'image' if len(rows) == 1 else 'images'} {', '.join(shown)}{more}"

    return ck.Terms(row="image", key="file", compared="same bytes", grouped_by="identical files",
                    where=where, label_column=not folder,
                    single_class="the training images hold a single class ({names}); a "
                                 "classifier needs at least 2: add a subfolder (or CSV label) "
                                 "per class")


def _relative(path: Path, scan: ScannedImages) -> str:
    """``path`` under the scanned folder, or the CSV's folder (paths in a CSV are relative to
    it); absolute when outside."""
    source = Path(scan.source)
    try:
        return str(path.relative_to(source if source.is_dir() else source.parent))
    except ValueError:
        return str(path)


def _image_report(report: dict[str, Any], specs: dict[str, str | None],
                  listings: dict[str, ImageList], scanned: dict[str, ScannedImages],
                  scan_of: Any) -> dict[str, Any]:
    """The shared checks' report in the words of images: each split's entry counts the files
    listed (``rows_read``), the bad ones (``bad_files``, ``skipped_files``) and names files
    in ``examples``; there are no empty texts, and no near-duplicates (files are compared
    byte for byte, so ``normalised_duplicates`` would repeat ``exact_duplicates``)."""
    report["checks"] = [c for c in report["checks"] if c["check"] != "normalised_duplicates"]
    for role, entry in report["splits"].items():
        from_train = entry["file"] is None
        for key in ("empty_text", "empty_label", "files", "skipped_rows",
                    "normalised_duplicates"):
            entry.pop(key, None)
            entry["rows_removed"].pop(key, None)
        scan = scan_of(role)
        entry["examples"] = {k: [_relative(scan.paths[r - 1], scan) for r in rows]
                             for k, rows in entry["examples"].items()}
        if from_train:
            entry["bad_files"] = 0
            continue
        listing = listings[role]
        entry["source"] = "folder" if Path(str(specs[role])).is_dir() else "csv"
        entry["rows_read"] = len(listing.paths) + len(listing.skipped)
        entry["bad_files"] = len(scanned[role].skipped)
        entry["skipped_files"] = scanned[role].skipped[:SKIPPED_FILES]
    report.setdefault("validation_split", None)
    return {"task": "image-classification", **report}


def _transforms(loaded: Any, model_name: str, channels: int, size: int, train: ImageSplit,
                decoded: np.ndarray | None, threads: int) -> ImageTransforms:
    from entrena.data.image_batches import Augmentation
    from entrena.tasks.image_classification.model import pretrained_normalisation

    cfg = loaded.config
    if cfg.model.pretrained:
        mean, std = pretrained_normalisation(model_name, channels)
    else:
        rng = np.random.default_rng(cfg.train.seed)
        sample = np.sort(rng.permutation(len(train))[:STATS_SAMPLE])
        if decoded is not None:
            import torch

            images: Any = (torch.from_numpy(decoded[i]) for i in sample)
        else:
            images = iter_resized([train.paths[i] for i in sample], channels, size, threads)
        mean, std = channel_stats(images, channels)
    aug = cfg.data.augmentation
    return ImageTransforms(size=size, channels=channels, mean=tuple(mean), std=tuple(std),
                           augmentation=Augmentation(**aug.model_dump()))
