"""TorchScript (``torch.jit.trace``), and a ``torch.export`` program when TorchScript fails.

``torch.jit`` is deprecated in torch 2.14 (it warns) but still traces and loads; a trace
records one path through Python control flow, so the parity check runs the traced module on
other batch shapes. When tracing raises, or the trace fails parity, the exporter falls back to
a ``torch.export`` program (``model.pt2``, dynamic batch and sequence axes) and says so in
``export.json`` (``program``, ``fallback_reason``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from entrena.exporting.inference import TorchRunner

__all__ = ["export_torchscript", "export_program", "load_torch_runner"]


@contextlib.contextmanager
def _no_jit_warnings() -> Iterator[None]:
    """Silence torch.jit's deprecation and tracer warnings (parity checks the result)."""
    with warnings.catch_warnings():
        _filter_jit_warnings()
        yield


def _filter_jit_warnings() -> None:
    warnings.filterwarnings("ignore", message=r".*torch\.jit.*deprecated", category=FutureWarning)
    warnings.filterwarnings("ignore", message=r".*is deprecated.*", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)  # "trace might not generalize"
    try:
        import torch

        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    except (ImportError, AttributeError):
        pass


def export_torchscript(model: Any, example: tuple[Any, Any], path: Path, **_: Any
                       ) -> dict[str, Any]:
    """Trace ``model`` on ``example`` and save it with ``torch.jit.save`` (``model.pt``).

    Returns:
        ``{"file", "program": "torchscript", "exporter"}``.
    """
    import torch

    with _no_jit_warnings():
        traced = torch.jit.trace(model, tuple(example), check_trace=False)
        torch.jit.save(traced, str(path))
    return {"file": path.name, "program": "torchscript",
            "exporter": f"torch.jit.trace, torch {torch.__version__}"}


def export_program(model: Any, example: tuple[Any, Any], path: Path, *, length_limit: int,
                   **_: Any) -> dict[str, Any]:
    """Export ``model`` with ``torch.export`` (dynamic batch and sequence) to ``model.pt2``.

    Returns:
        ``{"file", "program": "torch.export", "exporter"}``.
    """
    import torch

    batch = torch.export.Dim("batch")
    sequence = torch.export.Dim("sequence", max=length_limit)
    dynamic = {"input_ids": {0: batch, 1: sequence}, "attention_mask": {0: batch, 1: sequence}}
    program = torch.export.export(model, tuple(example), dynamic_shapes=dynamic, strict=False)
    torch.export.save(program, str(path))
    return {"file": path.name, "program": "torch.export",
            "exporter": f"torch.export.export(strict=False), torch {torch.__version__}"}


def load_torch_runner(path: Path, program: str, threads: int | None = None) -> TorchRunner:
    """Load a ``model.pt`` (TorchScript) or ``model.pt2`` (``torch.export``) as a runner."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    if program == "torch.export":
        return TorchRunner(torch.export.load(str(path)).module(), "torch.export")
    with _no_jit_warnings():
        module = torch.jit.load(str(path), map_location="cpu")
    module.eval()
    return TorchRunner(module, "torchscript")
