"""The verbs: one public function per CLI command."""

from entrena.api.doctoring import DoctorReport, doctor
from entrena.api.exporting import ExportResult, ParityFailed, export
from entrena.api.predicting import PredictResult, predict
from entrena.api.training import TrainResult, train

__all__ = ["DoctorReport", "doctor",
           "ExportResult", "ParityFailed", "PredictResult", "TrainResult", "export", "predict",
           "train"]
