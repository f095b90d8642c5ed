"""Tokenize once, store the token ids in Arrow files, read them back memory-mapped.

Texts are encoded once at the model's longest input. An Arrow IPC file holds one record batch
per block of rows, with the ids as a ``list<int32>`` column; reading it maps the file into
memory (``pyarrow.memory_map``) and wraps each block's flat id buffer and offsets in numpy
without copying, so a million encoded texts open in milliseconds and only the pages a batch
touches are read from disk. :class:`EncodedTexts` indexes across the blocks.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from entrena.core.files import write_json_atomic

__all__ = ["EncodedTexts", "encode_texts", "tokenize_block", "ends_with_special",
           "write_encoded", "read_encoded", "choose_max_length", "tokenizer_fingerprint",
           "TokenizerFacts", "tokenizer_facts", "numpy_view", "BLOCK_ROWS"]

BLOCK_ROWS = 32_768
"""Rows per tokenizer call and per Arrow record batch (bounds memory while encoding)."""


class EncodedTexts:
    """Token ids of N texts (with special tokens), stored as flat blocks.

    Args:
        flat: All ids of one block concatenated, shape (sum of lengths,).
        offsets: Start of each text in ``flat``, shape (n + 1,).
        keep_last: Whether the last token is an end marker (``[SEP]``) to keep when truncating.
    """

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, keep_last: bool):
        self._blocks = [(np.asarray(flat), np.asarray(offsets))]
        self.keep_last = keep_last
        self._init_index()

    @classmethod
    def from_blocks(cls, blocks: Sequence[tuple[np.ndarray, np.ndarray]], keep_last: bool
                    ) -> EncodedTexts:
        """Texts spread over several ``(flat, offsets)`` blocks, in order (no copy)."""
        self = cls.__new__(cls)
        self._blocks = [(np.asarray(f), np.asarray(o)) for f, o in blocks] or [
            (np.zeros(0, np.int32), np.zeros(1, np.int64))]
        self.keep_last = keep_last
        self._init_index()
        return self

    def _init_index(self) -> None:
        sizes = [len(o) - 1 for _, o in self._blocks]
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._lengths: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self._starts[-1])

    def lengths(self, max_length: int | None = None) -> np.ndarray:
        """Token length of each text after truncation to ``max_length``, shape (N,)."""
        if self._lengths is None:
            self._lengths = np.concatenate([np.diff(o) for _, o in self._blocks]).astype(
                np.int64)
        return self._lengths if max_length is None else np.minimum(self._lengths, max_length)

    def get(self, index: int, max_length: int | None = None) -> np.ndarray:
        """Ids of text ``index``, truncated to ``max_length`` keeping the end marker."""
        if len(self._blocks) == 1:
            flat, offsets = self._blocks[0]
            local = index
        else:
            block = int(np.searchsorted(self._starts, index, side="right")) - 1
            flat, offsets = self._blocks[block]
            local = index - int(self._starts[block])
        ids = flat[offsets[local]:offsets[local + 1]]
        if max_length is not None and len(ids) > max_length:
            if self.keep_last:
                ids = np.concatenate([ids[:max_length - 1], ids[-1:]])
            else:
                ids = ids[:max_length]
        return ids

    def subset(self, index: Sequence[int]) -> EncodedTexts:
        """The texts at ``index`` as a new object (copies)."""
        parts = [self.get(i) for i in index]
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


@dataclass(frozen=True)
class TokenizerFacts:
    """What training needs of a tokenizer besides tokenizing (which the cache has done).

    Attributes:
        fingerprint: :func:`tokenizer_fingerprint`.
        vocab_size: ``len(tokenizer)``: the vocabulary with added tokens.
        pad_token_id: The padding id, or ``None`` when the tokenizer has none.
        model_max_length: The tokenizer's longest input in tokens, or ``None`` when it sets
            none (transformers' "very large integer").
    """

    fingerprint: str
    vocab_size: int
    pad_token_id: int | None
    model_max_length: int | None

    @classmethod
    def of(cls, tokenizer: Any) -> TokenizerFacts:
        """The facts of a built tokenizer."""
        limit = getattr(tokenizer, "model_max_length", None)
        pad = getattr(tokenizer, "pad_token_id", None)
        return cls(tokenizer_fingerprint(tokenizer), len(tokenizer),
                   int(pad) if isinstance(pad, int) else None,
                   int(limit) if isinstance(limit, int) and 0 < limit < 2 ** 62 else None)


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".h5",
                    ".msgpack", ".ot", ".index")


def _folder_key(folder: Path) -> str | None:
    """A hash of every non-weight file directly in ``folder`` (names and bytes) and of the
    transformers and tokenizers versions: equal keys load equal tokenizers."""
    from importlib.metadata import PackageNotFoundError, version

    digest = hashlib.sha256()
    try:
        for name in ("transformers", "tokenizers"):
            digest.update(f"{name}={version(name)};".encode())
    except PackageNotFoundError:
        return None
    try:
        files = sorted(p for p in folder.iterdir()
                       if p.is_file() and not p.name.endswith(_WEIGHT_SUFFIXES))
        for path in files:
            digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    except OSError:
        return None
    return digest.hexdigest()[:24]


def tokenizer_facts(source: str, build: Callable[[str], Any], memo_dir: Path | None
                    ) -> tuple[TokenizerFacts, Any]:
    """The :class:`TokenizerFacts` of the tokenizer at ``source``, without building it when
    an earlier call recorded them.

    Building a tokenizer imports transformers' tokenization stack (0.8 s alone on a 2-core
    CPU, much of it shared with the model's imports); a run whose data comes from the cache
    needs only these facts before training, so they are
    kept in ``memo_dir`` (one JSON file per key) for a ``source`` that is a local folder, keyed
    by the folder's non-weight files and the transformers and tokenizers versions. A hub id
    is built every time.

    Args:
        source: A tokenizer folder or hub id.
        build: Builds the tokenizer from ``source`` (called on a miss).
        memo_dir: Where the facts are kept (``<cache root>/tokenizers``), or ``None``.

    Returns:
        ``(facts, tokenizer)``: the tokenizer when it was built, else ``None``. A memo that
        cannot be read or written is ignored.
    """
    folder = Path(source)
    key = _folder_key(folder) if memo_dir is not None and folder.is_dir() else None
    memo = memo_dir / f"{key}.json" if memo_dir is not None and key else None
    if memo is not None and memo.is_file():
        try:
            return TokenizerFacts(**json.loads(memo.read_text(encoding="utf-8"))), None
        except (OSError, ValueError, TypeError):
            pass  # rebuilt and rewritten below
    tokenizer = build(source)
    facts = TokenizerFacts.of(tokenizer)
    if memo is not None:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(memo, asdict(facts), durable=False)
        except OSError:
            pass
    return facts, tokenizer


def ends_with_special(tokenizer: Any) -> bool:
    """Whether the tokenizer ends every text with a special token (``[SEP]``, ``</s>``)."""
    ids = tokenizer("a", truncation=True, max_length=8)["input_ids"]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    return bool(ids) and int(ids[-1]) in special


def tokenize_block(texts: list[str], tokenizer: Any, length_cap: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of ``texts``, truncated at ``length_cap`` (end marker kept by the tokenizer).

    Returns:
        ``(flat, offsets)``: ids concatenated (int32) and the start of each text (int64,
        N + 1 entries).
    """
    if not texts:
        return np.zeros(0, np.int32), np.zeros(1, np.int64)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        ids = _backend_ids(backend, texts, length_cap)
    else:
        ids = tokenizer(texts, truncation=True, max_length=length_cap,
                        return_attention_mask=False, return_token_type_ids=False)["input_ids"]
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids)),
              out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(offsets[-1]))
    return flat, offsets


