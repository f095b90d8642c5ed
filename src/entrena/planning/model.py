"""The model seen by the planner: parameters, FLOPs and activation bytes, without any weights.

The classifier is built on PyTorch's meta device (shapes only: no memory, no weights read).
One forward + backward pass at batch 1 runs under :class:`torch.utils.flop_counter.FlopCounterMode`
and :func:`torch.autograd.graph.saved_tensors_hooks` at two sequence lengths, which gives

- training FLOPs per sample, ``f(T) = a0 + a1·T + a2·T²`` (a0 the classification head; the
  linear layers grow with the length T,
  attention's ``QKᵀ`` and ``AV`` products with T²; the counter includes attention, which
  parameter-based estimates such as ``6·N·T`` (Kaplan et al. 2020) leave out — PaLM,
  Chowdhery et al. 2022, App. B adds it as ``12·L·H·Q·T`` per token);
- bytes of the tensors autograd saves for the backward pass per sample on this machine's CPU
  kernels, ``s(T) = b0 + b1·T + b2·T²`` (the accounting of Korthikanti et al. 2022, "Reducing
  Activation Recomputation in Large Transformer Models", measured instead of assumed).

On the meta device the encoder is called without an attention mask: building the mask reads
its values, which meta tensors do not have. The FLOPs are the same (a mask is an elementwise
add, which the counter does not count); the saved tensors match a real CPU run with padded
batches to within a few hundred bytes (checked by tests/test_planning.py).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ModelProfile", "profile_model"]


@dataclass(frozen=True)
class ModelProfile:
    """What the planner knows about the model.

    Attributes:
        parameters: All parameters.
        trainable_parameters: Parameters with ``requires_grad``.
        linear_parameters: Weights of ``nn.Linear`` layers (what autocast copies to 16 bits).
        layers / hidden_size / heads / intermediate_size / vocab_size: Encoder shape.
        flops_constant: Training FLOPs per sample that do not depend on the length, a0.
        flops_linear: Training FLOPs (forward + backward) per sample per token, a1.
        flops_quadratic: Training FLOPs per sample per token², a2 (attention).
        saved_constant: Bytes saved per batch whatever the length, b0.
        ops_per_step: ATen operators a forward + backward pass dispatches, views excluded
            (each launches at least one kernel on a GPU: the per-step launch cost scales
            with it).
        saved_linear: Bytes autograd saves per sample per token on this CPU (fp32), b1.
        saved_quadratic: Bytes saved per sample per token², b2 (attention probabilities).
        saved_per_sample: Bytes saved per sample whatever its length (an LLM's logits at
            its target tokens; 0 for a measured profile).
        profile_s: Seconds spent building and measuring on the meta device.
        kind: ``transformer`` (the GPU activation formula of Korthikanti et al. applies),
            ``llm`` (a decoder LLM's formulas, :mod:`entrena.planning.llm_profile`) or
            ``fixed`` (a model whose inputs have one size, an MLP or a CNN: one "token" per
            sample, its measured saved bytes used on every device; see
            :mod:`entrena.planning.fixed`).
    """

    parameters: int
    trainable_parameters: int
    linear_parameters: int
    layers: int
    hidden_size: int
    heads: int
    intermediate_size: int
    vocab_size: int
    flops_linear: float
    flops_quadratic: float
    saved_linear: float
    saved_quadratic: float
    flops_constant: float = 0.0
    saved_constant: float = 0.0
    saved_per_sample: float = 0.0
    ops_per_step: int = 0
    profile_s: float = 0.0
    kind: str = "transformer"

    def flops_per_sample(self, tokens: float) -> float:
        """Training FLOPs (forward + backward) of one sample padded to ``tokens``."""
        return (self.flops_constant + self.flops_linear * tokens
                + self.flops_quadratic * tokens * tokens)

    def cpu_saved_bytes(self, tokens: float, batch_size: int = 1) -> float:
        """Bytes autograd keeps for backward for a batch of ``tokens`` on CPU in fp32 (the
        constant part — buffers such as the token-type ids — is per batch, not per sample)."""
        return (self.saved_constant + batch_size * (self.saved_per_sample
                                                    + self.saved_linear * tokens
                                                    + self.saved_quadratic * tokens * tokens))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _scalar_loss(loss_fn: Any, outputs: Any) -> Any:
    """The loss of one meta-device sample: the task's (target 0) or the outputs' sum."""
    import torch

    if loss_fn is None:
        return outputs.float().sum()
    target = {"labels": torch.zeros(outputs.shape[0], dtype=torch.long, device=outputs.device)}
    total, count = loss_fn(outputs, target)
    return total / max(1, count)


def _op_counter() -> Any:
    """A dispatch mode counting the ATen operators that compute (views and metadata excluded)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpCounter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            if not func.is_view and "detach" not in func.__name__:
                self.count += 1
            return func(*args, **(kwargs or {}))

    return OpCounter()


def _measure(model: Any, tokens: int, ops: Any = None,
             loss_fn: Any = None) -> tuple[float, float]:
    """(training FLOPs, saved bytes) of one sample of ``tokens`` tokens on the meta device;
    ``ops``, an :func:`_op_counter`, counts the operators too."""
    import contextlib

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    params = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in params:
            saved[storage._cdata] = storage.nbytes()
        return tensor

    ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")
    counter = FlopCounterMode(display=False)
    with counter, (ops if ops is not None else contextlib.nullcontext()):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            hidden = model.encoder(input_ids=ids).last_hidden_state  # (1, T, H)
            pooled = hidden.mean(1) if model.pooling == "mean" else hidden[:, 0]
            logits = model.head(model.dropout(pooled))  # (1, C)
            loss = _scalar_loss(loss_fn, logits)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops()), float(sum(saved.values()))


