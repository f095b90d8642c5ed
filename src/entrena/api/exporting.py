"""``entrena.export``: a deployable bundle from a finished run, with parity and latency."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from entrena.errors import CheckFailed, ConfigError, DataError, closest_choice

__all__ = ["ExportResult", "ParityFailed", "export"]

log = logging.getLogger("entrena")


@dataclass
class ExportResult:
    """What an export wrote.

    Attributes:
        bundle_dir: The bundle folder.
        report: The content of its ``export.json`` (``parity.max_abs_diff``,
            ``parity.label_agreement``, ``parity.passed``, ``latency``, ``size_bytes`` …).
    """

    bundle_dir: Path
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Whether the parity check passed."""
        return bool(self.report.get("parity", {}).get("passed"))


class ParityFailed(CheckFailed):
    """The exported model failed the parity check; the bundle was still written.

    Attributes:
        result: The :class:`ExportResult` (``result.report["parity"]`` says what failed).
    """

    def __init__(self, message: str, result: ExportResult):
        super().__init__(message)
        self.result = result


def _check_options(fmt_name: str, quantize: str | None, opset: int | None) -> Any:
    from entrena.exporting.formats import FORMATS, get_format
    from entrena.exporting.onnx_format import check_opset

    fmt = get_format(fmt_name)
    if quantize is not None and quantize not in fmt.quantizations and fmt.quantizations:
        close = closest_choice(quantize, fmt.quantizations)
        raise ConfigError(f"--quantize {quantize!r} is not a quantisation of --format "
                          f"{fmt.name}; use one of: {', '.join(fmt.quantizations)}"
                          + (f" (did you mean {close!r}?)" if close else ""))
    if quantize is not None and quantize not in fmt.quantizations:
        allowed = [name for name, f in FORMATS.items() if quantize in f.quantizations]
        raise ConfigError(f"--quantize {quantize!r} is not available for --format {fmt.name}; "
                          + (f"use --format {' or '.join(allowed)}" if allowed else
                             "the only quantisation is int8 (ONNX Runtime dynamic quantisation), "
                             "with --format onnx"))
    if opset is not None:
        if not fmt.takes_opset:
            raise ConfigError(f"--opset applies to --format onnx only, not {fmt.name}; "
                              "leave it out")
        check_opset(opset)
    return fmt


def _default_format(run: str | Path) -> str:
    """The run's task's first export format (``onnx`` where the run cannot be read: the
    export then says why, as with any format)."""
    from entrena.errors import EntrenaError
    from entrena.exporting.bundle import locate_run
    from entrena.tasks.registry import get_task, model_files

    try:
        return get_task(locate_run(run, model_files=model_files).config.get("task")
                        ).export_formats[0]
    except EntrenaError:
        return "onnx"


