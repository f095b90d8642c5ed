"""The export formats, registered by name: how each one is written and loaded back.

A format is a list of attempts tried in order: a later attempt runs when an earlier one raises
or fails the parity check (TorchScript falls back to a ``torch.export`` program). Adding a
format is adding an entry to :data:`FORMATS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError, closest_choice
from entrena.exporting import onnx_format, torch_format
from entrena.exporting.inference import Runner

__all__ = ["Attempt", "ExportFormat", "FORMATS", "get_format", "load_runner"]


@dataclass(frozen=True)
class Attempt:
    """One way to write a format.

    Attributes:
        program: What the file holds (``onnx``, ``torchscript``, ``torch.export``).
        file_name: The model file in the bundle.
        export: ``export(model, example, path, *, opset, length_limit) -> info dict``.
    """

    program: str
    file_name: str
    export: Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class ExportFormat:
    """An export format.

    Attributes:
        name: The ``--format`` value.
        attempts: Ways to write it, tried in order.
        quantizations: ``--quantize`` values it supports.
        takes_opset: Whether ``--opset`` applies.
        runs_on: The ``--backend`` of ``entrena predict`` that runs it.
        default_quantization: ``--quantize`` when none is given (the bundle is named after
            it: ``gguf-q8_0``), or ``None``.
    """

    name: str
    attempts: tuple[Attempt, ...]
    quantizations: tuple[str, ...]
    takes_opset: bool
    runs_on: str
    default_quantization: str | None = None


FORMATS: dict[str, ExportFormat] = {
    "onnx": ExportFormat("onnx", (Attempt("onnx", "model.onnx", onnx_format.export_onnx),),
                         quantizations=("int8",), takes_opset=True, runs_on="onnx"),
    "torchscript": ExportFormat(
        "torchscript",
        (Attempt("torchscript", "model.pt", torch_format.export_torchscript),
         Attempt("torch.export", "model.pt2", torch_format.export_program)),
        quantizations=(), takes_opset=False, runs_on="torch"),
    # Written by the task itself (a generative model: merged adapters, no traced graph).
    "gguf": ExportFormat("gguf", (), quantizations=("f16", "q8_0", "q4_k_m"), takes_opset=False,
                         runs_on="llama.cpp", default_quantization="q8_0"),
    "hf": ExportFormat("hf", (), quantizations=(), takes_opset=False, runs_on="torch"),
}


def get_format(name: str) -> ExportFormat:
    """The format called ``name``.

    Raises:
        ConfigError: Unknown name; lists the formats and the closest one.
    """
    if name in FORMATS:
        return FORMATS[name]
    close = closest_choice(name, FORMATS)
    hint = f"; did you mean {close!r}?" if close else ""
    raise ConfigError(f"--format {name!r} is not an export format; available formats are: "
                      f"{', '.join(FORMATS)}{hint}")


def load_runner(bundle: Path, manifest: dict[str, Any], threads: int | None = None) -> Runner:
    """The runner for a bundle's model file (``export.json`` says which file and program)."""
    path = bundle / manifest["file"]
    if manifest.get("program") == "onnx":
        return onnx_format.OnnxRunner(path, threads)
    return torch_format.load_torch_runner(path, manifest.get("program", "torchscript"), threads)
