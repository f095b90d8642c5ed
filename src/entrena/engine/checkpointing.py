"""Resumable checkpoints: what they hold, how they are written, found, verified and rotated.

A checkpoint is two files in the run's ``checkpoints/`` folder::

    step-000120.pt     torch.save of the payload (model, optimizer, scaler, counters,
                       callback states, RNG states), written to a temp file, fsynced, renamed
    step-000120.json   the completion marker, written the same way once the .pt is on disk:
                       its SHA-256 and size, step, epoch, position in the epoch, reason, time,
                       the config hash and the resolved config
    latest.json        a copy of the newest marker (for people and tools), replaced atomically

A ``.pt`` without its marker was cut short by a kill and is ignored. A marker whose file does
not hash to the recorded SHA-256 is "unreadable": the loader warns, renames the file to
``.pt.unreadable`` and takes the previous checkpoint. Retention keeps the newest
``keep_last`` and the one at the best step; ``best.pt`` (written by
:class:`~entrena.callbacks.checkpoint.ModelCheckpoint`) is not a resumable checkpoint and
is never touched here.

torch is imported inside the functions that need it: finding and verifying checkpoints (what
``entrena train`` does before it says "resuming from …") imports only the standard library.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import random
import re
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from entrena.core.files import TEMP_SUFFIX, write_atomic, write_json_atomic
from entrena.errors import ResourceError
from entrena.units import format_bytes

__all__ = ["CheckpointInfo", "CheckpointStore", "FORMAT", "POINTER", "capture_rng",
           "restore_rng", "training_payload", "restore_training", "callback_keys"]

log = logging.getLogger("entrena")

FORMAT = 1
POINTER = "latest.json"
_NAME = re.compile(r"^step-(\d+)\.json$")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint's completion marker says.

    Attributes:
        path: The ``.pt`` file.
        step / epoch / batch_in_epoch: Where training resumes (epoch 0-based).
        saved_at: Unix time the checkpoint was complete.
        reason: Why it was written (``epoch``, ``steps``, ``minutes``, ``SIGTERM`` …).
        sha256 / bytes: Hash and size of the ``.pt`` file.
        config_hash: :func:`~entrena.config.fingerprint.config_hash` of the run's config.
        config: The resolved config the checkpoint was trained with.
    """

    path: Path
    step: int
    epoch: int
    batch_in_epoch: int
    saved_at: float
    reason: str
    sha256: str
    bytes: int
    config_hash: str = ""
    config: dict[str, Any] | None = None

    @classmethod
    def from_marker(cls, marker: Path) -> CheckpointInfo:
        data = json.loads(marker.read_text(encoding="utf-8"))
        return cls(path=marker.with_suffix(".pt"), step=int(data["step"]),
                   epoch=int(data["epoch"]), batch_in_epoch=int(data["batch_in_epoch"]),
                   saved_at=float(data["saved_at"]), reason=str(data.get("reason", "")),
                   sha256=str(data["sha256"]), bytes=int(data["bytes"]),
                   config_hash=str(data.get("config_hash", "")), config=data.get("config"))

    @property
    def marker(self) -> Path:
        return self.path.with_suffix(".json")


class _HashingWriter:
    """A write-only file wrapper that hashes and counts what goes through it."""

    def __init__(self, handle: BinaryIO):
        self.handle = handle
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.bytes += len(data)
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def _write_payload(payload: dict[str, Any], handle: Any) -> None:
    """Serialize ``payload`` into ``handle`` (a seam for tests that simulate a full disk)."""
    import torch

    torch.save(payload, handle)


