"""The efficiency monitor: where a step's time goes, how much of the device is used.

Per step it adds the useful FLOPs of the batch (the planner's per-sample count at each
example's real length, padding excluded) and nothing else; the loop already times data
(``state.data_wait_s``) and steps (``state.train_time_s``) and counts real and padded tokens.
Every ``every_steps`` optimizer steps it reads memory, CPU and (via NVML) GPU utilisation and
emits a window record. No device synchronisation is added.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from entrena.callbacks.diagnosis import window_findings
from entrena.core.callback import Callback
from entrena.core.state import TrainState

__all__ = ["EfficiencyMonitor", "useful_flops"]

log = logging.getLogger("entrena")

Emit = Callable[..., None]
"""``emit(record_type, state, **fields)``: e.g. ``EventLog.write``."""


def useful_flops(lengths: np.ndarray, formula: tuple[float, float, float]) -> float:
    """Training FLOPs of examples of real ``lengths`` (tokens): ``Σ c + a·T + b·T²``.

    Args:
        lengths: Real (unpadded) token lengths, shape (B,).
        formula: ``(constant, per_token, per_token_squared)`` from the planner's profile.
    """
    c, a, b = formula
    t = lengths.astype(np.float64)
    return float(len(t) * c + a * t.sum() + b * (t * t).sum())


class _Nvml:
    """GPU utilisation and memory through NVML (``nvidia-ml-py``), when present."""

    def __init__(self, index: int = 0):
        self.handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.pynvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001 - no NVML, no GPU figures
            self.handle = None

    def read(self) -> dict[str, float]:
        if self.handle is None:
            return {}
        try:
            util = self.pynvml.nvmlDeviceGetUtilizationRates(self.handle)
            memory = self.pynvml.nvmlDeviceGetMemoryInfo(self.handle)
            return {"gpu_utilisation": util.gpu / 100, "gpu_memory_used_bytes": int(memory.used)}
        except Exception:  # noqa: BLE001
            return {}


class EfficiencyMonitor(Callback):
    """Data wait vs compute, real vs padded throughput, MFU, memory, CPU/GPU utilisation.

    Args:
        lengths: Real token length of each training example (truncated), shape (N,).
        flops_formula: The planner's ``(constant, per_token, per_token_squared)`` training
            FLOPs per sample, or ``None`` (no MFU).
        peak_flops_per_s: The device's peak for the precision (GPU: catalog; CPU: measured
            matmul peak), or ``None``.
        peak_source: Where the peak comes from.
        device: ``"cpu"`` or ``"cuda"``.
        threads: CPU threads torch uses.
        memory_capacity_bytes: The device's memory (GPU) or the machine's RAM.
        peak_memory: Returns the peak memory so far (bytes) or ``None``.
        memory_now: Returns the memory in use now (bytes: CPU resident set, CUDA allocated)
            or ``None``; recorded beside the peak so a climb (growth) tells apart from a
            high-water mark set once by the longest batch.
        every_steps: Window length in optimizer steps.
        emit: Writes a record (``EventLog.write``), or ``None``.
        persist_windows: Consecutive windows a condition must hold before a live warning.
        cores: Physical cores of the machine.
        nvml_every_s: Read NVML at most this often (a read can take milliseconds, more under
            a sandboxed kernel).
    """

    def __init__(self, *, lengths: np.ndarray, flops_formula: tuple[float, float, float] | None,
                 peak_flops_per_s: float | None, peak_source: str, device: str, threads: int,
                 memory_capacity_bytes: int | None, peak_memory: Callable[[], int | None],
                 memory_now: Callable[[], int | None] | None = None, every_steps: int = 10,
                 emit: Emit | None = None, persist_windows: int = 3,
                 cores: int | None = None, nvml_every_s: float = 5.0):
        self.lengths = np.asarray(lengths)
        self.formula = flops_formula
        self.peak = peak_flops_per_s
        self.peak_source = peak_source
        self.device = device
        self.threads = threads
        self.cores = cores
        self.capacity = memory_capacity_bytes
        self.peak_memory = peak_memory
        self.memory_now = memory_now
        self.every_steps = max(1, every_steps)
        self.emit = emit
        self.persist = persist_windows
        self.flops = 0.0  # useful FLOPs over the whole fit (resumable)
        self.own_time_s = 0.0  # this session's time inside on_batch_end
        self.nvml_every_s = nvml_every_s
        self._nvml_last = -float("inf")
        self._nvml = _Nvml() if device == "cuda" else None
        self._gpu_util: list[float] = []
        self._window: tuple[float, float, int, int, int, float] = (0, 0, 0, 0, 0, 0)
        self._streak: dict[str, int] = {}
        self._warned: set[str] = set()
        self._cpu_start: tuple[float, float] = (0.0, 0.0)
        self._process: Any = None
        self._train_time_start = 0.0

    # --- events --------------------------------------------------------------------------
    def on_fit_start(self, state: TrainState) -> None:
        import psutil

        self._process = psutil.Process()
        self._cpu_start = (self._cpu_seconds(), time.perf_counter())
        self._window = self._mark(state)
        self._train_time_start = state.train_time_s

    def on_batch_end(self, state: TrainState) -> None:
        started = time.perf_counter()
        if self.formula is not None and state.batch_indices:
            self.flops += useful_flops(self.lengths[state.batch_indices], self.formula)
        if state.extras.get("last_micro", True) and state.step % self.every_steps == 0:
            self._end_window(state)
        self.own_time_s += time.perf_counter() - started

    def on_fit_end(self, state: TrainState) -> None:
        state.extras["efficiency"] = self.summary(state)

    def state_dict(self) -> dict[str, Any]:
        return {"useful_flops": self.flops}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.flops = float(state.get("useful_flops", 0.0))

    # --- figures -------------------------------------------------------------------------
    def _cpu_seconds(self) -> float:
        times = self._process.cpu_times()
        return float(times.user + times.system)

    def _mark(self, state: TrainState) -> tuple[float, float, int, int, int, float]:
        return (state.train_time_s, state.data_wait_s, state.samples_seen, state.tokens_seen,
                state.padded_tokens_seen, self.flops)

    def _rates(self, time_s: float, wait_s: float, samples: int, tokens: int, padded: int,
               flops: float) -> dict[str, Any]:
        time_s = max(time_s, 1e-9)
        achieved = flops / time_s if self.formula is not None else None
        return {
            "throughput_samples_per_s": samples / time_s,
            "throughput_tokens_per_s": tokens / time_s,
            "throughput_padded_tokens_per_s": padded / time_s,
            "padding_fraction": 1 - tokens / padded if padded else 0.0,
            "data_wait_fraction": wait_s / time_s,
            "achieved_flops_per_s": achieved,
            "mfu": achieved / self.peak if achieved is not None and self.peak else None,
        }

    def _end_window(self, state: TrainState) -> None:
        now = self._mark(state)
        deltas = [b - a for a, b in zip(self._window, now, strict=True)]
        self._window = now
        if deltas[0] <= 0:
            return
        window = self._rates(*deltas)
        window["peak_memory_bytes"] = self.peak_memory()
        window["memory_bytes"] = self.memory_now() if self.memory_now is not None else None
        now_s = time.perf_counter()
        if self._nvml is not None and now_s - self._nvml_last >= self.nvml_every_s:
            self._nvml_last = now_s
            gpu = self._nvml.read()
            if "gpu_utilisation" in gpu:
                self._gpu_util.append(gpu["gpu_utilisation"])
            window.update(gpu)
        state.extras["efficiency_window"] = {"step": state.step, **window}  # for trackers
        if self.emit is not None:
            self.emit("efficiency", state, **window)
        self._live(window, state)

    def _live(self, window: dict[str, Any], state: TrainState) -> None:
        codes = {f["code"]: f for f in window_findings(window)}
        for code in list(self._streak):
            if code not in codes:
                self._streak[code] = 0
        for code, finding in codes.items():
            self._streak[code] = self._streak.get(code, 0) + 1
            if self._streak[code] >= self.persist and code not in self._warned:
                self._warned.add(code)
                log.warning("step %d: %s for %d windows; %s", state.step, finding["message"],
                            self._streak[code], finding["change"])

    def summary(self, state: TrainState) -> dict[str, Any]:
        """``metrics.json``'s ``efficiency`` over the whole fit (resumed sessions included
        for the counters; CPU and GPU utilisation over this session)."""
        result = self._rates(state.train_time_s, state.data_wait_s, state.samples_seen,
                             state.tokens_seen, state.padded_tokens_seen, self.flops)
        peak_memory = self.peak_memory()
        cpu_used = None
        if self._process is not None:
            cpu_s, started = self._cpu_start
            wall = max(time.perf_counter() - started, 1e-9)
            cpu_used = (self._cpu_seconds() - cpu_s) / wall / max(1, self.threads)
        steps = max(1, state.step)
        result.update({
            "useful_flops": self.flops if self.formula is not None else None,
            "useful_flops_per_step": self.flops / steps if self.formula is not None else None,
            "peak_flops_per_s": self.peak,
            "peak_source": self.peak_source,
            "data_wait_s": state.data_wait_s,
            "compute_s": state.train_time_s - state.data_wait_s,
            "peak_memory_bytes": peak_memory,
            "memory_capacity_bytes": self.capacity,
            "memory_share": (peak_memory / self.capacity
                             if peak_memory and self.capacity else None),
            "cpu_utilisation": cpu_used,
            "gpu_utilisation": (float(np.mean(self._gpu_util)) if self._gpu_util else None),
            "threads": self.threads,
            "monitor_time_s": self.own_time_s,
            "monitor_time_fraction": self.own_time_s / max(
                state.train_time_s - self._train_time_start, 1e-9),
            "cores": self.cores,
            "device": self.device,
        })
        return result
