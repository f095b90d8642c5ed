"""Measured step memory: what one training step and one evaluation batch add to a process.

The planner's model of activation memory (:mod:`entrena.planning.memory`) was fitted on one
machine; the bytes that autograd, the matrix library (oneDNN's scratch buffers differ between
AVX2, AVX-512 and AMX kernels) and the allocator really take differ between CPUs. So the plan's
probe measures them on the machine that will train: the rise of the process's resident set
(CPU; the kernel's high-water mark ``VmHWM``, reset just before) or of the CUDA allocator's peak
over

- one forward and backward pass at the epoch's longest training batch, without an optimizer
  step (the gradients it allocates are counted; the weights do not change), and, for an
  encoder that trains its shorter batches with the unfused attention products
  (:mod:`entrena.engine.attention`), the same batch cut to the longest such length (the
  larger rise counts), and
- one forward pass without gradients at the evaluation batch where evaluation memory peaks.

It runs first, before any timed step, so that the allocator starts as the fit does: what was
freed by earlier steps cannot hide what this one needs.
"""

from __future__ import annotations

import gc
import time
from typing import Any

__all__ = ["StepMemory", "measure_step_memory"]


class StepMemory(dict):
    """``{"train_step_bytes", "eval_step_bytes", "train_shape", "eval_shape",
    "train_step_s", "eval_step_s"}``: bytes of memory the step added above what was resident
    before it (``eval_step_bytes`` ``None`` without an evaluation batch), the ``[batch_size,
    tokens]`` measured, and the wall seconds of the forward and backward pass at the whole
    longest training batch and of the evaluation batch (first calls at those shapes)."""


def _shape(batch: dict[str, Any]) -> list[int]:
    size = int(batch["labels"].shape[0])
    tokens = int(batch["input_ids"].shape[1]) if "input_ids" in batch else 1
    return [size, tokens]


def _cut(batch: dict[str, Any], tokens: int | None) -> dict[str, Any] | None:
    """``batch`` cut to its first ``tokens`` tokens, or ``None`` when that is not shorter (or
    the batch has no token dimension)."""
    if not tokens or "input_ids" not in batch or not 0 < tokens < batch["input_ids"].shape[1]:
        return None
    return {k: (v[:, :tokens] if k != "labels" and getattr(v, "ndim", 0) == 2 else v)
            for k, v in batch.items()}


def _rise(device: str, run: Any) -> int:
    """Bytes by which ``run()`` raised the peak above what was in use before it."""
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        run()
        torch.cuda.synchronize()
        return max(0, int(torch.cuda.max_memory_allocated()) - int(before))
    from entrena.hardware.memory import current_rss_bytes, peak_rss_bytes, reset_peak_rss

    before = current_rss_bytes()
    if not reset_peak_rss():
        raise OSError("the resident-memory high-water mark cannot be reset here")
    run()
    return max(0, int(peak_rss_bytes() or 0) - before)


def measure_step_memory(model: Any, train_batch: dict[str, Any],
                        eval_batch: dict[str, Any] | None, *, device: str, precision: str,
                        loss: Any = None, also_at_tokens: int | None = None) -> StepMemory:
    """Measure the memory of one training step and one evaluation batch of ``model``.

    Args:
        model: The model on ``device``, called as ``model(**inputs)``; its weights do not
            change (no optimizer step) and its gradients are released afterwards.
        train_batch: The longest training batch (model inputs and ``labels`` (B,)).
        eval_batch: The evaluation batch where evaluation memory peaks, or ``None``.
        device: ``"cpu"`` or ``"cuda"``.
        precision: Fabric precision (``bf16-mixed``/``16-mixed`` run under autocast).
        loss: The task's loss ``(outputs, batch) -> (sum, count)``; default the outputs' mean.
        also_at_tokens: Also measure ``train_batch`` cut to this many tokens when that is
            shorter (the longest length the model trains with the unfused attention
            products, :func:`entrena.engine.attention.eager_up_to`); the larger rise counts.

    Returns:
        The :class:`StepMemory`, bytes.

    Raises:
        OSError: On a CPU whose resident-memory peak cannot be reset (not Linux).
    """
    import torch

    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)

    def inputs(batch: dict[str, Any]) -> dict[str, Any]:
        return {k: v.to(device) for k, v in batch.items() if k != "labels"}

    def train_step(batch: dict[str, Any]) -> None:
        moved = inputs(batch)
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None):
            outputs = model(**moved)
        if loss is None:
            value = outputs.float().mean()
        else:
            total, count = loss(outputs, {**moved, "labels": batch["labels"].to(device)})
            value = total / max(1, count)
        value.backward()

    def eval_step() -> None:
        assert eval_batch is not None
        with torch.no_grad(), torch.autocast(device_type=device, dtype=dtype,
                                             enabled=dtype is not None):
            model(**inputs(eval_batch))

    seconds: dict[str, float] = {}

    def timed(name: str, run: Any) -> Any:
        def wrapped() -> None:
            begin = time.perf_counter()
            run()
            if device == "cuda":
                torch.cuda.synchronize()
            seconds[name] = time.perf_counter() - begin
        return wrapped

    was_training = model.training
    model.train()
    train_bytes = _rise(device, timed("train", lambda: train_step(train_batch)))
    model.zero_grad(set_to_none=True)
    train_shape = _shape(train_batch)
    shorter = _cut(train_batch, also_at_tokens)
    if shorter is not None:  # the unfused attention keeps (B, heads, T, T) probabilities
        shorter_bytes = _rise(device, lambda: train_step(shorter))
        model.zero_grad(set_to_none=True)
        if shorter_bytes > train_bytes:
            train_bytes, train_shape = shorter_bytes, _shape(shorter)
    eval_bytes = None
    if eval_batch is not None:
        model.eval()
        eval_bytes = _rise(device, timed("eval", eval_step))
    model.train(was_training)
    return StepMemory(train_step_bytes=train_bytes, eval_step_bytes=eval_bytes,
                      train_shape=train_shape,
                      eval_shape=_shape(eval_batch) if eval_batch is not None else None,
                      train_step_s=seconds.get("train"), eval_step_s=seconds.get("eval"))
