"""Tokenize once, cache the token ids on disk, truncate cheaply.

Texts are encoded once at the model's longest input and stored as a flat ``int32`` array plus
offsets (``.npz``) under a key that hashes the texts, the tokenizer and the length cap, so a
second run (or another ``max_length``) reuses it without tokenizing again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["EncodedTexts", "encode_texts", "choose_max_length", "tokenizer_fingerprint"]


class EncodedTexts:
    """Token ids of N texts (with special tokens), stored flat.

    Args:
        flat: All ids concatenated, shape (sum of lengths,).
        offsets: Start of each text in ``flat``, shape (N + 1,).
        keep_last: Whether the last token is an end marker (``[SEP]``) to keep when truncating.
    """

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, keep_last: bool):
        self.flat = flat
        self.offsets = offsets
        self.keep_last = keep_last

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self, max_length: int | None = None) -> np.ndarray:
        """Token length of each text after truncation to ``max_length``, shape (N,)."""
        lengths = np.diff(self.offsets)
        return lengths if max_length is None else np.minimum(lengths, max_length)

    def get(self, index: int, max_length: int | None = None) -> np.ndarray:
        """Ids of text ``index``, truncated to ``max_length`` keeping the end marker."""
        ids = self.flat[self.offsets[index]:self.offsets[index + 1]]
        if max_length is not None and len(ids) > max_length:
            if self.keep_last:
                ids = np.concatenate([ids[:max_length - 1], ids[-1:]])
            else:
                ids = ids[:max_length]
        return ids

    def subset(self, index: Sequence[int]) -> EncodedTexts:
        """The texts at ``index`` as a new object (copies)."""
        parts = [self.flat[self.offsets[i]:self.offsets[i + 1]] for i in index]
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(p) for p in parts])
        flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
        return EncodedTexts(flat, offsets, self.keep_last)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash that changes whenever the tokenizer would produce different ids."""
    digest = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        # Truncation and padding settings change with each call; they are not the tokenizer.
        spec = {k: v for k, v in json.loads(backend.to_str()).items()
                if k not in ("truncation", "padding")}
        digest.update(json.dumps(spec, sort_keys=True).encode())
    else:
        digest.update(repr(sorted(tokenizer.get_vocab().items())).encode())
    return digest.hexdigest()[:16]


def _texts_hash(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


def encode_texts(texts: Sequence[str], tokenizer: Any, length_cap: int,
                 cache_dir: Path | None = None, batch_size: int = 1000) -> tuple[EncodedTexts, bool]:
    """Tokenize ``texts`` once (truncated at ``length_cap``), reusing a disk cache.

    Args:
        texts: The texts.
        tokenizer: A Hugging Face tokenizer (fast ones are much quicker).
        length_cap: Longest sequence kept in the cache, normally the model's position limit.
        cache_dir: Folder for ``.npz`` cache files; ``None`` disables caching.
        batch_size: Texts per tokenizer call.

    Returns:
        The encoded texts and whether they came from the cache.
    """
    key = f"{tokenizer_fingerprint(tokenizer)}-{length_cap}-{_texts_hash(texts)}"
    path = cache_dir / f"{key}.npz" if cache_dir is not None else None
    if path is not None and path.is_file():
        try:
            with np.load(path) as stored:
                return EncodedTexts(stored["flat"], stored["offsets"],
                                    bool(stored["keep_last"])), True
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache file is rebuilt below
    chunks: list[np.ndarray] = []
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start:start + batch_size])
        encoded = tokenizer(batch, truncation=True, max_length=length_cap,
                            return_attention_mask=False, return_token_type_ids=False)
        chunks.extend(np.asarray(ids, dtype=np.int32) for ids in encoded["input_ids"])
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(c) for c in chunks])
    flat = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    keep_last = bool(chunks) and all(int(c[-1]) in special for c in chunks[:50] if len(c))
    result = EncodedTexts(flat, offsets, keep_last)
    if path is not None:
        _save_atomic(path, result)
    return result, False


def _save_atomic(path: Path, encoded: EncodedTexts) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, flat=encoded.flat, offsets=encoded.offsets,
                     keep_last=np.array(encoded.keep_last))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def choose_max_length(lengths: np.ndarray, model_limit: int, quantile: float = 0.95,
                      multiple: int = 8) -> int:
    """The ``auto`` truncation length: a quantile of the token lengths.

    Args:
        lengths: Untruncated (or model-capped) token lengths of the training texts.
        model_limit: The model's longest input (tokens).
        quantile: Share of texts that must fit untruncated.
        multiple: Round up to a multiple of this (friendlier to matrix kernels).

    Returns:
        The length in tokens, between ``multiple`` and ``model_limit``.
    """
    if len(lengths) == 0:
        return min(model_limit, 128)
    value = int(np.ceil(np.quantile(lengths, quantile)))
    value = -(-value // multiple) * multiple
    return int(max(multiple, min(model_limit, value)))
