"""What ``entrena plan`` and the planning step of ``entrena train`` share: the task's model
profile, the run's shape from the config, and the calibration probe on this machine."""

from __future__ import annotations

from typing import Any

from entrena.config import Config, LoadedConfig
from entrena.hardware.catalog import Catalog
from entrena.hardware.detection import Machine
from entrena.planning.caches import cached_profile
from entrena.planning.llm_profile import llm_run_profile
from entrena.planning.options import RunShape, cpu_peak_flops, peak_for_precision
from entrena.planning.planner import run_shape
from entrena.planning.timing import Calibration
from entrena.tasks.base import PlanningSpec

__all__ = ["model_profile", "run_shape_of", "calibrate", "batch_flops", "device_peak"]


def model_profile(loaded: LoadedConfig, task: Any, spec: PlanningSpec,
                  sources: dict[str, str], prepared: Any, model: Any = None) -> Any:
    """The task's model profile: a sequence model measured on the meta device at three
    lengths (cached: :func:`entrena.planning.caches.cached_profile`); a fixed-size one on a
    copy of ``model`` (default: one the task builds) at one training example; an LLM's
    (``spec.llm``) from the formulas."""
    if spec.llm is not None:
        return llm_run_profile(spec.llm)
    if spec.meta_model is not None:
        return cached_profile(loaded, spec, task)
    from entrena.planning.fixed import profile_fixed

    if model is None:
        model = task.build_model(loaded, sources, prepared)
    batch = spec.example_batch() if spec.example_batch is not None else {}
    return profile_fixed(model, {k: v for k, v in batch.items() if k != "labels"},
                         loss=task.loss)


def run_shape_of(cfg: Config, spec: PlanningSpec, profile: Any) -> RunShape:
    """The run's shape as the config's ``train`` section and the task's lengths give it."""
    t = cfg.train
    return run_shape(
        train_lengths=spec.lengths("train"), eval_lengths=spec.lengths("validation"),
        test_lengths=spec.lengths("test"), profile=profile,
        batch_size=t.batch_size, eval_batch_size=t.eval_batch_size or 2 * t.batch_size,
        precision=t.precision, max_epochs=t.max_epochs, max_steps=t.max_steps,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        evals_per_epoch=t.evals_per_epoch, devices=t.devices, seed=t.seed,
        group_by_length=t.group_by_length, accelerator=t.accelerator, threads=t.num_threads,
        undo_copy=t.divergence_factor is not None, batch_width=spec.batch_width)


def calibrate(model: Any, loaded: LoadedConfig, task: Any, spec: PlanningSpec, profile: Any,
              machine: Machine, catalog: Catalog, device: str, precision: str,
              base_rss: float | None, *, timed: bool = True,
              also_at_tokens: int = 0) -> Calibration:
    """Probe ``model`` on this machine at the task's probe batches
    (:func:`entrena.planning.timing.probe`): the step memory, and with ``timed`` the FLOP
    rate and per-step cost.

    Args:
        base_rss: Resident memory of the process before the model was built, bytes.
        timed: Time the steps (``False``: memory only).
        also_at_tokens: Also measure the memory at this length (tokens), the longest the
            model trains with the unfused attention products
            (:func:`entrena.engine.attention.eager_up_to`; 0: none).
    """
    from entrena.planning.timing import probe

    cfg = loaded.config
    batches = spec.probe_batches(cfg.train.batch_size)
    eval_size = cfg.train.eval_batch_size or 2 * cfg.train.batch_size
    eval_batch = spec.eval_batch(eval_size) if spec.eval_batch is not None else None
    # A fixed-size profile counts one example as one "token" (an LLM's is one median-length
    # example profiled whole), whatever the tensors' shapes.
    flops = [batch_flops(profile, int(b["labels"].shape[0]),
                         int(b["input_ids"].shape[1]) if "input_ids" in b else 1)
             for b in batches]
    peak = device_peak(machine, catalog, cfg.train.num_threads, device, precision)
    # The median and the longest batch: two lengths separate the per-step cost from the FLOP
    # rate. A GPU step is short, so it is timed three times (the fastest counts).
    return probe(model, batches, flops, device=device, precision=precision,
                 repeats=3 if device == "cuda" else 1, peak_flops=peak, base_rss_bytes=base_rss,
                 loss=task.loss, eval_batch=eval_batch, timed=timed,
                 also_at_tokens=also_at_tokens)


def batch_flops(profile: Any, batch_size: float, tokens: float) -> float:
    """Training FLOPs of a batch of ``batch_size`` examples padded to ``tokens`` (a
    fixed-size profile counts one example as one "token", whatever the tensors' shapes)."""
    return batch_size * profile.flops_per_sample(tokens if profile.kind != "fixed" else 1)


def device_peak(machine: Machine, catalog: Catalog, threads: int | None, device: str,
                precision: str) -> float | None:
    """The nominal peak (FLOP/s) of ``device`` at ``precision``: this CPU's for ``threads``
    threads, or the catalog's for this machine's first GPU (``None`` when unknown)."""
    if device == "cpu":
        return cpu_peak_flops(machine, catalog, threads, precision)[0]
    acc = catalog.accelerator_for_device(machine.gpus[0].name) if machine.gpus else None
    return peak_for_precision(acc, precision) if acc else None
