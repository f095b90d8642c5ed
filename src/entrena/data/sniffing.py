"""What a data file is, before it is parsed: a fingerprint of its bytes, its text encoding,
its delimiter.

Encoding detection, in order: a byte-order mark (UTF-32, UTF-8, UTF-16); UTF-16 without one
(NUL in every other byte of the start); strict UTF-8 over the whole file; otherwise a file
with no valid UTF-8 multi-byte sequence is Windows-1252 (when it holds bytes 0x80–0x9F, which
that code page uses for curly quotes and dashes) or Latin-1. A file that is UTF-8 except for
some bytes, or that holds control bytes no text file has, is refused with the byte offset and
line, since any guess would silently corrupt its text.

Standard library only; the file is read in blocks, never whole.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

from entrena.errors import DataError

__all__ = ["FileScan", "scan_file", "detect_delimiter", "DELIMITERS"]

BLOCK_BYTES = 16 * 2**20
SAMPLE_BYTES = 64 * 2**10
DELIMITERS = (",", "\t", ";", "|")

_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))
_UTF8_MULTIBYTE = re.compile(rb"[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|"
                             rb"[\xe1-\xef][\x80-\xbf]{2}|\xf0[\x90-\xbf][\x80-\xbf]{2}|"
                             rb"[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}")
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1f\x7f]")  # not tab, newline, form feed, return
_CP1252_UNDEFINED = re.compile(rb"[\x81\x8d\x8f\x90\x9d]")
_C1 = re.compile(rb"[\x80-\x9f]")


@dataclass(frozen=True)
class FileScan:
    """One pass over a file's bytes.

    Attributes:
        size_bytes: File size.
        sha256: Hex SHA-256 of the bytes (the cache fingerprint).
        encoding: Python codec to read it with; ``None`` for binary formats (Parquet).
    """

    size_bytes: int
    sha256: str
    encoding: str | None


def scan_file(path: Path, *, name: str, key: str, text: bool, encoding: str = "auto"
              ) -> FileScan:
    """Hash a file and, for text formats, find its encoding.

    Args:
        path: The local file.
        name: What to call it in messages (the path or URL the user gave).
        key: The config key that named it (``data.train``).
        text: Whether the format is text (CSV, TSV, JSONL).
        encoding: ``"auto"`` to detect, or a codec name to trust as given.

    Raises:
        DataError: The file is empty, or its bytes fit no supported encoding (the message
            gives the byte offset and line).
    """
    digest = hashlib.sha256()
    size = 0
    detect = text and encoding == "auto"
    found = encoding if text and not detect else None
    decoder = codecs.getincrementaldecoder("utf-8")()
    error_at: int | None = None
    with path.open("rb") as handle:
        while block := handle.read(BLOCK_BYTES):
            digest.update(block)
            if detect and size == 0:
                found = _bom_or_utf16(block, name, key)
                if found == "utf-8-sig":
                    decoder.decode(codecs.BOM_UTF8)
                    block = block[len(codecs.BOM_UTF8):]
                    size += len(codecs.BOM_UTF8)
            if detect and found in (None, "utf-8-sig") and error_at is None:
                pending = len(decoder.getstate()[0])
                try:
                    decoder.decode(block)
                except UnicodeDecodeError as exc:
                    error_at = size - pending + exc.start
            size += len(block)
        if detect and found in (None, "utf-8-sig") and error_at is None:
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError as exc:
                error_at = size - len(exc.object) + exc.start
    if size == 0:
        raise DataError(f"{key}: {name} is empty (0 bytes); it needs a header line and data "
                        "rows (or JSON lines, or a Parquet table)")
    if detect:
        if error_at is None:
            found = found or "utf-8"
        else:
            found = _single_byte_encoding(path, name, key, error_at)
    return FileScan(size, digest.hexdigest(), found)


def _bom_or_utf16(start: bytes, name: str, key: str) -> str | None:
    for bom, codec in _BOMS:
        if start.startswith(bom):
            return codec
    sample = start[:SAMPLE_BYTES]
    if b"\x00" in sample:
        even, odd = sample[0::2], sample[1::2]
        if odd and odd.count(0) > 0.7 * len(odd) and even.count(0) < 0.1 * len(even):
            return "utf-16-le"
        if even and even.count(0) > 0.7 * len(even) and odd.count(0) < 0.1 * len(odd):
            return "utf-16-be"
        offset = sample.index(b"\x00")
        line = sample[:offset].count(b"\n") + 1
        raise DataError(f"{key}: {name}: NUL byte at byte {offset} (line {line}); this is not "
                        "a text file in a "
                        "supported encoding; give a CSV, TSV, JSONL or Parquet file, or set "
                        "data.encoding")
    return None


def _single_byte_encoding(path: Path, name: str, key: str, error_at: int) -> str:
    """Latin-1 or Windows-1252 for a file that is not UTF-8; refuse a mixed or binary one."""
    multibyte = c1 = False
    bad: tuple[int, str] | None = None
    tail = b""
    position = 0
    with path.open("rb") as handle:
        while block := handle.read(BLOCK_BYTES):
            window = tail + block
            multibyte = multibyte or _UTF8_MULTIBYTE.search(window) is not None
            c1 = c1 or _C1.search(block) is not None
            if bad is None:
                for pattern, what in ((_CONTROL, "a control byte"),
                                      (_CP1252_UNDEFINED, "a byte no text encoding uses here")):
                    match = pattern.search(block)
                    if match and (bad is None or position + match.start() < bad[0]):
                        bad = (position + match.start(), what)
            tail = block[-3:]
            position += len(block)
    if multibyte:
        offset, what = error_at, "not valid UTF-8, though the rest of the file is UTF-8"
    elif bad is not None:
        offset, what = bad
    else:
        return "cp1252" if c1 else "latin-1"
    value, line = _byte_and_line(path, offset)
    raise DataError(f"{key}: {name}: byte {offset} (0x{value:02x}, line {line}) is {what}; "
                    "fix or remove it (re-save the file as UTF-8), or set data.encoding to the "
                    "file's encoding")


def _byte_and_line(path: Path, offset: int) -> tuple[int, int]:
    lines = 1
    position = 0
    with path.open("rb") as handle:
        while block := handle.read(BLOCK_BYTES):
            if position + len(block) > offset:
                lines += block[:offset - position].count(b"\n")
                return block[offset - position], lines
            lines += block.count(b"\n")
            position += len(block)
    return 0, lines


def detect_delimiter(path: Path, encoding: str, *, default: str) -> str:
    """The delimiter that splits the header and the first rows into the same number (≥ 2) of
    fields; ``default`` when none does (a one-column file).

    Args:
        path: A CSV/TSV file.
        encoding: Its codec.
        default: ``","`` for ``.csv``, ``"\\t"`` for ``.tsv`` (tried first, wins ties).
    """
    with path.open("rb") as handle:
        raw = handle.read(SAMPLE_BYTES)
        complete = handle.read(1) == b""
    sample = raw.decode(encoding, errors="ignore")
    if not complete and "\n" in sample:
        sample = sample[:sample.rindex("\n") + 1]
    candidates = (default, *[d for d in DELIMITERS if d != default])
    best, best_score = default, (0.0, 0)
    for delimiter in candidates:
        try:
            rows = [row for row in csv.reader(io.StringIO(sample), delimiter=delimiter) if row]
        except csv.Error:
            continue
        rows = rows[:200] if complete else rows[:200][:-1] or rows[:1]
        if not rows or len(rows[0]) < 2:
            continue
        width = len(rows[0])
        rest = rows[1:]
        share = sum(len(r) == width for r in rest) / len(rest) if rest else 1.0
        if (share, width) > best_score and share >= 0.5:
            best, best_score = delimiter, (share, width)
    return best