def payload_bytes(payload: Any) -> int:
    """Bytes of tensor data in a (nested) payload: about the size of its ``torch.save`` file."""
    import torch

    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, dict):
        return sum(payload_bytes(v) for v in payload.values())
    if isinstance(payload, list | tuple):
        return sum(payload_bytes(v) for v in payload)
    return 0


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class CheckpointStore:
    """The resumable checkpoints of one run directory.

    Args:
        directory: The run's ``checkpoints/`` folder (created on the first save).
    """

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    @staticmethod
    def name(step: int) -> str:
        return f"step-{step:06d}.pt"

    def complete(self) -> list[CheckpointInfo]:
        """Checkpoints with a readable completion marker and their file present, newest first."""
        found: list[CheckpointInfo] = []
        if not self.directory.is_dir():
            return found
        for marker in self.directory.iterdir():
            if not _NAME.match(marker.name):
                continue
            try:
                info = CheckpointInfo.from_marker(marker)
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("checkpoint marker %s is unreadable; ignoring it", marker)
                continue
            if info.path.is_file():
                found.append(info)
        return sorted(found, key=lambda i: (i.step, i.saved_at), reverse=True)

    def verify(self, info: CheckpointInfo) -> str | None:
        """``None`` when the file is the one the marker describes, else what is wrong."""
        try:
            size = info.path.stat().st_size
        except OSError as exc:
            return f"cannot read it ({exc.strerror})"
        if size != info.bytes:
            return f"it has {size} bytes, its marker says {info.bytes}"
        if sha256_file(info.path) != info.sha256:
            return "its SHA-256 does not match its marker (the file changed after it was written)"
        return None

    def latest_readable(self) -> CheckpointInfo | None:
        """The newest checkpoint that verifies; unreadable newer ones are set aside, with a
        warning."""
        candidates = self.complete()
        for index, info in enumerate(candidates):
            problem = self.verify(info)
            if problem is None:
                return info
            fallback = (f"using the previous one, {candidates[index + 1].path.name}"
                        if index + 1 < len(candidates) else "no older checkpoint is left")
            log.warning("checkpoint %s is unreadable: %s; %s", info.path, problem, fallback)
            self._set_aside(info)
        return None

    def _set_aside(self, info: CheckpointInfo) -> None:
        try:
            info.marker.unlink(missing_ok=True)
            info.path.replace(info.path.with_name(info.path.name + ".unreadable"))
        except OSError:  # pragma: no cover - best effort; it is ignored from now on anyway
            pass

    def load(self, info: CheckpointInfo) -> dict[str, Any]:
        """The payload of a verified checkpoint, tensors on the CPU."""
        import torch

        return torch.load(info.path, map_location="cpu", weights_only=True)

    def clean(self) -> None:
        """Remove temporary files and ``.pt`` files without a marker (writes cut short)."""
        if not self.directory.is_dir():
            return
        for path in self.directory.iterdir():
            if path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX):
                path.unlink(missing_ok=True)
            elif (path.suffix == ".pt" and path.name.startswith("step-")
                  and not path.with_suffix(".json").exists()):
                path.unlink(missing_ok=True)

    def save(self, payload: dict[str, Any], meta: dict[str, Any], *, keep_last: int | None = None,
             protect_steps: Iterable[int | None] = ()) -> CheckpointInfo:
        """Write a checkpoint atomically, then its marker, the pointer, and apply retention.

        Args:
            payload: What ``torch.save`` writes.
            meta: ``step``, ``epoch``, ``batch_in_epoch``, ``reason``, ``config_hash``,
                ``config`` for the marker.
            keep_last: Keep this many newest checkpoints (``None``: keep all).
            protect_steps: Steps whose checkpoints retention never deletes (the best step).

        Raises:
            ResourceError: The disk is full (or the quota reached); the previous checkpoint
                is intact and the message says how much space the checkpoint needs.
        """
        step = int(meta["step"])
        path = self.directory / self.name(step)
        self.directory.mkdir(parents=True, exist_ok=True)
        needed = payload_bytes(payload)
        free = shutil.disk_usage(self.directory).free
        if free < needed:
            raise self._disk_full(path, needed, free)
        try:
            writer = write_atomic(path, lambda handle: _write_into(payload, handle))
            info = CheckpointInfo(path=path, step=step, epoch=int(meta["epoch"]),
                                  batch_in_epoch=int(meta["batch_in_epoch"]),
                                  saved_at=time.time(), reason=str(meta.get("reason", "")),
                                  sha256=writer.sha256.hexdigest(), bytes=writer.bytes,
                                  config_hash=str(meta.get("config_hash", "")),
                                  config=meta.get("config"))
            marker = {"format": FORMAT, "file": path.name, "step": info.step,
                      "epoch": info.epoch, "batch_in_epoch": info.batch_in_epoch,
                      "saved_at": info.saved_at, "reason": info.reason, "sha256": info.sha256,
                      "bytes": info.bytes, "config_hash": info.config_hash, "config": info.config}
            write_json_atomic(info.marker, marker)
            write_json_atomic(self.directory / POINTER, marker)
        except OSError as exc:
            if path.is_file() and not path.with_suffix(".json").is_file():
                path.unlink(missing_ok=True)  # the file got through, its marker did not
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                path_free = shutil.disk_usage(self.directory).free
                raise self._disk_full(path, needed, path_free) from exc
            raise
        if keep_last is not None:
            self.prune(keep_last, protect_steps)
        return info

    def _disk_full(self, path: Path, needed: int, free: int) -> ResourceError:
        previous = next((i for i in self.complete() if i.path != path), None)
        kept = (f"the previous checkpoint, {previous.path.name} (step {previous.step}), is intact"
                if previous else "no earlier checkpoint exists")
        return ResourceError(
            f"disk full while writing checkpoint {path}: it needs about "
            f"{format_bytes(needed)} ({needed} bytes) and {format_bytes(free)} are free on that "
            f"file system; {kept}. Free some space (or lower train.checkpoint.keep_last) and "
            f"run the same command to resume")

    def prune(self, keep_last: int, protect_steps: Iterable[int | None] = ()) -> list[Path]:
        """Delete all but the newest ``keep_last`` checkpoints and those at ``protect_steps``.

        The marker goes first, so a kill in between leaves an incomplete (ignored) file.

        Returns:
            The deleted ``.pt`` files.
        """
        protected = {s for s in protect_steps if s is not None}
        deleted = []
        for index, info in enumerate(self.complete()):
            if index < keep_last or info.step in protected:
                continue
            info.marker.unlink(missing_ok=True)
            info.path.unlink(missing_ok=True)
            deleted.append(info.path)
        return deleted


