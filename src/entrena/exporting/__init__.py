"""Shipping a trained model: export bundles (ONNX, TorchScript, int8) with parity and latency
checks, and batch prediction from a run or a bundle.

Layer: beside ``tuning`` and ``reporting``; imports ``tasks``, ``data``, ``core``, ``errors``
and ``units``, never the engine or ``api``. torch, onnx and onnxruntime are imported inside
functions.
"""

from entrena.exporting.bundle import Preprocessing, RunModel, is_bundle, locate_run
from entrena.exporting.checks import Thresholds, parity_report
from entrena.exporting.formats import FORMATS, ExportFormat, get_format

__all__ = ["FORMATS", "ExportFormat", "Preprocessing", "RunModel", "Thresholds", "get_format",
           "is_bundle", "locate_run", "parity_report"]
