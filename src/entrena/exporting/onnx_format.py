"""ONNX: export with ``torch.onnx``'s dynamo exporter, int8 dynamic quantisation, a runner.

The dynamo exporter (``torch.onnx.export(..., dynamo=True)``, the default in torch 2.14)
traces the model with ``torch.export`` and writes ONNX with dynamic ``batch`` and
``sequence`` axes. It emits opset 18 and converts to the opsets its version converter knows
(18 to 25 with onnxscript 0.7); a lower opset is silently left at 18 by the exporter, so the
requested opset is checked before exporting and again in the written file.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from entrena.errors import ConfigError, ModelError

__all__ = ["DEFAULT_OPSET", "supported_opsets", "check_opset", "export_onnx",
           "export_onnx_batched", "quantize_int8", "OnnxRunner", "file_opset"]

DEFAULT_OPSET = 18
"""The dynamo exporter's own opset: no version conversion, runs on ONNX Runtime >= 1.14."""

INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("logits",)


def _versions() -> str:
    parts = []
    for name in ("torch", "onnxscript", "onnx", "onnxruntime"):
        try:
            module = __import__(name)
            parts.append(f"{name} {module.__version__}")
        except ImportError:
            parts.append(f"{name} not installed")
    return ", ".join(parts)


def supported_opsets() -> range:
    """Opsets the installed exporter writes: from its base opset (18) to the highest its
    version converter supports, capped by the installed ``onnx``."""
    low, high = 18, 23
    try:
        from onnxscript.version_converter import _version_converter as vc

        low, high = vc.SUPPORTED_MIN_ONNX_OPSET, vc.SUPPORTED_MAX_ONNX_OPSET
    except (ImportError, AttributeError):
        pass
    try:
        import onnx

        high = min(high, onnx.defs.onnx_opset_version())
    except ImportError:
        pass
    return range(low, high + 1)


def check_opset(opset: int) -> None:
    """Raise unless the installed exporter writes ``opset``.

    Raises:
        ConfigError: Names the installed versions and the range they support.
    """
    allowed = supported_opsets()
    if opset not in allowed:
        raise ConfigError(f"--opset {opset}: the installed ONNX exporter ({_versions()}) writes "
                          f"opsets {allowed.start} to {allowed.stop - 1}; pass --opset between "
                          f"them, or leave it out for opset {DEFAULT_OPSET}")


