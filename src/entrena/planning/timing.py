"""Time: the epoch's real batches, their FLOPs, and how fast a device turns FLOPs into steps.

A step's time is modelled as ``t = α + F / R``: F the batch's training FLOPs (from
:class:`~entrena.planning.model.ModelProfile` at the batch's padded length), R the achieved
FLOP/s and α a fixed cost per step (optimizer step, framework and launch overheads). On this
machine a short probe (:func:`probe`) measures α and R on real batches of the data; elsewhere
``R = peak × efficiency`` from the catalog and α is unknown (0), so small models on large GPUs
come out optimistic — the plan says so.

Evaluation runs the forward pass only, a third of the training FLOPs (forward 2N, backward 4N
per token: Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from entrena.planning.model import ModelProfile

__all__ = ["BatchPlan", "epoch_batches", "Calibration", "probe", "calibration_from_steps",
           "FORWARD_SHARE"]

FORWARD_SHARE = 1.0 / 3.0
"""Forward FLOPs as a share of training FLOPs (2N of 6N per token; Kaplan et al. 2020)."""


@dataclass(frozen=True)
class BatchPlan:
    """One epoch's batches as the loader will cut them.

    Attributes:
        sizes: Samples per batch, shape (N_batches,).
        tokens: Padded length per batch (its longest member), shape (N_batches,).
        real_tokens: Real (unpadded) tokens in the epoch.
        indices: Example indices of each batch (for building probe batches).
    """

    sizes: np.ndarray
    tokens: np.ndarray
    real_tokens: int
    indices: list[list[int]] = field(default_factory=list, repr=False)

    @property
    def batches(self) -> int:
        return int(len(self.sizes))

    @property
    def samples(self) -> int:
        return int(self.sizes.sum())

    @property
    def longest(self) -> int:
        """The longest padded length of the epoch, tokens (where memory peaks)."""
        return int(self.tokens.max()) if len(self.tokens) else 0

    @property
    def padding_fraction(self) -> float:
        slots = float((self.sizes * self.tokens).sum())
        return 1.0 - self.real_tokens / slots if slots else 0.0

    def flops(self, profile: ModelProfile) -> np.ndarray:
        """Training FLOPs of each batch, shape (N_batches,)."""
        return np.array([int(b) * profile.flops_per_sample(int(t))
                         for b, t in zip(self.sizes, self.tokens, strict=True)], dtype=float)


def epoch_batches(lengths: Sequence[int], batch_size: int, *, seed: int,
                  group_by_length: bool = True, shuffle: bool = True,
                  batch_width: Callable[[int], int] | None = None) -> BatchPlan:
    """The batches of the first epoch, built by the same functions the loader uses.

    Args:
        lengths: Token length of each example after truncation, shape (N,).
        batch_size: Samples per batch.
        seed: ``train.seed`` (the loader shuffles epoch e with ``seed + e``).
        group_by_length: ``train.group_by_length``.
        shuffle: Training order; ``False`` gives the evaluation order (sorted by length).
        batch_width: A batch's padded width from its longest example's length
            (:attr:`~entrena.tasks.base.PlanningSpec.batch_width`); ``None``: that length.

    Returns:
        The :class:`BatchPlan`.
    """
    from entrena.data.batching import group_by_length as grouped
    from entrena.data.batching import random_batches, sequential_batches

    lengths = np.asarray(lengths, dtype=np.int64)
    if not shuffle:
        plan = sequential_batches(lengths, batch_size)
    elif group_by_length:
        plan = grouped(lengths, batch_size, seed)
    else:
        plan = random_batches(len(lengths), batch_size, seed)
    sizes = np.array([len(b) for b in plan], dtype=np.int64)
    width = batch_width or int
    tokens = np.array([width(int(lengths[b].max())) if len(b) else 0 for b in plan],
                      dtype=np.int64)
    return BatchPlan(sizes, tokens, int(lengths.sum()), plan)


@dataclass
class Calibration:
    """What a short real probe, or a fit's first steps, measured on this machine.

    Attributes:
        device: ``cpu`` or ``cuda``.
        precision: The precision probed.
        flops_per_s: Achieved training FLOP/s, R; ``None`` when only memory was measured
            (``entrena train`` times its own first steps instead: :func:`calibration_from_steps`)
            on a GPU; on a CPU the memory measurement's step gives a first R (``source``
            ``"memory measurement"``) until then.
        step_overhead_s: Fixed seconds per step, α (≥ 0).
        probe_s: Wall time of the whole probe, set-up included: the seconds planning cost
            (with the fit's own steps timed, the memory measurement's alone).
        steps: Timed steps.
        shapes: ``[batch_size, tokens, seconds]`` of each timed step.
        peak_flops: The device's nominal peak for the precision, or ``None``.
        base_rss_bytes: Resident memory of the process before the probe (CPU), or ``None``.
        train_step_bytes: Memory one forward and backward pass at the longest training batch
            added (gradients included; :mod:`entrena.planning.memory_probe`), or ``None``.
        eval_step_bytes: Memory one evaluation batch (no gradients) added, or ``None``.
        memory_shapes: ``{"train": [B, T], "eval": [B, T] | None}`` measured, or ``None``.
        source: ``"probe"`` (steps of a copy of the model, untimed warm-up first),
            ``"training steps"`` (the fit's own optimizer steps after its first) or
            ``"memory measurement"`` (R from the one forward and backward pass of the memory
            measurement at the longest batch, α 0: a CPU fit's estimate before its own steps
            are timed, which the catalog's efficiency alone missed by 4x on an Intel Xeon
            held to AVX2).
        memory_step_s: Wall seconds of the memory measurement's forward and backward pass at
            the longest training batch (``shapes[0]`` when ``source`` is the memory
            measurement), or ``None``.
        memory_eval_s: Wall seconds of its evaluation batch, or ``None``.
        memory_cached: The memory figures come from an earlier run's measurement of the
            same model, batch shape, precision and machine (``entrena train``'s cache).
        fit_peak_above_base_bytes: How far above its base the largest earlier fit of that
            model and batch shape on this machine peaked (from the same cache; ``None``:
            no fit recorded yet). The CPU plan's peak is at least the base plus this.
    """

    device: str
    precision: str
    flops_per_s: float | None
    step_overhead_s: float
    probe_s: float
    steps: int
    shapes: list[list[float]]
    peak_flops: float | None = None
    base_rss_bytes: float | None = None
    train_step_bytes: float | None = None
    eval_step_bytes: float | None = None
    memory_shapes: dict[str, Any] | None = None
    source: str = "probe"
    memory_cached: bool = False
    fit_peak_above_base_bytes: float | None = None
    memory_step_s: float | None = None
    memory_eval_s: float | None = None

    @property
    def timed(self) -> bool:
        """Whether steps were timed (else only memory was measured)."""
        return bool(self.flops_per_s)

    def step_time_s(self, flops: np.ndarray | float) -> np.ndarray | float:
        """Predicted seconds of steps of ``flops`` training FLOPs each.

        Raises:
            ValueError: No step was timed.
        """
        if not self.flops_per_s:
            raise ValueError("this calibration measured memory only: no step was timed")
        return self.step_overhead_s + np.asarray(flops) / self.flops_per_s

    @property
    def efficiency(self) -> float | None:
        """Achieved FLOP/s over the nominal peak (MFU), when the peak is known."""
        return (self.flops_per_s / self.peak_flops
                if self.peak_flops and self.flops_per_s else None)

    def with_steps(self, steps: Calibration) -> Calibration:
        """This calibration's memory figures with the timing of ``steps``."""
        return replace(self, flops_per_s=steps.flops_per_s,
                       step_overhead_s=steps.step_overhead_s, steps=steps.steps,
                       shapes=steps.shapes, source=steps.source,
                       peak_flops=steps.peak_flops or self.peak_flops)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "efficiency": self.efficiency}


def _fit_rate(flops: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """Least squares ``seconds = α + flops / R`` with α ≥ 0; returns (α, R)."""
    if len(set(np.round(flops, -3))) >= 2:
        slope, intercept = np.polyfit(flops, seconds, 1)
        if slope > 0 and intercept >= 0:
            return float(intercept), float(1.0 / slope)
    rate = float(flops.sum() / max(seconds.sum(), 1e-12))
    return 0.0, rate


def probe(model: Any, batches: Sequence[dict[str, Any]], flops: Sequence[float], *,
          device: str, precision: str, repeats: int = 1, peak_flops: float | None = None,
          base_rss_bytes: float | None = None, loss: Any = None,
          eval_batch: dict[str, Any] | None = None,
          measure_memory: bool = True, timed: bool = True,
          also_at_tokens: int | None = None) -> Calibration:
    """Time real training steps (forward, backward, AdamW step) on this machine, and first
    measure the memory of a step at the last (longest) batch and of ``eval_batch``
    (:func:`~entrena.planning.memory_probe.measure_step_memory`).

    Each batch first runs once untimed (the first step of a shape pays for kernel selection,
    autotuning and fresh memory: 1.6 s against 0.02 s on an H200), then ``repeats`` timed
    times; the fastest time of each batch is kept (a busy machine only ever adds time). The
    model is trained on its own optimizer and the random number generators are restored
    afterwards: pass a copy of the model the run will train, or a fresh one.

    Args:
        model: A real classifier on ``device`` (its weights change), called as
            ``model(**inputs)``.
        batches: Batches (the model's inputs and ``labels`` (B,)) of at least two sizes in
            FLOPs (text: two lengths; fixed-size inputs: two batch sizes), so the fixed cost
            per step separates from the FLOP rate.
        flops: Training FLOPs of each batch (same order).
        device: ``"cpu"`` or ``"cuda"``.
        precision: Fabric precision (``bf16-mixed`` and ``16-mixed`` run under autocast).
        repeats: Timed steps per batch.
        peak_flops: The device's nominal peak for the precision, for the efficiency figure.
        base_rss_bytes: Resident memory measured before the probe, kept in the result.
        loss: The task's loss (``(outputs, batch) -> (sum, count)``; the mean is trained on);
            default the mean of the outputs.
        eval_batch: The evaluation batch where evaluation memory peaks, or ``None``.
        measure_memory: Measure the step memory (skipped, with ``None`` figures, where the
            resident-memory peak cannot be reset).
        timed: Time steps; ``False`` measures memory only (``flops_per_s`` ``None``):
            ``entrena train`` times its own first steps instead, which train the model.
        also_at_tokens: The memory measurement's second length (``measure_step_memory``'s
            ``also_at_tokens``).

    Returns:
        The :class:`Calibration`.
    """
    import torch

    started = time.perf_counter()
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()

    def step(batch: dict[str, Any]) -> float:
        inputs = {k: v.to(device) for k, v in batch.items() if k != "labels"}
        labels = batch["labels"].to(device)
        if device == "cuda":
            torch.cuda.synchronize()
        begin = time.perf_counter()
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None):
            outputs = model(**inputs)
        if loss is None:
            value = outputs.float().mean()
        else:
            total, count = loss(outputs, {**inputs, "labels": labels})
            value = total / max(1, count)
        value.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - begin

    devices = [torch.cuda.current_device()] if device == "cuda" else []
    memory = None
    with torch.random.fork_rng(devices=devices):
        if measure_memory:
            from entrena.planning.memory_probe import measure_step_memory

            try:
                memory = measure_step_memory(model, batches[-1], eval_batch, device=device,
                                             precision=precision, loss=loss,
                                             also_at_tokens=also_at_tokens)
            except OSError:
                memory = None
        warm: Sequence[dict[str, Any]] = []
        seconds = np.zeros(0)
        if timed:
            # Untimed: the first use of each shape (the memory measurement already ran the
            # last, longest one forward and backward; the first batch's step creates AdamW's
            # states).
            warm = batches[:-1] if memory is not None else batches
            for batch in warm:
                step(batch)
            seconds = np.array([min(step(batch) for _ in range(max(1, repeats)))
                                for batch in batches])
    alpha, rate = (_fit_rate(np.asarray(flops, dtype=float), seconds) if timed
                   else (0.0, None))
    shapes = [[int(b["labels"].shape[0]),
               int(b["input_ids"].shape[1]) if "input_ids" in b else 1, float(s)]
              for b, s in zip(batches, seconds, strict=False)]
    memory_step_s = memory.get("train_step_s") if memory else None
    source = "probe"
    if not timed and memory_step_s and device == "cpu":
        # a CPU's first step at a shape costs about what later ones do (0.94-1.02x per
        # padded token, docs/benchmarks-journal.md "first-step"); a GPU's pays for its
        # kernel selection (1.6 s against 0.02 s), so there the fit's own steps decide
        rate, source = flops[-1] / memory_step_s, "memory measurement"
        last = batches[-1]
        shapes = [[int(last["labels"].shape[0]),
                   int(last["input_ids"].shape[1]) if "input_ids" in last else 1,
                   float(memory_step_s)]]
    return Calibration(device=device, precision=precision, flops_per_s=rate,
                       step_overhead_s=alpha, probe_s=time.perf_counter() - started,
                       steps=(len(warm) + len(batches) * max(1, repeats)) if timed
                       else len(shapes),
                       shapes=shapes, source=source, memory_step_s=memory_step_s,
                       memory_eval_s=memory.get("eval_step_s") if memory else None,
                       peak_flops=peak_flops, base_rss_bytes=base_rss_bytes,
                       train_step_bytes=memory["train_step_bytes"] if memory else None,
                       eval_step_bytes=memory["eval_step_bytes"] if memory else None,
                       memory_shapes=({"train": memory["train_shape"],
                                       "eval": memory["eval_shape"]} if memory else None))


def calibration_from_steps(shapes: Sequence[Sequence[float]], flops: Sequence[float], *,
                           device: str, precision: str,
                           peak_flops: float | None = None) -> Calibration:
    """α and R fitted to a fit's own optimizer steps (:func:`_fit_rate`): no step is spent on
    planning, and the steps are the run's, with its data order, optimizer and callbacks.

    Args:
        shapes: ``[batch_size, padded tokens, seconds]`` of each step (gradient accumulation:
            the optimizer step's samples and their mean padded length).
        flops: Training FLOPs of each step (same order).
        device: ``cpu`` or ``cuda``.
        precision: The fit's precision.
        peak_flops: The device's nominal peak for the precision, for the efficiency figure.

    Raises:
        ValueError: Fewer than one step, or lengths that differ.
    """
    if not shapes or len(shapes) != len(flops):
        raise ValueError(f"need one FLOP count per timed step ({len(shapes)} steps, "
                         f"{len(flops)} counts)")
    seconds = np.array([float(s[2]) for s in shapes])
    alpha, rate = _fit_rate(np.asarray(flops, dtype=float), seconds)
    return Calibration(device=device, precision=precision, flops_per_s=rate,
                       step_overhead_s=alpha, probe_s=0.0, steps=len(shapes),
                       shapes=[[int(s[0]), int(round(s[1])), float(s[2])] for s in shapes],
                       peak_flops=peak_flops, source="training steps")
