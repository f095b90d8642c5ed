"""Out of memory in a training step: split each batch into smaller micro-batches and keep the
batch (Composer's automatic micro-batching, without its search upwards).

The pure pieces (:func:`split_batch`, :func:`halved`), :func:`forward_backward`, which the
loop calls for every batch, and :func:`retry_smaller`, which it calls after the error. When a
forward or backward pass raises ``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError``
is the same class), the loop discards the step's gradients, halves
``TrainState.micro_batch_size`` and runs the step again from its first micro-batch: the
gradient is that of the whole batch, accumulated over the parts. The size is saved in
checkpoints, so a resumed run splits its batches as the run did.
"""

from __future__ import annotations

import gc
import logging
from typing import Any

import torch

from entrena.core.state import TrainState
from entrena.errors import ResourceError

__all__ = ["forward_backward", "free_memory", "halved", "model_inputs", "retry_smaller",
           "split_batch"]

log = logging.getLogger("entrena")


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch without ``labels``: the keyword arguments of ``model(**inputs)``."""
    return {key: value for key, value in batch.items() if key != "labels"}


def _rows(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["labels"].shape[0])


def split_batch(batch: dict[str, torch.Tensor], size: int | None
                ) -> list[dict[str, torch.Tensor]]:
    """The batch cut into consecutive parts of at most ``size`` examples (views, no copy).

    Args:
        batch: Tensors whose first dimension is the batch (B, ...), ``labels`` among them.
        size: Examples per part; ``None`` (or at least B) keeps the batch whole.

    Returns:
        The parts, in order; a value that is not a tensor of B rows is given to every part.
    """
    rows = _rows(batch)
    if size is None or size >= rows:
        return [batch]
    return [{key: value[start:start + size]
             if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == rows
             else value for key, value in batch.items()}
            for start in range(0, rows, size)]


def halved(size: int) -> int:
    """The next micro-batch size after an out-of-memory error: half, rounded up.

    Raises:
        ResourceError: ``size`` is already 1 example: nothing smaller to try.
    """
    if size <= 1:
        raise ResourceError(
            "out of memory with micro-batches of 1 example: the model does not fit this "
            "device even so; use a smaller model or max length, precision bf16-mixed, or a "
            "device with more memory")
    return (size + 1) // 2


def free_memory() -> None:
    """Release what the failed attempt held (its tensors are garbage once the exception
    is gone) and return cached CUDA blocks to the allocator."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def forward_backward(*, backend: Any, model: Any, loss: Any, batch: dict[str, torch.Tensor],
                     accumulation: int, sync: bool, micro_batch_size: int | None,
                     group_count: int | None = None) -> float:
    """One batch's forward and backward passes, split into micro-batches of
    ``micro_batch_size`` examples; gradients add up to those of the whole batch's mean loss
    divided by ``accumulation``.

    A part's summed loss is divided by the batch's examples, which is the whole batch's mean
    exactly when the task's loss is normalised by its examples (the classifiers); a loss
    normalised by another count (tokens) cannot be split so and is refused.

    Args:
        backend: The backend (``backward``, ``no_backward_sync``).
        model: Called as ``model(**inputs)``.
        loss: The task's loss (``(outputs, batch) -> (sum, count)``).
        batch: The batch on the device.
        accumulation: Gradient accumulation steps (each batch's loss is divided by it).
        sync: Whether the last backward pass synchronises gradients across processes.
        micro_batch_size: Examples per forward pass; ``None``: the whole batch.
        group_count: The loss count (target tokens) of the whole optimizer step, known
            beforehand (a batch source's ``target_count``): every summed loss is divided by
            it instead of ``count × accumulation``, which is exact for any split.

    Returns:
        The batch's mean loss.

    Raises:
        torch.OutOfMemoryError: From the forward or backward pass (the caller retries).
        ResourceError: A split batch whose loss is not normalised by its examples.
    """
    parts = split_batch(batch, micro_batch_size)
    if len(parts) == 1:
        with backend.no_backward_sync(model, enabled=not sync):
            batch_sum, batch_count = loss(model(**model_inputs(batch)), batch)
            batch_loss = batch_sum / max(1, batch_count)
            backend.backward(batch_sum / max(1, group_count) if group_count is not None
                             else batch_loss / accumulation)
        return batch_loss.item()
    if group_count is not None:  # sums over the step's own count: any split is exact
        total_sum, total_count = 0.0, 0
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            with backend.no_backward_sync(model, enabled=not (sync and last)):
                part_sum, part_count = loss(model(**model_inputs(part)), part)
                backend.backward(part_sum / max(1, group_count))
            total_sum += part_sum.item()
            total_count += part_count
        return total_sum / max(1, total_count)
    rows = _rows(batch)
    total = 0.0
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        with backend.no_backward_sync(model, enabled=not (sync and last)):
            part_sum, part_count = loss(model(**model_inputs(part)), part)
            if part_count != _rows(part):
                raise ResourceError(
                    f"out of memory, and this task's loss is normalised by {part_count} "
                    f"(not the {_rows(part)} examples of a micro-batch), so a batch cannot "
                    f"be split without changing it; lower train.batch_size and raise "
                    f"train.gradient_accumulation_steps to keep the effective batch")
            backend.backward(part_sum / (rows * accumulation))
        total += part_sum.item()
    return total / rows


def retry_smaller(state: TrainState, optimizer: Any, backend: Any,
                  group_start: tuple[int, int, int, int, float], batch_rows: int,
                  error: str) -> None:
    """After an out-of-memory error in the current step: discard its gradients, put the
    counters back to its start, halve ``state.micro_batch_size``, record it, say so.

    Raises:
        ResourceError: Already at 1 example, or several processes (one rank cannot change
            its split alone: the others would wait for it).
    """
    optimizer.zero_grad(set_to_none=True)
    free_memory()
    before = state.micro_batch_size or batch_rows
    if getattr(backend, "world_size", 1) > 1:
        raise ResourceError(
            f"out of memory at step {state.step + 1} with micro-batches of {before} examples "
            f"({error}); with several processes entrena does not split batches by itself: "
            f"lower train.batch_size and raise train.gradient_accumulation_steps")
    size = halved(before)
    (state.batch_in_epoch, state.samples_seen, state.tokens_seen,
     state.padded_tokens_seen, _) = group_start
    state.micro_batch_size = size
    state.out_of_memory_retries += 1
    state.extras.setdefault("out_of_memory", []).append({
        "step": state.step + 1, "epoch": state.epoch, "batch": group_start[0] + 1,
        "micro_batch_size_before": before, "micro_batch_size": size, "error": error})
    log.warning("out of memory at step %d (epoch %d) with micro-batches of %d examples "
                "(%s); the step runs again with micro-batches of %d, gradients accumulated "
                "over the parts (the batch and its result stay the same)", state.step + 1,
                state.epoch + 1, before, error, size)
