"""Frozen weights stored in the dtype mixed precision computes them in.

Under ``bf16-mixed`` autocast casts every weight to bfloat16 where a matrix product uses
it. A trained weight keeps its float32 master copy (autocast caches the cast per forward);
a frozen one (a LoRA base) is never updated, so its float32 copy buys nothing but a cast
at every use, twice the memory, and float32 activations around it: the embedding's float32
output keeps the residual stream in float32, and every adapted projection then casts the
same input to bfloat16 again, once for the base weight and once for the adapter (PEFT
first casts it to the adapter's float32 weight, and autocast casts it back).

:func:`store_frozen_weights` casts the frozen floating-point parameters to bfloat16 once and
lets adapters take their input in the dtype it arrives in. The matrix products see the
same bfloat16 weights as before; what changes is that the activations between them are
bfloat16 too (the residual stream, as in a model loaded in bfloat16, the common way to
train LoRA adapters). Trained parameters, buffers (rotary frequencies) and quantised
weights are left as they are.

On the LLM demo's steps (SmolLM2-135M, LoRA r 16, batch 8 × 124 tokens, Intel Xeon with
AMX, 2 cores): 1.13× faster, the same loss curve within noise (docs/benchmarks.md,
bench:frozen-bf16).
"""

from __future__ import annotations

from typing import Any

__all__ = ["store_frozen_weights"]


def store_frozen_weights(model: Any, setting: str | None, precision: str) -> str | None:
    """Cast ``model``'s frozen floating-point parameters to bfloat16 under ``bf16-mixed``.

    Args:
        model: The model to train (changed in place; tied parameters stay tied).
        setting: ``model.base_dtype``: ``auto`` or ``float32``; ``None`` (a task without
            the key) casts nothing.
        precision: The run's resolved Fabric precision (``bf16-mixed``, ``32-true`` …).

    Returns:
        A sentence for the log, or ``None`` when nothing was cast (not ``auto``, another
        precision, no frozen parameter, or a quantised model, whose recipe keeps the rest
        of its weights in float32 on purpose).
    """
    import torch

    if setting != "auto" or precision != "bf16-mixed":
        return None
    params = list(model.parameters())
    if any(not p.is_floating_point() for p in params):
        return None  # a quantised base (QLoRA): prepared as its recipe says
    frozen = [p for p in params if not p.requires_grad and p.dtype == torch.float32]
    if not frozen:
        return None
    for param in frozen:
        param.data = param.data.to(torch.bfloat16)
    for module in model.modules():  # PEFT's adapters: take the input as it comes
        if hasattr(module, "cast_input_dtype_enabled"):
            module.cast_input_dtype_enabled = False
    count = sum(p.numel() for p in frozen)
    return (f"frozen weights: {count:,} parameters stored in bfloat16 for bf16-mixed "
            f"({2 * count / 2**20:,.0f} MiB less; model.base_dtype: float32 keeps them)")