def _backend_ids(backend: Any, texts: list[str], length_cap: int) -> list[list[int]]:
    """Ids straight from the Rust tokenizer: what ``tokenizer(texts, truncation=True,
    max_length=length_cap)`` returns, about twice as fast (no offsets, no Python wrappers).
    The backend's truncation and padding settings are restored afterwards."""
    truncation, padding = backend.truncation, backend.padding
    backend.enable_truncation(length_cap)
    backend.no_padding()
    try:
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=True)]
    finally:
        if truncation is None:
            backend.no_truncation()
        else:
            backend.enable_truncation(**truncation)
        if padding is not None:
            backend.enable_padding(**{k: v for k, v in padding.items()
                                      if k in ("direction", "pad_id", "pad_type_id",
                                               "pad_token", "length", "pad_to_multiple_of")})


def _id_lists(flat: np.ndarray, offsets: np.ndarray) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat))


def write_encoded(path: Path, blocks: Iterator[dict[str, Any]], *, keep_last: bool,
                  columns: dict[str, pa.DataType] | None = None) -> None:
    """Write encoded blocks to an Arrow IPC file (atomically: temp file, then rename).

    Args:
        path: The target ``.arrow`` file.
        blocks: Dicts with ``flat`` and ``offsets`` (from :func:`tokenize_block`) and one
            array per extra column.
        keep_last: Stored in the schema metadata for :func:`read_encoded`.
        columns: Extra columns and their types (``{"label": pa.int64()}``).
    """
    columns = columns or {}
    schema = pa.schema([*((name, kind) for name, kind in columns.items()),
                        ("input_ids", pa.list_(pa.int32()))],
                       metadata={"keep_last": json.dumps(keep_last)})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for block in blocks:
                arrays = [pa.array(block[name], type=kind) if not isinstance(block[name], pa.Array)
                          else block[name].cast(kind) for name, kind in columns.items()]
                arrays.append(_id_lists(block["flat"], block["offsets"]))
                writer.write_batch(pa.record_batch(arrays, schema=schema))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_encoded(path: Path) -> tuple[EncodedTexts, pa.Table]:
    """Memory-map an Arrow file written by :func:`write_encoded`.

    Returns:
        The encoded texts (numpy views of the mapped file) and the whole table (its other
        columns, also mapped).

    Raises:
        OSError, pyarrow.ArrowInvalid: The file is missing or damaged.
    """
    source = pa.memory_map(str(path), "r")
    reader = pa.ipc.open_file(source)
    table = reader.read_all()
    keep_last = json.loads((table.schema.metadata or {}).get(b"keep_last", b"true"))
    blocks = []
    for chunk in table.column("input_ids").chunks:
        blocks.append((numpy_view(chunk.values), numpy_view(chunk.offsets)))
    return EncodedTexts.from_blocks(blocks, bool(keep_last)), table


