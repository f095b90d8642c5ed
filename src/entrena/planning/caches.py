"""What planning keeps between runs under ``<cache>/profiles/``: the model profile measured
on the meta device (building the model imports most of transformers), the step memory a
probe measured on this machine, and beside it the largest peak a fit of that shape reached.

Every entry is a plain JSON file keyed by a hash of what it depends on; a damaged or
outdated entry is measured again, and a failure to write one is logged at debug level.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
from pathlib import Path
from typing import Any

from entrena.config import LoadedConfig
from entrena.hardware.detection import Machine
from entrena.planning.timing import Calibration
from entrena.tasks.base import PlanningSpec

__all__ = ["FIT_PEAK_FIELD", "cache_root", "cached_profile", "memory_cache_path",
           "cached_memory", "cache_memory", "record_fit_peak"]

log = logging.getLogger("entrena")

_MEMORY_FIELDS = ("train_step_bytes", "eval_step_bytes", "memory_shapes")
_TIMING_FIELD = "memory_step_timing"
"""The entry's ``[flops_per_s, [batch, tokens, seconds]]`` of the measurement's training step
(a CPU's first estimate of a step's time, :attr:`Calibration.source` ``"memory
measurement"``)."""
FIT_PEAK_FIELD = "fit_peak_above_base_bytes"
"""The step-memory cache entry's record of the largest fit's peak above its base, bytes."""


def cache_root(loaded: LoadedConfig) -> Path:
    """The data cache of this config (``data.cache_dir``, else the default)."""
    from entrena.data.cache import default_cache_dir

    configured = getattr(loaded.config.data, "cache_dir", None)
    return default_cache_dir(loaded.resolve_path(configured) if configured else None)


def _profile_cache_key(spec: PlanningSpec) -> str | None:
    """A key for the model profile, or ``None`` when the task gives no shape to key it on."""
    if spec.profile_key is None:
        return None
    versions = [importlib.metadata.version(d) for d in ("torch", "transformers")]
    blob = json.dumps([spec.profile_key, versions, 4], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def cached_profile(loaded: LoadedConfig, spec: PlanningSpec, task: Any) -> Any:
    """The model profile of ``spec.meta_model``, measured on the meta device once and then
    read from the cache (``<cache>/profiles/<key>.json``)."""
    from entrena.planning.model import ModelProfile, profile_model

    key = _profile_cache_key(spec)
    path = cache_root(loaded) / "profiles" / f"{key}.json" if key else None
    if path is not None and path.is_file():
        try:
            return ModelProfile(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            pass  # a damaged or outdated entry is measured again
    assert spec.meta_model is not None
    profile = profile_model(spec.meta_model(), spec.max_length, loss=task.loss)
    if path is not None:
        from entrena.core.files import write_json_atomic

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, profile.as_dict(), durable=False)
        except OSError:
            log.debug("could not cache the model profile in %s", path, exc_info=True)
    return profile


def memory_cache_path(loaded: LoadedConfig, spec: PlanningSpec, machine: Machine,
                      device: str, precision: str, shape: Any,
                      unfused_up_to: int = 0) -> Path | None:
    """Where the step-memory measurement of this model, batch shape, padding multiple,
    precision and machine is kept, with the largest peak a fit of it reached
    (``<cache>/profiles/memory-<key>.json``), or ``None`` for a model the task gives
    no shape key for, or a GPU (whose allocator state other processes share).
    ``unfused_up_to``: the longest length the model trains with the unfused attention
    products (:func:`entrena.engine.attention.eager_up_to`), which the measurement covers."""
    if spec.profile_key is None or device != "cpu":
        return None
    cfg = loaded.config
    eval_lengths = list(spec.lengths("validation"))
    cpu = machine.cpu
    blob = json.dumps([
        1, spec.profile_key, cfg.model.model_dump(mode="json"), precision, device,
        cfg.train.batch_size, cfg.train.eval_batch_size or 2 * cfg.train.batch_size,
        shape.train.longest, max(eval_lengths) if eval_lengths else 0,
        cpu.model, sorted(k for k, v in cpu.features.items() if v), cpu.torch_capability,
        shape.threads, [importlib.metadata.version(d) for d in ("torch", "transformers")],
        unfused_up_to,
        # the batch widths a fit meets shape its heap, so the fit peak kept here too
        getattr(cfg.data, "pad_to_multiple_of", None),
    ], sort_keys=True, default=str)
    key = hashlib.sha256(blob.encode()).hexdigest()[:20]
    return cache_root(loaded) / "profiles" / f"memory-{key}.json"


def cached_memory(path: Path | None, device: str, precision: str,
                  base_rss: float | None) -> Calibration | None:
    """The step memory measured by an earlier run of the same model, batch shape, precision
    and machine (the measurement is the resident set's rise over one step: it does not depend
    on the process's base), or ``None``."""
    if path is None or not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
        timed = saved.get(_TIMING_FIELD)  # [flops_per_s, [B, T, seconds]] of its step
        rate, shape = (float(timed[0]), [float(v) for v in timed[1]]) if timed else (None, None)
        return Calibration(device=device, precision=precision, flops_per_s=rate,
                           step_overhead_s=0.0, probe_s=0.0, steps=1 if shape else 0,
                           shapes=[shape] if shape else [], base_rss_bytes=base_rss,
                           memory_cached=True,
                           source="memory measurement" if rate else "probe",
                           fit_peak_above_base_bytes=saved.get(FIT_PEAK_FIELD),
                           memory_step_s=shape[2] if shape else None,
                           **{k: saved[k] for k in _MEMORY_FIELDS})
    except (OSError, ValueError, TypeError, KeyError):
        return None  # a damaged or outdated entry is measured again


def cache_memory(path: Path | None, memory: Calibration) -> None:
    """Keep the step memory of a fresh measurement at ``path`` (nothing without one)."""
    if path is None or memory.train_step_bytes is None:
        return
    from entrena.core.files import write_json_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {k: getattr(memory, k) for k in _MEMORY_FIELDS}
        if memory.source == "memory measurement" and memory.flops_per_s and memory.shapes:
            entry[_TIMING_FIELD] = [memory.flops_per_s, memory.shapes[0]]
        write_json_atomic(path, entry, durable=False)
    except OSError:
        log.debug("could not cache the step memory in %s", path, exc_info=True)


def record_fit_peak(path: Path, above_base: float) -> bool:
    """Raise the cache entry's ``fit_peak_above_base_bytes`` to ``above_base`` (bytes) when
    larger (the entry written by the probe of the same run; absent: nothing is kept).
    Returns whether the entry holds at least ``above_base`` now."""
    from entrena.core.files import write_json_atomic

    try:
        saved = json.loads(path.read_text())
        if above_base > (saved.get(FIT_PEAK_FIELD) or 0.0):
            write_json_atomic(path, {**saved, FIT_PEAK_FIELD: float(above_base)},
                              durable=False)
        return True
    except (OSError, ValueError, TypeError, AttributeError):
        log.debug("could not keep the fit's peak in %s", path, exc_info=True)
        return False
