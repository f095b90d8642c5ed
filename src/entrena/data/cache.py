"""The prepared-data cache: checked, split, encoded examples stored once, shared by runs.

An entry is a folder ``<cache root>/prepared/<key>/`` named by a fingerprint of everything the
result depends on (the data files' bytes, the data config, the split seed, the tokenizer, the
length cap: see ``entrena.api.preparing``). It holds one Arrow file per split (``row``,
``label``, ``text`` and ``input_ids`` columns; see :mod:`entrena.data.encoding`) and
``meta.json`` (labels, the data report). An entry is written into a temporary folder and
renamed into place, so a reader finds a whole entry or none; a damaged one is rebuilt.

The cache root is ``data.cache_dir``, else ``$ENTRENA_CACHE_DIR``, else
``$XDG_CACHE_HOME/entrena`` (``~/.cache/entrena``). Downloads of remote data live beside the
entries, in ``downloads/``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from entrena.data.encoding import (
    BLOCK_ROWS,
    EncodedTexts,
    ends_with_special,
    numpy_view,
    read_encoded,
    tokenize_block,
    write_encoded,
)
from entrena.data.remote import default_cache_dir
from entrena.data.splits import Split, TextColumn

__all__ = ["CACHE_FORMAT", "default_cache_dir", "CachedSplits", "PreparedCache", "EntryWriter"]

log = logging.getLogger("entrena")

CACHE_FORMAT = 3
"""Bumped whenever what an entry holds, or how checks decide, changes."""
COLUMNS = {"row": pa.int64(), "label": pa.int64(), "text": pa.large_string()}


@dataclass
class CachedSplits:
    """An entry read back: splits with memory-mapped texts and ids.

    Attributes:
        splits: ``{role: Split}`` (texts are :class:`~entrena.data.splits.TextColumn`).
        encoded: ``{role: EncodedTexts}``.
        meta: The entry's ``meta.json``.
        path: The entry folder.
    """

    splits: dict[str, Split]
    encoded: dict[str, EncodedTexts]
    meta: dict[str, Any]
    path: Path


def _read_split(path: Path) -> tuple[Split, EncodedTexts]:
    encoded, table = read_encoded(path)
    labels = numpy_view(table.column("label"))
    split = Split(TextColumn(table.column("text")),
                  labels if labels.dtype.kind == "f" else labels.astype(np.int64, copy=False),
                  numpy_view(table.column("row")).astype(np.int64, copy=False))
    return split, encoded


class PreparedCache:
    """The ``prepared/`` folder of a cache root.

    Args:
        root: The cache root (see :func:`default_cache_dir`).
    """

    def __init__(self, root: Path):
        self.root = Path(root)
        self.folder = self.root / "prepared"

    def entry(self, key: str) -> Path:
        return self.folder / key

    def load(self, key: str) -> CachedSplits | None:
        """The entry under ``key``, or ``None`` when there is none (a damaged one is removed)."""
        path = self.entry(key)
        meta_file = path / "meta.json"
        if not meta_file.is_file():
            return None
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
            if meta.get("format") != CACHE_FORMAT:
                raise ValueError(f"format {meta.get('format')}")
            splits, encoded = {}, {}
            for role in meta["roles"]:
                splits[role], encoded[role] = _read_split(path / f"{role}.arrow")
                if len(splits[role]) != meta["rows"][role]:
                    raise ValueError(f"{role}: {len(splits[role])} rows, meta says "
                                     f"{meta['rows'][role]}")
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
            log.warning("prepared-data cache entry %s is damaged (%s); rebuilding it", path, exc)
            shutil.rmtree(path, ignore_errors=True)
            return None
        return CachedSplits(splits, encoded, meta, path)

    def writer(self, key: str) -> EntryWriter:
        """An :class:`EntryWriter` for a new entry under ``key``."""
        return EntryWriter(self, key)


class EntryWriter:
    """Builds one entry in a temporary folder; :meth:`publish` renames it into place.

    If the cache root cannot be written, the entry goes to a temporary folder outside it
    (used for this process only, with a warning).
    """

    def __init__(self, cache: PreparedCache, key: str):
        self.cache, self.key = cache, key
        self.publishable = True
        try:
            cache.folder.mkdir(parents=True, exist_ok=True)
            self.path = Path(tempfile.mkdtemp(dir=cache.folder, prefix=f".{key}."))
        except OSError as exc:
            log.warning("cannot write the prepared-data cache in %s (%s); nothing will be "
                        "cached; set data.cache_dir or ENTRENA_CACHE_DIR to a writable folder",
                        cache.folder, exc)
            self.path = Path(tempfile.mkdtemp(prefix="entrena-prepared-"))
            self.publishable = False
        self.roles: list[str] = []
        self.rows: dict[str, int] = {}

    def write_split(self, role: str, split: Split, tokenizer: Any, length_cap: int,
                    on_block: Any = None) -> tuple[Split, EncodedTexts]:
        """Tokenize ``split`` block by block into ``<role>.arrow`` and map it back.

        Args:
            on_block: Called with the number of rows done after each block (progress).
        """
        keep_last = ends_with_special(tokenizer)
        texts = split.texts

        def blocks() -> Iterator[dict[str, Any]]:
            for start in range(0, len(split), BLOCK_ROWS):
                stop = min(len(split), start + BLOCK_ROWS)
                block_texts = (texts.array.slice(start, stop - start)
                               if isinstance(texts, TextColumn)
                               else pa.array(list(texts[start:stop]), type=pa.large_string()))
                if isinstance(block_texts, pa.ChunkedArray):
                    block_texts = block_texts.combine_chunks()
                flat, offsets = tokenize_block(block_texts.to_pylist(), tokenizer, length_cap)
                yield {"row": split.row_ids[start:stop], "label": split.labels[start:stop],
                       "text": block_texts, "flat": flat, "offsets": offsets}
                if on_block is not None:
                    on_block(stop)

        numbers = np.asarray(split.labels).dtype.kind == "f"  # regression targets
        write_encoded(self.path / f"{role}.arrow", blocks(), keep_last=keep_last,
                      columns={**COLUMNS, "label": pa.float64()} if numbers else COLUMNS)
        self.roles.append(role)
        self.rows[role] = len(split)
        return _read_split(self.path / f"{role}.arrow")

    def publish(self, meta: dict[str, Any]) -> Path:
        """Write ``meta.json`` and move the entry into place; returns its folder."""
        meta = {**meta, "format": CACHE_FORMAT, "roles": self.roles, "rows": self.rows}
        (self.path / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n",
                                             encoding="utf-8")
        if not self.publishable:  # used by this process only (its files stay mapped)
            shutil.rmtree(self.path, ignore_errors=True)
            return self.path
        final = self.cache.entry(self.key)
        try:
            os.rename(self.path, final)
        except OSError:  # another process published the same entry first: same content
            shutil.rmtree(self.path, ignore_errors=True)
            return final
        return final

    def abort(self) -> None:
        """Delete the unfinished entry."""
        shutil.rmtree(self.path, ignore_errors=True)
