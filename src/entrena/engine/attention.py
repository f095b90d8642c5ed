"""``model.attn_implementation``: which attention kernel a Hugging Face model trains with
(text encoders such as BERT, causal decoders such as Llama).

Transformers' default, ``sdpa``, calls PyTorch's fused scaled-dot-product attention; on a CPU
that is a flash-attention kernel whose *backward* in bf16 has a high cost per call at short
sequences: forward and backward of MiniLM's attention shape (12 heads of 32, batch 32, a
quarter of the keys padded) took 41 ms at 32 tokens and 164 ms at 128 against 6.6 ms and
43 ms for the unfused products (``QKᵀ``, softmax, ``·V``: transformers' ``eager``), and
632 ms against 1,093 ms at 512 (Intel Xeon with AMX, 2 threads, torch 2.14.1;
docs/benchmarks.md, bench:attention-kernel; between 192 and 256 tokens the measurements
disagree run to run). Forward alone the fused kernel is as fast or faster at every length,
and in fp32 from 64 tokens on, on that CPU. The crossover depends on the CPU, the dtype and
the head shape, so it is measured on the machine that trains, never assumed.

``auto`` on a CPU measures, once per machine (cached), forward + backward of both kernels at
the run's head shape (key heads for grouped-query attention, a decoder's causal mask) and
dtype at 32, 64, 128 … tokens, and keeps the longest length up to which the unfused
products are clearly faster (:data:`EAGER_MARGIN`); the model then runs
the unfused products for training batches up to that length and the fused kernel for longer
ones and for every pass without gradients (evaluation, prediction). Off a CPU, ``auto`` keeps
``sdpa``. The two compute the same function (tests/test_attention.py); only the kernels, and
the memory kept for the backward pass (the unfused path keeps the (B, heads, T, T)
probabilities: the plan's memory probe measures a batch at that length too), differ.

A model that caps its attention scores (Gemma 2's ``attn_logit_softcapping``) runs
transformers' ``eager`` under ``auto``, since the fused kernel has no soft-cap, and refuses
``sdpa`` (a ``ConfigError``: its scores would not be capped).

The choice lives in the model's config (``config._attn_implementation``, which transformers
does not save): a saved model loads with transformers' default everywhere.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError

__all__ = ["ATTENTION_NAME", "EAGER_MARGIN", "PROBE_LENGTHS", "PROBE_MAX_BATCH",
           "apply_attention", "eager_attention", "eager_up_to", "measure_eager_up_to",
           "probe_lengths"]

ATTENTION_NAME = "entrena_auto"
"""The name under which the per-batch choice is registered with transformers'
``AttentionInterface`` (and ``AttentionMaskInterface``, with the ``sdpa`` mask)."""

EAGER_MARGIN = 0.9
"""The unfused products are used up to a length only where they took at most this share of
the fused kernel's time (a 10% margin against timing noise)."""

