"""The verbs: one public function per CLI command."""

from entrena.api.chatting import chat
from entrena.api.doctoring import DoctorReport, doctor
from entrena.api.exporting import ExportResult, ParityFailed, export
from entrena.api.launching import LaunchResult, launch
from entrena.api.llm_planning import LlmPlanResult, plan_llm
from entrena.api.planning import PlanResult, plan
from entrena.api.predicting import PredictResult, predict
from entrena.api.preparing import DataCheckFailed, PrepareResult, prepare
from entrena.api.training import TrainResult, train
from entrena.api.tuning import TuneResult, tune

__all__ = ["chat", "DoctorReport", "doctor", "PlanResult", "plan", "LlmPlanResult", "plan_llm",
           "DataCheckFailed", "ExportResult", "ParityFailed", "PredictResult", "PrepareResult",
           "LaunchResult", "launch", "TrainResult", "TuneResult", "export", "predict", "prepare",
           "train", "tune"]