def _write_into(payload: dict[str, Any], handle: BinaryIO) -> _HashingWriter:
    writer = _HashingWriter(handle)
    _write_payload(payload, writer)
    return writer


def capture_rng() -> dict[str, Any]:
    """The states of Python's, NumPy's, torch's and (when initialised) CUDA's generators."""
    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": {"bit_generator": numpy_state["bit_generator"],
                  "key": numpy_state["state"]["key"].tolist(),
                  "pos": int(numpy_state["state"]["pos"]),
                  "has_gauss": int(numpy_state["has_gauss"]),
                  "gauss": float(numpy_state["gauss"])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng` returned (CUDA only when both sides have it)."""
    import numpy as np
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy = state["numpy"]
    np.random.set_state({"bit_generator": numpy["bit_generator"],
                         "state": {"key": np.asarray(numpy["key"], dtype=np.uint32),
                                   "pos": numpy["pos"]},
                         "has_gauss": numpy["has_gauss"], "gauss": numpy["gauss"]})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        saved = state["cuda"]
        if len(saved) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(saved)
        else:
            log.warning("the checkpoint has CUDA RNG states for %d devices, this machine has %d; "
                        "CUDA random numbers will differ from an uninterrupted run",
                        len(saved), torch.cuda.device_count())


def callback_keys(callbacks: Sequence[Any]) -> list[tuple[str, Any]]:
    """``(key, callback)``: the class name, with ``#2``, ``#3`` … for repeated classes."""
    seen: dict[str, int] = {}
    keyed = []
    for callback in callbacks:
        name = type(callback).__name__
        seen[name] = seen.get(name, 0) + 1
        keyed.append((name if seen[name] == 1 else f"{name}#{seen[name]}", callback))
    return keyed


def training_payload(state: Any, *, model: Any, optimizer: Any, backend: Any,
                     callbacks: Sequence[Any], config_hash: str) -> dict[str, Any]:
    """Everything a run needs to continue exactly from ``state``.

    Model weights, optimizer state, the gradient scaler's state (``16-mixed``), the loop's
    counters (``TrainState.counters()``: epoch, position in the epoch, step …), every
    callback's ``state_dict()`` (LR scheduler, early stopping, best weights …) and the RNG
    states. The batch order needs no saving: each epoch's plan is a function of seed and epoch.
    """
    return {
        "format": FORMAT,
        "model": getattr(model, "module", model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "precision": getattr(backend, "precision_state_dict", dict)(),
        "counters": state.counters(),
        "callbacks": {key: cb.state_dict() for key, cb in callback_keys(callbacks)},
        "rng": capture_rng(),
        "config_hash": config_hash,
    }


def restore_training(payload: dict[str, Any], state: Any, *, model: Any, optimizer: Any,
                     backend: Any, callbacks: Sequence[Any],
                     on_mismatch: Callable[[str], None] | None = None) -> None:
    """Load a :func:`training_payload` into live objects and count the resume (the RNG states
    are left to the caller: :func:`restore_rng` goes right before the loop starts).

    Args:
        on_mismatch: Called with a message when a callback present now has no saved state.
    """
    getattr(model, "module", model).load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    if payload.get("precision"):
        backend.load_precision_state_dict(payload["precision"])
    state.restore_counters(payload["counters"])
    state.resumes += 1
    saved = payload.get("callbacks", {})
    for key, callback in callback_keys(callbacks):
        if key in saved:
            callback.load_state_dict(saved[key])
        elif on_mismatch is not None:
            on_mismatch(f"the checkpoint has no state for callback {key}; it starts fresh")