PROBE_LENGTHS = (32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
"""Sequence lengths (tokens) measured, in steps of about √2, shortest first, below the
run's longest (measured last); the measurement stops at the first length where the fused
kernel wins."""

PROBE_MAX_BATCH = 32
"""The measurement's batch is the run's, at most this (the unfused products' share of the
time grows with the batch as their (B, heads, T, T) scores leave the caches)."""

CACHE_FILE = "attention_kernels.json"

_EAGER_UP_TO: dict[tuple[Any, int, int, int, bool], int] = {}
"""(dtype, heads, kv_heads, head_dim, causal) → longest length (tokens) trained with the
unfused products."""


def _shape_key(dtype: Any, heads: int, kv_heads: int, head_dim: int,
               causal: bool) -> tuple[Any, int, int, int, bool]:
    return (dtype, int(heads), int(kv_heads), int(head_dim), bool(causal))


def eager_attention(query: Any, key: Any, value: Any, mask: Any, *, dropout: float = 0.0,
                    scaling: float | None = None, causal: bool = False) -> Any:
    """Attention as explicit products: ``softmax(QKᵀ·scale + mask)·V``.

    Args:
        query: (B, heads, T, head_dim).
        key, value: (B, kv_heads, S, head_dim), S ≥ T (a cache's keys come first); with
            grouped-query attention ``heads`` is a multiple of ``kv_heads`` and each key
            head serves ``heads / kv_heads`` consecutive query heads (transformers'
            ``repeat_kv``).
        mask: ``None``, a boolean mask broadcastable to (B, heads, T, S) (``True`` = attend,
            transformers' ``sdpa`` mask) or an additive float mask.
        dropout: Dropout probability on the attention probabilities (training only: pass 0
            otherwise).
        scaling: Scale of the scores; default ``head_dim ** -0.5``.
        causal: With ``mask`` ``None``, query ``t`` attends to keys up to ``S - T + t``
            (``sdpa``'s ``is_causal``, aligned to the end as with a cache); ignored when a
            mask is given (transformers' causal masks hold the causality).

    Returns:
        (B, T, heads, head_dim), contiguous.
    """
    import torch

    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key, value = (t.repeat_interleave(groups, dim=1) for t in (key, value))
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    if mask is None and causal:
        rows, cols = scores.shape[-2:]
        mask = torch.ones(rows, cols, dtype=torch.bool, device=scores.device).tril(cols - rows)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask
    probs = torch.softmax(scores, dim=-1)
    if dropout > 0:
        probs = torch.nn.functional.dropout(probs, p=dropout, training=True)
    return torch.matmul(probs, value).transpose(1, 2).contiguous()


def _attention_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                       dropout: float = 0.0, scaling: float | None = None,
                       is_causal: bool | None = None, **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention-function signature: the unfused products for a CPU training
    batch up to the measured length, ``sdpa`` otherwise."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", False))
    # Under autocast the products run in its dtype whatever the inputs' (a decoder's rotary
    # embedding hands over fp32 queries and keys with bf16 values).
    dtype = (torch.get_autocast_dtype(query.device.type)
             if torch.is_autocast_enabled(query.device.type) else query.dtype)
    limit = _EAGER_UP_TO.get(_shape_key(dtype, query.shape[1], key.shape[1],
                                        query.shape[-1], causal), 0)
    if (limit and key.shape[-2] <= limit and query.device.type == "cpu"
            and torch.is_grad_enabled() and query.shape[-2] <= key.shape[-2]
            and query.shape[1] % key.shape[1] == 0 and kwargs.get("softcap") is None
            and kwargs.get("position_bias") is None and kwargs.get("sliding_window") is None
            and kwargs.get("s_aux") is None):
        return eager_attention(query, key, value, attention_mask, dropout=dropout,
                               scaling=scaling, causal=causal and query.shape[-2] > 1), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                  scaling=scaling, is_causal=is_causal, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, _attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


def _time_ms(run: Any, repeats: int = 3) -> float:
    """The fastest of ``repeats`` calls of ``run`` (the first pays the shape's first use)."""
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - began)
    return best * 1000


def _time_both(q: Any, k: Any, v: Any, mask: Any, grad: Any) -> tuple[float, float]:
    """Milliseconds of forward + backward: the fused kernel (grouped-query attention as
    transformers' ``sdpa`` runs it with a mask: keys and values repeated first), then the
    unfused products."""
    import torch.nn.functional as F

    groups = q.shape[1] // k.shape[1]

    def fused() -> None:
        keys, values = ((k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1))
                        if groups > 1 else (k, v))
        F.scaled_dot_product_attention(q, keys, values, attn_mask=mask).backward(grad)

    def unfused() -> None:
        eager_attention(q, k, v, mask).transpose(1, 2).backward(grad)

    return _time_ms(fused), _time_ms(unfused)


def probe_lengths(max_length: int) -> tuple[int, ...]:
    """The lengths measured for a run whose longest batch is ``max_length`` tokens."""
    return tuple(t for t in PROBE_LENGTHS if t < max_length) + (int(max_length),)