_NUMPY_TYPES = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
                "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
                "uint64": np.uint64, "float": np.float32, "double": np.float64}


def numpy_view(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a numeric Arrow array as numpy, without a copy where the array is one
    null-free chunk (a memory-mapped file stays mapped).

    ``pyarrow.Array.to_numpy`` gives the same values but imports pandas (~0.3 s on a 2-core
    CPU), which a run whose data comes from the cache otherwise never needs.

    Args:
        array: A numeric (int, uint, float) array, or a chunked one (its chunks are joined:
            a copy when there are several).

    Returns:
        A 1-D array of the matching numpy dtype (N,); arrays of other types or with nulls go
        through ``to_numpy``.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    dtype = _NUMPY_TYPES.get(str(array.type))
    if dtype is None or array.null_count:
        return array.to_numpy(zero_copy_only=False)
    item = np.dtype(dtype).itemsize
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array),
                         offset=array.offset * item)


def _texts_hash(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


def encode_texts(texts: Sequence[str], tokenizer: Any, length_cap: int,
                 cache_dir: Path | None = None, batch_size: int = BLOCK_ROWS
                 ) -> tuple[EncodedTexts, bool]:
    """Tokenize ``texts`` once (truncated at ``length_cap``), reusing an Arrow file cache.

    Training goes through :mod:`entrena.data.cache` (whole prepared splits); this is for a
    list of texts (inference, the parity check).

    Args:
        texts: The texts.
        tokenizer: A Hugging Face tokenizer (fast ones are much quicker).
        length_cap: Longest sequence kept, normally the model's position limit.
        cache_dir: Folder for ``.arrow`` cache files; ``None`` disables caching.
        batch_size: Texts per tokenizer call.

    Returns:
        The encoded texts and whether they came from the cache.
    """
    keep_last = ends_with_special(tokenizer)
    if cache_dir is None:
        blocks = [tokenize_block(list(texts[s:s + batch_size]), tokenizer, length_cap)
                  for s in range(0, len(texts), batch_size)]
        return EncodedTexts.from_blocks(blocks, keep_last), False
    key = f"{tokenizer_fingerprint(tokenizer)}-{length_cap}-{_texts_hash(texts)}"
    path = cache_dir / f"{key}.arrow"
    if path.is_file():
        try:
            encoded, _ = read_encoded(path)
            return encoded, True
        except (OSError, pa.ArrowException, ValueError):
            pass  # a damaged cache file is rebuilt below

    def blocks_of() -> Iterator[dict[str, Any]]:
        for start in range(0, len(texts), batch_size):
            flat, offsets = tokenize_block(list(texts[start:start + batch_size]), tokenizer,
                                           length_cap)
            yield {"flat": flat, "offsets": offsets}

    write_encoded(path, blocks_of(), keep_last=keep_last)
    encoded, _ = read_encoded(path)
    return encoded, False


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
