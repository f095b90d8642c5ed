"""Planning: what a run needs (memory, FLOPs, time, cost) on each option, before running it."""

from entrena.planning.memory import MemoryEstimate, largest_batch, training_memory
from entrena.planning.model import ModelProfile, profile_model
from entrena.planning.options import Option, RunShape
from entrena.planning.planner import build_plan, make_plan, plan_document, run_shape
from entrena.planning.recommend import Recommendation, recommend
from entrena.planning.timing import BatchPlan, Calibration, epoch_batches, probe

__all__ = ["BatchPlan", "Calibration", "MemoryEstimate", "ModelProfile", "Option",
           "Recommendation", "RunShape", "build_plan", "epoch_batches", "largest_batch",
           "make_plan", "plan_document", "probe", "profile_model", "recommend",
           "run_shape", "training_memory"]