def file_opset(path: Path) -> int:
    """The default-domain opset a written ONNX file declares."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def export_onnx(model: Any, example: tuple[Any, Any], path: Path, *, opset: int,
                length_limit: int) -> dict[str, Any]:
    """Write ``model`` as one ONNX file with dynamic batch and sequence axes.

    Args:
        model: The classifier in eval mode: ``(input_ids (B, T), attention_mask (B, T))`` to
            logits (B, C).
        example: Example ``(input_ids, attention_mask)`` tensors, B >= 2 and T >= 2 (so that
            neither axis is specialised to 1), with some padding.
        path: The ``.onnx`` file to write (weights inside it, no external data file).
        opset: ONNX opset; checked with :func:`check_opset`.
        length_limit: The longest sequence the model accepts (upper bound of the sequence axis).

    Returns:
        ``{"file", "program": "onnx", "opset", "exporter", "dynamic_axes"}``.

    Raises:
        ConfigError: The opset is not supported, or the exporter wrote another one.
    """
    import torch

    check_opset(opset)
    batch = torch.export.Dim("batch")
    sequence = torch.export.Dim("sequence", max=length_limit)
    dynamic = {"input_ids": {0: batch, 1: sequence}, "attention_mask": {0: batch, 1: sequence}}
    # The exporter prints progress on stdout, which `--json` keeps for the JSON document.
    with contextlib.redirect_stdout(sys.stderr), _quiet("onnxscript", "torch.onnx"), \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*axis name.*will not be used")
        program = torch.onnx.export(model, tuple(example), None, dynamo=True,
                                    input_names=list(INPUT_NAMES),
                                    output_names=list(OUTPUT_NAMES), opset_version=opset,
                                    dynamic_shapes=dynamic, external_data=False, verbose=False)
        program.save(str(path), external_data=False)
    written = file_opset(path)
    if written != opset:
        raise ConfigError(f"--opset {opset}: the installed ONNX exporter ({_versions()}) wrote "
                          f"opset {written} instead; pass --opset {written} or leave it out")
    return {"file": path.name, "program": "onnx", "opset": written,
            "exporter": f"torch.onnx.export(dynamo=True), torch {torch.__version__}",
            "dynamic_axes": {"input_ids": ["batch", "sequence"],
                             "attention_mask": ["batch", "sequence"], "logits": ["batch"]}}


def export_onnx_batched(model: Any, inputs: dict[str, Any], path: Path, *,
                        opset: int) -> dict[str, Any]:
    """Write a model whose inputs vary only in batch size as one ONNX file (the batch axis,
    axis 0 of every input, dynamic; the other axes fixed).

    Args:
        model: The classifier in eval mode; ``model(**inputs)`` returns logits (B, C).
        inputs: Example inputs by name, in ``forward`` order (``features`` (B, F) float32 …),
            B >= 2 so that the batch axis is not specialised to 1.
        path: The ``.onnx`` file to write (weights inside it).
        opset: ONNX opset; checked with :func:`check_opset`.

    Returns:
        ``{"file", "program": "onnx", "opset", "exporter", "dynamic_axes"}``.

    Raises:
        ConfigError: The opset is not supported, or the exporter wrote another one.
    """
    import torch

    check_opset(opset)
    batch = torch.export.Dim("batch")
    dynamic = {name: {0: batch} for name in inputs}
    with contextlib.redirect_stdout(sys.stderr), _quiet("onnxscript", "torch.onnx"), \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*axis name.*will not be used")
        program = torch.onnx.export(model, (), None, kwargs=dict(inputs), dynamo=True,
                                    input_names=list(inputs), output_names=list(OUTPUT_NAMES),
                                    opset_version=opset, dynamic_shapes=dynamic,
                                    external_data=False, verbose=False)
        program.save(str(path), external_data=False)
    written = file_opset(path)
    if written != opset:
        raise ConfigError(f"--opset {opset}: the installed ONNX exporter ({_versions()}) wrote "
                          f"opset {written} instead; pass --opset {written} or leave it out")
    return {"file": path.name, "program": "onnx", "opset": written,
            "exporter": f"torch.onnx.export(dynamo=True), torch {torch.__version__}",
            "dynamic_axes": {**{name: ["batch"] for name in inputs}, "logits": ["batch"]}}


def quantize_int8(source: Path, target: Path) -> dict[str, Any]:
    """ONNX Runtime dynamic quantisation: int8 weights, activations quantised on the fly.

    MatMul, Gemm and Gather (the embedding tables) are quantised, with one scale per output
    channel: on the demo's MiniLM, one scale per tensor changed 2.6% of the test labels
    (per channel: 0.3%). An opset-23+ ``Attention`` node is left in float (ONNX Runtime's
    quantiser would turn it into a ``QAttention`` it cannot load).

    Returns:
        ``{"quantization": {...}}`` describing what was done.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    op_types = ["MatMul", "Gemm", "Gather"]
    with _quiet("root"):  # "Please consider to run pre-processing …" goes to the root logger
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8,
                         op_types_to_quantize=op_types, per_channel=True)
    return {"quantization": {"method": "onnxruntime.quantization.quantize_dynamic",
                             "weight_type": "int8", "per_channel": True, "op_types": op_types}}


@contextlib.contextmanager
def _quiet(*loggers: str) -> Any:
    saved = []
    for name in loggers:
        logger = logging.getLogger() if name == "root" else logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


class OnnxRunner:
    """An ONNX file run by ONNX Runtime on CPU, as a :class:`~entrena.exporting.inference.Runner`.

    Args:
        path: The ``.onnx`` file.
        threads: Intra-op threads (``None``: ONNX Runtime's default, all physical cores).
    """

    name = "onnxruntime"

    def __init__(self, path: Path, threads: int | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(path), options,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime's errors share no base class
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise ModelError(f"{path}: ONNX Runtime cannot load this file ({type(exc).__name__}: "
                             f"{first}); it is damaged or not an ONNX model: export it again "
                             "with: entrena export RUN") from None
        self.input_names = [i.name for i in self.session.get_inputs()]

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        """Logits (B, C) for the model's inputs in order (text: ``input_ids``,
        ``attention_mask``; a table: ``features`` (B, F) float32)."""
        feeds = dict(zip(self.input_names, inputs, strict=True))
        return self.session.run(None, feeds)[0]