def export(run: str | Path, *, format: str | None = None, quantize: str | None = None,
           opset: int | None = None, output: str | Path | None = None,
           parity_data: str | Path | None = None, atol: float = 1e-4,
           min_label_agreement: float = 0.99, max_accuracy_drop: float = 0.01,
           latency_calls: int = 50, threads: int | None = None,
           parity_prompts: int = 100, ollama: str | None = None) -> ExportResult:
    """Export a finished run's model as a self-contained bundle and check it.

    The bundle holds the model file, the tokenizer, the label map and preprocessing
    (``entrena_model.json``), ``export.json`` (parity, latency, sizes) and ``MODEL_CARD.md``.
    Parity compares the exported model's logits with the PyTorch model's on the run's test
    split (validation when it had none), batched 32 at a time sorted by length and one at a
    time for the first 8 examples.

    Args:
        run: The run directory (``runs/<name>``).
        format: ``onnx`` (dynamo exporter, dynamic batch and sequence axes) or
            ``torchscript`` (``torch.jit.trace``; a ``torch.export`` program when that fails);
            for a chat model (a task whose model generates text) ``gguf`` (llama.cpp, with an Ollama
            ``Modelfile``) or ``hf`` (the merged model as a Hugging Face folder). Default: the
            run's task's first format (``onnx``; ``gguf`` for a chat model).
        quantize: ``"int8"``: ONNX Runtime dynamic quantisation (ONNX only); ``f16``,
            ``q8_0`` (default) or ``q4_k_m`` for ``gguf`` (llama.cpp's quantiser).
        opset: ONNX opset (default 18); must be one the installed exporter writes.
        output: The bundle folder; default ``<run>/export/<format>[-int8]``.
        parity_data: A file to check parity on instead of the run's test split (the run's
            text column; its label column too for accuracy).
        atol: Full precision passes when max |exported − PyTorch| over the logits ≤ this.
        min_label_agreement: int8 passes when labels agree on at least this share …
        max_accuracy_drop: … and accuracy drops by at most this (0.01 = one point).
        latency_calls: Timed calls per engine and batch size (1 and 32).
        threads: CPU threads for PyTorch and ONNX Runtime; default PyTorch's current count.
        parity_prompts: A chat model (``--format gguf`` or ``hf``): held-out prompts whose
            greedy answers are compared (the first of the run's test file).
        ollama: ``gguf``: once the bundle is written, ``ollama create OLLAMA -f Modelfile``
            in it when an ``ollama`` binary is on ``PATH`` (else one line with the command to
            run later); the outcome is ``export.json``'s ``ollama``.

    Returns:
        The :class:`ExportResult`.

    Raises:
        ConfigError: Unknown format, a quantisation or opset the format or the installed
            exporter does not support, a negative ``atol``, ``latency_calls`` below 1, an
            ``ollama`` name without ``--format gguf`` or that Ollama does not take (before
            anything is loaded), a format the run's task does not export to.
        ResourceError: ``--format gguf`` without llama-cpp-python installed.
        DataError: A local ``parity_data`` that does not exist (before the run is read); the
            run has no finished model (the message says what is missing and which
            command makes it), ``output`` is an existing folder that is not a bundle, or the
            parity data cannot be read.
        ParityFailed: The check failed; the bundle and ``export.json`` were written with
            ``parity.passed: false`` (``exc.result`` holds them). A :class:`CheckFailed`
            (exit code 3).
    """
    from entrena.exporting.bundle import ExportRequest, default_bundle_dir, is_bundle, locate_run
    from entrena.exporting.checks import Thresholds
    from entrena.tasks.registry import get_task, model_files
    from entrena.tracking.base import wants_mlflow_model

    if quantize is not None:  # llama.cpp spells them Q8_0, Q4_K_M; ONNX users write INT8
        quantize = quantize.strip().lower()
    fmt = _check_options(format or _default_format(run), quantize, opset)
    quantize = quantize if quantize is not None else fmt.default_quantization
    if ollama is not None:
        from entrena.exporting.ollama import check_ollama_name

        if fmt.name != "gguf":
            raise ConfigError(f"--ollama {ollama}: Ollama runs GGUF files; add --format gguf "
                              f"(or leave --ollama out)")
        check_ollama_name(ollama)
    if parity_prompts < 1:
        raise ConfigError(f"--parity-prompts {parity_prompts}: give at least 1 (50 or more for "
                          "a meaningful agreement)")
    if not atol >= 0:  # NaN too
        raise ConfigError(f"--atol {atol}: the largest allowed difference must be a number >= 0; "
                          "leave it out for 1e-4")
    if latency_calls < 1:
        raise ConfigError(f"--latency-calls {latency_calls}: give at least 1 timed call (the "
                          "default is 50)")
    if parity_data is not None and "://" not in str(parity_data) \
            and not any(c in str(parity_data) for c in "*?[") and not Path(parity_data).exists():
        raise DataError(f"--parity-data {parity_data}: no such file or folder; give an existing "
                        "data file (an image model: also a folder), or leave --parity-data out "
                        "to check parity on the run's test split")
    model_run = locate_run(run, model_files=model_files)
    task = get_task(model_run.config.get("task"))
    if fmt.name not in task.export_formats:
        raise ConfigError(f"--format {fmt.name}: a {task.name} model exports to "
                          f"{' or '.join(task.export_formats)} only; use --format "
                          f"{task.export_formats[0]}")
    destination = Path(output) if output is not None else \
        default_bundle_dir(model_run.paths.root, fmt.name, quantize)
    if destination.exists() and not is_bundle(destination) and (
            not destination.is_dir() or any(destination.iterdir())):
        raise DataError(f"--output {destination} exists and is not an export bundle (no "
                        "export.json); give a new or empty folder (an existing bundle is "
                        "replaced)")

    thresholds = Thresholds(max_abs_diff=atol, min_label_agreement=min_label_agreement,
                            max_accuracy_drop=max_accuracy_drop)
    log.info("exporting %s to %s (%s%s)", model_run.paths.root, destination, fmt.name,
             f", {quantize}" if quantize else "")
    report = task.write_bundle(model_run, ExportRequest(
        format=fmt, quantize=quantize, opset=opset, destination=destination,
        parity_data=parity_data, thresholds=thresholds, latency_calls=latency_calls,
        threads=threads, parity_prompts=parity_prompts, ollama=ollama))
    if ollama is not None:  # a finished GGUF bundle (not created when parity failed)
        from entrena.exporting.ollama import add_bundle_to_ollama

        add_bundle_to_ollama(destination, ollama, report)
    result = ExportResult(destination, report)
    tracking = model_run.config.get("tracking") or {}
    if result.passed and wants_mlflow_model(tracking):  # a failure only warns
        from entrena.api.mlflow_models import register_model

        register_model(destination, model_run.paths.root, tracking)
    if not result.passed:
        parity = report["parity"]
        if "agreement" in parity:  # a chat model: greedy answers compared
            failed = "; ".join(f"{s['from']} → {s['to']} agreement {s['agreement']:.3f}, "
                               f"needs {s['criteria']}" for s in parity.get("steps", [])
                               if not s["passed"])
            raise ParityFailed(
                f"parity check failed ({failed or parity['criteria']}; on "
                f"{parity['prompts']} prompts, exact match "
                f"{parity['exact_match_pytorch']:.3f} (PyTorch) vs "
                f"{parity[f'exact_match_{fmt.name}']:.3f}); the bundle is in {destination} "
                f"with parity.passed: false", result)
        figures = (f"max |Δvalue| {parity['max_abs_diff']:.3g} (target units), max relative "
                   f"{parity['max_rel_diff']:.3g}" if "max_rel_diff" in parity else
                   f"max |Δlogit| {parity['max_abs_diff']:.3g}, label agreement "
                   f"{parity['label_agreement']:.4f}")
        drop = (f", accuracy drop {parity['accuracy_drop']:.4f}" if "accuracy_drop" in parity
                else f", R² drop {parity['r2_drop']:.4f}" if "r2_drop" in parity else "")
        raise ParityFailed(f"parity check failed ({parity['criteria']}; {figures}{drop}); the "
                           f"bundle is in {destination} with parity.passed: false", result)
    return result
