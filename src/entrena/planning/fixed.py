"""The planner's view of a model whose inputs have one size (an MLP over table rows, a CNN
over resized images): FLOPs and saved activation bytes of one sample, measured.

A copy of the model is moved to PyTorch's meta device (shapes only, no memory); one forward +
backward pass at batch 1 runs under :class:`torch.utils.flop_counter.FlopCounterMode` and
:func:`torch.autograd.graph.saved_tensors_hooks`. The result is a
:class:`~entrena.planning.model.ModelProfile` of ``kind="fixed"`` in which a sample is one
"token": ``flops_linear`` is the training FLOPs per sample (forward + backward, matrix
products and convolutions counted as 2 FLOPs per multiply-add), ``saved_linear`` the bytes
autograd keeps per sample for the backward pass, and the runs' lengths are all 1.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from entrena.planning.model import ModelProfile, _op_counter, _scalar_loss

__all__ = ["profile_fixed"]


def profile_fixed(model: Any, inputs: dict[str, Any], *, loss: Any = None) -> ModelProfile:
    """Count parameters, training FLOPs and saved bytes of one sample.

    Args:
        model: The model (any device; it is copied, the original is left as it is);
            ``model(**inputs)`` returns logits (B, C).
        inputs: Example inputs of batch size 1 or more (``features`` (B, F), ``pixel_values``
            (B, C, H, W) …); only the first sample's shape is used.
        loss: The task's loss (``(outputs, batch) -> (sum, count)``); default the sum of
            the outputs (the loss is a rounding error of a step's FLOPs and memory).

    Returns:
        The profile (``kind="fixed"``, ``flops_linear`` and ``saved_linear`` per sample).
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    started = time.perf_counter()
    params = list(model.parameters())
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    layers = sum(1 for m in model.modules()
                 if isinstance(m, torch.nn.Linear | torch.nn.Conv1d | torch.nn.Conv2d))
    twin = copy.deepcopy(model).to("meta").train()
    sample = {name: torch.empty_like(value[:1], device="meta") for name, value in inputs.items()}
    weights = {p.untyped_storage()._cdata for p in twin.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in weights:
            saved[storage._cdata] = storage.nbytes()
        return tensor

    ops = _op_counter()
    counter = FlopCounterMode(display=False)
    with counter, ops:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            outputs = twin(**sample)
            value = _scalar_loss(loss, outputs)
        value.backward()
    return ModelProfile(
        parameters=sum(p.numel() for p in params),
        trainable_parameters=sum(p.numel() for p in params if p.requires_grad),
        linear_parameters=int(linear), layers=max(layers, 1), hidden_size=0, heads=1,
        intermediate_size=0, vocab_size=0, flops_linear=float(counter.get_total_flops()),
        flops_quadratic=0.0, saved_linear=float(sum(saved.values())), saved_quadratic=0.0,
        ops_per_step=ops.count, profile_s=time.perf_counter() - started, kind="fixed")
