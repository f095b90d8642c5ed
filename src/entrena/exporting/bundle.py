"""Where a model comes from: a finished run directory or an export bundle.

A bundle (``entrena export``) is a self-contained folder::

    <bundle>/
      model.onnx | model.pt | model.pt2   the exported model (see export.json "file")
      tokenizer.json, tokenizer_config.json   the tokenizer, as training used it
      entrena_model.json                  labels in index order and the preprocessing
                                          (max_length, length_limit, text_column, on_bad_rows)
      export.json                         format, opset, parity, latency, sizes
      MODEL_CARD.md                       task, data, metrics, training time, use and limits

By default it is written to ``<run>/export/<format>[-int8]/``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from entrena.core.files import dumps_strict, plain_mode
from entrena.core.rundir import RunPaths, read_status
from entrena.errors import DataError, ModelError

__all__ = ["MANIFEST_FILE", "CARD_FILE", "META_FILE", "ExportRequest", "Preprocessing", "RunModel",
           "locate_run", "is_bundle", "read_manifest", "default_bundle_dir", "bundle_name",
           "find_run_bundle", "finish_bundle", "staged_bundle", "versions", "parity_source",
           "check_model_files"]

MANIFEST_FILE = "export.json"
CARD_FILE = "MODEL_CARD.md"
META_FILE = "entrena_model.json"  # the same name as in a run's model/ folder


@dataclass
class Preprocessing:
    """How texts become model inputs, the same as in training.

    Attributes:
        labels: Class names in index order.
        max_length: Truncation length in tokens (the run's ``fit.max_length``).
        length_limit: Longest input the model accepts; texts are tokenized at this cap and
            then cut to ``max_length`` keeping the end marker, as training does.
        text_column: The training data's text column (the default input column), or its
            text columns, joined as :func:`entrena.data.text_fields.join_text_columns` does.
        label_column: The training data's label column.
        on_bad_rows: The training policy for empty texts: ``skip`` or ``error``.
    """

    labels: list[str]
    max_length: int
    length_limit: int
    text_column: str | list[str] = "text"
    label_column: str = "label"
    on_bad_rows: str = "skip"

    def to_json(self) -> dict[str, Any]:
        return {"labels": self.labels, "max_length": self.max_length,
                "length_limit": self.length_limit, "text_column": self.text_column,
                "label_column": self.label_column, "on_bad_rows": self.on_bad_rows}


@dataclass
class ExportRequest:
    """What ``entrena export`` asks a task's ``write_bundle`` for (options already checked).

    Attributes:
        format: The :class:`~entrena.exporting.formats.ExportFormat`.
        quantize: ``"int8"`` or ``None``.
        opset: ONNX opset, or ``None`` for the default.
        destination: The bundle folder (replaced if it exists).
        parity_data: A file (or image folder) to check parity on instead of the run's test
            split, or ``None``.
        thresholds: The :class:`~entrena.exporting.checks.Thresholds` parity must meet.
        latency_calls: Timed calls per engine and batch size.
        threads: CPU threads for PyTorch and ONNX Runtime (``None``: PyTorch's current).
        parity_prompts: Held-out prompts a generative model's parity check runs.
        ollama: A GGUF bundle: the model name ``entrena export`` gives ``ollama create``
            once the bundle is written (``None``: none); the task's writer need not read it.
    """

    format: Any
    quantize: str | None
    opset: int | None
    destination: Path
    parity_data: str | Path | None
    thresholds: Any
    latency_calls: int = 50
    threads: int | None = None
    parity_prompts: int = 100
    ollama: str | None = None


@dataclass
class RunModel:
    """A finished run and what it wrote.

    Attributes:
        paths: The run directory's paths.
        meta: ``model/entrena_model.json`` (labels, pooling, max_length, dropout).
        config: The resolved config (``config.yaml``), as a dict.
        metrics: ``metrics.json``.
        data_report: ``data_report.json``.
    """

    paths: RunPaths
    meta: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    data_report: dict[str, Any] = field(default_factory=dict)

    def preprocessing(self, length_limit: int) -> Preprocessing:
        data = self.config.get("data", {})
        return Preprocessing(labels=list(self.meta["labels"]),
                             max_length=int(self.meta["max_length"]), length_limit=length_limit,
                             text_column=data.get("text_column", "text"),
                             label_column=data.get("label_column", "label"),
                             on_bad_rows=data.get("on_bad_rows", "skip"))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _damage(path: Path) -> str | None:
    """What is wrong with a saved model file that cannot be read, or ``None``: a ``.json`` file
    must be a JSON object; a ``.safetensors`` file's header (a little-endian u64 length, then
    JSON) must parse and its tensors' bytes fit in the file. Other files are not checked."""
    try:
        if path.suffix == ".json":
            if not isinstance(json.loads(path.read_text(encoding="utf-8")), dict):
                return "not a JSON object"
        elif path.suffix == ".safetensors":
            size = path.stat().st_size
            with path.open("rb") as handle:
                length = int.from_bytes(handle.read(8), "little")
                if size < 8 or length > size - 8:
                    return f"header of {length} bytes in a file of {size}"
                header = json.loads(handle.read(length))
            ends = [entry["data_offsets"][1] for name, entry in header.items()
                    if name != "__metadata__"]
            if max(ends, default=0) > size - 8 - length:
                return f"cut short: its tensors need {max(ends) + 8 + length} bytes, it has {size}"
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    return None


def check_model_files(folder: Path, names: Sequence[str], fix: str) -> None:
    """Refuse a saved model whose files are damaged (checked before any is loaded).

    Raises:
        ModelError: Names the first damaged file, what is wrong, and ``fix``.
    """
    for name in names:
        problem = _damage(folder / name)
        if problem is not None:
            raise ModelError(f"{folder / name}: the saved model file is damaged ({problem}); "
                             f"{fix}")


def _status(paths: RunPaths) -> str | None:
    status = read_status(paths)
    return status["status"] if status else None


def locate_run(run: str | Path, *, verb: str = "export",
               model_files: Callable[[str | None], Sequence[str]] | None = None) -> RunModel:
    """The finished run at ``run``.

    Args:
        run: The run directory.
        verb: What the caller does with it, for messages (``export``, ``predict with``).
        model_files: Maps the run's ``config.yaml`` ``task`` (``None`` when it has none) to
            the files its ``model/`` folder must hold (the task's ``model_files``); default
            ``entrena_model.json`` alone.

    Raises:
        DataError: ``run`` is not a directory, or holds no finished model; the message says
            what is missing and which command makes it.
        ModelError: A model file is damaged (:func:`check_model_files`).
    """
    paths = RunPaths(Path(run))
    make = f"train it first: entrena train CONFIG --run-dir {paths.root}"
    if not paths.root.is_dir():
        raise DataError(f"{paths.root}: no such run directory; give the folder `entrena train` "
                        f"wrote (runs/<name> by default), or {make}")
    status = _status(paths)
    config: dict[str, Any] = {}
    if paths.config.is_file():
        try:
            config = yaml.safe_load(paths.config.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError:
            config = {}
    required = model_files(config.get("task")) if model_files is not None else (META_FILE,)
    missing = [f"model/{name}" for name in required if not (paths.model / name).is_file()]
    if status != "finished" or missing:
        what = []
        if status != "finished":
            what.append("status.json is missing" if status is None
                        else f"status.json says {status!r}")
        if missing:
            what.append(f"missing {', '.join(missing)}")
        raise DataError(f"{paths.root}: no finished model to {verb} ({'; '.join(what)}); "
                        f"{make}")
    check_model_files(paths.model, required, f"train it again: entrena train CONFIG --run-dir "
                      f"{paths.root} --restart")
    return RunModel(paths, _read_json(paths.model / META_FILE), config,
                    _read_json(paths.metrics), _read_json(paths.data_report))


def parity_source(run: RunModel, parity_data: str | Path | None, what: str) -> tuple[str, str]:
    """Where the parity check reads its examples: ``parity_data``, else the run's test file
    (its validation file, its training file when it had neither), as ``data_report.json``
    names them.

    Args:
        run: The finished run.
        parity_data: ``--parity-data``, or ``None``.
        what: What such a file holds, for messages (``a file with the run's text column``).

    Returns:
        ``(path or URL, dataset name)``: the dataset is the split's role, or the path given.

    Raises:
        DataError: The report names no file, or the run's file is gone (local paths).
    """
    if parity_data is not None:
        return str(parity_data), str(parity_data)
    splits = run.data_report.get("splits", {})
    role = next((r for r in ("test", "validation", "train") if splits.get(r, {}).get("file")),
                None)
    if role is None:
        raise DataError(f"{run.paths.data_report}: names no data file to check parity on; "
                        f"pass --parity-data FILE ({what})")
    path = str(splits[role]["file"])
    if "://" not in path and not Path(path).exists():
        raise DataError(f"{path}: the run's {role} file, which the parity check reads, is no "
                        f"longer there; pass --parity-data FILE ({what})")
    return path, role


def is_bundle(path: str | Path) -> bool:
    """Whether ``path`` is an export bundle (holds ``export.json``)."""
    return (Path(path) / MANIFEST_FILE).is_file()


def read_manifest(bundle: str | Path) -> dict[str, Any]:
    """``export.json`` of a bundle.

    Raises:
        DataError: The file is missing or not JSON.
    """
    path = Path(bundle) / MANIFEST_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{bundle}: not a readable export bundle ({path.name}: "
                        f"{type(exc).__name__}); export one with: entrena export RUN") from None


def bundle_name(fmt: str, quantize: str | None) -> str:
    """``onnx``, ``onnx-int8``, ``torchscript``, ``gguf-q8_0``."""
    return f"{fmt}-{quantize}" if quantize else fmt


def default_bundle_dir(run_dir: Path, fmt: str, quantize: str | None) -> Path:
    """``<run>/export/<format>[-int8]``."""
    return run_dir / "export" / bundle_name(fmt, quantize)


def find_run_bundle(run_dir: Path, fmt: str) -> Path | None:
    """The run's own bundle of format ``fmt`` (full precision first, then int8), if any."""
    root = run_dir / "export"
    if not root.is_dir():
        return None
    candidates = [root / fmt, *sorted(p for p in root.glob(f"{fmt}-*") if p.is_dir())]
    for candidate in candidates:
        if is_bundle(candidate) and read_manifest(candidate).get("format") == fmt:
            return candidate
    return None


@contextlib.contextmanager
def staged_bundle(destination: Path) -> Iterator[Path]:
    """A fresh folder beside ``destination`` to write a bundle in (``finish_bundle`` moves it
    into place); removed when the block raises, so an interrupted or failed export never
    leaves half a bundle."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.tmp-"))
    plain_mode(work, folder=True)
    try:
        yield work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def finish_bundle(work: Path, destination: Path, manifest: dict[str, Any],
                  card: Callable[[dict[str, Any]], str]) -> None:
    """Write ``export.json`` and the model card into the bundle folder ``work`` (its
    ``manifest["size_bytes"]["bundle"]`` counting both files), then move it to ``destination``,
    replacing an older bundle there.

    Args:
        card: Renders ``MODEL_CARD.md`` from the manifest.
    """
    for _ in range(2):  # the bundle size includes export.json and the card themselves
        manifest["size_bytes"]["bundle"] = sum(p.stat().st_size for p in work.rglob("*")
                                               if p.is_file())
        (work / MANIFEST_FILE).write_text(dumps_strict(manifest, indent=2) + "\n",
                                          encoding="utf-8")
        (work / CARD_FILE).write_text(card(manifest), encoding="utf-8")
    if destination.exists():
        shutil.rmtree(destination)
    work.rename(destination)


def versions() -> dict[str, str]:
    """Installed versions of entrena and the libraries a bundle depends on (``export.json``)."""
    import importlib.metadata as md

    out = {}
    for name in ("entrena", "torch", "transformers", "onnx", "onnxruntime", "onnxscript"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out
