"""Image data: listing an image folder or a CSV of paths, checking and decoding the files.

Two layouts are read (:func:`list_images`):

- an image folder, one subfolder per class (``train/cat/001.png``); files inside a class
  folder may sit in deeper subfolders; hidden files (``.DS_Store``) are ignored, files directly
  in the root have no class and are skipped and counted;
- a CSV with a path column and a label column; paths are relative to the CSV's folder.

Every file is read once (:func:`scan_images`): its bytes are hashed (SHA-256, for duplicates
and leakage) and decoded in full with Pillow, so a truncated file is caught here and not in the
middle of an epoch. With ``on_bad_rows: skip`` a file Pillow cannot identify (a text file, a
PDF), a truncated or otherwise undecodable image, a missing file and a CSV row without a path
or label are skipped and listed with the reason; with ``error`` the first one is a
:class:`~entrena.errors.DataError`.

Colour modes: the training images decide the channels (:func:`choose_channels`). When every
training image is grayscale (Pillow modes ``1``, ``L``, ``LA``, ``I``, ``I;16``, ``F``) the
model sees 1 channel (``L``); otherwise 3 (``RGB``), and grayscale, palette, CMYK and RGBA
images are converted (alpha is dropped, not composited). Validation, test and prediction images
are converted to the training choice. EXIF orientation is applied before anything else.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from entrena.errors import DataError

__all__ = ["GRAYSCALE_MODES", "ImageList", "ScannedImages", "list_images", "scan_images",
           "choose_channels", "decode_image", "decode_failure", "max_image_pixels",
           "mode_for_channels"]

log = logging.getLogger("entrena")

GRAYSCALE_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})
"""Pillow modes that hold one intensity channel (plus alpha for ``LA``)."""


@dataclass
class ImageList:
    """The files of one split before they are opened.

    Attributes:
        paths: Image files, in listing order (sorted within each class folder; CSV row order).
        labels: Class label per file (``None`` where the source has no labels: prediction).
        rows: Where each file came from, for messages (the CSV's 1-based data row, or ``None``
            for a folder).
        skipped: Entries dropped while listing: ``{"path", "reason"}``.
        source: The folder or CSV that was listed.
    """

    paths: list[Path]
    labels: list[str | None]
    rows: list[int | None]
    skipped: list[dict[str, str]] = field(default_factory=list)
    source: str = ""


@dataclass
class ScannedImages:
    """What reading every file found.

    Attributes:
        paths: The readable images (bad files removed).
        labels: Their labels.
        sha256: Hex SHA-256 of each file's bytes.
        modes: Pillow mode of each file as stored (``"L"``, ``"RGB"``, ``"P"`` …).
        sizes: ``(width, height)`` in pixels, shape (N, 2), int64.
        skipped: Files and rows left out, ``{"path", "reason"}`` (listing and decoding).
        source: The folder or CSV read.
    """

    paths: list[Path]
    labels: list[str | None]
    sha256: list[str]
    modes: list[str]
    sizes: np.ndarray
    skipped: list[dict[str, str]]
    source: str = ""

    def __len__(self) -> int:
        return len(self.paths)


def _is_hidden(path: Path) -> bool:
    return path.name.startswith(".")


def _list_folder(root: Path) -> ImageList:
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not _is_hidden(p))
    if not classes:
        raise DataError(f"{root}: an image folder needs one subfolder per class "
                        f"(`{root.name}/<class>/<image>`), found none; put each class's images "
                        f"in a folder named after the class, or give a CSV of paths and labels")
    listing = ImageList([], [], [], source=str(root))
    for loose in sorted(p for p in root.iterdir() if p.is_file() and not _is_hidden(p)):
        listing.skipped.append({"path": str(loose), "reason": "outside any class folder"})
    for folder in classes:
        files = sorted(p for p in folder.rglob("*") if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(root).parts))
        listing.paths.extend(files)
        listing.labels.extend([folder.name] * len(files))
        listing.rows.extend([None] * len(files))
    return listing


def _list_csv(csv_path: Path, path_column: str, label_column: str | None,
              on_bad_rows: str) -> ImageList:
    import pandas as pd

    try:
        frame = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"{csv_path}: cannot read the CSV of image paths ({exc})") from exc
    needed = [path_column, *([label_column] if label_column else [])]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise DataError(f"{csv_path}: column {missing[0]!r} not found (columns: "
                        f"{', '.join(map(str, frame.columns))}); set data.image_column / "
                        f"data.label_column to the column holding it")
    listing = ImageList([], [], [], source=str(csv_path))
    base = csv_path.parent
    labels = frame[label_column] if label_column else [None] * len(frame)
    for i, (raw, label) in enumerate(zip(frame[path_column], labels, strict=True)):
        row = i + 2  # 1-based, after the header line
        value = str(raw).strip()
        if not value or (label_column and not str(label).strip()):
            what = "image path" if not value else "label"
            if on_bad_rows == "error":
                raise DataError(f"{csv_path}:{row}: empty {what}; fill it in or set "
                                f"data.on_bad_rows: skip")
            listing.skipped.append({"path": f"{csv_path}:{row}", "reason": f"empty {what}"})
            continue
        path = Path(value)
        listing.paths.append(path if path.is_absolute() else base / path)
        listing.labels.append(str(label).strip() if label_column else None)
        listing.rows.append(row)
    return listing


def list_images(source: str | Path, *, path_column: str = "image",
                label_column: str | None = "label", on_bad_rows: str = "skip") -> ImageList:
    """List the images of one split (no file is opened yet).

    Args:
        source: An image folder (one subfolder per class) or a CSV of paths and labels.
        path_column: The CSV column holding image paths (relative to the CSV's folder).
        label_column: The CSV column holding labels; ``None`` reads no labels (prediction).
        on_bad_rows: ``"skip"`` counts CSV rows with an empty path or label; ``"error"``
            refuses them.

    Returns:
        The :class:`ImageList`.

    Raises:
        DataError: The source is missing, is neither a folder nor a CSV, a column is missing,
            or a folder has no class subfolders.
    """
    root = Path(source)
    if root.is_dir():
        return _list_folder(root)
    if root.is_file() and root.suffix.lower() in (".csv", ".tsv", ".txt"):
        return _list_csv(root, path_column, label_column, on_bad_rows)
    if not root.exists():
        raise DataError(f"{root}: no such folder or file; give an image folder (one subfolder "
                        f"per class) or a CSV of image paths and labels")
    raise DataError(f"{root}: not an image folder nor a CSV of image paths; image tasks read "
                    f"a folder with one subfolder per class, or a CSV with columns "
                    f"{path_column!r} and {label_column!r}")


def _open(data: bytes) -> Any:
    from PIL import Image, ImageOps

    image = Image.open(io.BytesIO(data))
    image.load()  # decodes in full: a truncated file raises here
    return ImageOps.exif_transpose(image)


def mode_for_channels(channels: int) -> str:
    """The Pillow mode images are converted to: ``"L"`` for 1 channel, ``"RGB"`` for 3."""
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels}")
    return "L" if channels == 1 else "RGB"


def decode_image(source: str | Path | bytes, channels: int) -> np.ndarray:
    """Decode one image file into pixels.

    Args:
        source: A file path, or the file's bytes.
        channels: 1 (converted to Pillow ``L``) or 3 (``RGB``).

    Returns:
        uint8 pixels, shape (H, W, C) with C = ``channels``.

    Raises:
        OSError / PIL.UnidentifiedImageError: Not an image, or a damaged one.
    """
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    image = _open(data)
    target = mode_for_channels(channels)
    if image.mode != target:
        if image.mode.startswith("I;16"):
            # 16-bit: scale the full range 0-65535 to 0-255 (Pillow's convert would clip
            # everything above 255 to white)
            from PIL import Image

            array = np.rint(np.asarray(image, dtype=np.float64) / 257.0)
            image = Image.fromarray(array.astype(np.uint8), mode="L")
        if image.mode != target:
            image = image.convert(target)
    pixels = np.array(image, dtype=np.uint8)  # a writable copy
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def max_image_pixels() -> int:
    """The most pixels (width x height) an image may have: twice Pillow's
    ``Image.MAX_IMAGE_PIXELS`` (178,956,970 by default), above which Pillow refuses to open a
    file as a possible decompression bomb."""
    from PIL import Image

    return 2 * int(Image.MAX_IMAGE_PIXELS or 0) or 0


def decode_failure(exc: BaseException) -> str:
    """The reason, for a skipped-file list, that decoding one file raised ``exc``."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(exc, FileNotFoundError):
        return "missing file"
    if isinstance(exc, UnidentifiedImageError):
        return "not an image Pillow can read"
    if isinstance(exc, Image.DecompressionBombError):
        found = re.search(r"\((\d+) pixels\)", str(exc))  # "Image size (400000000 pixels) …"
        count = f"{int(found.group(1)):,} pixels" if found else "too many pixels"
        return (f"too large: {count}, above the limit of {max_image_pixels():,} (Pillow's "
                f"decompression-bomb guard); shrink the image")
    reason = str(exc).splitlines()[0] if str(exc) else ""
    if not isinstance(exc, OSError | ValueError | SyntaxError):
        reason = f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__
    return f"damaged image ({reason or type(exc).__name__})"


def _check_one(path: Path) -> tuple[str, str, int, int] | str:
    """``(sha256, mode, width, height)`` of a readable image, else the reason it is not."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "missing file"
    except OSError as exc:
        return f"unreadable file ({exc.strerror or exc})"
    try:
        image = _open(data)
    except Exception as exc:  # noqa: BLE001  # any decoder failure is this file's problem
        return decode_failure(exc)
    return hashlib.sha256(data).hexdigest(), image.mode, image.width, image.height


def scan_images(listing: ImageList, *, on_bad_rows: str = "skip", threads: int = 1,
                role: str = "train") -> ScannedImages:
    """Read, hash and fully decode every listed file; skip (or refuse) the bad ones.

    Args:
        listing: From :func:`list_images`.
        on_bad_rows: ``"skip"`` drops and lists bad files; ``"error"`` raises on the first.
        threads: Files read at once (Pillow releases the GIL while decoding).
        role: The split's name, for messages.

    Returns:
        The :class:`ScannedImages`; ``skipped`` holds the listing's entries and the bad files.

    Raises:
        DataError: ``on_bad_rows: error`` and a file is bad.
    """
    paths = listing.paths
    if threads > 1 and len(paths) > 1:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            results = list(pool.map(_check_one, paths, chunksize=16))
    else:
        results = [_check_one(p) for p in paths]
    kept: list[int] = []
    skipped = list(listing.skipped)
    for i, result in enumerate(results):
        if isinstance(result, str):
            where = f"{listing.source}:{listing.rows[i]} ({paths[i]})" if listing.rows[i] \
                else str(paths[i])
            if on_bad_rows == "error":
                raise DataError(f"{where}: {result} in the {role} images; remove or replace "
                                f"the file, or set data.on_bad_rows: skip to leave it out")
            skipped.append({"path": str(paths[i]), "reason": result})
        else:
            kept.append(i)
    if skipped:
        shown = "; ".join(f"{s['path']} ({s['reason']})" for s in skipped[:5])
        more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        log.warning("%s images: skipped %d of %d entries: %s%s (listed in data_report.json)",
                    role, len(skipped), len(paths) + len(listing.skipped), shown, more)
    good = [results[i] for i in kept]
    if role == "train":
        _warn_minority_colour([paths[i] for i in kept], [r[1] for r in good])
    sizes = np.array([[r[2], r[3]] for r in good], dtype=np.int64).reshape(-1, 2)
    return ScannedImages(paths=[paths[i] for i in kept], labels=[listing.labels[i] for i in kept],
                         sha256=[r[0] for r in good], modes=[r[1] for r in good], sizes=sizes,
                         skipped=skipped, source=listing.source)


def _warn_minority_colour(paths: Sequence[Path], modes: Sequence[str]) -> None:
    """Warn, naming them, when a few colour images make a grayscale set train in colour."""
    colour = [i for i, mode in enumerate(modes) if mode not in GRAYSCALE_MODES]
    if not colour or 2 * len(colour) >= len(modes):
        return
    shown = ", ".join(f"{paths[i]} ({modes[i]})" for i in colour[:5])
    more = f" and {len(colour) - 5} more" if len(colour) > 5 else ""
    log.warning("the model gets 3 channels because %d of %d training images %s in colour: "
                "%s%s; the other %d are grayscale: convert %s to grayscale (or remove %s) "
                "for a 1-channel model", len(colour), len(modes),
                "is" if len(colour) == 1 else "are", shown, more, len(modes) - len(colour),
                "it" if len(colour) == 1 else "them", "it" if len(colour) == 1 else "them")


def choose_channels(modes: Sequence[str]) -> int:
    """1 when every image is grayscale (see :data:`GRAYSCALE_MODES`), else 3."""
    return 1 if modes and all(m in GRAYSCALE_MODES for m in modes) else 3