def _fit(points: list[tuple[int, float]]) -> tuple[float, float, float]:
    """``(c, a, b)`` with ``c + a·t + b·t² = y`` through three points (exact for
    transformers: nothing in them grows faster than T²)."""
    import numpy as np

    t = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    c, a, b = np.linalg.solve(np.stack([np.ones_like(t), t, t * t], axis=1), y)
    return float(c), float(a), float(b)


def profile_model(model: Any, max_length: int, *, loss: Any = None) -> ModelProfile:
    """Count parameters, FLOPs and saved activation bytes of a meta-device classifier.

    Args:
        model: From :func:`entrena.tasks.text.model.meta_classifier`.
        max_length: The longest sequence the run uses (tokens); the three measured lengths
            are it, half of it and a quarter of it (at least 4 apart).
        loss: The task's loss (``(outputs, batch) -> (sum, count)``); default the sum of
            the outputs (the loss is a rounding error of a step's FLOPs and memory).

    Returns:
        The :class:`ModelProfile`.
    """
    import torch

    started = time.perf_counter()
    params = list(model.parameters())
    config = model.encoder.config
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    long = max(16, int(max_length))
    lengths = (long // 4, long // 2, long)
    ops = _op_counter()
    measured = [(t, *_measure(model, t, ops if t == long else None, loss)) for t in lengths]
    a0, a1, a2 = _fit([(t, f) for t, f, _ in measured])
    b0, b1, b2 = _fit([(t, s) for t, _, s in measured])
    return ModelProfile(
        parameters=sum(p.numel() for p in params),
        trainable_parameters=sum(p.numel() for p in params if p.requires_grad),
        linear_parameters=int(linear),
        layers=int(getattr(config, "num_hidden_layers", 1) or 1),
        hidden_size=int(getattr(config, "hidden_size", 0) or 0),
        heads=int(getattr(config, "num_attention_heads", 1) or 1),
        intermediate_size=int(getattr(config, "intermediate_size", 0) or 0),
        vocab_size=int(getattr(config, "vocab_size", 0) or 0),
        flops_linear=a1, flops_quadratic=a2, saved_linear=b1, saved_quadratic=b2,
        flops_constant=a0, saved_constant=b0, ops_per_step=ops.count,
        profile_s=time.perf_counter() - started)
