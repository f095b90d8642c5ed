"""A GGUF file read and checked before any heavy work: its header (architecture, metadata,
tensor table) parsed with the standard library, its length compared with what the tensor
table says it holds, and its family compared with what ``transformers`` reads.

The format (llama.cpp's ``docs/gguf.md``, versions 2 and 3): the magic ``GGUF``, a version
(u32), the tensor and key/value counts (u64 each), the key/values (a string key, a u32 type,
the value), the tensor table (name, dimension count, dimensions, ggml type, offset into the
data), then the tensor data from the next multiple of ``general.alignment`` (default 32).
A file cut short (an interrupted download or copy) is told by its length alone: the last
tensor's offset plus its size in bytes is where the file must end.
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from entrena.errors import ConfigError

__all__ = ["GGUF_CAUSAL_ARCHITECTURES", "GGUF_ENCODER_DECODER", "VECTORS", "GgufFacts",
           "check_gguf", "read_gguf_facts"]

GGUF_CAUSAL_ARCHITECTURES = frozenset({
    "llama", "mistral", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "qwen35", "qwen35moe",
    "phi3", "gemma2", "gemma3", "gemma4", "falcon", "bloom", "stablelm", "gpt2", "starcoder2",
    "mamba", "nemotron", "deci", "lfm2", "gpt-oss", "minimax-m2"})
"""The ``general.architecture`` values of decoder-only models that transformers 5.25 reads
from a GGUF file: the keys of ``integrations/ggml.py``'s ``GGUF_CONFIG_MAPPING`` (in
llama.cpp's spelling: ``qwen2moe`` for ``qwen2_moe`` …) and of ``integrations/gguf``'s
``GGUF_ARCHS``, less the encoder-decoders. ``tests/test_llm_sources.py`` compares it with the
installed transformers. (Mistral files usually say ``llama``; transformers reads them as
Llama, the same computation.)"""

GGUF_ENCODER_DECODER = frozenset({"t5", "t5encoder"})
"""Architectures transformers reads from GGUF that are not causal language models."""

VECTORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
"""Small tensors that hold RoPE settings (llama.cpp's converter writes Llama 3's frequency
factors and Phi-3's LongRoPE factors as tensors, not metadata)."""

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_DEFAULT_ALIGNMENT = 32
_MAGIC = b"GGUF"


class _Truncated(Exception):
    """The file ended inside its header."""


@dataclass(frozen=True)
class GgufFacts:
    """What a GGUF file's header says.

    Attributes:
        path: The file.
        version: The GGUF version (2 or 3).
        architecture: ``general.architecture`` (``llama``, ``qwen2``, ``gemma3`` …).
        metadata: Every key/value; an array is kept as its length.
        tensor_count: Tensors in the table.
        size_bytes: The file's length.
        expected_bytes: Where the file must end (the data start plus the last tensor's offset
            and size), or ``None`` when a tensor's ggml type is unknown to the ``gguf``
            package.
        vectors: The :data:`VECTORS` the file has: ``{name: (elements, ggml type, offset
            from the file's start)}``.
    """

    path: Path
    version: int
    architecture: str
    metadata: dict[str, Any] = field(repr=False)
    tensor_count: int
    size_bytes: int
    expected_bytes: int | None
    vectors: dict[str, tuple[int, int, int]] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str | None:
        """``general.name``, when the file has one."""
        value = self.metadata.get("general.name")
        return value if isinstance(value, str) else None

    @property
    def chat_template(self) -> str | None:
        """``tokenizer.chat_template``, when the file has one."""
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None

    def vector(self, name: str) -> list[float] | None:
        """The values of one of the :data:`VECTORS` (float32 in the file), or ``None``."""
        found = self.vectors.get(name)
        if found is None or found[1] != 0:  # ggml type 0: F32
            return None
        count, _, offset = found
        with self.path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(4 * count)
        return list(struct.unpack(f"<{count}f", data)) if len(data) == 4 * count else None


class _Reader:
    """Little-endian reads from a file that raise :class:`_Truncated` at its end."""

    def __init__(self, handle: BinaryIO):
        self.handle = handle

    def take(self, count: int) -> bytes:
        data = self.handle.read(count)
        if len(data) != count:
            raise _Truncated
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.handle.seek(self.unpack("<Q"), 1)

    def value(self, kind: int) -> Any:
        if kind in _SCALAR:
            return self.unpack(_SCALAR[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise ValueError(f"unknown key/value type {kind}")
        item, count = self.unpack("<I"), self.unpack("<Q")
        if item in _SCALAR:
            self.handle.seek(count * struct.calcsize(_SCALAR[item]), 1)
        elif item == _STRING:
            for _ in range(count):
                self.skip_string()
        else:
            for _ in range(count):
                self.value(item)
        return count


def read_gguf_facts(path: Path) -> GgufFacts:
    """Read a GGUF file's header once per process for a file of unchanged size and
    modification time (:func:`_read_facts`)."""
    stat = path.stat()
    return _read_facts(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _read_facts(name: str, size: int, mtime_ns: int) -> GgufFacts:
    """Parse a GGUF file's header (no tensor data is read; a second for a 150,000-token
    vocabulary).

    Args:
        name: The file.
        size: Its length in bytes.
        mtime_ns: Its modification time (part of the memo's key only).

    Returns:
        Its :class:`GgufFacts`.

    Raises:
        ValueError: Not a GGUF file (wrong magic), an unsupported version or value type, or
            the file ends inside its header (the message says ``truncated``).
    """
    path = Path(name)
    with path.open("rb") as handle:
        reader = _Reader(handle)
        try:
            magic = handle.read(4)
            if magic != _MAGIC:
                raise ValueError(f"it does not start with the GGUF magic bytes (found "
                                 f"{magic!r}), so it is not a GGUF file")
            version = reader.unpack("<I")
            if version not in (2, 3):
                raise ValueError(f"it is GGUF version {version}; versions 2 and 3 are read")
            tensor_count, kv_count = reader.unpack("<Q"), reader.unpack("<Q")
            metadata: dict[str, Any] = {}
            for _ in range(kv_count):
                key = reader.string()
                metadata[key] = reader.value(reader.unpack("<I"))
            tensors, vectors = [], {}
            for _ in range(tensor_count):
                tensor = reader.string()
                dims = [reader.unpack("<Q") for _ in range(reader.unpack("<I"))]
                tensors.append((math.prod(dims), reader.unpack("<I"), reader.unpack("<Q")))
                if tensor in VECTORS:
                    vectors[tensor] = tensors[-1]
            header_end = handle.tell()
        except _Truncated:
            raise ValueError(f"truncated: {size:,} bytes, and its header alone is longer (an "
                             f"interrupted download or copy)") from None
    alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT) or _DEFAULT_ALIGNMENT)
    data_start = -(-header_end // alignment) * alignment
    if "general.architecture" not in metadata:
        raise ValueError("its metadata has no general.architecture")
    return GgufFacts(path=path, version=version,
                     architecture=str(metadata["general.architecture"]), metadata=metadata,
                     tensor_count=tensor_count, size_bytes=size,
                     expected_bytes=_expected_bytes(data_start, tensors),
                     vectors={k: (n, kind, data_start + offset)
                              for k, (n, kind, offset) in vectors.items()})


def _expected_bytes(data_start: int, tensors: list[tuple[int, int, int]]) -> int | None:
    """Where the file must end: the data start plus the furthest tensor's offset and size
    (sizes from the ``gguf`` package's ``GGML_QUANT_SIZES``: elements and bytes a block)."""
    if not tensors:
        return data_start
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    end = 0
    for elements, kind, offset in tensors:
        try:
            block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            return None
        end = max(end, offset + elements // block * block_bytes)
    return data_start + end


def check_gguf(path: Path, key: str = "model.name", fix: str | None = None) -> GgufFacts:
    """Read a GGUF file's header and refuse what cannot become a base model, before any
    heavy work: not a GGUF file, cut short, not a causal LM, or a family transformers does
    not read from GGUF.

    Args:
        path: The file.
        key: The config key that named it, for messages.
        fix: How to get a good copy (``ollama pull NAME`` for an Ollama blob); default: copy
            or download it again.

    Returns:
        The file's :class:`GgufFacts`.

    Raises:
        ConfigError: One line naming the file, what is wrong and the fix.
    """
    again = fix or "download or copy it again"
    where = f"{key}: {path}"
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise ConfigError(f"{where} {what}; point {key} to a GGUF model file (.gguf)")
    try:
        facts = read_gguf_facts(path)
    except (ValueError, OSError) as error:
        hint = again if "truncated" in str(error) else \
            "point it to a llama.cpp GGUF model file (or a Hugging Face model folder)"
        raise ConfigError(f"{where}: {error}; {hint}") from None
    if facts.expected_bytes is not None and facts.size_bytes < facts.expected_bytes:
        raise ConfigError(f"{where}: truncated: {facts.size_bytes:,} of "
                          f"{facts.expected_bytes:,} bytes (an interrupted download or copy); "
                          f"{again}")
    arch = facts.architecture
    if arch in GGUF_ENCODER_DECODER:
        raise ConfigError(f"{where}: its architecture is {arch!r}, an encoder-decoder, not a "
                          f"causal language model; llm-sft adapts decoder-only models (Llama, "
                          f"Qwen, Mistral, Gemma, Phi-3 …)")
    if arch not in GGUF_CAUSAL_ARCHITECTURES:
        raise ConfigError(f"{where}: its architecture is {arch!r} (general.architecture), which "
                          f"transformers cannot read from a GGUF file (it reads: "
                          f"{', '.join(sorted(GGUF_CAUSAL_ARCHITECTURES))}); use the model's "
                          f"Hugging Face folder (config.json and safetensors) as {key}")
    return facts
