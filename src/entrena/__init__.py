"""entrena: plan, train and ship PyTorch models efficiently on whatever hardware you have.

The verbs are plain functions (``entrena.train(config)`` …). They are imported lazily so that
``import entrena`` and ``entrena --help`` stay fast and never import torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "doctor", "DoctorReport", "plan", "PlanResult",
           "prepare", "PrepareResult", "train", "TrainResult", "export",
           "ExportResult", "predict", "PredictResult", "tune", "TuneResult", "launch",
           "LaunchResult", "chat", "load_config"]

_LAZY = {
    "doctor": ("entrena.api", "doctor"),
    "DoctorReport": ("entrena.api", "DoctorReport"),
    "plan": ("entrena.api", "plan"),
    "PlanResult": ("entrena.api", "PlanResult"),
    "prepare": ("entrena.api", "prepare"),
    "PrepareResult": ("entrena.api", "PrepareResult"),
    "train": ("entrena.api", "train"),
    "TrainResult": ("entrena.api", "TrainResult"),
    "export": ("entrena.api", "export"),
    "ExportResult": ("entrena.api", "ExportResult"),
    "predict": ("entrena.api", "predict"),
    "PredictResult": ("entrena.api", "PredictResult"),
    "tune": ("entrena.api", "tune"),
    "TuneResult": ("entrena.api", "TuneResult"),
    "launch": ("entrena.api", "launch"),
    "LaunchResult": ("entrena.api", "LaunchResult"),
    "chat": ("entrena.api", "chat"),
    "load_config": ("entrena.tasks.registry", "load_config"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'entrena' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
