"""Image data for ``task: image-classification``: list, check, split and decode once.

The order (each step is counted in the split's report entry):

1. list each split (:func:`~entrena.data.images.list_images`) and hash every file's bytes;
   the fingerprint of the result is the file hashes with the ``data`` section, ``train.seed``,
   the model's input size and :data:`IMAGE_CACHE_FORMAT` — a second run of unchanged data
   hashes the files and loads the entry (no decoding, no checks);
2. decode every file in full; bad files are skipped and listed (``data.on_bad_rows``);
3. the label map from training (sorted as strings; a single class is refused); validation/test
   images with a label training never saw are refused or dropped (``data.on_unseen_labels``);
4. training images: identical files with different labels (``conflicting_labels``), identical
   files with the same label (``exact_duplicates``);
5. leakage: training files identical (same bytes) to a validation or test file;
6. validation split off training when no validation folder is given: stratified by label,
   seeded, identical files on one side;
7. class balance (``small_classes``, ``imbalance``) and the seeded subsamples;
8. the channels (1 when every training image is grayscale, else 3), the input size, the
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from entrena.data import hygiene as hy
from entrena.data.cache import default_cache_dir
from entrena.data.image_batches import ImageTransforms, channel_stats, iter_resized
from entrena.data.image_cache import ImageSplit, ImageSplits, load_entry, write_entry
from entrena.data.images import ImageList, choose_channels, list_images, scan_images
from entrena.data.tables import stratified_group_split, stratified_split
from entrena.errors import DataError

__all__ = ["IMAGE_CACHE_FORMAT", "PreparedImages", "prepare_images", "decoded_cache_wanted",
           "worker_count"]

log = logging.getLogger("entrena")

IMAGE_CACHE_FORMAT = 1
"""Bumped whenever what an image entry holds, or how checks decide, changes."""
DECODED_CACHE_MAX_BYTES = 1 << 30
"""``decoded_cache: auto`` caches when every split's pixels at S × S fit in 1 GiB."""
DECODED_CACHE_MAX_SIDE = 64
"""… and the input side S is at most 64 pixels (small images, where decoding dominates)."""
STATS_SAMPLE = 2000
"""Training images the normalisation is measured on (a seeded sample)."""


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
        DataError: A split is missing or unreadable, a single class, no images left, bad
            files under ``on_bad_rows: error``, unseen labels under ``error``, or a
            validation split that cannot hold every class.
    """
    started = time.perf_counter()
    cfg = loaded.config
    data = cfg.data
    specs = {role: loaded.resolve_path(getattr(data, role)) if getattr(data, role) else None
             for role in ("train", "validation", "test")}
    for role, spec in specs.items():
        if spec and "://" in spec:
            raise DataError(f"data.{role}: {spec}: image data must be a local folder or CSV; "
                            f"download it first")
    listings = {role: list_images(spec, path_column=data.image_column,
                                  label_column=data.label_column, on_bad_rows=data.on_bad_rows)
                for role, spec in specs.items() if spec}
    hashes = {role: [_hash_file(p) for p in listing.paths] for role, listing in listings.items()}
    data_section = data.model_dump(mode="json")
    data_section.pop("cache_dir", None)
    data_section.pop("num_workers", None)
    key = _fingerprint({"format": IMAGE_CACHE_FORMAT, "data": data_section, "specs": specs,
                        "files": {r: [[str(p), h] for p, h in zip(listings[r].paths, hashes[r],
                                                                  strict=True)]
                                  for r in listings},
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
    splits, transforms, decoded, report = _build(loaded, sources, specs, listings, entry)
    report = {**report, "from_cache": False, "cache": str(entry),
              "prepare_time_s": round(time.perf_counter() - started, 3)}
    log.info("images read, checked%s in %.1fs", " and decoded" if decoded["train"] is not None
             else "", report["prepare_time_s"])
    return PreparedImages(splits, transforms, decoded,
                          worker_count(data.num_workers, decoded["train"] is not None),
                          report, False)


def _build(loaded: Any, sources: dict[str, str], specs: dict[str, str | None],
           listings: dict[str, ImageList], entry: Path) -> tuple[Any, ...]:
    cfg = loaded.config
    data = cfg.data
    policy = hy.CheckPolicy(**data.checks.model_dump())
    threads = max(1, worker_count(data.num_workers, False))
    scanned = {role: scan_images(listing, on_bad_rows=data.on_bad_rows, threads=threads,
                                 role=role) for role, listing in listings.items()}
    for role, scan in scanned.items():
        if len(scan) == 0:
            why = scan.skipped[0]["reason"] if scan.skipped else "none listed"
            raise DataError(f"{specs[role]}: no readable {role} images ({len(scan.skipped)} "
                            f"entries skipped, the first: {why}); check the folder or the "
                            f"CSV's data.image_column")
    names = sorted({str(label) for label in scanned["train"].labels})
    if len(names) < 2:
        raise DataError(f"{specs['train']}: the training images hold a single class "
                        f"({names[0]!r}); a classifier needs at least 2: add a subfolder (or "
                        f"CSV label) per class")
    index_of = {name: i for i, name in enumerate(names)}
    k = len(names)
    sha_keys = np.unique(np.concatenate([np.array(s.sha256, dtype=object)
                                         for s in scanned.values()]).astype(str),
                         return_inverse=True)[1]
    offsets = np.cumsum([0, *[len(s) for s in scanned.values()]])
    keys = {role: sha_keys[offsets[i]:offsets[i + 1]] for i, role in enumerate(scanned)}
    index = {role: np.arange(len(s)) for role, s in scanned.items()}
    labels = {role: np.array([index_of.get(str(x), -1) for x in s.labels], dtype=np.int64)
              for role, s in scanned.items()}
    entries: dict[str, dict[str, Any]] = {
        role: {"file": specs[role], "source": "folder" if Path(str(specs[role])).is_dir()
               else "csv", "rows_read": len(listings[role].paths) + len(listings[role].skipped),
               "rows_kept": 0, "bad_files": len(s.skipped), "skipped_files": s.skipped[:20],
               "exact_duplicates": 0, "conflicting_label_rows": 0, "leaked_rows": 0,
               "unseen_label_rows": 0, "rows_removed": {}} for role, s in scanned.items()}
    for role in ("validation", "test"):
        if role in labels:
            unseen = labels[role] < 0
            if unseen.any():
                first = int(np.flatnonzero(unseen)[0])
                if data.on_unseen_labels == "error":
                    raise DataError(f"{scanned[role].paths[first]}: label "
                                    f"{scanned[role].labels[first]!r} "
                                    f"of {int(unseen.sum())} {role} images never occurs in "
                                    f"training; add training images of it or set "
                                    f"data.on_unseen_labels: drop")
                index[role] = index[role][~unseen]
                entries[role]["rows_removed"]["unseen_labels"] = int(unseen.sum())
            entries[role]["unseen_label_rows"] = int(unseen.sum())

    def drop_train(mask: np.ndarray, reason: str) -> None:
        entries["train"]["rows_removed"][reason] = int(mask.sum())
        index["train"] = index["train"][~mask]

    checks: list[dict[str, Any]] = []
    t_keys, t_labels = keys["train"], labels["train"]
    clash = hy.conflicting(t_keys[index["train"]], t_labels[index["train"]], k)
    checks.append(hy.check_record("conflicting_labels", int(clash.sum()), policy.conflicting_labels,
                                  f"{int(clash.sum())} training images are identical files "
                                  f"filed under different labels"))
    entries["train"]["conflicting_label_rows"] = int(clash.sum())
    if policy.conflicting_labels == "drop" and clash.any():
        drop_train(clash, "conflicting_labels")
    copies = hy.repeats(hy.pair_keys(t_keys[index["train"]], t_labels[index["train"]], k))
    checks.append(hy.check_record("exact_duplicates", int(copies.sum()), policy.exact_duplicates,
                                  f"{int(copies.sum())} training images repeat an earlier "
                                  f"file byte for byte (same label)"))
    entries["train"]["exact_duplicates"] = int(copies.sum())
    if policy.exact_duplicates == "drop" and copies.any():
        drop_train(copies, "exact_duplicates")
    others = [keys[r][index[r]] for r in ("validation", "test") if r in keys]
    leaked = np.isin(t_keys[index["train"]], np.concatenate(others)) if others else \
        np.zeros(len(index["train"]), dtype=bool)
    checks.append(hy.check_record("leakage", int(leaked.sum()), policy.leakage,
                                  f"{int(leaked.sum())} training images are identical to a "
                                  f"validation or test image"))
    entries["train"]["leaked_rows"] = int(leaked.sum())
    for role in ("validation", "test"):
        if role in keys:
            mine = keys[role][index[role]]
            entries[role]["leaked_rows"] = int(np.isin(mine, t_keys[index["train"]]).sum())
            entries[role]["exact_duplicates"] = int(hy.repeats(hy.pair_keys(
                mine, labels[role][index[role]], k)).sum())
    if policy.leakage == "drop" and leaked.any():
        drop_train(leaked, "leakage")
    validation_split = None
    if "validation" not in scanned:
        current = index["train"]
        try:
            kept, held = stratified_group_split(t_labels[current], t_keys[current],
                                                data.validation_fraction, cfg.train.seed)
        except ValueError as exc:
            raise DataError(f"{specs['train']}: cannot hold out data.validation_fraction "
                            f"{data.validation_fraction:g} of {len(current)} training images "
                            f"with every class on both sides ({exc}); raise the fraction, add "
                            f"images or give data.validation") from exc
        index["train"], held_index = current[kept], current[held]
        entries["train"]["rows_removed"]["held_out_for_validation"] = len(held_index)
        scanned["validation"], keys["validation"] = scanned["train"], keys["train"]
        labels["validation"], index["validation"] = labels["train"], held_index
        entries["validation"] = {"file": None, "source": "split from train",
                                 "rows_read": len(held_index), "rows_kept": 0, "bad_files": 0,
                                 "exact_duplicates": 0, "conflicting_label_rows": 0,
                                 "leaked_rows": 0, "unseen_label_rows": 0, "rows_removed": {}}
        validation_split = {"from": "train", "fraction": data.validation_fraction,
                            "stratified": True, "seed": cfg.train.seed,
                            "grouped_by": "identical files"}
    counts = np.bincount(t_labels[index["train"]], minlength=k)
    small = hy.small_classes(counts, data.validation_fraction if validation_split else None)
    checks.append(hy.check_record("small_classes", len(small), policy.small_classes,
                                  f"{len(small)} classes have too few training images: "
                                  f"{', '.join(names[i] for i in small[:10])}"))
    ratio = hy.imbalance_ratio(counts)
    checks.append(hy.check_record(
        "imbalance", round(ratio or 0.0, 4), policy.imbalance,
        f"the most frequent training class has {ratio or 0:.2f}x the images of the least "
        f"frequent (limit {policy.max_imbalance_ratio:g})",
        failing=ratio is not None and ratio > policy.max_imbalance_ratio))
    limits = {"train": data.max_train_samples, "validation": data.max_eval_samples,
              "test": data.max_eval_samples}
    for role, limit in limits.items():
        if role in index and limit is not None and len(index[role]) > limit:
            keep = _subsample(labels[role][index[role]], limit, cfg.train.seed)
            entries[role]["rows_removed"]["subsampled"] = len(index[role]) - len(keep)
            index[role] = index[role][keep]
    for role in index:
        if len(index[role]) == 0:
            raise DataError(f"{specs[role] or specs['train']}: no {role} images are left once "
                            f"the checks have run ({entries[role]['rows_removed']}); keep "
                            f"them (data.checks.*) or add images")

    splits = ImageSplits(*(None if role not in index else ImageSplit(
        [scanned[role].paths[i] for i in index[role]], labels[role][index[role]],
        index[role].astype(np.int64), [scanned[role].sha256[i] for i in index[role]])
        for role in ("train", "validation", "test")), labels=names)
    train_scan = scanned["train"]
    channels = choose_channels([train_scan.modes[i] for i in index["train"]])
    size, size_from = _image_size(loaded, sources["model"], train_scan.sizes[index["train"]])
    total = sum(len(s) for _, s in splits.roles())
    use_cache = decoded_cache_wanted(data.decoded_cache, total, channels, size)
    decoded: dict[str, np.ndarray | None] = {r: None for r, _ in splits.roles()}
    if use_cache:
        for role, split in splits.roles():
            stack = list(iter_resized(split.paths, channels, size, threads))
            decoded[role] = np.stack([t.numpy() for t in stack]) if stack else \
                np.zeros((0, channels, size, size), np.uint8)
    transforms = _transforms(loaded, sources["model"], channels, size, splits.train,
                             decoded["train"], threads)
    for role, split in splits.roles():
        entries[role]["rows_kept"] = len(split)
        entries[role]["label_counts"] = {names[i]: int(c) for i, c in
                                         enumerate(np.bincount(split.labels, minlength=k))}
    sizes = train_scan.sizes[index["train"]]
    modes: dict[str, int] = {}
    for i in index["train"]:
        modes[train_scan.modes[i]] = modes.get(train_scan.modes[i], 0) + 1
    report = {"task": "image-classification", "labels": names,
              "rows": {role: e["rows_kept"] for role, e in entries.items()},
              "label_counts": {role: e["label_counts"] for role, e in entries.items()},
              "imbalance_ratio": ratio, "splits": entries,
              "validation_split": validation_split, "checks": checks,
              "images": {"channels": channels, "training_modes": modes,
                         "training_sizes": {"min": sizes.min(0).tolist(),
                                            "median": np.median(sizes, 0).tolist(),
                                            "max": sizes.max(0).tolist()},
                         "image_size": size, "image_size_from": size_from,
                         "mean": list(transforms.mean), "std": list(transforms.std),
                         "decoded_cache": use_cache},
              "fingerprint": entry.name}
    write_entry(entry, splits, transforms, decoded, report)
    loaded_back = load_entry(entry)
    if loaded_back is not None:  # serve the memory-mapped arrays, like a cache hit
        decoded = loaded_back[2]
    return splits, transforms, decoded, report


def _subsample(labels: np.ndarray, limit: int, seed: int) -> np.ndarray:
    held = min(0.999999, limit / len(labels))
    try:
        _, keep = stratified_split(labels, held, seed)
    except ValueError:
        keep = np.sort(np.random.default_rng(seed).permutation(len(labels))[:limit])
    return keep[:limit]


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