def measure_eager_up_to(heads: int, head_dim: int, dtype: Any, *, batch: int,
                        lengths: tuple[int, ...], kv_heads: int | None = None,
                        causal: bool = False) -> tuple[int, list[list[float]]]:
    """Time forward + backward of both kernels on this CPU, shortest length first.

    Args:
        heads: Attention (query) heads.
        head_dim: Features per head.
        dtype: ``torch.bfloat16``, ``torch.float16`` or ``torch.float32``.
        batch: Sequences per call.
        lengths: Lengths to measure (tokens), increasing.
        kv_heads: Key and value heads (grouped-query attention); default ``heads``.
        causal: A decoder's causal mask (combined with the padding), as its training
            batches pass it.

    Returns:
        ``(eager_up_to, [[tokens, sdpa_ms, eager_ms], …])``: the longest length up to which
        the unfused products took at most :data:`EAGER_MARGIN` of the fused kernel's time at
        every measured length (0: at none), and the timings (the fastest of 3 calls).
    """
    import torch

    up_to, rows = 0, []
    generator = torch.Generator().manual_seed(0)
    kv_heads = kv_heads or heads
    for tokens in lengths:
        shape = (batch, heads, tokens, head_dim)
        q = torch.randn(shape, generator=generator).to(dtype).requires_grad_()
        k, v = (torch.randn(batch, kv_heads, tokens, head_dim, generator=generator)
                .to(dtype).requires_grad_() for _ in range(2))
        mask = torch.ones(batch, 1, tokens, tokens, dtype=torch.bool)
        mask[..., tokens - tokens // 4:] = False  # a quarter of the keys are padding
        if causal:
            mask &= torch.ones(tokens, tokens, dtype=torch.bool).tril()
        grad = torch.randn(shape, generator=generator).to(dtype)

        sdpa_ms, eager_ms = _time_both(q, k, v, mask, grad)
        rows.append([tokens, round(sdpa_ms, 3), round(eager_ms, 3)])
        if eager_ms > EAGER_MARGIN * sdpa_ms:
            break
        up_to = tokens
    return up_to, rows


def _cached_eager_up_to(heads: int, head_dim: int, dtype: Any, *, batch: int,
                        max_length: int, threads: int, cache_dir: Path | None,
                        kv_heads: int | None = None,
                        causal: bool = False) -> tuple[int, str]:
    """:func:`measure_eager_up_to` through ``cache_dir/attention_kernels.json`` (keyed by
    the CPU, threads, torch version, dtype, head shape, batch and lengths). Returns
    ``(up_to, source)``."""
    import torch

    from entrena.hardware.measured import cached_measurement
    from entrena.hardware.peak import _cpu_name

    batch = max(1, min(int(batch), PROBE_MAX_BATCH))
    lengths = probe_lengths(max_length)
    key = (f"{_cpu_name()}|threads={threads}|torch={torch.__version__}|dtype={dtype}"
           f"|heads={heads}|head_dim={head_dim}|batch={batch}|up_to={lengths[-1]}"
           + (f"|kv_heads={kv_heads}" if kv_heads and kv_heads != heads else "")
           + ("|causal" if causal else ""))

    def measure() -> dict[str, Any]:
        began = time.perf_counter()
        up_to, rows = measure_eager_up_to(heads, head_dim, dtype, batch=batch, lengths=lengths,
                                          kv_heads=kv_heads, causal=causal)
        return {"eager_up_to": up_to, "timings_ms": rows, "date": time.strftime("%Y-%m-%d"),
                "seconds": round(time.perf_counter() - began, 2)}

    entry, cached = cached_measurement(
        cache_dir / CACHE_FILE if cache_dir is not None else None, key, measure,
        valid=lambda e: isinstance(e, dict) and isinstance(e.get("eager_up_to"), int))
    return entry["eager_up_to"], (f"measured {entry['date']}, cached" if cached
                                  else f"measured now in {entry['seconds']:.1f}s")


def _encoders(model: Any) -> list[Any]:
    """The outermost Hugging Face models inside ``model`` (``model`` itself if it is one)."""
    found: list[Any] = []
    seen: set[int] = set()
    for module in model.modules():
        if (id(module) not in seen and hasattr(module, "set_attn_implementation")
                and hasattr(module, "config")):
            found.append(module)
            seen.update(id(sub) for sub in module.modules())
    return found


def _softcap(config: Any) -> float | None:
    """The attention scores' soft-cap of a model that has one (Gemma 2:
    ``attn_logit_softcapping``, 50), which only the unfused products apply."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    cap = getattr(text, "attn_logit_softcapping", None)
    return float(cap) if cap else None


def _head_shape(config: Any) -> tuple[int, int, int]:
    """(heads, key/value heads, features per head) of a Hugging Face model config (0s if
    it names none)."""
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    kv_heads = int(getattr(config, "num_key_value_heads", 0) or 0) or heads
    head_dim = int(getattr(config, "head_dim", 0) or 0) or (
        int(getattr(config, "hidden_size", 0) or 0) // max(heads, 1))
    return heads, kv_heads, head_dim


def _causal(model: Any) -> bool:
    """Whether ``model``'s self-attention is causal (a decoder: its attention modules say
    ``is_causal``)."""
    return any(getattr(module, "is_causal", False) is True for module in model.modules())


def apply_attention(model: Any, setting: str, *, device: str, precision: str, batch_size: int,
                    max_length: int, threads: int, cache_dir: Path | None) -> str | None:
    """Set the attention kernel of every Hugging Face model inside ``model``.

    Args:
        model: The model to train (changed in place).
        setting: ``auto``, ``sdpa`` or ``eager`` (``model.attn_implementation``).
        device: ``cpu``, ``cuda`` …: ``auto`` measures on a CPU only.
        precision: The run's precision (``bf16-mixed`` trains the attention in bf16).
        batch_size: The run's training batch (the measurement's, up to
            :data:`PROBE_MAX_BATCH`).
        max_length: The run's longest sequence (tokens), the longest length measured.
        threads: Torch threads (part of the measurement's cache key).
        cache_dir: Where the measurement is cached (``None``: not cached).

    Returns:
        A sentence for the log, or ``None`` when ``model`` holds no Hugging Face model.
    """
    encoders = _encoders(model)
    if not encoders:
        return None
    capped = [e for e in encoders if _softcap(e.config)]
    if capped and setting == "sdpa":
        config = capped[0].config
        raise ConfigError(f"model.attn_implementation = 'sdpa': this {config.model_type} model "
                          f"caps its attention scores (attn_logit_softcapping = "
                          f"{_softcap(config)}), which PyTorch's fused kernel cannot do; use "
                          f"auto or eager")
    if capped:
        for encoder in capped:
            encoder.set_attn_implementation("eager")
        encoders = [e for e in encoders if e not in capped]
        note = ("attention: eager (the model caps its attention scores, "
                "attn_logit_softcapping, which the fused kernel cannot)")
        if not encoders:
            return note
    if setting in ("sdpa", "eager"):
        for encoder in encoders:
            encoder.set_attn_implementation(setting)
        return f"attention: {setting} (model.attn_implementation)"
    if device != "cpu":
        return "attention: sdpa (auto off a CPU)"
    dtype = _attention_dtype(precision)
    notes = []
    for encoder in encoders:
        heads, kv_heads, head_dim = _head_shape(encoder.config)
        if (getattr(encoder.config, "is_encoder_decoder", False) or heads <= 0
                or head_dim <= 0 or heads % max(kv_heads, 1)):
            continue  # cross-attention (encoder-decoder models) was never measured
        causal = _causal(encoder)
        up_to, source = _cached_eager_up_to(heads, head_dim, dtype, batch=batch_size,
                                            max_length=max_length, threads=threads,
                                            cache_dir=cache_dir, kv_heads=kv_heads,
                                            causal=causal)
        if not up_to:
            notes.append(f"sdpa at every length ({source})")
            continue
        _register()
        _EAGER_UP_TO[_shape_key(dtype, heads, kv_heads, head_dim, causal)] = up_to
        encoder.set_attn_implementation(ATTENTION_NAME)
        notes.append(f"unfused products for training batches up to {up_to} tokens, sdpa "
                     f"beyond and without gradients ({str(dtype).removeprefix('torch.')}; "
                     f"{source})")
    return "attention: auto, " + "; ".join(notes) if notes else None


def _attention_dtype(precision: str) -> Any:
    """The dtype attention computes in under a Fabric precision (autocast's for mixed)."""
    import torch

    return {"bf16-mixed": torch.bfloat16, "bf16-true": torch.bfloat16,
            "16-mixed": torch.float16, "16-true": torch.float16}.get(precision, torch.float32)


def eager_up_to(model: Any, precision: str) -> int:
    """The longest training length (tokens) ``model`` runs with the unfused products at
    ``precision`` (a Fabric precision string; 0: none)."""
    dtype = _attention_dtype(precision)
    longest = 0
    for encoder in _encoders(model):
        config = encoder.config
        if getattr(config, "_attn_implementation", None) != ATTENTION_NAME:
            continue
        heads, kv_heads, head_dim = _head_shape(config)
        longest = max(longest, _EAGER_UP_TO.get(
            _shape_key(dtype, heads, kv_heads, head_dim, _causal(encoder)), 0))
    return longest
