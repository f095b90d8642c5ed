"""Training memory: weights, gradients, optimizer states, activations, overhead; largest batch.

Model states follow the mixed-precision accounting of Rajbhandari et al. 2019 (ZeRO, §3.1)
for the way Lightning Fabric trains: fp32 weights (4 B/param) and gradients (4 B/param),
AdamW's two fp32 moments (8 B/param); under ``bf16-true`` all three are 16-bit.

Activations (what autograd keeps for the backward pass) per sample of T tokens:

- CPU (``32-true``): measured on the meta device for this very model
  (:mod:`entrena.planning.model`), ``b1·T + b2·T²``.
- CUDA: the per-layer accounting of Korthikanti et al. 2022 (``sbh·(34 + 5as/h)`` bytes in
  16-bit) redone for the Hugging Face BERT layer as it runs under Fabric with PyTorch's
  ``scaled_dot_product_attention`` (the memory-efficient kernel takes the padding mask, so no
  ``a·T²`` probabilities are stored): with h the width, i the feed-forward width, a the
  heads, per layer and sample, ``bf16-mixed``/``16-mixed``: ``28hT + 4iT + 16T + 4a·T₃₂ +
  2T²`` bytes (16-bit copies of the Q/K/V/out/FFN inputs made by autocast, 1-byte dropout
  masks, fp32 LayerNorm inputs and statistics, the kernel's fp32 log-sum-exp over T rounded
  up to 32, the 16-bit mask); ``32-true``: ``38hT + 8iT + 16T + 4a·T₃₂ + 4T²``. Plus the
  embeddings and pooling (``9hT + 48T`` bytes). Checked on a GPU by benchmarks/gpu_check.py.

The peak adds the backward pass's temporaries: on CPU one layer's activations
(:data:`CPU_BACKWARD_LAYERS`), on CUDA 0.4 of one (:data:`CUDA_BACKWARD_LAYERS`), both
measured; on CUDA also autocast's 16-bit weight copies (2 B per ``nn.Linear`` weight), or,
when larger, AdamW's temporary at the optimizer step (4 B/param, ``torch._foreach_sqrt`` in
the multi-tensor implementation).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from entrena.planning.model import ModelProfile

__all__ = ["MemoryEstimate", "training_memory", "largest_batch", "activation_bytes",
           "CPU_ALLOCATOR_OVERHEAD_BYTES", "FIT_IMPORTS_RSS_BYTES", "GPU_MEMORY_RESERVE",
           "CPU_BACKWARD_LAYERS", "CUDA_BACKWARD_LAYERS"]

CPU_ALLOCATOR_OVERHEAD_BYTES = 218 * 2**20
"""Resident memory the CPU fit holds beyond its tensors (malloc arenas, oneDNN and thread
buffers): measured on the team machine, MiniLM-L6 at batch 8-32 and 64-256 tokens (peak RSS
minus base RSS, optimizer states, gradients, activations and one layer of temporaries);
docs/benchmarks.md, plan section."""

FIT_IMPORTS_RSS_BYTES = 96 * 2**20
"""Resident memory that importing Lightning Fabric and MLflow adds to a process that already
imported torch, transformers, pandas, pyarrow and scikit-learn: measured on the team machine
with torch 2.14.1+cu130 (1080 MiB before, 1176 MiB after); ``entrena plan`` adds it to its own
resident memory when it has not imported them (``entrena train`` measures instead)."""

CPU_BACKWARD_LAYERS = 1.0
"""Backward temporaries on CPU, in layers' worth of saved activations: with it the peak
resident set of six MiniLM-L6 fits came within -8%..+3% (docs/benchmarks.md, plan section)."""

CUDA_BACKWARD_LAYERS = 0.4
"""Backward temporaries on CUDA, in layers' worth of activations: fitted to
``torch.cuda.max_memory_allocated`` of four configurations on an H200 (MiniLM-L6 bf16 32×256
and 128×128, fp32 32×256, a BERT-base shape bf16 32×512; benchmarks/results/h200-2026-11-30):
0.4 gives -4.5%..+5.1% there, where a whole layer gave up to +13%."""

GPU_MEMORY_RESERVE = 0.10
"""Share of an accelerator's memory the planner keeps free (CUDA context, allocator
fragmentation): entrena's margin, not a measured figure; ``fits`` compares the peak with
the remaining 90 %."""

_PRECISION_BYTES = {"32-true": (4, 4, 8), "bf16-mixed": (4, 4, 8), "16-mixed": (4, 4, 8),
                    "bf16-true": (2, 2, 4)}
"""(weights, gradients, optimizer states) bytes per parameter under each precision."""


@dataclass(frozen=True)
class MemoryEstimate:
    """The memory terms of one training configuration, bytes.

    Attributes:
        weights_bytes: Model weights (all parameters).
        gradients_bytes: Gradients (trainable parameters).
        optimizer_bytes: AdamW states (two moments per trainable parameter).
        activations_bytes: Tensors saved for backward by the largest batch (B samples padded to
            the longest length of the epoch).
        transient_bytes: Short-lived buffers at the peak (backward temporaries, autocast
            weight copies or the optimizer step's temporary, whichever peak is higher).
        overhead_bytes: Everything else resident: on CPU the process itself (imports, data,
            tokenizer), the best-weights copy and the allocator; on accelerators 0 (the
            CUDA context is outside ``torch.cuda.max_memory_allocated``); on both, the
            divergence guard's copy of the weights and optimizer state when it is on.
        peak_bytes: The predicted peak (resident set on CPU, allocated memory on CUDA).
        batch_size: B.
        tokens: The padded length of the largest batch, T.
    """

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    transient_bytes: float
    overhead_bytes: float
    peak_bytes: float
    batch_size: int
    tokens: int

    def as_dict(self) -> dict[str, Any]:
        return {k: (int(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def activation_bytes(profile: ModelProfile, tokens: int, *, device: str,
                     precision: str) -> tuple[float, float]:
    """Bytes autograd saves for one sample of ``tokens`` tokens, and one layer's share.

    Args:
        profile: The model profile.
        tokens: Padded sequence length T.
        device: ``"cpu"``, ``"cuda"`` or ``"tpu"`` (TPUs use the CUDA mixed-precision terms).
        precision: Fabric precision string.

    Returns:
        ``(whole model, one layer)`` in bytes per sample.
    """
    t = float(tokens)
    if device == "cpu" or profile.kind != "transformer":  # measured bytes (fp32: an upper
        total = profile.cpu_saved_bytes(t) - profile.saved_constant  # bound under autocast)
        return total, total / max(profile.layers, 1)
    h, i, a = profile.hidden_size, profile.intermediate_size, profile.heads
    t32 = math.ceil(t / 32) * 32
    if precision == "32-true":
        layer = 38 * h * t + 8 * i * t + 16 * t + 4 * a * t32 + 4 * t * t
    else:
        layer = 28 * h * t + 4 * i * t + 16 * t + 4 * a * t32 + 2 * t * t
        if precision == "bf16-true":
            layer = 0.5 * (38 * h * t + 8 * i * t) + 16 * t + 4 * a * t32 + 2 * t * t
    total = profile.layers * layer + 9 * h * t + 48 * t
    return total, layer


def training_memory(profile: ModelProfile, *, batch_size: int, tokens: int, device: str,
                    precision: str, base_bytes: float = 0.0,
                    weights_in_base: bool = False, undo_copy: bool = False,
                    measured: tuple[float, float | None] | None = None,
                    fit_above_base: float | None = None) -> MemoryEstimate:
    """Predict the peak memory of training at ``batch_size`` × ``tokens``.

    On a CPU with ``measured`` (the probe's :mod:`~entrena.planning.memory_probe` figures at
    this very batch), the gradients, activations, backward temporaries and the allocator's
    share are the larger measured rise, of a training step or of an evaluation batch, in
    place of the modelled terms; the weights, AdamW's states, the best-weights copy and the
    process before the fit stay modelled (they do not depend on the CPU).

    Args:
        profile: The model profile.
        batch_size: Samples per micro-batch, B.
        tokens: Padded length of the longest batch, T.
        device: ``"cpu"`` (peak resident set), ``"cuda"`` or ``"tpu"`` (peak allocated).
        precision: ``32-true``, ``bf16-mixed``, ``16-mixed`` or ``bf16-true``.
        base_bytes: CPU only: the process's resident memory before the fit (imports, data).
        weights_in_base: CPU only: the model's weights are already in ``base_bytes``.
        undo_copy: The loop keeps a copy of the trainable weights and their optimizer state
            from before each step (``train.divergence_factor`` set; engine/guard.py).
        measured: CPU only: ``(train_step_bytes, eval_step_bytes or None)`` measured by the
            probe at this batch.
        fit_above_base: CPU only, with ``measured``: how far above its base an earlier fit of
            this model at this batch shape peaked on this machine (its resident set's
            high-water mark; over a fit glibc's heap keeps growing past one measured step,
            docs/benchmarks.md "Padding batches to a multiple"). The peak is at least
            ``base_bytes`` plus this; the excess is counted in the overhead.

    Returns:
        The :class:`MemoryEstimate`.
    """
    w_b, g_b, o_b = _PRECISION_BYTES.get(precision, (4, 4, 8))
    weights = profile.parameters * w_b
    gradients = profile.trainable_parameters * g_b
    optimizer = profile.trainable_parameters * o_b
    per_sample, per_layer = activation_bytes(profile, tokens, device=device, precision=precision)
    undo = profile.trainable_parameters * (w_b + o_b) if undo_copy else 0.0
    activations = batch_size * per_sample + (profile.saved_constant if device == "cpu" else 0)
    layers = CPU_BACKWARD_LAYERS if device == "cpu" else CUDA_BACKWARD_LAYERS
    backward_temp = layers * batch_size * per_layer
    if device == "cpu":
        # Freed CPU memory mostly stays in the process: states, gradients and activations add.
        # Overhead: the process without the model, ModelCheckpoint's CPU copy of the best
        # weights, and the allocator's own share.
        model_in_base = weights if weights_in_base else 0.0
        if measured is not None:
            step = max(measured[0], measured[1] or 0.0)
            overhead = base_bytes - model_in_base + weights + undo
            peak = overhead + weights + optimizer + max(step, gradients)
            if fit_above_base is not None and base_bytes + fit_above_base > peak:
                overhead += base_bytes + fit_above_base - peak
                peak = base_bytes + fit_above_base
            return MemoryEstimate(weights, gradients, optimizer, max(0.0, step - gradients),
                                  0.0, overhead, peak, batch_size, tokens)
        overhead = base_bytes - model_in_base + weights + CPU_ALLOCATOR_OVERHEAD_BYTES + undo
        peak = overhead + weights + optimizer + gradients + activations + backward_temp
        return MemoryEstimate(weights, gradients, optimizer, activations, backward_temp,
                              overhead, peak, batch_size, tokens)
    cast_copies = 2 * profile.linear_parameters if precision in ("bf16-mixed", "16-mixed") else 0
    during_backward = activations + backward_temp + cast_copies
    at_step = gradients + 4 * profile.trainable_parameters
    transient = max(during_backward - activations, at_step - gradients)
    peak = weights + optimizer + max(during_backward, at_step) + undo
    return MemoryEstimate(weights, gradients, optimizer, activations, transient, undo, peak,
                          batch_size, tokens)


def largest_batch(profile: ModelProfile, *, tokens: int, device: str, precision: str,
                  capacity_bytes: float, base_bytes: float = 0.0,
                  weights_in_base: bool = False, undo_copy: bool = False,
                  limit: int = 65536) -> int:
    """The largest batch size whose predicted peak fits in ``capacity_bytes`` (0 if none).

    The peak is the larger of a term growing linearly with B (activations) and terms that do
    not depend on B (the optimizer step), so B is solved from the slope between B = 1 and a
    large B, then checked.
    """
    kwargs = dict(tokens=tokens, device=device, precision=precision, base_bytes=base_bytes,
                  weights_in_base=weights_in_base, undo_copy=undo_copy)

    def peak(batch: int) -> float:
        return training_memory(profile, batch_size=batch, **kwargs).peak_bytes

    if peak(1) > capacity_bytes:
        return 0
    far = 1024
    slope = (peak(far + 1) - peak(far)) or 1.0
    best = min(limit, max(1, int(far + (capacity_bytes - peak(far)) // slope)))
    while best > 1 and peak(best) > capacity_bytes:
        best -= 1
    return best
